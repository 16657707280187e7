#include "tessera/dp/data_parallel.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "comm/flat_buckets.hpp"
#include "dp/engine.hpp"
#include "dp/units.hpp"
#include "tessera/ops.hpp"

namespace tessera::dp {

namespace detail {

namespace {

class Placeholder final : public nn::Module {
 public:
  Tensor forward(const Tensor&) override { throw InternalError("dp placeholder module ran"); }
  Tensor backward(const Tensor&) override { throw InternalError("dp placeholder module ran"); }
  std::string type_name() const override { return "Placeholder"; }
};

// The hook wrapper: the inner module's parameters registered directly (same FQNs), the
// engine's hooks around its forward and backward.
class UnitWrapper final : public nn::Module {
 public:
  UnitWrapper(std::unique_ptr<nn::Module> inner, std::shared_ptr<Engine> engine, int unit)
      : inner_(std::move(inner)), engine_(std::move(engine)), unit_(unit) {
    for (auto& [name, p] : inner_->named_parameters()) register_parameter(name, *p);
  }
  Tensor forward(const Tensor& x) override {
    engine_->pre_forward(unit_);
    Tensor y;
    try {
      y = inner_->forward(x);
    } catch (...) {
      engine_->post_forward(unit_);
      throw;
    }
    engine_->post_forward(unit_);
    return y;
  }
  Tensor backward(const Tensor& grad_y) override {
    engine_->pre_backward(unit_);
    Tensor dx;
    try {
      dx = inner_->backward(grad_y);
    } catch (...) {
      engine_->post_backward(unit_);
      throw;
    }
    engine_->post_backward(unit_);
    return dx;
  }
  void visit_activations(nn::ActivationVisitor& v) override { inner_->visit_activations(v); }
  void set_compute_precision(Precision precision) override {
    nn::Module::set_compute_precision(precision);
    inner_->set_compute_precision(precision);
  }
  std::string type_name() const override {
    return (engine_->mode == DataParallelMode::fsdp2 ? "FSDP(" : "DDP(") + inner_->type_name() + ")";
  }

