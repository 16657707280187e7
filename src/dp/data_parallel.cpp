#include "tessera/dp/data_parallel.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "comm/flat_buckets.hpp"
#include "dp/units.hpp"
#include "tessera/ops.hpp"

namespace tessera::dp {

namespace detail {

// One parameter as data parallelism manages it.
struct ParamState {
  std::string name;
  Parameter* p = nullptr;
  Shape full_shape;             // the tp-local block (what the layer computes with)
  bool sharded = false;         // fsdp2: split along dim 0 over dp
  ShardRange rows;              // this rank's rows of dim 0
  std::int64_t row_numel = 1;   // elements per dim-0 row
  std::int64_t pad_rows = 0;    // the largest rank's row count (collective blocks are padded to it)
  std::int64_t group_offset = 0;  // where its rows sit in its unit group's per-rank block
  Tensor shard_value, shard_grad;  // sharded: the resident shard (value/grad point here when released)
  Tensor full_grad;                // sharded: the full gradient, while its unit's backward is open
  int bucket = -1;                 // replicated: its gradient bucket
  int pending = 0;                 // replicated, overlap: forwards not yet matched by a backward
};

// Sharded parameters of one unit with one dtype and device: one collective each way.
struct Group {
  std::vector<int> params;
  std::int64_t block = 0;  // elements per rank (padded)
  DType dtype = DType::f32;
  Device device;
};

struct Unit {
  std::string path;
  std::vector<int> params;
  std::vector<Group> groups;
  int pending = 0;          // forwards not yet matched by a backward
  bool gathered = false;
  bool grads_open = false;  // full gradients allocated
};

struct Bucket {
  std::vector<int> params;
  Tensor flat;  // the parameters' gradients are views into it
  std::size_t ready = 0;
  bool launched = false;
  CommRequest request;
};

struct PendingScatter {
  CommRequest request;
  Tensor input, output;
  int unit = 0, group = 0;
};

struct Engine {
  Communicator* dp = nullptr;
  DataParallelMode mode = DataParallelMode::none;
  DataParallelOptions options;
  bool active = false;  // dp size > 1 and mode != none
  bool hooks = false;   // units are wrapped
  bool sync = true;     // backward starts the reduction (false: accumulate locally)
  std::vector<ParamState> params;
  std::vector<Unit> units;
  std::vector<Bucket> buckets;
  std::size_t next_launch = 0;
  std::vector<PendingScatter> scatters;

  std::string label() const { return "dp::DataParallel(" + std::string(data_parallel_mode_name(mode)) + ")"; }

  // ---- fsdp2 gather / release / reduce-scatter
  void gather(Unit& unit) {
    if (unit.gathered) return;
    const int size = dp->size();
    for (Group& g : unit.groups) {
      Tensor send = Tensor::zeros({g.block}, g.dtype, g.device);
      for (int i : g.params) {
        ParamState& s = params[i];
        s.shard_value = s.p->value;  // the resident shard, whatever the caller did to it
        send.narrow(0, s.group_offset, s.rows.length * s.row_numel)
            .copy_from(s.shard_value.contiguous().reshape({s.rows.length * s.row_numel}));
      }
      Tensor recv = Tensor::empty({g.block * size}, g.dtype, g.device);
      dp->all_gather(send, recv);
      for (int i : g.params) {
        ParamState& s = params[i];
        Tensor full = Tensor::empty(s.full_shape, g.dtype, g.device);
        for (int r = 0; r < size; ++r) {
          const ShardRange rr = shard_range(s.full_shape[0], size, r);
          Shape rows_shape = s.full_shape;
          rows_shape[0] = rr.length;
          full.narrow(0, rr.start, rr.length)
              .copy_from(recv.narrow(0, r * g.block + s.group_offset, rr.length * s.row_numel).reshape(rows_shape));
        }
        s.p->value = full;
      }
    }
    unit.gathered = true;
  }

  void release(Unit& unit) {
    if (!unit.gathered) return;
    for (const Group& g : unit.groups) {
      for (int i : g.params) params[i].p->value = params[i].shard_value;
    }
    unit.gathered = false;
  }

  void open_grads(Unit& unit) {
    if (unit.grads_open) return;
    for (const Group& g : unit.groups) {
      for (int i : g.params) {
        ParamState& s = params[i];
        s.shard_grad = s.p->grad;
        s.full_grad = Tensor::zeros(s.full_shape, g.dtype, g.device);
      }
    }
    unit.grads_open = true;
  }

  void add_scattered(int u, int gi, const Tensor& output) {
    for (int i : units[u].groups[gi].params) {
      ParamState& s = params[i];
      ops::axpy(1.0, output.narrow(0, s.group_offset, s.rows.length * s.row_numel).reshape(s.shard_grad.shape()),
                s.shard_grad);
    }
  }

