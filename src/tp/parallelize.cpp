#include "tessera/tp/parallelize.hpp"

#include <map>

#include "comm/flat_buckets.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/tp/conv2d.hpp"
#include "tessera/tp/embedding.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/mappings.hpp"

namespace tessera::tp {

// ---------------------------------------------------------------------------
// Styles and patterns
// ---------------------------------------------------------------------------

std::string_view layout_name(Layout layout) noexcept {
  switch (layout) {
    case Layout::replicate: return "Replicate";
    case Layout::shard_features: return "Shard(features)";
    case Layout::shard_sequence: return "Shard(sequence)";
  }
  return "?";
}

ParallelStyle ParallelStyle::colwise(Layout input, Layout output) { return {Kind::colwise, input, output}; }
ParallelStyle ParallelStyle::rowwise(Layout input, Layout output) { return {Kind::rowwise, input, output}; }
ParallelStyle ParallelStyle::pairwise() { return {Kind::pairwise, Layout::replicate, Layout::replicate}; }
ParallelStyle ParallelStyle::sequence_parallel(Layout input) {
  return {Kind::sequence_parallel, input, Layout::shard_sequence};
}
ParallelStyle ParallelStyle::replicated(Layout output) { return {Kind::replicate, Layout::replicate, output}; }

std::string ParallelStyle::str() const {
  const char* names[] = {"Colwise", "Rowwise", "Pairwise", "SequenceParallel", "Replicate"};
  std::string s = names[static_cast<int>(kind)];
  if (kind == Kind::colwise || kind == Kind::rowwise || kind == Kind::sequence_parallel ||
      (kind == Kind::replicate && output != Layout::replicate)) {
    s += "(input=" + std::string(layout_name(input)) + ", output=" + std::string(layout_name(output)) + ")";
  }
  return s;
}

namespace {

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = s.find('.', start);
    parts.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

// Glob with `*` only, within one component.
bool component_matches(const std::string& pattern, const std::string& text) {
  std::size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::string label_of(const std::string& path, const nn::Module& m) { return m.type_name() + " '" + path + "'"; }

[[noreturn]] void cannot_apply(const std::string& path, const nn::Module& m, const ParallelStyle& style,
                               const std::string& why) {
  throw InvalidArgument("tensor parallelism: style " + style.str() + " cannot apply to " + label_of(path, m) + ": " +
                        why);
}

std::optional<int> sequence_input(const ParallelStyle& s) {
  return s.input == Layout::shard_sequence ? std::optional<int>(s.sequence_dim) : std::nullopt;
}
std::optional<int> sequence_output(const ParallelStyle& s) {
  return s.output == Layout::shard_sequence ? std::optional<int>(s.sequence_dim) : std::nullopt;
}

// Checks that `style` can convert the leaf `m`; throws InvalidArgument naming both.
void validate_leaf(const std::string& path, const nn::Module& m, const ParallelStyle& style) {
  const bool col = style.kind == ParallelStyle::Kind::colwise;
  if (path.empty()) cannot_apply(path, m, style, "the root module cannot be replaced; style its children");
  if (col && !(style.input == Layout::replicate || style.input == Layout::shard_sequence)) {
    cannot_apply(path, m, style, "a Colwise input is Replicate or Shard(sequence)");
  }
  if (col && !(style.output == Layout::shard_features || style.output == Layout::replicate)) {
    cannot_apply(path, m, style, "a Colwise output is Shard(features) or Replicate");
  }
  if (!col && !(style.input == Layout::shard_features || style.input == Layout::replicate)) {
    cannot_apply(path, m, style, "a Rowwise input is Shard(features) or Replicate");
  }
  if (!col && !(style.output == Layout::replicate || style.output == Layout::shard_sequence)) {
    cannot_apply(path, m, style, "a Rowwise output is Replicate or Shard(sequence)");
  }
  if (dynamic_cast<const nn::Linear*>(&m)) return;
  if (dynamic_cast<const nn::Conv2d*>(&m)) {
    if (style.input == Layout::shard_sequence || style.output == Layout::shard_sequence) {
      cannot_apply(path, m, style, "sequence sharding applies to (B, S, D) activations, not NCHW fields");
    }
    return;  // any kernel, stride, padding and dilation: the channel split is the same
  }
  if (dynamic_cast<const nn::Embedding*>(&m)) {
    // Ids are replicated and both parallel embeddings return a replicated output, so
    // the feature layouts of the default Colwise/Rowwise styles are accepted as such;
    // only sequence sharding has no meaning here.
    if (style.input == Layout::shard_sequence || style.output == Layout::shard_sequence) {
      cannot_apply(path, m, style, "an Embedding takes replicated ids and returns a replicated output");
    }
    return;
  }
  cannot_apply(path, m, style, "only Linear, Conv2d and Embedding can be sharded");
}

std::unique_ptr<nn::Module> convert_leaf(const std::string& path, nn::Module& m, const ParallelStyle& style,
                                         Communicator& tp) {
  validate_leaf(path, m, style);
  const bool col = style.kind == ParallelStyle::Kind::colwise;
  if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
    if (col) {
      return ColumnParallelLinear::from_serial(*linear, tp, style.output == Layout::replicate, path,
                                               sequence_input(style));
    }
    return RowParallelLinear::from_serial(*linear, tp, style.input == Layout::shard_features, path,
                                          sequence_output(style));
  }
  if (auto* conv = dynamic_cast<nn::Conv2d*>(&m)) {
    if (col) return ColumnParallelConv2d::from_serial(*conv, tp, style.output == Layout::replicate, path);
    return RowParallelConv2d::from_serial(*conv, tp, style.input == Layout::shard_features, path);
  }
  auto& embedding = dynamic_cast<nn::Embedding&>(m);
  if (col) return ParallelEmbedding::from_serial(embedding, tp, path);
  return VocabParallelEmbedding::from_serial(embedding, tp, path);
}

void validate_norm(const std::string& path, const nn::Module& m, const ParallelStyle& style) {
  const std::string type = m.type_name();
  if (type != "RMSNorm" && type != "LayerNorm") {
    cannot_apply(path, m, style, "SequenceParallel applies to norms (RMSNorm, LayerNorm)");
  }
  if (style.input != Layout::shard_sequence && style.input != Layout::replicate) {
    cannot_apply(path, m, style, "a SequenceParallel input is Shard(sequence) or Replicate");
  }
  if (path.empty()) cannot_apply(path, m, style, "the root module cannot be replaced; style its children");
}

// Holds a child's place while it is being wrapped.
class Placeholder final : public nn::Module {
 public:
  Tensor forward(const Tensor&) override { throw InternalError("placeholder module ran"); }
  Tensor backward(const Tensor&) override { throw InternalError("placeholder module ran"); }
  std::string type_name() const override { return "Placeholder"; }
};

// One resolved conversion: a leaf (Colwise/Rowwise) or a norm (SequenceParallel).
struct Conversion {
  std::string path;
  ParallelStyle style;
  std::string pattern;  // the plan entry it came from, for conflict messages
};

// Resolves the plan against the unmodified tree and validates every conversion, so a
// bad plan throws before the model is touched.
std::vector<Conversion> resolve(nn::Module& model, const ParallelizePlan& plan) {
  using Kind = ParallelStyle::Kind;
  const auto modules = model.named_modules();
  std::vector<Conversion> out;
  std::map<std::string, std::string> claimed;  // path -> pattern
  auto claim = [&](const std::string& path, const ParallelStyle& style, const std::string& pattern) {
    if (auto it = claimed.find(path); it != claimed.end()) {
      throw InvalidArgument("parallelize: module '" + path + "' is matched by both '" + it->second + "' and '" +
                            pattern + "'");
    }
    claimed[path] = pattern;
    out.push_back({path, style, pattern});
  };
  for (const auto& [pattern, style] : plan) {
    bool matched = false;
    for (const auto& [path, m] : modules) {
      if (!fqn_matches(pattern, path)) continue;
      matched = true;
      switch (style.kind) {
        case Kind::replicate:
          if (style.output != Layout::replicate && style.output != Layout::shard_sequence) {
            cannot_apply(path, *m, style, "a Replicate output is Replicate or Shard(sequence)");
          }
          if (style.output == Layout::shard_sequence && path.empty()) {
            cannot_apply(path, *m, style, "the root module cannot be replaced; style its children");
          }
          claim(path, style, pattern);
          break;
        case Kind::colwise:
        case Kind::rowwise:
          validate_leaf(path, *m, style);
          claim(path, style, pattern);
          break;
        case Kind::sequence_parallel:
          validate_norm(path, *m, style);
          claim(path, style, pattern);
          break;
        case Kind::pairwise: {
          std::vector<std::string> linears;
          for (const auto& [name, child] : m->children()) {
            if (dynamic_cast<nn::Linear*>(child.get())) linears.push_back(path.empty() ? name : path + "." + name);
          }
          if (linears.empty() || linears.size() % 2 != 0) {
            cannot_apply(path, *m, style,
                         "Pairwise needs an even number of Linear children, found " + std::to_string(linears.size()));
          }
          for (std::size_t i = 0; i < linears.size(); ++i) {
            claim(linears[i], i % 2 == 0 ? ParallelStyle::colwise() : ParallelStyle::rowwise(), pattern);
          }
          break;
        }
      }
    }
    if (!matched) {
      throw InvalidArgument("parallelize: pattern '" + pattern + "' (style " + style.str() +
                            ") matches no module of the model");
    }
  }
  return out;
}

void apply(nn::Module& model, const Conversion& c, Communicator& tp) {
  using Kind = ParallelStyle::Kind;
  nn::Module& m = model.at(c.path);
  if (c.style.kind == Kind::colwise || c.style.kind == Kind::rowwise) {
    model.replace(c.path, convert_leaf(c.path, m, c.style, tp));
  } else if (c.style.kind == Kind::sequence_parallel) {
    auto norm = model.replace(c.path, std::make_unique<Placeholder>());
    model.replace(c.path, std::make_unique<SequenceShardWrapper>(std::move(norm), tp, c.style.sequence_dim,
                                                                  c.style.input == Layout::replicate,
                                                                  /*split_output=*/false, /*partial_grads=*/true));
  } else if (c.style.kind == Kind::replicate && c.style.output == Layout::shard_sequence) {
    auto inner = model.replace(c.path, std::make_unique<Placeholder>());
    model.replace(c.path, std::make_unique<SequenceShardWrapper>(std::move(inner), tp, c.style.sequence_dim,
                                                                  /*split_input=*/false, /*split_output=*/true,
                                                                  /*partial_grads=*/false));
  }
}

}  // namespace

bool fqn_matches(const std::string& pattern, const std::string& path) {
  // The root (path "") is addressed only by the empty pattern: "*" means "any child".
  if (path.empty() || pattern.empty()) return path.empty() && pattern.empty();
  const auto p = split_dots(pattern), t = split_dots(path);
  if (p.size() != t.size()) return false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (!component_matches(p[i], t[i])) return false;
  }
  return true;
}

}  // namespace tessera::tp

