// What a rank saves: its entries (parameters and optimizer state), the cross-rank check
// that every rank saves the same tensors, and the checkpoint header.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "io/checkpoint_collectives.hpp"
#include "io/checkpoint_save.hpp"
#include "io/checkpoint_snapshot.hpp"
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

std::vector<Entry> collect_entries(const Mesh& mesh, const NamedParameters& params, Optimizer* optimizer,
                                   SnapshotBuffers* snapshot) {
  std::vector<Entry> entries;
  std::set<std::string> seen;
  auto add = [&](std::string section, const std::string& name, const Tensor& value, const Shape& global,
                 const MeshPlacement& placement, const Shape& offset) {
    Entry e;
    e.section = std::move(section);
    e.name = name;
    if (!value.defined()) throw InvalidArgument("checkpoint: " + e.path() + " has an undefined value");
    e.host = snapshot != nullptr ? snapshot->copy(entries.size(), value)
                                 : value.to(Device::host()).contiguous();  // no copy for a contiguous host tensor
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

namespace {

// One writer's block of a tensor: the writing rank, its offset and extent.
struct WrittenBox {
  int rank = 0;
  Shape offset, extent;
};

// "[0, 3) x [2, 5)": the element ranges of a block, in the file's (C-order) index space.
std::string box_text(const WrittenBox& b) {
  std::string text;
  for (std::size_t d = 0; d < b.offset.size(); ++d) {
    if (d > 0) text += " x ";
    text += "[" + std::to_string(b.offset[d]) + ", " + std::to_string(b.offset[d] + b.extent[d]) + ")";
  }
  return text;
}

bool boxes_intersect(const WrittenBox& a, const WrittenBox& b) {
  for (std::size_t d = 0; d < a.offset.size(); ++d) {
    if (a.offset[d] >= b.offset[d] + b.extent[d] || b.offset[d] >= a.offset[d] + a.extent[d]) return false;
  }
  return true;
}

// The verdict on one tensor's writers' blocks (each already inside the global shape:
// collect_entries checked it). Overlaps are searched along the dimension with the most
// distinct offsets, so a slab decomposition costs a sort, not all pairs.
void check_tensor_tiles(const Entry& e, std::vector<WrittenBox>& boxes) {
  const std::size_t rank = e.global_shape.size();
  std::size_t sweep = 0, most = 0;
  for (std::size_t d = 0; d < rank; ++d) {
    std::set<std::int64_t> distinct;
    for (const WrittenBox& b : boxes) distinct.insert(b.offset[d]);
    if (distinct.size() > most) most = distinct.size(), sweep = d;
  }
  std::sort(boxes.begin(), boxes.end(), [sweep](const WrittenBox& a, const WrittenBox& b) {
    return a.offset[sweep] != b.offset[sweep] ? a.offset[sweep] < b.offset[sweep] : a.rank < b.rank;
  });
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const std::int64_t end = boxes[i].offset[sweep] + boxes[i].extent[sweep];
    for (std::size_t j = i + 1; j < boxes.size() && boxes[j].offset[sweep] < end; ++j) {
      if (!boxes_intersect(boxes[i], boxes[j])) continue;
      const WrittenBox& a = boxes[i].rank < boxes[j].rank ? boxes[i] : boxes[j];
      const WrittenBox& b = boxes[i].rank < boxes[j].rank ? boxes[j] : boxes[i];
      throw InvalidArgument("checkpoint: tensor " + e.path() + " " + shape_str(e.global_shape) + ": the blocks of ranks " +
                            std::to_string(a.rank) + " and " + std::to_string(b.rank) + " overlap (rank " +
                            std::to_string(a.rank) + " writes " + box_text(a) + ", rank " + std::to_string(b.rank) +
                            " writes " + box_text(b) + "; placement " + e.placement.str() +
                            "): every element must be written by one rank; check the local offsets and shapes "
                            "given for it");
    }
  }
  // No overlap and every block inside: they tile iff their sizes add up to the whole.
  std::int64_t covered = 0;
  for (const WrittenBox& b : boxes) covered += shape_numel(b.extent);
  const std::int64_t whole = shape_numel(e.global_shape);
  if (covered == whole) return;
  std::string where;
  for (const WrittenBox& b : boxes) {
    if (!where.empty()) where += ", ";
    if (where.size() > 400) {
      where += "...";
      break;
    }
    where += "rank " + std::to_string(b.rank) + " " + box_text(b);
  }
  throw InvalidArgument("checkpoint: tensor " + e.path() + " " + shape_str(e.global_shape) + ": the ranks' blocks cover " +
                        std::to_string(covered) + " of its " + std::to_string(whole) + " elements (" +
                        (where.empty() ? std::string("no rank writes a block") : where) + "; placement " +
                        e.placement.str() +
                        "): the rest would read back as zeros; give every element to one rank's block");
}

}  // namespace

void check_blocks_tile(Communicator& world, const std::vector<Entry>& entries) {
  // (entry index, offset..., extent...) of every non-empty block this rank writes.
  std::vector<std::int64_t> mine;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (!e.writer || e.host.numel() == 0) continue;
    mine.push_back(static_cast<std::int64_t>(i));
    mine.insert(mine.end(), e.offset.begin(), e.offset.end());
    const Shape& extent = e.host.shape();
    mine.insert(mine.end(), extent.begin(), extent.end());
  }
  const auto all = all_gather_vectors(world, mine);
  std::vector<std::vector<WrittenBox>> boxes(entries.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto& list = all[r];
    for (std::size_t k = 0; k < list.size();) {
      const auto i = static_cast<std::size_t>(list[k]);
      // Every rank saves the same tensors in one order (check_same_tensors_everywhere).
      if (i >= entries.size()) throw InternalError("checkpoint: a block of an unknown tensor was gathered");
      const auto n = static_cast<std::ptrdiff_t>(entries[i].global_shape.size());
      const auto first = list.begin() + static_cast<std::ptrdiff_t>(k) + 1;
      boxes[i].push_back({static_cast<int>(r), Shape(first, first + n), Shape(first + n, first + 2 * n)});
      k += 1 + 2 * static_cast<std::size_t>(n);
    }
  }
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (shape_numel(entries[i].global_shape) == 0) continue;
    check_tensor_tiles(entries[i], boxes[i]);
  }
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