  void scatter_grads(int u) {
    Unit& unit = units[u];
    if (!unit.grads_open) return;
    const int size = dp->size();
    for (std::size_t gi = 0; gi < unit.groups.size(); ++gi) {
      const Group& g = unit.groups[gi];
      Tensor input = Tensor::zeros({g.block * size}, g.dtype, g.device);
      for (int i : g.params) {
        const ParamState& s = params[i];
        for (int r = 0; r < size; ++r) {
          const ShardRange rr = shard_range(s.full_shape[0], size, r);
          input.narrow(0, r * g.block + s.group_offset, rr.length * s.row_numel)
              .copy_from(s.full_grad.narrow(0, rr.start, rr.length).contiguous().reshape({rr.length * s.row_numel}));
        }
      }
      Tensor output = Tensor::empty({g.block}, g.dtype, g.device);
      if (options.overlap) {
        PendingScatter pending;
        pending.request = dp->reduce_scatter_async(input, output, ReduceOp::avg);
        pending.input = input;
        pending.output = output;
        pending.unit = u;
        pending.group = static_cast<int>(gi);
        scatters.push_back(std::move(pending));
      } else {
        dp->reduce_scatter(input, output, ReduceOp::avg);
        add_scattered(u, static_cast<int>(gi), output);
      }
    }
    for (const Group& g : unit.groups) {
      for (int i : g.params) {
        params[i].p->grad = params[i].shard_grad;
        params[i].full_grad = Tensor();
      }
    }
    unit.grads_open = false;
  }

