#include "dp/engine.hpp"

#include "comm/flat_buckets.hpp"
#include "tessera/ops.hpp"
#include "tp/block_gather.hpp"

namespace tessera::dp::detail {

// ---- fsdp2 gather / release / reduce-scatter
// A unit group's shards travel in one padded all-gather of uneven blocks, tp's
// (src/tp/block_gather.hpp): each parameter's rows padded to pad_rows at group_offset of
// the per-rank block, the layout scatter_grads reduce-scatters the gradients in.
void Engine::gather(Unit& unit) {
  if (unit.gathered) return;
  const int size = dp->size();
  for (Group& g : unit.groups) {
    std::vector<tp::detail::BlockGather> parts;
    for (int i : g.params) {
      ParamState& s = params[i];
      s.shard_value = s.p->value;  // the resident shard, whatever the caller did to it
      parts.push_back({s.shard_value, 0, tp::detail::partition_blocks(s.full_shape[0], size)});
    }
    std::vector<Tensor> full = tp::detail::all_gather_blocks(parts, *dp);
    for (std::size_t k = 0; k < g.params.size(); ++k) params[g.params[k]].p->value = std::move(full[k]);
  }
  unit.gathered = true;
}

void Engine::release(Unit& unit) {
  if (!unit.gathered) return;
  for (const Group& g : unit.groups) {
    for (int i : g.params) params[i].p->value = params[i].shard_value;
  }
  unit.gathered = false;
}

void Engine::open_grads(Unit& unit) {
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

void Engine::add_scattered(int u, int gi, const Tensor& output) {
  for (int i : units[u].groups[gi].params) {
    ParamState& s = params[i];
    ops::axpy(1.0, output.narrow(0, s.group_offset, s.rows.length * s.row_numel).reshape(s.shard_grad.shape()),
              s.shard_grad);
  }
}

void Engine::scatter_grads(int u) {
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
    // In the reduce dtype: the rounded input travels, the average is taken on widening.
    Tensor wire_input = tessera::detail::wire_buffer(input, options.reduce_dtype);
    Tensor wire_output = tessera::detail::wire_buffer(output, options.reduce_dtype);
    tessera::detail::pack_wire(input, wire_input);
    const ReduceOp op = tessera::detail::wire_op(ReduceOp::avg, input, wire_input);
    if (options.overlap) {
      PendingScatter pending;
      pending.request = dp->reduce_scatter_async(wire_input, wire_output, op);
      pending.wire_input = wire_input;
      pending.wire_output = wire_output;
      pending.output = output;
      pending.unit = u;
      pending.group = static_cast<int>(gi);
      scatters.push_back(std::move(pending));
    } else {
      dp->reduce_scatter(wire_input, wire_output, op);
      tessera::detail::unpack_wire(wire_output, output, ReduceOp::avg, size);
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
void Engine::launch_ready() {
  while (next_launch < buckets.size() && buckets[next_launch].ready == buckets[next_launch].params.size()) {
    launch(buckets[next_launch]);
    ++next_launch;
  }
}

void Engine::launch(Bucket& b) {
  tessera::detail::pack_wire(b.flat, b.wire);
  b.request = dp->all_reduce_async(b.wire, tessera::detail::wire_op(ReduceOp::avg, b.flat, b.wire));
  b.launched = true;
}

// ---- hooks
void Engine::pre_forward(int u) {
  Unit& unit = units[u];
  ++unit.pending;
  if (options.overlap) {
    for (int i : unit.params) {
      if (!params[i].sharded && !params[i].tied) ++params[i].pending;
    }
  }
  gather(unit);
}

void Engine::post_forward(int u) { release(units[u]); }
void Engine::pre_backward(int u) {
  Unit& unit = units[u];
  gather(unit);
  open_grads(unit);
  for (const Group& g : unit.groups) {
    for (int i : g.params) params[i].p->grad = params[i].full_grad;
  }
}

void Engine::park_grads(Unit& unit) {
  for (const Group& g : unit.groups) {
    for (int i : g.params) params[i].p->grad = params[i].shard_grad;
  }
}

void Engine::post_backward(int u) {
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
      if (s.sharded || s.tied || s.bucket < 0) continue;
      // Without sync the bucket is not counted ready: its launch waits for the
      // backward that has sync (or for finish).
      if (--s.pending == 0 && sync) {
        if (++buckets[s.bucket].ready == buckets[s.bucket].params.size()) launch_ready();
      }
      if (s.pending < 0) s.pending = 0;  // a backward without a forward: counted once
    }
  }
}

void Engine::finish() {
  if (!active) return;
  for (std::size_t u = 0; u < units.size(); ++u) {
    release(units[u]);
    scatter_grads(static_cast<int>(u));  // backward passes whose forward ran more often
    units[u].pending = 0;
  }
  for (; next_launch < buckets.size(); ++next_launch) launch(buckets[next_launch]);
  for (Bucket& b : buckets) {
    if (b.launched) {
      b.request.wait();
      tessera::detail::unpack_wire(b.wire, b.flat, ReduceOp::avg, dp->size());
    }
    b.launched = false;
    b.ready = 0;
  }
  next_launch = 0;
  for (PendingScatter& s : scatters) {
    s.request.wait();
    tessera::detail::unpack_wire(s.wire_output, s.output, ReduceOp::avg, dp->size());
    add_scattered(s.unit, s.group, s.output);
  }
  scatters.clear();
  for (ParamState& s : params) s.pending = 0;
}

}  // namespace tessera::dp::detail
