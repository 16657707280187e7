#pragma once
// Data parallelism over the mesh's dp communicator: ddp and fsdp2 (the seed's
// `data: ddp | fsdp2`), applied in place to a model that tensor and domain parallelism
// have already converted.
//
// ddp   Every parameter is replicated over dp. Gradients are averaged over mesh.dp() in
//       buckets of at most `bucket_bytes`, formed in *reverse* registration order (the
//       order backward produces them). Each parameter's gradient becomes a view into its
//       bucket's flat buffer, so a bucket is all-reduced in place with no packing copy.
//       With `overlap`, each bucket's non-blocking all-reduce starts during backward, as
//       soon as the last of its parameters has finished its backward; buckets start in
//       bucket order, so every dp rank issues the same collectives in the same order.
//
// fsdp2 Every parameter is additionally sharded along dim 0 over dp, on top of its tp
//       (and domain) sharding: the tp-local block is split by shard_range(rows, dp,
//       dp_rank) (uneven extents allowed), so placement.dp = Shard(0), global_shape is
//       unchanged and local_offset[0] moves by the dp shard's start — checkpoints,
//       clip_grad_norm and optimizer state read the shard like any other. Before a
//       module's forward and again before its backward its parameters are all-gathered
//       (one all-gather per module and dtype); they are released right after. After its
//       last backward its gradients are reduce-scattered (averaged) into the shards (one
//       reduce-scatter per module and dtype; non-blocking with `overlap`). Build the
//       optimizer *after* DataParallel, on the sharded parameters: its state is then
//       sharded too. A parameter whose tp-local dim 0 is smaller than the dp size (or a
//       0-d one) cannot give every rank a row: it stays dp-Replicate and is averaged
//       like a ddp bucket.
//
// Tied weights: a parameter registered by two units, or one that a module reads outside
// its unit and declares in Module::tied_parameter_paths() (the decoder's tied head reads
// the embedding table), stays dp-Replicate in both modes — a unit's hooks see only the
// uses inside it, so no gather/release or readiness count can cover the others. Its
// gradient is averaged in buckets of its own, the last ones, which start in
// finish_gradient_sync(). A module that reads another's parameter without declaring it
// gets wrong results under fsdp2 (it sees the shard) — declare it.
//
// Reduce dtype: `reduce_dtype` f32 (default) reduces every gradient in its own dtype.
// bf16 halves the bytes of every gradient reduction — ddp's bucket all-reduces, fsdp2's
// reduce-scatters and the buckets of its replicated leftovers: each bucket (or unit group)
// is rounded from f32 to a bf16 shadow buffer (nearest even) before its collective
// starts, the collective sums the bf16 values, and the sum is widened back into the f32
// gradients when the collective completes, where the average is taken (in f32).
// Parameters, gradients and optimizer state stay f32; the reduced gradient carries bf16's
// 8 significant bits. Only f32 gradients may be reduced in bf16: an f64 gradient is an
// InvalidArgument naming its parameter, and a reduce dtype other than f32 or bf16 one
// naming the option, both at construction (every rank checks the same tree).
//
// Frozen parameters (Parameter::trainable false, e.g. a LoRA base weight) are broadcast
// like the others but never reduced, bucketed or sharded: they stay whole on every rank
// and their gradients are left as they are (undefined).
//
// Hooks: fsdp2 and overlapped ddp need to act around each module's forward and backward,
// so they replace every *unit* — the topmost module that registers parameters itself
// (in practice the leaf layers) — by a wrapper that registers the same parameters under
// the same names (FQNs do not change) and runs the hooks around the inner module.
// Parents reach children through at()/child() at call time, so the wrapper takes
// effect. A root module that registers parameters itself cannot be replaced and is an
// InvalidArgument. Modules below a unit are no longer visible to at()/named_modules():
// apply tp::parallelize / apply_tensor_parallel first. ddp without overlap wraps nothing
// and works with any model. The hooks count one forward and one backward per step, so
// fsdp2 and overlap are InvalidArguments on a mesh with pipeline > 1, where a stage runs
// one of each per microbatch (pp/pipeline.hpp): use ddp without overlap there.
//
// Per step, on every rank:
//     y = model.forward(x);  ...;  model.backward(dy);
//     data_parallel.finish_gradient_sync();             // waits for / issues the dp traffic
//     tp::sync_replicated_gradients(model, mesh.tp());  // tp, domain: linear sums that
//     domain::sync_domain_gradients(model, mesh);       // commute with the dp average
//     (clip_grad_norm(...);) optimizer.step();
// Gradient accumulation over several forward/backward pairs (micro-batches) reduces once
// per optimizer step: set_gradient_sync(false) before every backward but the last, so
// those backward passes start no dp traffic and their gradients add up locally (ddp: in
// the bucket buffers; fsdp2: in the full, unsharded gradients of every unit, which stay
// allocated until the step's reduction), then set_gradient_sync(true) before the last
// backward and call finish_gradient_sync() once. (Calling finish_gradient_sync() after
// each backward also accumulates, in the reduced gradients, at one reduction per
// micro-batch.) A forward without a backward (evaluation) is allowed: call
// finish_evaluation() after it, so the next backward starts its reductions on time.
//
// The constructor is collective over mesh.dp() (it broadcasts every parameter from dp
// rank 0, so the replicas start identical); a bad model throws the same error on every
// rank because every rank checks the same tree. The mesh and the model must outlive the
// DataParallel object; the wrappers keep the shared state alive by themselves.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "tessera/dp/memory.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/optim.hpp"

