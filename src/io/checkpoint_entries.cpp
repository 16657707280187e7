// What a rank saves: its entries (parameters and optimizer state), the cross-rank check
// that every rank saves the same tensors, and the checkpoint header.
#include <map>
#include <set>
#include <sstream>

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
    // The block's place is checked now, before any file exists (ShapeError); its checksum
    // share is computed as it is written (raw_block_of).
    if (e.writer) (void)block_checksum_range(e.host, e.global_shape, e.offset, 0, 0);
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

namespace {

// An entry as text for the gather across stages: section, name, dtype, global shape and
// placement, separated by US (0x1f), which no HDF5 link name here contains in practice.
constexpr char kSep = '\x1f';

std::string describe_entry(const Entry& e) {
  std::ostringstream out;
  out << e.section << kSep << e.name << kSep << static_cast<int>(e.host.dtype()) << kSep;
  for (std::int64_t d : e.global_shape) out << d << ' ';
  out << kSep;
  for (MeshDim d : {MeshDim::dp, MeshDim::tp, MeshDim::domain}) {
    out << static_cast<int>(e.placement[d].kind) << ' ' << e.placement[d].dim << ' ';
  }
  return out.str();
}

// The entry another stage saves, as this rank sees it: its dtype, global shape and
// placement, an empty block, never written by this rank, no checksum share.
Entry entry_of_other_stage(const std::string& text) {
  std::vector<std::string> field;
  std::size_t start = 0;
  for (std::size_t sep; (sep = text.find(kSep, start)) != std::string::npos; start = sep + 1) {
    field.push_back(text.substr(start, sep - start));
  }
  field.push_back(text.substr(start));
  if (field.size() != 5) throw InternalError("checkpoint: bad entry description from another pipeline stage");
  Entry e;
  e.section = field[0];
  e.name = field[1];
  std::istringstream shape(field[3]);
  for (std::int64_t d; shape >> d;) e.global_shape.push_back(d);
  std::istringstream placement(field[4]);
  for (MeshDim d : {MeshDim::dp, MeshDim::tp, MeshDim::domain}) {
    int kind = 0, dim = -1;
    placement >> kind >> dim;
    e.placement[d] = {static_cast<Placement::Kind>(kind), dim};
  }
  e.offset = Shape(e.global_shape.size(), 0);
  e.host = Tensor::zeros(e.offset, static_cast<DType>(std::stoi(field[2])));
  return e;
}

}  // namespace

void add_entries_of_other_stages(const Mesh& mesh, std::vector<Entry>& entries) {
  if (mesh.pp_size() == 1) return;
  std::vector<std::string> mine{std::to_string(mesh.coords().pp)};
  for (const Entry& e : entries) mine.push_back(describe_entry(e));
  const auto all = all_gather_strings(mesh.world(), mine);
  // One list per stage, from its first rank; every other rank of the stage must agree.
  std::map<int, std::size_t> first_rank_of_stage;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const int stage = std::stoi(all[r].front());
    const auto [it, added] = first_rank_of_stage.emplace(stage, r);
    if (!added && all[r] != all[it->second]) {
      throw InvalidArgument("checkpoint: ranks " + std::to_string(it->second) + " and " + std::to_string(r) +
                            " of pipeline stage " + std::to_string(stage) +
                            " do not agree on the tensors to save (names, global shapes, dtypes or placements)");
    }
  }
  std::map<int, std::vector<std::string>> paths_of_stage;
  for (const auto& [stage, r] : first_rank_of_stage) {
    for (std::size_t k = 1; k < all[r].size(); ++k) paths_of_stage[stage].push_back(entry_of_other_stage(all[r][k]).path());
  }
  require_one_stage_per_tensor(paths_of_stage);
  // The union in one order on every rank: the model's tensors stage by stage, then the
  // optimizer's (for a serial split, the serial model's order).
  std::map<std::string, Entry> own;
  for (Entry& e : entries) own.emplace(e.path(), std::move(e));
  std::vector<Entry> all_entries;
  for (const char* section : {"model", "optimizer"}) {
    for (const auto& [stage, r] : first_rank_of_stage) {
      for (std::size_t k = 1; k < all[r].size(); ++k) {
        Entry e = entry_of_other_stage(all[r][k]);
        if (e.section != section) continue;
        const auto it = own.find(e.path());
        all_entries.push_back(it != own.end() ? std::move(it->second) : std::move(e));
      }
    }
  }
  entries = std::move(all_entries);
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

SectionGroups write_header_and_sections(hid_t file, const CheckpointHeader& h) {
  write_header(file, h);
  SectionGroups sections;
  sections.model = create_ordered_group(file, "model");
  if (!h.optimizer_type.empty()) {
    sections.optimizer = create_ordered_group(file, "optimizer");
    write_string_attribute(sections.optimizer.get(), "type", h.optimizer_type);
    write_int_attribute(sections.optimizer.get(), "step_count", h.optimizer_step_count);
  }
  return sections;
}

RawBlock raw_block_of(const Entry& e, std::vector<RawRun> runs) {
  RawBlock block;
  block.data = static_cast<const unsigned char*>(e.host.data());
  block.element_size = dtype_size(e.host.dtype());
  block.runs = std::move(runs);
  block.checksum = [&e](std::int64_t first, std::int64_t count) {
    return block_checksum_range(e.host, e.global_shape, e.offset, first, count);
  };
  return block;
}

}  // namespace tessera::io::detail