namespace tessera::tp {

void parallelize(nn::Module& model, Communicator& tp, const ParallelizePlan& plan) {
  for (const Conversion& c : resolve(model, plan)) apply(model, c, tp);
}

void parallelize(nn::Module& model, const Mesh& mesh, const ParallelizePlan& plan) {
  parallelize(model, mesh.tp(), plan);
}

void apply_tensor_parallel(nn::Module& model, const Mesh& mesh) { apply_tensor_parallel(model, mesh.tp()); }

void apply_tensor_parallel(nn::Module& model, Communicator& tp) {
  // Resolve every opted-in block first, so a bad declaration throws before anything
  // is converted.
  std::vector<Conversion> conversions;
  for (const auto& [path, m] : model.named_modules()) {
    const auto paths = m->tensor_parallel_paths();
    if (!paths) continue;
    const std::string lead = path.empty() ? "" : path + ".";
    const std::string where = m->type_name() + (path.empty() ? "" : " '" + path + "'");
    for (const auto& [child, style] : {std::pair{paths->column, ParallelStyle::colwise()},
                                       std::pair{paths->row, ParallelStyle::rowwise()}}) {
      nn::Module* target = m->find(child);
      if (target == nullptr) {
        throw InvalidArgument("apply_tensor_parallel: " + where + " declares tensor-parallel child '" + child +
                              "', which does not exist");
      }
      validate_leaf(lead + child, *target, style);
      conversions.push_back({lead + child, style, where});
    }
  }
  for (const Conversion& c : conversions) apply(model, c, tp);
}

// ---------------------------------------------------------------------------
// SequenceShardWrapper
// ---------------------------------------------------------------------------

SequenceShardWrapper::SequenceShardWrapper(std::unique_ptr<nn::Module> inner, Communicator& tp, int sequence_dim,
                                           bool split_input, bool split_output, bool partial_grads)
    : inner_(std::move(inner)),
      tp_(tp),
      sequence_dim_(sequence_dim),
      split_input_(split_input),
      split_output_(split_output),
      partial_grads_(partial_grads) {
  // The parameters keep their names (no ".inner" in the FQN). On sequence shards each
  // rank's gradient covers only its shard.
  for (auto& [name, p] : inner_->named_parameters()) {
    if (partial_grads_) p->partial_grad_over_tp = true;
    register_parameter(name, *p);
  }
}

std::string SequenceShardWrapper::type_name() const {
  return (partial_grads_ ? "SequenceParallel(" : "SequenceSharded(") + inner_->type_name() + ")";
}

Tensor SequenceShardWrapper::forward(const Tensor& x) {
  const Tensor input = split_input_ ? scatter_to_parallel(x, sequence_dim_, tp_) : x;
  const Tensor y = inner_->forward(input);
  return split_output_ ? scatter_to_parallel(y, sequence_dim_, tp_) : y;
}

Tensor SequenceShardWrapper::backward(const Tensor& grad_y) {
  const Tensor grad = split_output_ ? scatter_to_parallel_backward(grad_y, sequence_dim_, tp_) : grad_y;
  const Tensor dx = inner_->backward(grad);
  if (!dx.defined()) return dx;  // e.g. an embedding: ids have no gradient
  return split_input_ ? scatter_to_parallel_backward(dx, sequence_dim_, tp_) : dx;
}

// ---------------------------------------------------------------------------
// sync_replicated_gradients
// ---------------------------------------------------------------------------

void sync_replicated_gradients(nn::Module& model, Communicator& tp, std::size_t bucket_bytes) {
  if (tp.size() == 1) return;
  // Parameters in FQN order, the same on every rank; a gradient that is only this rank's
  // part (partial_grad_over_tp) is summed, a replicated one averaged (kind 1 / 0).
  std::vector<Tensor> grads;
  std::vector<int> sums;
  for (auto& [name, p] : model.named_parameters()) {
    if (p->placement.tp.is_shard() || !p->grad.defined()) continue;
    grads.push_back(p->grad);
    sums.push_back(p->partial_grad_over_tp ? 1 : 0);
  }
  tessera::detail::bucketed_in_place(grads, sums, bucket_bytes, [&](Tensor& flat, int sum) {
    tp.all_reduce(flat, sum ? ReduceOp::sum : ReduceOp::avg);
  });
}

}  // namespace tessera::tp
