#include "tessera/dp/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>
#include <unordered_set>

#include "dp/units.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera::dp {

MemoryReport measure_memory(const NamedParameters& params, Optimizer* optimizer) {
  MemoryReport r;
  std::unordered_set<const Parameter*> seen;
  for (const auto& [name, p] : params) {
    if (p == nullptr || !seen.insert(p).second) continue;
    if (p->value.defined()) {
      r.parameter_elements += p->value.numel();
      r.parameter_bytes += static_cast<std::int64_t>(p->value.nbytes());
    }
    if (p->grad.defined()) r.gradient_bytes += static_cast<std::int64_t>(p->grad.nbytes());
  }
  if (optimizer != nullptr) {
    for (const OptimizerState& s : optimizer->named_state()) {
      if (s.tensor.defined()) r.optimizer_bytes += static_cast<std::int64_t>(s.tensor.nbytes());
    }
  }
  return r;
}

constexpr tessera::detail::EnumName<OptimizerKind> kOptimizerKindNames[] = {
    {OptimizerKind::none, "none"},
    {OptimizerKind::sgd, "sgd"},
    {OptimizerKind::sgd_momentum, "sgd_momentum"},
    {OptimizerKind::adamw, "adamw"},
};

std::string_view optimizer_kind_name(OptimizerKind kind) noexcept {
  return tessera::detail::name_of(kOptimizerKindNames, kind);
}

int optimizer_state_tensors(OptimizerKind kind) noexcept {
  return kind == OptimizerKind::adamw ? 2 : kind == OptimizerKind::sgd_momentum ? 1 : 0;
}

MemoryPlanLayout MemoryPlanLayout::of(const Mesh& mesh) {
  MemoryPlanLayout l;
  l.mode = mesh.config().data;
  l.dp_size = mesh.dp_size();
  l.tp_size = mesh.tp_size();
  l.domain_size = mesh.domain_size();
  l.coords = mesh.coords();
  return l;
}

MemoryReport plan_memory(const std::vector<ParameterSpec>& specs, const MemoryPlanLayout& layout,
                         OptimizerKind optimizer) {
  if (layout.dp_size < 1 || layout.tp_size < 1 || layout.domain_size < 1) {
    throw InvalidArgument("plan_memory: mesh sizes must be >= 1 (dp " + std::to_string(layout.dp_size) + ", tp " +
                          std::to_string(layout.tp_size) + ", domain " + std::to_string(layout.domain_size) + ")");
  }
  MemoryReport r;
  std::map<std::string, std::int64_t> transient;  // per unit
  const bool fsdp2 = layout.mode == DataParallelMode::fsdp2 && layout.dp_size > 1;
  for (const ParameterSpec& s : specs) {
    Shape local = s.global_shape;
    const int dims = static_cast<int>(local.size());
    for (const auto& [dim, parts, index] : {std::tuple{MeshDim::tp, layout.tp_size, layout.coords.tp},
                                            std::tuple{MeshDim::domain, layout.domain_size, layout.coords.domain}}) {
      const Placement& pl = s.placement[dim];
      if (pl.is_replicate()) continue;
      if (pl.dim < 0 || pl.dim >= dims) {
        throw InvalidArgument("plan_memory: parameter " + s.name + " is " + pl.str() + " over " +
                              std::string(mesh_dim_name(dim)) + " but has shape " + shape_str(s.global_shape));
      }
      local[pl.dim] = shard_range(local[pl.dim], parts, index).length;
    }
    const std::int64_t element = static_cast<std::int64_t>(dtype_size(s.dtype));
    if (fsdp2 && s.trainable && !s.tied && !local.empty() && local[0] >= layout.dp_size) {
      transient[s.unit] += 2 * shape_numel(local) * element;
      local[0] = shard_range(local[0], layout.dp_size, layout.coords.dp).length;
    }
    const std::int64_t n = shape_numel(local);
    r.parameter_elements += n;
    r.parameter_bytes += n * element;
    if (!s.trainable) continue;
    r.gradient_bytes += n * element;
    r.optimizer_bytes += optimizer_state_tensors(optimizer) * n * element;
  }
  for (const auto& [unit, bytes] : transient) r.transient_bytes = std::max(r.transient_bytes, bytes);
  return r;
}

std::vector<ParameterSpec> parameter_specs(nn::Module& model) {
  std::vector<ParameterSpec> specs;
  std::unordered_set<const Parameter*> seen;
  const auto units = detail::find_units(model);
  const auto tied = detail::find_tied_parameters(model, units);
  for (const auto& unit : units) {
    for (const auto& [name, p] : unit.params) {
      if (!seen.insert(p).second) continue;
      if (p->placement.dp.is_shard()) {
        throw InvalidArgument("parameter_specs: parameter " + name + " is already sharded over dp (" +
                              p->placement.str() + "); plan from a model that is not yet data-parallel");
      }
      specs.push_back({name, p->global_shape, p->placement, p->value.defined() ? p->value.dtype() : DType::f32,
                       unit.path, tied.contains(p), p->trainable});
    }
  }
  return specs;
}

MemoryReport plan_memory(nn::Module& model, const MemoryPlanLayout& layout, OptimizerKind optimizer) {
  return plan_memory(parameter_specs(model), layout, optimizer);
}

std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::abs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  }
  return buf;
}

std::string format_memory_report(const MemoryReport& report, const std::string& title, const std::string& indent) {
  std::string out;
  if (!title.empty()) out += title + "\n";
  char line[160];
  auto row = [&](const char* what, std::int64_t bytes, const std::string& note) {
    std::snprintf(line, sizeof line, "%s%-17s %12s%s\n", indent.c_str(), what, format_bytes(bytes).c_str(),
                  note.c_str());
    out += line;
  };
  row("parameters", report.parameter_bytes, "  (" + std::to_string(report.parameter_elements) + " elements)");
  row("gradients", report.gradient_bytes, "");
  row("optimizer state", report.optimizer_bytes, "");
  row("total", report.total_bytes(), "");
  if (report.transient_bytes > 0) row("fsdp2 transient", report.transient_bytes, "  (largest gathered unit)");
  return out;
}

}  // namespace tessera::dp