namespace tessera::dp {

struct DataParallelOptions {
  std::size_t bucket_bytes = std::size_t(25) << 20;  // ddp (and fsdp2's replicated leftovers); > 0
  bool overlap = true;                // start each bucket's / module's reduction during backward
  bool broadcast_parameters = true;   // make dp rank 0's values everyone's at construction
  DType reduce_dtype = DType::f32;    // the dtype gradients are reduced in: f32 or bf16 (above)
};

namespace detail {
struct Engine;
}

class DataParallel {
 public:
  // The mode is mesh.config().data (none: nothing is done, and nothing is sent).
  DataParallel(nn::Module& model, const Mesh& mesh, DataParallelOptions options = {});
  DataParallel(nn::Module& model, const Mesh& mesh, DataParallelMode mode, DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Completes this backward's dp reduction: starts what overlap has not started, waits
  // for everything, and leaves averaged gradients (fsdp2: averaged gradient shards).
  // Collective over mesh.dp().
  void finish_gradient_sync();

  // Whether a backward starts the dp reduction (default true). While false, backward
  // passes only accumulate local gradients; finish_gradient_sync() reduces whatever has
  // accumulated, whatever this setting. Local; every dp rank must set the same value
  // before the same backward (the trainer's accumulation loop does).
  void set_gradient_sync(bool enabled);
  bool gradient_sync() const;

  // After forward passes that no backward follows (evaluation): forgets them, so the next
  // step's backward starts its reductions during backward again (without this call they
  // start in finish_gradient_sync(): the same values, without the overlap). Local, no
  // communication.
  void finish_evaluation();

  DataParallelMode mode() const;
  const DataParallelOptions& options() const;
  // The FQN paths of the modules that were wrapped (empty for ddp without overlap).
  std::vector<std::string> unit_paths() const;
  // Parameter FQNs per gradient bucket, in bucket (= launch) order.
  std::vector<std::vector<std::string>> buckets() const;
  // fsdp2: the parameters sharded over dp (the others are dp-Replicate).
  std::vector<std::string> sharded_parameters() const;
  // Tied parameters (below): dp-Replicate in both modes, reduced after the whole backward.
  std::vector<std::string> tied_parameters() const;

  // This rank's parameter, gradient and (when given) optimizer-state bytes, plus the
  // largest transient footprint of one gathered fsdp2 unit (parameters + gradients).
  MemoryReport memory_report(Optimizer* optimizer = nullptr) const;

 private:
  std::shared_ptr<detail::Engine> engine_;
};

}  // namespace tessera::dp
