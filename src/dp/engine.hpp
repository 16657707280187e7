#pragma once
// The data-parallel engine behind dp::DataParallel: the per-parameter state, the fsdp2
// unit groups (gather before use, release after, reduce-scatter after the last backward),
// the ddp gradient buckets (launched in bucket order as they become ready) and the hooks
// the unit wrappers call around each unit's forward and backward. data_parallel.cpp
// builds it (units, tied parameters, shards, buckets) and wraps the units.

#include <string>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/dp/data_parallel.hpp"

namespace tessera::dp::detail {

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
  bool tied = false;               // units.hpp: replicated, reduced after the whole backward
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
  Tensor wire;  // what the all-reduce runs on: flat itself, or its bf16 shadow (reduce dtype bf16)
  std::size_t ready = 0;
  bool launched = false;
  CommRequest request;
};

struct PendingScatter {
  CommRequest request;
  Tensor wire_input, wire_output;  // what the reduce-scatter runs on (bf16 with reduce dtype bf16)
  Tensor output;                   // the averaged gradient block, in the gradients' dtype
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
  void gather(Unit& unit);
  void release(Unit& unit);
  void open_grads(Unit& unit);
  void add_scattered(int u, int gi, const Tensor& output);
  void scatter_grads(int u);

  // ---- buckets
  void launch_ready();
  void launch(Bucket& b);

  // ---- hooks
  void pre_forward(int u);
  void post_forward(int u);
  void pre_backward(int u);
  // Without sync, the full gradients stay open (the next backward adds to them) and the
  // parameters point at their shards again, as between steps.
  void park_grads(Unit& unit);
  void post_backward(int u);
  void finish();
};

}  // namespace tessera::dp::detail