 private:
  std::unique_ptr<nn::Module> inner_;
  std::shared_ptr<Engine> engine_;
  int unit_;
};

struct DeviceKey {
  DType dtype;
  DeviceType type;
  int index;
  bool operator<(const DeviceKey& o) const { return std::tie(dtype, type, index) < std::tie(o.dtype, o.type, o.index); }
};
DeviceKey key_of(const Tensor& t) { return {t.dtype(), t.device().type, t.device().index}; }

// dp rank 0's values everywhere: flat broadcasts per dtype/device, at most bucket_bytes each.
void broadcast_values(std::vector<ParamState>& params, Communicator& dp, std::size_t bucket_bytes) {
  std::vector<Tensor> values;
  for (ParamState& s : params) values.push_back(s.p->value);
  tessera::detail::bucketed_in_place(values, {}, bucket_bytes, [&](Tensor& flat, int) { dp.broadcast(flat, 0); });
}

// The options, the same on every rank (every rank raises alike).
void check_options(const Mesh& mesh, DataParallelMode mode, const DataParallelOptions& options,
                   const std::string& label) {
  if (options.bucket_bytes == 0) throw InvalidArgument(label + ": option bucket_bytes must be > 0");
  tessera::detail::check_reduce_dtype(options.reduce_dtype, label + ": option reduce_dtype");
  // The hooks of fsdp2 and overlapped ddp count one forward and one backward per unit and
  // step; a pipeline stage runs one of each per microbatch, and a bucket would be reduced
  // after the first microbatch's backward, before the others have added to it (a silently
  // wrong gradient).
  if (mode != DataParallelMode::none && mesh.dp_size() > 1 && mesh.pp_size() > 1 &&
      (mode == DataParallelMode::fsdp2 || options.overlap)) {
    throw InvalidArgument(label + ": " +
                          (mode == DataParallelMode::fsdp2 ? std::string("fsdp2") : std::string("option overlap")) +
                          " is not supported on a mesh with pipeline " + std::to_string(mesh.pp_size()) +
                          " (a stage runs a forward and a backward per microbatch, which its hooks do not count); "
                          "use ddp with overlap = false");
  }
}

// Every parameter once (a tied parameter may be registered under two names) into
// e.params, checked, with a zero gradient where a trainable one has none. Returns each
// parameter's index in e.params.
std::unordered_map<Parameter*, int> register_parameters(Engine& e, nn::Module& model, const std::string& label) {
  std::unordered_map<Parameter*, int> index_of;
  for (auto& [name, p] : model.named_parameters()) {
    if (index_of.contains(p)) continue;
    if (!p->value.defined() || !p->value.is_contiguous()) {
      throw InvalidArgument(label + ": parameter " + name + " needs a defined, contiguous value");
    }
    if (p->trainable && !p->grad.defined()) {
      p->grad = Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device());
    }
    if (p->trainable && (p->grad.shape() != p->value.shape() || p->grad.dtype() != p->value.dtype())) {
      throw ShapeError(label + ": parameter " + name + " has gradient " + p->grad.str() + " for value " +
                       p->value.str());
    }
    if (p->trainable) tessera::detail::check_reducible(p->grad, e.options.reduce_dtype, label, name);
    if (p->placement.dp.is_shard()) {
      throw InvalidArgument(label + ": parameter " + name + " is already sharded over dp (" + p->placement.str() +
                            "); apply data parallelism once, to a model that is not yet data-parallel");
    }
    index_of[p] = static_cast<int>(e.params.size());
    ParamState s;
    s.name = name;
    s.p = p;
    s.full_shape = p->value.shape();
    e.params.push_back(std::move(s));
  }
  return index_of;
}

// The units the hooks wrap; a root that registers parameters itself cannot be wrapped.
std::vector<UnitInfo> find_hook_units(nn::Module& model, const std::string& label) {
  std::vector<UnitInfo> infos = find_units(model);
  for (const auto& info : infos) {
    if (!info.path.empty()) continue;
    std::string names;
    for (const auto& [n, p] : info.params) names += (names.empty() ? "" : ", ") + n;
    throw InvalidArgument(label + ": the root module " + model.type_name() +
                          " registers parameters itself (" + names +
                          "); fsdp2 and overlapped ddp wrap the modules that own parameters and the root "
                          "cannot be replaced — hold them in a child module, or use ddp with overlap = false");
  }
  return infos;
}

// fsdp2: shard dim 0 of every tp-local block that gives each dp rank at least one row.
void shard_parameters(Engine& e, int size, int rank) {
  for (ParamState& s : e.params) {
    if (!s.p->trainable || s.tied || s.full_shape.empty() || s.full_shape[0] < size) continue;
    Parameter& p = *s.p;
    s.sharded = true;
    s.rows = shard_range(s.full_shape[0], size, rank);
    s.row_numel = shape_numel(s.full_shape) / s.full_shape[0];
    s.pad_rows = shard_range(s.full_shape[0], size, 0).length;
    s.shard_value = p.value.narrow(0, s.rows.start, s.rows.length).clone();
    s.shard_grad = p.grad.narrow(0, s.rows.start, s.rows.length).clone();
    p.value = s.shard_value;
    p.grad = s.shard_grad;
    p.placement.dp = Placement::shard(0);
    if (p.local_offset.empty()) p.local_offset.assign(p.global_shape.size(), 0);
    p.local_offset[0] += s.rows.start;
  }
}

// Buckets over the dp-replicated gradients, in reverse registration order (the order
// backward produces them), tied parameters last (their buckets start in
// finish_gradient_sync(), so they hold no other bucket back); each parameter's gradient
// becomes a view into its bucket.
void make_buckets(Engine& e) {
  for (const bool tied : {false, true}) {
    std::vector<int> replicated;
    std::vector<tessera::detail::BucketItem> items;
    for (int i = static_cast<int>(e.params.size()) - 1; i >= 0; --i) {
      const Tensor& grad = e.params[i].p->grad;
      if (!e.params[i].p->trainable || e.params[i].sharded || e.params[i].tied != tied || grad.numel() == 0) continue;
      replicated.push_back(i);
      items.push_back({grad.dtype(), grad.device(), 0, grad.nbytes()});
    }
    for (const std::vector<int>& members : tessera::detail::plan_buckets(items, e.options.bucket_bytes)) {
      Bucket& b = e.buckets.emplace_back();
      std::vector<Tensor> grads;
      for (int m : members) {
        b.params.push_back(replicated[m]);
        e.params[replicated[m]].bucket = static_cast<int>(e.buckets.size()) - 1;
        grads.push_back(e.params[replicated[m]].p->grad);
      }
      b.flat = tessera::detail::flatten(grads);  // keeps what was accumulated so far
      b.wire = tessera::detail::wire_buffer(b.flat, e.options.reduce_dtype);
      std::int64_t offset = 0;
      for (int i : b.params) {
        Parameter& p = *e.params[i].p;
        p.grad = b.flat.narrow(0, offset, p.grad.numel()).reshape(p.grad.shape());
        offset += p.grad.numel();
      }
    }
  }
}

// The engine's units: each unit's parameters, its sharded ones grouped per dtype and
// device (one gather block each).
void make_units(Engine& e, const std::vector<UnitInfo>& infos, const std::unordered_map<Parameter*, int>& index_of) {
  for (const auto& info : infos) {
    Unit unit;
    unit.path = info.path;
    std::map<DeviceKey, int> group_of;
    for (const auto& [n, p] : info.params) {
      const int i = index_of.at(p);
      if (std::find(unit.params.begin(), unit.params.end(), i) != unit.params.end()) continue;
      unit.params.push_back(i);
      ParamState& s = e.params[i];
      if (!s.sharded) continue;
      const DeviceKey k = key_of(s.p->value);
      auto it = group_of.find(k);
      if (it == group_of.end()) {
        it = group_of.emplace(k, static_cast<int>(unit.groups.size())).first;
        unit.groups.push_back({{}, 0, s.p->value.dtype(), s.p->value.device()});
      }
      Group& g = unit.groups[it->second];
      s.group_offset = g.block;
      g.block += s.pad_rows * s.row_numel;
      g.params.push_back(i);
    }
    e.units.push_back(std::move(unit));
  }
}

// Each unit replaced by its hook wrapper (through a placeholder, so the unit's module
// leaves the tree before the wrapper that holds it enters).
void wrap_units(nn::Module& model, const std::vector<UnitInfo>& infos, const std::shared_ptr<Engine>& engine) {
  for (std::size_t u = 0; u < infos.size(); ++u) {
    auto inner = model.replace(infos[u].path, std::make_unique<Placeholder>());
    model.replace(infos[u].path, std::make_unique<UnitWrapper>(std::move(inner), engine, static_cast<int>(u)));
  }
}

}  // namespace
}  // namespace detail

