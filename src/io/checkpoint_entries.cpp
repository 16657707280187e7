// What a rank saves: its entries (parameters and optimizer state), the cross-rank check
// that every rank saves the same tensors, and the checkpoint header.
#include <set>

#include "io/checkpoint_collectives.hpp"
#include "io/checkpoint_save.hpp"
#include "tessera/agree.hpp"
#include "tessera/io/checksum.hpp"
#include "tessera/version.hpp"

namespace tessera::io::detail {

namespace {

void check_entry(const Entry& e) {
  if (e.name.empty() || e.name.find('/') != std::string::npos || e.name == "." || e.name == "..") {
    throw InvalidArgument("checkpoint: tensor name '" + e.name + "' cannot be an HDF5 link name");
  }
  if (e.global_shape.empty()) throw UnsupportedError("checkpoint: " + e.path() + " is 0-dimensional");
  if (e.host.shape().size() != e.global_shape.size() || e.offset.size() != e.global_shape.size()) {
    throw ShapeError("checkpoint: " + e.path() + ": block " + e.host.str() + " at " + shape_str(e.offset) +
                     " does not match global shape " + shape_str(e.global_shape));
  }
}

}  // namespace

std::vector<Entry> collect_entries(const Mesh& mesh, const NamedParameters& params, Optimizer* optimizer) {
  std::vector<Entry> entries;
  std::set<std::string> seen;
  auto add = [&](std::string section, const std::string& name, const Tensor& value, const Shape& global,
                 const MeshPlacement& placement, const Shape& offset) {
    Entry e;
    e.section = std::move(section);
    e.name = name;
    if (!value.defined()) throw InvalidArgument("checkpoint: " + e.path() + " has an undefined value");
    e.host = value.to(Device::host()).contiguous();  // no copy for a contiguous host tensor
    e.global_shape = global;
    e.placement = placement;
    e.offset = offset;
    check_entry(e);
    if (!seen.insert(e.path()).second) throw InvalidArgument("checkpoint: two tensors are named " + e.path());
    e.writer = is_main_replica(mesh, placement);
    if (e.writer) e.checksum = block_checksum(e.host, e.global_shape, e.offset);
    entries.push_back(std::move(e));
  };
  for (const auto& [name, p] : params) {
    if (p == nullptr) throw InvalidArgument("checkpoint: parameter '" + name + "' is null");
    add("model", name, p->value, p->global_shape, p->placement, p->local_offset);
  }
  if (optimizer != nullptr) {
    for (const OptimizerState& s : optimizer->named_state()) {
      add("optimizer", s.name, s.tensor, s.global_shape, s.placement, s.local_offset);
    }
  }
  return entries;
}

void check_same_tensors_everywhere(Communicator& world, const std::vector<Entry>& entries,
                                   const Optimizer* optimizer) {
  std::string description = optimizer ? optimizer->type_name() : "-";
  for (const Entry& e : entries) {
    description += "|" + e.path() + shape_str(e.global_shape) + std::string(dtype_name(e.host.dtype())) +
                   e.placement.str();
  }
  require_same_on_all_ranks(world.mpi_comm(), description,
                            "checkpoint: the ranks do not agree on the tensors to save (names, global shapes, "
                            "dtypes, placements or optimizer type differ between ranks)");
}

CheckpointHeader make_header(const Mesh& mesh, const SaveOptions& options, const Optimizer* optimizer) {
  CheckpointHeader h;
  h.format = checkpoint_format_name;
  h.format_version = checkpoint_format_version;
  h.tessera_version = version_string;
  h.layout = options.layout;
  h.mesh = mesh.config();
  h.dp = mesh.dp_size();
  h.world_size = mesh.world_size();
  h.step = options.step;
  h.metadata = options.metadata;
  h.checksum_algorithm = checksum_algorithm;
  if (optimizer != nullptr) {
    h.optimizer_type = optimizer->type_name();
    h.optimizer_step_count = optimizer->step_count();
  }
  return h;
}

void write_optimizer_group_attributes(hid_t group, const CheckpointHeader& h) {
  write_string_attribute(group, "type", h.optimizer_type);
  write_int_attribute(group, "step_count", h.optimizer_step_count);
}

}  // namespace tessera::io::detail
