#pragma once
// Memory report: the bytes one rank holds for parameters, gradients and optimizer state,
// measured from live tensors or planned from shapes without allocating them (for a
// driver's --dry-run).
//
// Planning follows the same rules as the layers and dp::DataParallel: a dim that a
// placement shards over tp or domain gets shard_range(global, size, coord) of it; under
// fsdp2 the resulting block is split along dim 0 over dp, unless that dim is smaller
// than the dp size (the parameter then stays dp-Replicate, as DataParallel does).
// Optimizer state: SGD without momentum none, SGD with momentum one tensor, AdamW two,
// each the parameter's local size and dtype.

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/dtype.hpp"
#include "tessera/mesh.hpp"
#include "tessera/optim.hpp"
#include "tessera/parallelism.hpp"
#include "tessera/placement.hpp"
#include "tessera/tensor.hpp"

namespace tessera::nn {
class Module;
}

namespace tessera::dp {

struct MemoryReport {
  std::int64_t parameter_elements = 0;  // local elements over all parameters
  std::int64_t parameter_bytes = 0;
  std::int64_t gradient_bytes = 0;
  std::int64_t optimizer_bytes = 0;
  // fsdp2: the largest one-unit transient (its gathered parameters + full gradients),
  // allocated during that unit's forward/backward only. 0 otherwise.
  std::int64_t transient_bytes = 0;
  std::int64_t total_bytes() const { return parameter_bytes + gradient_bytes + optimizer_bytes; }
  bool operator==(const MemoryReport&) const = default;
};

// Sums value, grad and optimizer->named_state() tensors (each parameter counted once).
MemoryReport measure_memory(const NamedParameters& params, Optimizer* optimizer = nullptr);

enum class OptimizerKind { none, sgd, sgd_momentum, adamw };
std::string_view optimizer_kind_name(OptimizerKind kind) noexcept;  // "none" "sgd" ...
int optimizer_state_tensors(OptimizerKind kind) noexcept;           // 0, 0, 1, 2

// One parameter as a plan sees it: master shape, tp/domain placement (dp is decided by
// the plan's mode), dtype, and its unit (the path of the module that registers it;
// parameters with one unit path are gathered together under fsdp2).
struct ParameterSpec {
  std::string name;
  Shape global_shape;
  MeshPlacement placement;
  DType dtype = DType::f32;
  std::string unit;
  bool tied = false;  // read by two units or outside its own: fsdp2 keeps it dp-replicated
  bool trainable = true;  // frozen: whole on every dp rank, no gradient, no optimizer state
};

// Where the planned rank sits.
struct MemoryPlanLayout {
  DataParallelMode mode = DataParallelMode::none;
  int dp_size = 1, tp_size = 1, domain_size = 1;
  MeshCoords coords;
  static MemoryPlanLayout of(const Mesh& mesh);  // mode from mesh.config().data
};

// The per-rank report for `specs` under `layout`, without allocating anything.
// Throws InvalidArgument naming the parameter when a placement shards a missing dim.
MemoryReport plan_memory(const std::vector<ParameterSpec>& specs, const MemoryPlanLayout& layout,
                         OptimizerKind optimizer);
// The specs of a model that is not yet data-parallel (serial, or after tp/domain
// conversion: each parameter's global shape and placement; units as DataParallel forms
// them). A parameter already sharded over dp is an InvalidArgument naming it.
std::vector<ParameterSpec> parameter_specs(nn::Module& model);
MemoryReport plan_memory(nn::Module& model, const MemoryPlanLayout& layout, OptimizerKind optimizer);

// "1.50 KiB", "12.00 MiB" (binary units; bytes below 1 KiB as "512 B").
std::string format_bytes(std::int64_t bytes);
// A small table, one line per item, each line prefixed by `indent`:
//   parameters        12.00 KiB  (3072 elements)
//   gradients         12.00 KiB
//   optimizer state   24.00 KiB
//   total             48.00 KiB
//   fsdp2 transient    4.00 KiB  (largest gathered unit)      [only when non-zero]
std::string format_memory_report(const MemoryReport& report, const std::string& title = "",
                                 const std::string& indent = "  ");

}  // namespace tessera::dp