using detail::Engine;
using detail::ParamState;

DataParallel::DataParallel(nn::Module& model, const Mesh& mesh, DataParallelOptions options)
    : DataParallel(model, mesh, mesh.config().data, options) {}

DataParallel::DataParallel(nn::Module& model, const Mesh& mesh, DataParallelMode mode, DataParallelOptions options)
    : engine_(std::make_shared<Engine>()) {
  Engine& e = *engine_;
  e.dp = &mesh.dp();
  e.mode = mode;
  e.options = options;
  const std::string label = e.label();
  detail::check_options(mesh, mode, options, label);
  const std::unordered_map<Parameter*, int> index_of = detail::register_parameters(e, model, label);

  e.active = mode != DataParallelMode::none && e.dp->size() > 1;
  if (!e.active) return;
  e.hooks = mode == DataParallelMode::fsdp2 || options.overlap;

  // Units first: a bad tree throws before anything is changed.
  const std::vector<detail::UnitInfo> infos = e.hooks ? detail::find_hook_units(model, label)
                                                      : std::vector<detail::UnitInfo>{};
  // Tied parameters (shared by two units, or read by a module outside their unit) stay
  // whole on every dp rank: a unit's hooks see only its own uses, so neither an fsdp2
  // gather/release nor an overlap readiness count can cover them. Without hooks the whole
  // backward is done before finish_gradient_sync() anyway.
  for (Parameter* p : detail::find_tied_parameters(model, e.hooks ? infos : detail::find_units(model))) {
    e.params[index_of.at(p)].tied = true;
  }

  if (options.broadcast_parameters) detail::broadcast_values(e.params, *e.dp, options.bucket_bytes);
  if (mode == DataParallelMode::fsdp2) detail::shard_parameters(e, e.dp->size(), e.dp->rank());
  detail::make_buckets(e);
  if (!e.hooks) return;
  detail::make_units(e, infos, index_of);
  detail::wrap_units(model, infos, engine_);
}

DataParallel::~DataParallel() {
  // Requests wait in their destructors; nothing else must happen here.
  if (engine_) {
    engine_->scatters.clear();
    for (auto& b : engine_->buckets) b.request = CommRequest();
  }
}

void DataParallel::finish_gradient_sync() { engine_->finish(); }

void DataParallel::set_gradient_sync(bool enabled) { engine_->sync = enabled; }
bool DataParallel::gradient_sync() const { return engine_->sync; }

void DataParallel::finish_evaluation() {
  // Evaluation forwards released what they gathered; only their counts remain.
  for (auto& u : engine_->units) u.pending = 0;
  for (auto& s : engine_->params) s.pending = 0;
}

DataParallelMode DataParallel::mode() const { return engine_->mode; }
const DataParallelOptions& DataParallel::options() const { return engine_->options; }

std::vector<std::string> DataParallel::unit_paths() const {
  std::vector<std::string> out;
  for (const auto& u : engine_->units) out.push_back(u.path);
  return out;
}

std::vector<std::vector<std::string>> DataParallel::buckets() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : engine_->buckets) {
    out.emplace_back();
    for (int i : b.params) out.back().push_back(engine_->params[i].name);
  }
  return out;
}

std::vector<std::string> DataParallel::tied_parameters() const {
  std::vector<std::string> out;
  for (const auto& s : engine_->params) {
    if (s.tied) out.push_back(s.name);
  }
  return out;
}

std::vector<std::string> DataParallel::sharded_parameters() const {
  std::vector<std::string> out;
  for (const auto& s : engine_->params) {
    if (s.sharded) out.push_back(s.name);
  }
  return out;
}

MemoryReport DataParallel::memory_report(Optimizer* optimizer) const {
  NamedParameters named;
  for (auto& s : engine_->params) named.emplace_back(s.name, s.p);
  MemoryReport report = measure_memory(named, optimizer);
  for (const auto& u : engine_->units) {
    std::int64_t bytes = 0;
    for (const auto& g : u.groups) {
      for (int i : g.params) {
        bytes += 2 * shape_numel(engine_->params[i].full_shape) * static_cast<std::int64_t>(dtype_size(g.dtype));
      }
    }
    report.transient_bytes = std::max(report.transient_bytes, bytes);
  }
  return report;
}

}  // namespace tessera::dp
