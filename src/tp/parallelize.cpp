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
#include "tessera/detail/enum_table.hpp"

namespace tessera::tp {

// ---------------------------------------------------------------------------
// Styles and patterns
// ---------------------------------------------------------------------------

constexpr tessera::detail::EnumName<Layout> kLayoutNames[] = {
    {Layout::replicate, "Replicate"},
    {Layout::shard_features, "Shard(features)"},
    {Layout::shard_sequence, "Shard(sequence)"},
};

std::string_view layout_name(Layout layout) noexcept { return tessera::detail::name_of(kLayoutNames, layout); }

namespace {
// A style of `kind` between two layouts, the optional shard dims left unset.
ParallelStyle style_of(ParallelStyle::Kind kind, Layout input, Layout output) {
  ParallelStyle s;
  s.kind = kind;
  s.input = input;
  s.output = output;
  return s;
}
}  // namespace

ParallelStyle ParallelStyle::colwise(Layout input, Layout output) { return style_of(Kind::colwise, input, output); }
ParallelStyle ParallelStyle::rowwise(Layout input, Layout output) { return style_of(Kind::rowwise, input, output); }

namespace {
ParallelStyle prepared(ParallelStyle::Kind kind, const Prepare& input, const Prepare& output) {
  ParallelStyle s = style_of(kind, input.layout, output.layout);
  if (input.layout == Layout::shard_sequence) s.input_dim = input.dim;
  if (output.layout == Layout::shard_sequence) s.output_dim = output.dim;
  return s;
}
// A shard along the last dim is a shard of the features.
Prepare shard_on(int dim) { return dim == -1 ? Prepare{Layout::shard_features, {}} : Prepare{Layout::shard_sequence, dim}; }
}  // namespace

ParallelStyle ParallelStyle::colwise(Prepare input, Prepare output) { return prepared(Kind::colwise, input, output); }
ParallelStyle ParallelStyle::rowwise(Prepare input, Prepare output) { return prepared(Kind::rowwise, input, output); }

Prepare make_input_replicate_1d() { return {Layout::replicate, {}}; }
Prepare make_input_shard_1d(int dim) { return shard_on(dim); }
Prepare make_input_shard_1d_last_dim() { return {Layout::shard_features, {}}; }
Prepare make_input_reshard_replicate() { return {Layout::shard_sequence, 0}; }
Prepare make_output_replicate_1d() { return {Layout::replicate, {}}; }
Prepare make_output_tensor() { return {Layout::replicate, {}}; }
Prepare make_sharded_output_tensor() { return {Layout::shard_features, {}}; }
Prepare make_output_shard_1d(int dim) { return shard_on(dim); }
Prepare make_output_reshard_tensor() { return {Layout::shard_sequence, 0}; }
ParallelStyle ParallelStyle::pairwise() { return style_of(Kind::pairwise, Layout::replicate, Layout::replicate); }
ParallelStyle ParallelStyle::sequence_parallel(Layout input) {
  return style_of(Kind::sequence_parallel, input, Layout::shard_sequence);
}
ParallelStyle ParallelStyle::replicated(Layout output) { return style_of(Kind::replicate, Layout::replicate, output); }

std::string ParallelStyle::str() const {
  const char* names[] = {"Colwise", "Rowwise", "Pairwise", "SequenceParallel", "Replicate"};
  std::string s = names[static_cast<int>(kind)];
  // "Shard(sequence)" for the sequence dim, "Shard(dim 0)" for another one.
  auto name = [](Layout layout, const std::optional<int>& dim) {
    if (layout == Layout::shard_sequence && dim) return "Shard(dim " + std::to_string(*dim) + ")";
    return std::string(layout_name(layout));
  };
  if (kind == Kind::colwise || kind == Kind::rowwise || kind == Kind::sequence_parallel ||
      (kind == Kind::replicate && output != Layout::replicate)) {
    s += "(input=" + name(input, input_dim) + ", output=" + name(output, output_dim) + ")";
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

// The dim a Colwise layer all-gathers its input along (its gradient reduce-scattered
// back): a sharded input of either kind; a Rowwise layer's reduce-scatter dim likewise.
std::optional<int> gathered_input_dim(const ParallelStyle& s) {
  if (s.input == Layout::shard_sequence) return s.input_shard_dim();
  if (s.input == Layout::shard_features) return -1;
  return std::nullopt;
}
std::optional<int> scattered_output_dim(const ParallelStyle& s) {
  if (s.output == Layout::shard_sequence) return s.output_shard_dim();
  if (s.output == Layout::shard_features) return -1;
  return std::nullopt;
}

// Checks that `style` can convert the leaf `m`; throws InvalidArgument naming both.
// Linear layers take every layout (parallelize.hpp); convs and embeddings their defaults.
void validate_leaf(const std::string& path, const nn::Module& m, const ParallelStyle& style) {
  const bool col = style.kind == ParallelStyle::Kind::colwise;
  if (path.empty()) cannot_apply(path, m, style, "the root module cannot be replaced; style its children");
  if (dynamic_cast<const nn::Linear*>(&m)) return;
  if (col && style.input != Layout::replicate) {
    cannot_apply(path, m, style, "a Colwise " + m.type_name() + " takes a Replicate input");
  }
  if (col && !(style.output == Layout::shard_features || style.output == Layout::replicate)) {
    cannot_apply(path, m, style, "a Colwise " + m.type_name() + "'s output is Shard(features) or Replicate");
  }
  if (!col && !(style.input == Layout::shard_features || style.input == Layout::replicate)) {
    cannot_apply(path, m, style, "a Rowwise " + m.type_name() + " takes a Shard(features) or Replicate input");
  }
  if (!col && style.output != Layout::replicate) {
    cannot_apply(path, m, style, "a Rowwise " + m.type_name() + "'s output is Replicate");
  }
  if (dynamic_cast<const nn::Conv2d*>(&m)) return;  // any geometry: the channel split is the same
  // Ids are replicated and both parallel embeddings return a replicated output, so the
  // feature layouts of the default Colwise/Rowwise styles are accepted as such.
  if (dynamic_cast<const nn::Embedding*>(&m)) return;
  cannot_apply(path, m, style, "only Linear, Conv2d and Embedding can be sharded");
}

std::unique_ptr<nn::Module> convert_leaf(const std::string& path, nn::Module& m, const ParallelStyle& style,
                                         Communicator& tp) {
  validate_leaf(path, m, style);
  const bool col = style.kind == ParallelStyle::Kind::colwise;
  if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
    if (col) {
      // Shard(dim) out: the layer gathers its output whole and the wrapper keeps a block.
      const bool split_output = style.output == Layout::shard_sequence;
      auto layer = ColumnParallelLinear::from_serial(*linear, tp, style.output != Layout::shard_features, path,
                                                     gathered_input_dim(style));
      if (!split_output) return layer;
      return std::make_unique<LayoutWrapper>(std::move(layer), tp, Redistribute::none, 0, Redistribute::split,
                                             style.output_shard_dim(), /*partial_grads=*/false);
    }
    // Shard(dim) in: the wrapper gathers it whole and the layer takes its features.
    const bool gather_input = style.input == Layout::shard_sequence;
    auto layer = RowParallelLinear::from_serial(*linear, tp, style.input == Layout::shard_features, path,
                                                scattered_output_dim(style));
    if (!gather_input) return layer;
    return std::make_unique<LayoutWrapper>(std::move(layer), tp, Redistribute::gather, style.input_shard_dim(),
                                           Redistribute::none, 0, /*partial_grads=*/false);
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
    const Redistribute input = c.style.input == Layout::replicate ? Redistribute::split : Redistribute::none;
    model.replace(c.path, std::make_unique<LayoutWrapper>(std::move(norm), tp, input, c.style.sequence_dim,
                                                          Redistribute::none, 0, /*partial_grads=*/true));
  } else if (c.style.kind == Kind::replicate && c.style.output == Layout::shard_sequence) {
    auto inner = model.replace(c.path, std::make_unique<Placeholder>());
    model.replace(c.path, std::make_unique<LayoutWrapper>(std::move(inner), tp, Redistribute::none, 0,
                                                          Redistribute::split, c.style.sequence_dim,
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
// LayoutWrapper
// ---------------------------------------------------------------------------

LayoutWrapper::LayoutWrapper(std::unique_ptr<nn::Module> inner, Communicator& tp, Redistribute input, int input_dim,
                             Redistribute output, int output_dim, bool partial_grads)
    : inner_(std::move(inner)),
      tp_(tp),
      input_(input),
      output_(output),
      input_dim_(input_dim),
      output_dim_(output_dim),
      partial_grads_(partial_grads) {
  // The parameters keep their names (no ".inner" in the FQN). On sequence shards each
  // rank's gradient covers only its shard.
  for (auto& [name, p] : inner_->named_parameters()) {
    if (partial_grads_) p->partial_grad_over_tp = true;
    register_parameter(name, *p);
  }
}

std::string LayoutWrapper::type_name() const {
  if (partial_grads_) return "SequenceParallel(" + inner_->type_name() + ")";
  if (input_ == Redistribute::none && output_ == Redistribute::split) {
    return "SequenceSharded(" + inner_->type_name() + ")";
  }
  return "Prepared(" + inner_->type_name() + ")";
}

namespace {
// A split remembers the extent it split (`extent`), so that its backward gathers uneven
// blocks back to it; a gather learns the ranks' extents (it cannot know the whole).
Tensor redistribute(const Tensor& x, Redistribute how, int dim, Communicator& tp, std::int64_t& extent) {
  switch (how) {
    case Redistribute::none: return x;
    case Redistribute::split:
      extent = x.shape()[dim < 0 ? x.dim() + dim : dim];
      return scatter_to_parallel(x, dim, tp);
    case Redistribute::gather: return gather_from_parallel(x, dim, tp, GatherExtent::exchanged());
  }
  return x;
}
Tensor redistribute_backward(const Tensor& grad, Redistribute how, int dim, Communicator& tp, std::int64_t extent) {
  switch (how) {
    case Redistribute::none: return grad;
    case Redistribute::split: return scatter_to_parallel_backward(grad, dim, tp, extent);
    case Redistribute::gather: return gather_from_parallel_backward(grad, dim, tp);
  }
  return grad;
}
}  // namespace

Tensor LayoutWrapper::forward(const Tensor& x) {
  const Tensor y = inner_->forward(redistribute(x, input_, input_dim_, tp_, input_extent_));
  return redistribute(y, output_, output_dim_, tp_, output_extent_);
}

Tensor LayoutWrapper::backward(const Tensor& grad_y) {
  const Tensor dx = inner_->backward(redistribute_backward(grad_y, output_, output_dim_, tp_, output_extent_));
  if (!dx.defined()) return dx;  // e.g. an embedding: ids have no gradient
  return redistribute_backward(dx, input_, input_dim_, tp_, input_extent_);
}

// ---------------------------------------------------------------------------
// sync_replicated_gradients
// ---------------------------------------------------------------------------

void sync_replicated_gradients(nn::Module& model, Communicator& tp, std::size_t bucket_bytes, DType reduce_dtype) {
  const char* who = "tp::sync_replicated_gradients";
  tessera::detail::check_reduce_dtype(reduce_dtype, who);
  // Parameters in FQN order, the same on every rank; a gradient that is only this rank's
  // part (partial_grad_over_tp) is summed, a replicated one averaged.
  std::vector<Tensor> grads;
  std::vector<ReduceOp> ops;
  for (auto& [name, p] : model.named_parameters()) {
    if (p->placement.tp.is_shard() || !p->grad.defined()) continue;
    tessera::detail::check_reducible(p->grad, reduce_dtype, who, name);
    grads.push_back(p->grad);
    ops.push_back(p->partial_grad_over_tp ? ReduceOp::sum : ReduceOp::avg);
  }
  if (tp.size() == 1) return;
  tessera::detail::bucketed_all_reduce(tp, grads, ops, bucket_bytes, reduce_dtype);
}

void sync_replicated_gradients(nn::Module& model, Communicator& tp, DType reduce_dtype) {
  sync_replicated_gradients(model, tp, std::size_t(25) << 20, reduce_dtype);
}

}  // namespace tessera::tp