  // ---- buckets
  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].ready == buckets[next_launch].params.size()) {
      launch(buckets[next_launch]);
      ++next_launch;
    }
  }
  void launch(Bucket& b) {
    b.request = dp->all_reduce_async(b.flat, ReduceOp::avg);
    b.launched = true;
  }

  // ---- hooks
  void pre_forward(int u) {
    Unit& unit = units[u];
    ++unit.pending;
    if (options.overlap) {
      for (int i : unit.params) {
        if (!params[i].sharded) ++params[i].pending;
      }
    }
    gather(unit);
  }
  void post_forward(int u) { release(units[u]); }
  void pre_backward(int u) {
    Unit& unit = units[u];
    gather(unit);
    open_grads(unit);
    for (const Group& g : unit.groups) {
      for (int i : g.params) params[i].p->grad = params[i].full_grad;
    }
  }
  // Without sync, the full gradients stay open (the next backward adds to them) and the
  // parameters point at their shards again, as between steps.
  void park_grads(Unit& unit) {
    for (const Group& g : unit.groups) {
      for (int i : g.params) params[i].p->grad = params[i].shard_grad;
    }
  }

  void post_backward(int u) {
    Unit& unit = units[u];
    release(unit);
    if (--unit.pending <= 0) {
      unit.pending = 0;
      if (sync) {
        scatter_grads(u);
      } else {
        park_grads(unit);
      }
    }
    if (options.overlap) {
      for (int i : unit.params) {
        ParamState& s = params[i];
        if (s.sharded || s.bucket < 0) continue;
        // Without sync the bucket is not counted ready: its launch waits for the
        // backward that has sync (or for finish).
        if (--s.pending == 0 && sync) {
          if (++buckets[s.bucket].ready == buckets[s.bucket].params.size()) launch_ready();
        }
        if (s.pending < 0) s.pending = 0;  // a backward without a forward: counted once
      }
    }
  }

  void finish() {
    if (!active) return;
    for (std::size_t u = 0; u < units.size(); ++u) {
      release(units[u]);
      scatter_grads(static_cast<int>(u));  // backward passes whose forward ran more often
      units[u].pending = 0;
    }
    for (; next_launch < buckets.size(); ++next_launch) launch(buckets[next_launch]);
    for (Bucket& b : buckets) {
      if (b.launched) b.request.wait();
      b.launched = false;
      b.ready = 0;
    }
    next_launch = 0;
    for (PendingScatter& s : scatters) {
      s.request.wait();
      add_scattered(s.unit, s.group, s.output);
    }
    scatters.clear();
    for (ParamState& s : params) s.pending = 0;
  }
};

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
  if (options.bucket_bytes == 0) throw InvalidArgument(label + ": option bucket_bytes must be > 0");

  // Every parameter once (a tied parameter may be registered under two names).
  std::unordered_map<Parameter*, int> index_of;
  for (auto& [name, p] : model.named_parameters()) {
    if (index_of.contains(p)) continue;
    if (!p->value.defined() || !p->value.is_contiguous()) {
      throw InvalidArgument(label + ": parameter " + name + " needs a defined, contiguous value");
    }
    if (!p->grad.defined()) p->grad = Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device());
    if (p->grad.shape() != p->value.shape() || p->grad.dtype() != p->value.dtype()) {
      throw ShapeError(label + ": parameter " + name + " has gradient " + p->grad.str() + " for value " +
                       p->value.str());
    }
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

  e.active = mode != DataParallelMode::none && e.dp->size() > 1;
  if (!e.active) return;
  const int size = e.dp->size(), rank = e.dp->rank();
  e.hooks = mode == DataParallelMode::fsdp2 || options.overlap;

  // Units first: a bad tree throws before anything is changed.
  std::vector<detail::UnitInfo> infos;
  if (e.hooks) {
    infos = detail::find_units(model);
    for (const auto& info : infos) {
      if (!info.path.empty()) continue;
      std::string names;
      for (const auto& [n, p] : info.params) names += (names.empty() ? "" : ", ") + n;
      throw InvalidArgument(label + ": the root module " + model.type_name() +
                            " registers parameters itself (" + names +
                            "); fsdp2 and overlapped ddp wrap the modules that own parameters and the root "
                            "cannot be replaced — hold them in a child module, or use ddp with overlap = false");
    }
    std::unordered_map<Parameter*, std::string> owner;
    for (const auto& info : infos) {
      for (const auto& [n, p] : info.params) {
        auto [it, fresh] = owner.emplace(p, info.path);
        if (!fresh && it->second != info.path && mode == DataParallelMode::fsdp2) {
          throw InvalidArgument(label + ": parameter " + n + " is shared by modules '" + it->second + "' and '" +
                                info.path + "'; fsdp2 gathers and reduces per module and cannot shard a shared "
                                "parameter");
        }
      }
    }
  }

  if (options.broadcast_parameters) detail::broadcast_values(e.params, *e.dp, options.bucket_bytes);

  // fsdp2: shard dim 0 of every tp-local block that gives each dp rank at least one row.
  if (mode == DataParallelMode::fsdp2) {
    for (ParamState& s : e.params) {
      if (s.full_shape.empty() || s.full_shape[0] < size) continue;
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
  // backward produces them); each parameter's gradient becomes a view into its bucket.
  {
    std::vector<int> replicated;
    std::vector<tessera::detail::BucketItem> items;
    for (int i = static_cast<int>(e.params.size()) - 1; i >= 0; --i) {
      const Tensor& grad = e.params[i].p->grad;
      if (e.params[i].sharded || grad.numel() == 0) continue;
      replicated.push_back(i);
      items.push_back({grad.dtype(), grad.device(), 0, grad.nbytes()});
    }
    for (const std::vector<int>& members : tessera::detail::plan_buckets(items, options.bucket_bytes)) {
      detail::Bucket& b = e.buckets.emplace_back();
      std::vector<Tensor> grads;
      for (int m : members) {
        b.params.push_back(replicated[m]);
        e.params[replicated[m]].bucket = static_cast<int>(e.buckets.size()) - 1;
        grads.push_back(e.params[replicated[m]].p->grad);
      }
      b.flat = tessera::detail::flatten(grads);  // keeps what was accumulated so far
      std::int64_t offset = 0;
      for (int i : b.params) {
        Parameter& p = *e.params[i].p;
        p.grad = b.flat.narrow(0, offset, p.grad.numel()).reshape(p.grad.shape());
        offset += p.grad.numel();
      }
    }
  }

  if (!e.hooks) return;
  for (const auto& info : infos) {
    detail::Unit unit;
    unit.path = info.path;
    std::map<detail::DeviceKey, int> group_of;
    for (const auto& [n, p] : info.params) {
      const int i = index_of.at(p);
      if (std::find(unit.params.begin(), unit.params.end(), i) != unit.params.end()) continue;
      unit.params.push_back(i);
      ParamState& s = e.params[i];
      if (!s.sharded) continue;
      const detail::DeviceKey k = detail::key_of(s.p->value);
      auto it = group_of.find(k);
      if (it == group_of.end()) {
        it = group_of.emplace(k, static_cast<int>(unit.groups.size())).first;
        unit.groups.push_back({{}, 0, s.p->value.dtype(), s.p->value.device()});
      }
      detail::Group& g = unit.groups[it->second];
      s.group_offset = g.block;
      g.block += s.pad_rows * s.row_numel;
      g.params.push_back(i);
    }
    e.units.push_back(std::move(unit));
  }
  for (std::size_t u = 0; u < infos.size(); ++u) {
    auto inner = model.replace(infos[u].path, std::make_unique<detail::Placeholder>());
    model.replace(infos[u].path, std::make_unique<detail::UnitWrapper>(std::move(inner), engine_, static_cast<int>(u)));
  }
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
