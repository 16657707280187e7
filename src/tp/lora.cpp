// LoRA adapters on serial, column- and row-parallel linears (tp/lora.hpp).

#include "tessera/tp/lora.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "tessera/init.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/ops.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp/serial_twin.hpp"

namespace tessera::tp {

namespace {

// What LoRA needs to know about a base layer; throws for a module it cannot wrap.
struct BaseInfo {
  LoraLinear::Kind kind;
  Parameter* weight;
  std::int64_t in, out;
  bool gather_output = false, input_is_parallel = true;
};

BaseInfo inspect_base(nn::Module& base, const Communicator* tp, const std::string& label) {
  auto unsupported = [&](const std::string& what) {
    throw UnsupportedError(label + ": LoRA on a " + base.type_name() + " with " + what +
                           " is not supported (stride 1 and no sequence_dim only)");
  };
  auto need_tp = [&] {
    if (tp == nullptr) {
      throw InvalidArgument(label + ": a " + base.type_name() + " base needs its tp communicator (got nullptr)");
    }
  };
  if (auto* l = dynamic_cast<nn::Linear*>(&base)) {
    return {LoraLinear::Kind::serial, &l->weight, l->in_features(), l->out_features()};
  }
  if (auto* c = dynamic_cast<ColumnParallelLinear*>(&base)) {
    need_tp();
    if (c->stride() != 1) unsupported("stride " + std::to_string(c->stride()));
    if (c->sequence_dim()) unsupported("sequence_dim " + std::to_string(*c->sequence_dim()));
    return {LoraLinear::Kind::column, &c->weight, c->in_features(), c->out_features(), c->gather_output(), true};
  }
  if (auto* r = dynamic_cast<RowParallelLinear*>(&base)) {
    need_tp();
    if (r->stride() != 1) unsupported("stride " + std::to_string(r->stride()));
    if (r->sequence_dim()) unsupported("sequence_dim " + std::to_string(*r->sequence_dim()));
    return {LoraLinear::Kind::row, &r->weight, r->in_features(), r->out_features(), false, r->input_is_parallel()};
  }
  throw InvalidArgument(label + ": LoRA wraps a Linear, ColumnParallelLinear or RowParallelLinear, not a " +
                        base.type_name());
}

void check_options(const LoraOptions& o, const std::string& label) {
  if (o.rank < 1) throw InvalidArgument(label + ": LoRA rank " + std::to_string(o.rank) + " must be >= 1");
  if (!std::isfinite(o.alpha)) throw InvalidArgument(label + ": LoRA alpha must be finite");
  if (o.dropout != 0.0) {
    throw UnsupportedError(label + ": LoRA dropout " + std::to_string(o.dropout) + " is not supported (0 only)");
  }
}

// Back to an ordinary parameter (after merge_lora or before parallelize_with_lora).
void unfreeze(Parameter& p) {
  p.trainable = true;
  if (!p.grad.defined()) p.grad = Tensor::zeros(p.value.shape(), p.value.dtype(), p.value.device());
}

// Holds a path while its module is swapped (Module::replace returns the old one).
class Vacant : public nn::Module {
 public:
  Tensor forward(const Tensor&) override { throw InternalError("LoRA: a vacant module ran forward"); }
  Tensor backward(const Tensor&) override { throw InternalError("LoRA: a vacant module ran backward"); }
  std::string type_name() const override { return "Vacant"; }
};

std::unique_ptr<nn::Module> take(nn::Module& model, const std::string& path) {
  return model.replace(path, std::make_unique<Vacant>());
}

}  // namespace

LoraLinear::LoraLinear(std::unique_ptr<nn::Module> base, Communicator* tp, LoraOptions options,
                       const std::string& name)
    : base_(std::move(base)), tp_(tp), options_(std::move(options)), label_(detail::layer_label("LoraLinear", name)) {
  if (!base_) throw InvalidArgument(label_ + ": the base module is null");
  check_options(options_, label_);
  const BaseInfo info = inspect_base(*base_, tp_, label_);
  kind_ = info.kind;
  base_weight_ = info.weight;
  in_ = info.in;
  out_ = info.out;
  gather_output_ = info.gather_output;
  input_is_parallel_ = info.input_is_parallel;

  const DType dtype = base_weight_->value.dtype();
  const Device device = base_weight_->value.device();
  const InitSpec a_init = options_.a_init.value_or(nn::Linear::default_weight_init());
  const InitSpec b_init = options_.b_init.value_or(InitSpec::zeros());
  const Shape a_shape{options_.rank, in_}, b_shape{out_, options_.rank};
  // A follows the base weight's input dim, B its output dim (see lora.hpp).
  lora_a = kind_ == Kind::row ? make_tp_sharded(label_, "lora_A.weight", a_shape, 1, *tp_, dtype, device, a_init)
                              : Parameter(Tensor::zeros(a_shape, dtype, device), a_init);
  lora_b = kind_ == Kind::column ? make_tp_sharded(label_, "lora_B.weight", b_shape, 0, *tp_, dtype, device, b_init)
                                 : Parameter(Tensor::zeros(b_shape, dtype, device), b_init);

  // The base's parameters under their own names (so FQNs do not change), frozen. Their
  // gradients are released so the base skips dW — except a row layer's bias, whose
  // gradient the row rule always accumulates (a few floats).
  for (auto& [pname, p] : base_->named_parameters()) {
    register_parameter(pname, *p);
    p->trainable = false;
    if (kind_ != Kind::row || p == base_weight_) p->grad = Tensor();
  }
  register_parameter("lora_A.weight", lora_a);
  register_parameter("lora_B.weight", lora_b);
}

void LoraLinear::initialize_adapters(std::uint64_t seed, const std::string& fqn) {
  const std::string lead = fqn.empty() ? "" : fqn + ".";
  initialize(lora_a.value, lora_a.global_shape, lora_a.local_offset, lora_a.init, seed, lead + "lora_A.weight");
  initialize(lora_b.value, lora_b.global_shape, lora_b.local_offset, lora_b.init, seed, lead + "lora_B.weight");
}

Tensor LoraLinear::forward(const Tensor& x) {
  if (!base_) throw InvalidArgument(label_ + ": the base was released");
  Tensor y = base_->forward(x).contiguous();
  Tensor input = x.contiguous();
  if (kind_ == Kind::row && !input_is_parallel_) input = split_along(input, -1, *tp_);
  // u = x Aᵀ: whole on every rank (column, serial) or a partial sum over tp (row).
  Tensor u = nn::functional::linear(input, lora_a.value, Tensor(), compute_precision());
  if (kind_ == Kind::row) u = all_reduce_sum(u, *tp_);
  ops::scale(u, scale());
  Tensor delta = nn::functional::linear(u, lora_b.value, Tensor(), compute_precision());
  if (kind_ == Kind::column && gather_output_) delta = gather_along(delta, -1, *tp_, out_);  // uneven blocks too
  ops::axpy(1.0, delta, y);
  input_ = std::move(input);
  scaled_u_ = std::move(u);
  return y;
}

Tensor LoraLinear::backward(const Tensor& grad_y) {
  if (!base_) throw InvalidArgument(label_ + ": the base was released");
  if (!input_.defined()) throw InvalidArgument(label_ + ": backward without a preceding forward");
  Tensor dx = base_->backward(grad_y).contiguous();
  Tensor dy = grad_y.contiguous();
  if (kind_ == Kind::column && gather_output_) dy = split_along(dy, -1, *tp_);
  Tensor no_bias;
  // dB += dyᵀ (scale · u); d(scale · u) = dy B, then d u = scale · that.
  Tensor du = nn::functional::linear_backward(dy, scaled_u_, lora_b.value, lora_b.grad, no_bias, compute_precision());
  ops::scale(du, scale());
  // Column: this rank's B rows give a partial sum over tp; completing it here (rank-
  // sized) leaves A's gradient and the input gradient whole on every rank.
  if (kind_ == Kind::column) du = all_reduce_sum(du, *tp_);
  Tensor dx_adapter = nn::functional::linear_backward(du, input_, lora_a.value, lora_a.grad, no_bias,
                                                            compute_precision());
  if (kind_ == Kind::row && !input_is_parallel_) dx_adapter = gather_along(dx_adapter, -1, *tp_, in_);
  ops::axpy(1.0, dx_adapter, dx);
  input_ = Tensor();
  scaled_u_ = Tensor();
  return dx;
}

Tensor LoraLinear::merged_weight() const {
  if (!base_) throw InvalidArgument(label_ + ": the base was released");
  // Column: B_local [out/tp, r] A [r, in]; row: B [out, r] A_local [r, in/tp]; either way
  // exactly the block the base weight holds.
  Tensor merged = base_weight_->value.clone();
  ops::gemm(lora_b.value, false, lora_a.value, false, merged, scale(), 1.0);
  return merged;
}

Tensor LoraLinear::master_a() { return tp_ ? assemble_master(lora_a, lora_a.value, *tp_) : lora_a.value.clone(); }
Tensor LoraLinear::master_b() { return tp_ ? assemble_master(lora_b, lora_b.value, *tp_) : lora_b.value.clone(); }

void LoraLinear::set_compute_precision(Precision precision) {
  nn::Module::set_compute_precision(precision);
  if (base_) base_->set_compute_precision(precision);
}

void LoraLinear::visit_activations(nn::ActivationVisitor& v) {
  v.tensor(input_);
  v.tensor(scaled_u_);
  if (base_) base_->visit_activations(v);
}

std::unique_ptr<nn::Module> LoraLinear::release_base() {
  base_weight_ = nullptr;
  return std::move(base_);
}

// ---------------------------------------------------------------------------------------------
// Model-level helpers
// ---------------------------------------------------------------------------------------------

std::vector<std::string> add_lora(nn::Module& model, const std::vector<std::string>& patterns,
                                  const LoraOptions& options, Communicator* tp, std::uint64_t seed,
                                  const std::string& prefix) {
  if (patterns.empty()) throw InvalidArgument("add_lora: no target patterns given");
  check_options(options, "add_lora");
  // Resolve and check every target before changing anything.
  std::vector<std::string> paths;
  for (const std::string& pattern : patterns) {
    bool matched = false;
    for (auto& [path, m] : model.named_modules()) {
      if (path.empty() || !fqn_matches(pattern, path)) continue;
      matched = true;
      if (dynamic_cast<LoraLinear*>(m) != nullptr) {
        throw InvalidArgument("add_lora: pattern '" + pattern + "' matches '" + path + "', which already has LoRA");
      }
      inspect_base(*m, tp, "add_lora: pattern '" + pattern + "' matches '" + path + "'");
      if (std::find(paths.begin(), paths.end(), path) == paths.end()) paths.push_back(path);
    }
    if (!matched) throw InvalidArgument("add_lora: pattern '" + pattern + "' matches no module");
  }
  const std::string lead = prefix.empty() ? "" : prefix + ".";
  for (const std::string& path : paths) {
    auto wrapper = std::make_unique<LoraLinear>(take(model, path), tp, options, lead + path);
    wrapper->initialize_adapters(seed, lead + path);
    model.replace(path, std::move(wrapper));
  }
  return paths;
}

std::vector<std::string> merge_lora(nn::Module& model) {
  if (dynamic_cast<LoraLinear*>(&model) != nullptr) {
    throw InvalidArgument("merge_lora: the root module is a LoraLinear; merge it from its parent");
  }
  std::vector<std::string> paths;
  for (auto& [path, m] : model.named_modules()) {
    if (dynamic_cast<LoraLinear*>(m) != nullptr) paths.push_back(path);
  }
  for (const std::string& path : paths) {
    auto& lora = dynamic_cast<LoraLinear&>(model.at(path));
    lora.base_weight().value.copy_from(lora.merged_weight());
    std::unique_ptr<nn::Module> base = lora.release_base();
    for (auto& [name, p] : base->named_parameters()) unfreeze(*p);
    model.replace(path, std::move(base));
  }
  return paths;
}

void parallelize_with_lora(nn::Module& model, Communicator& tp, const ParallelizePlan& plan) {
  struct Saved {
    std::string path;
    LoraOptions options;
    Tensor a, b;  // masters
  };
  std::vector<Saved> saved;
  for (auto& [path, m] : model.named_modules()) {
    auto* lora = dynamic_cast<LoraLinear*>(m);
    if (lora == nullptr || lora->kind() != LoraLinear::Kind::serial) continue;
    if (path.empty()) throw InvalidArgument("parallelize_with_lora: the root module is a LoraLinear");
    saved.push_back({path, lora->options(), lora->lora_a.value.clone(), lora->lora_b.value.clone()});
  }
  // Unwrap: the plan sees plain Linears where the LoRA layers were.
  for (const Saved& s : saved) {
    auto base = dynamic_cast<LoraLinear&>(model.at(s.path)).release_base();
    for (auto& [name, p] : base->named_parameters()) unfreeze(*p);
    model.replace(s.path, std::move(base));
  }
  // Wrap again around whatever the plan made of each base (also when it threw, so the
  // model keeps its adapters).
  auto rewrap = [&] {
    for (const Saved& s : saved) {
      auto base = take(model, s.path);
      const bool serial = dynamic_cast<nn::Linear*>(base.get()) != nullptr;
      auto lora = std::make_unique<LoraLinear>(std::move(base), serial ? nullptr : &tp, s.options, s.path);
      load_shard_from_master(lora->lora_a, s.a, s.path + ".lora_A.weight");
      load_shard_from_master(lora->lora_b, s.b, s.path + ".lora_B.weight");
      model.replace(s.path, std::move(lora));
    }
  };
  try {
    parallelize(model, tp, plan);
  } catch (...) {
    rewrap();
    throw;
  }
  rewrap();
}

bool is_lora_adapter(const std::string& fqn) {
  for (const char* leaf : {"lora_A.weight", "lora_B.weight"}) {
    const std::string tail = std::string(".") + leaf;
    if (fqn == leaf || (fqn.size() > tail.size() && fqn.compare(fqn.size() - tail.size(), tail.size(), tail) == 0)) {
      return true;
    }
  }
  return false;
}

}  // namespace tessera::tp
