#include "tessera/io/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "io/format.hpp"
#include "tessera/agree.hpp"
#include "tessera/init.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/io/checksum.hpp"
#include "tessera/version.hpp"

namespace fs = std::filesystem;

namespace tessera::io {

using namespace detail;

std::string_view checkpoint_layout_name(CheckpointLayout layout) noexcept {
  return layout == CheckpointLayout::per_rank ? "per_rank" : "shared";
}

CheckpointLayout parse_checkpoint_layout(std::string_view text) {
  if (text == "per_rank") return CheckpointLayout::per_rank;
  if (text == "shared") return CheckpointLayout::shared;
  throw InvalidArgument("checkpoint layout '" + std::string(text) + "' is not one of per_rank, shared");
}

std::string checkpoint_directory_name(std::int64_t step) {
  if (step < 0) throw InvalidArgument("checkpoint: step " + std::to_string(step) + " is negative");
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "step_%08" PRId64, step);
  return buffer;
}

std::optional<std::string> latest_checkpoint(const std::string& root) {
  const fs::path pointer = fs::path(root) / "latest";
  std::ifstream in(pointer);
  if (!in) return std::nullopt;
  std::string name;
  std::getline(in, name);
  while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (name.empty()) return std::nullopt;
  return (fs::path(root) / name).string();
}

namespace {

// step_<digits> -> step; -1 for any other name.
std::int64_t parse_step_directory(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5) return -1;
  std::int64_t step = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

}  // namespace

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::int64_t step = parse_step_directory(entry.path().filename().string());
    if (step >= 0 && entry.is_directory(ec)) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

namespace {

// ---------------------------------------------------------------------------
// Small collectives over the tessera Communicator (sleep-polled where the node is
// oversubscribed), so checkpointing adds no busy-waiting ranks.
// ---------------------------------------------------------------------------

// Sums 64-bit checksums modulo 2^64 over `comm`: each is split into 32-bit halves so
// the signed 64-bit reduction never overflows.
void all_reduce_checksums(Communicator& comm, std::vector<std::uint64_t>& sums) {
  if (comm.size() == 1 || sums.empty()) return;
  std::vector<std::int64_t> halves;
  halves.reserve(2 * sums.size());
  for (std::uint64_t s : sums) {
    halves.push_back(static_cast<std::int64_t>(s >> 32));
    halves.push_back(static_cast<std::int64_t>(s & 0xffffffffULL));
  }
  Tensor t = Tensor::from_vector<std::int64_t>(halves, {static_cast<std::int64_t>(halves.size())});
  comm.all_reduce(t, ReduceOp::sum);
  const auto reduced = t.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < sums.size(); ++i) {
    sums[i] = (static_cast<std::uint64_t>(reduced[2 * i]) << 32) + static_cast<std::uint64_t>(reduced[2 * i + 1]);
  }
}

// Gathers every rank's vector onto every rank (rank order).
std::vector<std::vector<std::int64_t>> all_gather_vectors(Communicator& comm, const std::vector<std::int64_t>& mine) {
  if (comm.size() == 1) return {mine};
  Tensor length = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(mine.size())}, {1});
  Tensor lengths = Tensor::zeros({comm.size()}, DType::i64);
  comm.all_gather(length, lengths);
  const auto all_lengths = lengths.to_vector<std::int64_t>();
  const std::int64_t longest = std::max<std::int64_t>(1, *std::max_element(all_lengths.begin(), all_lengths.end()));
  std::vector<std::int64_t> padded(mine);
  padded.resize(static_cast<std::size_t>(longest), 0);
  Tensor local = Tensor::from_vector<std::int64_t>(padded, {longest});
  Tensor all = Tensor::zeros({comm.size() * longest}, DType::i64);
  comm.all_gather(local, all);
  const auto flat = all.to_vector<std::int64_t>();
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    const auto begin = flat.begin() + r * longest;
    out[static_cast<std::size_t>(r)].assign(begin, begin + all_lengths[static_cast<std::size_t>(r)]);
  }
  return out;
}

// ---------------------------------------------------------------------------
// The fault-injection test hook (TESSERA_CKPT_FAIL="<rank>:<stage>").
// ---------------------------------------------------------------------------

struct FaultHook {
  int rank = -1;
  std::string stage;

  static FaultHook from_environment() {
    FaultHook hook;
    const char* text = std::getenv("TESSERA_CKPT_FAIL");
    if (text == nullptr || *text == '\0') return hook;
    const std::string value = text;
    const auto colon = value.find(':');
    static const std::set<std::string> stages = {"prepare", "write", "index", "commit"};
    char* end = nullptr;
    const long rank = colon == std::string::npos ? -1 : std::strtol(value.c_str(), &end, 10);
    if (colon == std::string::npos || end != value.c_str() + colon || rank < 0 ||
        stages.count(value.substr(colon + 1)) == 0) {
      throw ConfigError("TESSERA_CKPT_FAIL='" + value +
                        "' is not <rank>:<stage> with stage one of prepare, write, index, commit");
    }
    hook.rank = static_cast<int>(rank);
    hook.stage = value.substr(colon + 1);
    return hook;
  }

  void maybe_fail(int rank_now, std::string_view stage_now, const std::string& where) const {
    if (rank_now == rank && stage_now == stage) {
      throw IoError("checkpoint: injected failure (TESSERA_CKPT_FAIL=" + std::to_string(rank) + ":" + stage +
                    ") while " + where);
    }
  }
};

// ---------------------------------------------------------------------------
// What a rank saves.
// ---------------------------------------------------------------------------

// True when this rank holds the copy of a block that gets written (and counted in
// checksums): coordinate 0 along every mesh dimension the tensor is replicated over.
bool is_main_replica(const Mesh& mesh, const MeshPlacement& placement) {
  for (MeshDim d : {MeshDim::dp, MeshDim::tp, MeshDim::domain}) {
    if (placement[d].is_replicate() && mesh.rank(d) != 0) return false;
  }
  return true;
}

struct Entry {
  std::string section;  // "model" or "optimizer"
  std::string name;
  Tensor host;          // this rank's block, contiguous on the host
  Shape global_shape;
  MeshPlacement placement;
  Shape offset;
  bool writer = false;
  std::uint64_t checksum = 0;  // this rank's share, then (after the reduction) the whole tensor's
  std::string path() const { return dataset_path(section, name); }
};

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

// A collective HDF5 write with ranks that disagree on the tensors would hang; compare a
// hash of (name, shape, dtype, placement) of every tensor across ranks first.
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

struct SaveContext {
  const Mesh& mesh;
  Communicator& world;
  std::vector<Entry>& entries;
  CheckpointHeader header;
  std::string temp_dir;
  FaultHook hook;
};

// ---------------------------------------------------------------------------
// per_rank: slice files with serial HDF5, then rank 0's index of virtual datasets.
// ---------------------------------------------------------------------------

// One record per written block: entry index, rank, offset[n], count[n].
std::vector<std::int64_t> slice_records(const SaveContext& c) {
  std::vector<std::int64_t> records;
  for (std::size_t i = 0; i < c.entries.size(); ++i) {
    const Entry& e = c.entries[i];
    if (!e.writer) continue;
    records.push_back(static_cast<std::int64_t>(i));
    records.insert(records.end(), e.offset.begin(), e.offset.end());
    records.insert(records.end(), e.host.shape().begin(), e.host.shape().end());
  }
  return records;
}

void write_slice_file(SaveContext& c, const std::vector<std::uint64_t>& slice_checksums) {
  const int rank = c.world.rank();
  const std::string path = (fs::path(c.temp_dir) / rank_file_name(rank)).string();
  {
    H5File file(TESSERA_CHECK_HDF5(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT)));
    write_header(file.get(), c.header);
    write_int_attribute(file.get(), "rank", rank);
    std::map<std::string, H5Group> groups;
    bool first = true;
    for (std::size_t i = 0; i < c.entries.size(); ++i) {
      const Entry& e = c.entries[i];
      if (!e.writer) continue;
      auto group = groups.find(e.section);
      if (group == groups.end()) group = groups.emplace(e.section, create_ordered_group(file.get(), e.section)).first;
      const H5Space space = make_space(e.host.shape());
      H5Dataset dataset(TESSERA_CHECK_HDF5(H5Dcreate2(group->second.get(), e.name.c_str(),
                                                      file_type_of(e.host.dtype()), space.get(), H5P_DEFAULT,
                                                      H5P_DEFAULT, H5P_DEFAULT)));
      if (e.host.numel() > 0) {
        TESSERA_CHECK_HDF5(H5Dwrite(dataset.get(), memory_type_of(e.host.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                    e.host.data()));
      }
      write_dataset_attributes(dataset.get(), e.placement.str(), e.host.dtype(), slice_checksums[i]);
      write_int_array_attribute(dataset.get(), "global_shape", e.global_shape);
      write_int_array_attribute(dataset.get(), "offset", e.offset);
      dataset.close();
      if (first) c.hook.maybe_fail(rank, "write", "writing " + e.path() + " to " + path);
      first = false;
    }
    for (auto& [name, group] : groups) group.close();
    file.close();
  }
  fsync_path(path, false);
}

// HDF5 reads '%' in virtual source names as a printf-style pattern.
std::string escape_vds_name(const std::string& name) {
  std::string out;
  for (char ch : name) {
    if (ch == '%') out += '%';
    out += ch;
  }
  return out;
}

void write_index_file(SaveContext& c, const std::vector<std::vector<std::int64_t>>& records_by_rank) {
  // Mappings per entry: (rank, offset, count).
  struct Mapping {
    std::int64_t rank;
    Shape offset, count;
  };
  std::vector<std::vector<Mapping>> mappings(c.entries.size());
  for (std::size_t r = 0; r < records_by_rank.size(); ++r) {
    const auto& rec = records_by_rank[r];
    std::size_t k = 0;
    while (k < rec.size()) {
      const auto i = static_cast<std::size_t>(rec[k++]);
      if (i >= c.entries.size()) throw InternalError("checkpoint: bad slice record from rank " + std::to_string(r));
      const std::size_t n = c.entries[i].global_shape.size();
      Mapping m{static_cast<std::int64_t>(r), Shape(rec.begin() + k, rec.begin() + k + n),
                Shape(rec.begin() + k + n, rec.begin() + k + 2 * n)};
      k += 2 * n;
      mappings[i].push_back(std::move(m));
    }
  }
  const std::string path = (fs::path(c.temp_dir) / checkpoint_file_name).string();
  {
    H5File file(TESSERA_CHECK_HDF5(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT)));
    write_header(file.get(), c.header);
    H5Group model = create_ordered_group(file.get(), "model");
    H5Group optimizer;
    if (!c.header.optimizer_type.empty()) {
      optimizer = create_ordered_group(file.get(), "optimizer");
      write_optimizer_group_attributes(optimizer.get(), c.header);
    }
    for (std::size_t i = 0; i < c.entries.size(); ++i) {
      const Entry& e = c.entries[i];
      const H5Space space = make_space(e.global_shape);
      H5Plist dcpl(TESSERA_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE)));
      const std::string source = escape_vds_name(e.path());
      for (const Mapping& m : mappings[i]) {
        if (shape_numel(m.count) == 0) continue;
        const H5Space virtual_space = make_space(e.global_shape);
        select_block(virtual_space, m.offset, m.count);
        const H5Space source_space = make_space(m.count);
        // Relative source file names resolve against the index file's directory, so the
        // step directory can be moved or copied as a whole.
        TESSERA_CHECK_HDF5(H5Pset_virtual(dcpl.get(), virtual_space.get(), rank_file_name(m.rank).c_str(),
                                          source.c_str(), source_space.get()));
      }
      const hid_t group = e.section == "model" ? model.get() : optimizer.get();
      H5Dataset dataset(TESSERA_CHECK_HDF5(H5Dcreate2(group, e.name.c_str(), file_type_of(e.host.dtype()),
                                                      space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)));
      write_dataset_attributes(dataset.get(), e.placement.str(), e.host.dtype(), e.checksum);
    }
    c.hook.maybe_fail(c.world.rank(), "index", "writing the index " + path);
    optimizer.close();
    model.close();
    file.close();
  }
  fsync_path(path, false);
}

void save_per_rank(SaveContext& c) {
  std::vector<std::uint64_t> slice_checksums(c.entries.size());
  std::vector<std::uint64_t> totals(c.entries.size());
  for (std::size_t i = 0; i < c.entries.size(); ++i) totals[i] = slice_checksums[i] = c.entries[i].checksum;
  all_reduce_checksums(c.world, totals);
  for (std::size_t i = 0; i < c.entries.size(); ++i) c.entries[i].checksum = totals[i];

  const auto records = all_gather_vectors(c.world, slice_records(c));
  for (std::size_t r = 0; r < records.size(); ++r) {
    if (!records[r].empty()) c.header.writer_ranks.push_back(static_cast<std::int64_t>(r));
  }
  agree_on_success(c.world.mpi_comm(), [&] {
    if (!records[static_cast<std::size_t>(c.world.rank())].empty()) {
      write_slice_file(c, slice_checksums);
    } else {
      // A rank holding only replicas writes no file; the hook still fires here.
      c.hook.maybe_fail(c.world.rank(), "write", "holding only replicas");
    }
  });
  agree_on_success(c.world.mpi_comm(), [&] {
    if (c.world.rank() == 0) {
      write_index_file(c, records);
    } else {
      c.hook.maybe_fail(c.world.rank(), "index", "rank 0 writes the index");
    }
  });
}

// ---------------------------------------------------------------------------
// shared: one file, parallel HDF5, collective metadata and hyperslab writes.
// ---------------------------------------------------------------------------

void save_shared(SaveContext& c) {
  std::vector<std::uint64_t> totals(c.entries.size());
  for (std::size_t i = 0; i < c.entries.size(); ++i) totals[i] = c.entries[i].checksum;
  all_reduce_checksums(c.world, totals);
  for (std::size_t i = 0; i < c.entries.size(); ++i) c.entries[i].checksum = totals[i];

  const std::string path = (fs::path(c.temp_dir) / checkpoint_file_name).string();
  const MPI_Comm comm = c.world.mpi_comm();
  const int rank = c.world.rank();
  {
    H5File file;
    H5Group model, optimizer;
    std::vector<H5Dataset> datasets;
    // Every call below is collective: each rank makes it in the same order with the
    // same arguments, and the ranks agree after each phase, so a failure on one rank
    // reaches every rank at the next agreement instead of leaving the others waiting.
    agree_on_success(comm, [&] {
      H5Plist fapl(TESSERA_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)));
      TESSERA_CHECK_HDF5(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
      TESSERA_CHECK_HDF5(H5Pset_all_coll_metadata_ops(fapl.get(), true));
      TESSERA_CHECK_HDF5(H5Pset_coll_metadata_write(fapl.get(), true));
      file = H5File(TESSERA_CHECK_HDF5(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get())));
    });
    agree_on_success(comm, [&] {
      write_header(file.get(), c.header);
      model = create_ordered_group(file.get(), "model");
      if (!c.header.optimizer_type.empty()) {
        optimizer = create_ordered_group(file.get(), "optimizer");
        write_optimizer_group_attributes(optimizer.get(), c.header);
      }
      H5Plist dcpl(TESSERA_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE)));
      // Every element is written, so filling first would only double the I/O.
      TESSERA_CHECK_HDF5(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
      for (const Entry& e : c.entries) {
        const H5Space space = make_space(e.global_shape);
        const hid_t group = e.section == "model" ? model.get() : optimizer.get();
        datasets.emplace_back(TESSERA_CHECK_HDF5(H5Dcreate2(group, e.name.c_str(), file_type_of(e.host.dtype()),
                                                            space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)));
        write_dataset_attributes(datasets.back().get(), e.placement.str(), e.host.dtype(), e.checksum);
      }
    });
    H5Plist dxpl(TESSERA_CHECK_HDF5(H5Pcreate(H5P_DATASET_XFER)));
    TESSERA_CHECK_HDF5(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
    for (std::size_t i = 0; i < c.entries.size(); ++i) {
      const Entry& e = c.entries[i];
      agree_on_success(comm, [&] {
        H5Space file_space(TESSERA_CHECK_HDF5(H5Dget_space(datasets[i].get())));
        const bool writes = e.writer && e.host.numel() > 0;
        const H5Space memory_space = make_space(writes ? e.host.shape() : Shape{1});
        if (writes) {
          select_block(file_space, e.offset, e.host.shape());
        } else {
          // Replicas take part in the collective call with an empty selection.
          TESSERA_CHECK_HDF5(H5Sselect_none(file_space.get()));
          TESSERA_CHECK_HDF5(H5Sselect_none(memory_space.get()));
        }
        static const std::int64_t dummy = 0;  // a valid buffer for an empty selection
        TESSERA_CHECK_HDF5(H5Dwrite(datasets[i].get(), memory_type_of(e.host.dtype()), memory_space.get(),
                                    file_space.get(), dxpl.get(), writes ? e.host.data() : &dummy));
        if (i == 0) c.hook.maybe_fail(rank, "write", "writing " + e.path() + " to " + path);
      });
    }
    agree_on_success(comm, [&] {
      for (H5Dataset& d : datasets) d.close();
      optimizer.close();
      model.close();
      file.close();
    });
  }
  // Each rank flushes what its node wrote (on a parallel file system, every node's).
  agree_on_success(comm, [&] {
    fsync_path(path, false);
    c.hook.maybe_fail(rank, "index", "finishing " + path);
  });
}

// ---------------------------------------------------------------------------
// Commit: rename the finished directory into place, point `latest` at it, rotate.
// ---------------------------------------------------------------------------

void commit(const std::string& root, const std::string& temp_dir, const std::string& final_dir,
            const std::string& nonce, int keep_last) {
  fsync_path(temp_dir, true);
  std::error_code ec;
  const std::string aside = (fs::path(root) / ("." + fs::path(final_dir).filename().string() + ".old-" + nonce)).string();
  const bool replacing = fs::exists(final_dir, ec);
  // A directory cannot be renamed over a non-empty one: move the old one aside first
  // and delete it only once the new one is in place.
  if (replacing) rename_path(final_dir, aside);
  rename_path(temp_dir, final_dir);
  fsync_path(root, true);
  if (replacing) fs::remove_all(aside, ec);

  const std::string pointer_tmp = (fs::path(root) / ("latest.tmp-" + nonce)).string();
  {
    std::ofstream out(pointer_tmp, std::ios::trunc);
    out << fs::path(final_dir).filename().string() << "\n";
    out.flush();
    if (!out) throw IoError("checkpoint: cannot write '" + pointer_tmp + "'");
  }
  fsync_path(pointer_tmp, false);
  rename_path(pointer_tmp, (fs::path(root) / "latest").string());
  fsync_path(root, true);

  if (keep_last > 0) {
    auto all = list_checkpoints(root);
    std::size_t excess = all.size() > static_cast<std::size_t>(keep_last) ? all.size() - keep_last : 0;
    for (std::size_t i = 0; i < all.size() && excess > 0; ++i) {
      if (fs::path(all[i]) == fs::path(final_dir)) continue;
      fs::remove_all(all[i], ec);
      if (ec) throw IoError("checkpoint: cannot remove old checkpoint '" + all[i] + "': " + ec.message());
      --excess;
    }
  }
}

std::string make_nonce() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%d-%" PRIx64, static_cast<int>(::getpid()), ns);
  return buffer;
}

}  // namespace

std::string save_checkpoint(const std::string& root, const Mesh& mesh, const NamedParameters& params,
                            Optimizer* optimizer, const SaveOptions& options) {
  ::tessera::detail::hdf5_errors_as_exceptions();
  Communicator& world = mesh.world();
  const MPI_Comm comm = world.mpi_comm();
  const int rank = world.rank();

  std::vector<Entry> entries;
  FaultHook hook;
  std::string final_dir;
  agree_on_success(comm, [&] {
    hook = FaultHook::from_environment();
    if (options.keep_last < 0) throw InvalidArgument("checkpoint: keep_last " + std::to_string(options.keep_last) + " is negative");
    final_dir = (fs::path(root) / checkpoint_directory_name(options.step)).string();
    entries = collect_entries(mesh, params, optimizer);
    hook.maybe_fail(rank, "prepare", "preparing " + final_dir);
  });
  check_same_tensors_everywhere(world, entries, optimizer);

  std::string nonce = rank == 0 ? make_nonce() : std::string();
  broadcast_text(world, nonce, 0);
  const std::string temp_dir = (fs::path(root) / ("." + checkpoint_directory_name(options.step) + ".tmp-" + nonce)).string();
  agree_on_success(comm, [&] {
    if (rank != 0) return;
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec) throw IoError("checkpoint: cannot create directory '" + root + "': " + ec.message());
    if (!fs::create_directory(temp_dir, ec) || ec) {
      throw IoError("checkpoint: cannot create directory '" + temp_dir + "': " +
                    (ec ? ec.message() : std::string("it already exists")));
    }
  });

  try {
    SaveContext context{mesh, world, entries, make_header(mesh, options, optimizer), temp_dir, hook};
    if (options.layout == CheckpointLayout::per_rank) {
      save_per_rank(context);
    } else {
      save_shared(context);
    }
    agree_on_success(comm, [&] { hook.maybe_fail(rank, "commit", "committing " + final_dir); });
    agree_on_success(comm, [&] {
      if (rank == 0) commit(root, temp_dir, final_dir, nonce, options.keep_last);
    });
  } catch (const Error&) {
    // Every rank is here with the same error; once all have closed their files, rank 0
    // removes the unfinished directory. Committed checkpoints were never touched.
    world.barrier();
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(temp_dir, ec);
    }
    throw;
  }
  return final_dir;
}

std::string save_checkpoint(const std::string& root, const Mesh& mesh, nn::Module& model, Optimizer* optimizer,
                            const SaveOptions& options) {
  return save_checkpoint(root, mesh, model.named_parameters(), optimizer, options);
}

// ---------------------------------------------------------------------------
// Load with resharding.
// ---------------------------------------------------------------------------

namespace {

struct Target {
  std::string section, name;
  Tensor destination;  // aliases the parameter's value or the optimizer's state
  Shape global_shape, offset;
  MeshPlacement placement;
  const DatasetInfo* dataset = nullptr;
  Tensor staged;
  std::uint64_t checksum = 0;
  std::string path() const { return dataset_path(section, name); }
};

Target make_target(std::string section, std::string name, const Tensor& destination, const Shape& global_shape,
                   const Shape& offset, const MeshPlacement& placement) {
  Target t;
  t.section = std::move(section);
  t.name = std::move(name);
  t.destination = destination;
  t.global_shape = global_shape;
  t.offset = offset;
  t.placement = placement;
  return t;
}

std::string parameter_of_state(const std::string& state) {
  const auto dot = state.rfind('.');
  return dot == std::string::npos ? state : state.substr(0, dot);
}

}  // namespace

LoadResult load_checkpoint(const std::string& path, const Mesh& mesh, const NamedParameters& params,
                           Optimizer* optimizer, const LoadOptions& options) {
  ::tessera::detail::hdf5_errors_as_exceptions();
  Communicator& world = mesh.world();
  const MPI_Comm comm = world.mpi_comm();

  // One rank resolves `latest`, so every rank reads the same checkpoint even while a
  // save elsewhere moves the pointer.
  std::string file;
  agree_on_success(comm, [&] {
    if (world.rank() == 0) file = resolve_checkpoint_file(path);
  });
  broadcast_text(world, file, 0);

  LoadResult result;
  result.file = file;
  std::optional<CheckpointReader> reader;
  std::vector<Target> targets;
  bool load_optimizer = false;

  agree_on_success(comm, [&] {
    reader.emplace(file);
    const CheckpointHeader& h = reader->header();
    result.step = h.step;
    result.metadata = h.metadata;
    result.layout = h.layout;
    result.saved_mesh = h.mesh;
    result.saved_world_size = h.world_size;
    if (h.layout == CheckpointLayout::per_rank) {
      for (std::int64_t r : h.writer_ranks) {
        const fs::path slice = fs::path(file).parent_path() / rank_file_name(r);
        std::error_code ec;
        if (!fs::is_regular_file(slice, ec)) {
          throw IoError("checkpoint '" + file + "': slice file '" + slice.string() + "' is missing");
        }
      }
    }

    std::set<std::string> selected(options.only.begin(), options.only.end());
    std::set<std::string> known;
    for (const auto& [name, p] : params) known.insert(name);
    for (const std::string& name : selected) {
      if (!known.count(name)) {
        throw InvalidArgument("load_checkpoint: '" + name + "' (in LoadOptions::only) is not a parameter of the model");
      }
    }
    auto wanted = [&](const std::string& fqn) { return selected.empty() || selected.count(fqn) > 0; };

    for (const auto& [name, p] : params) {
      if (p == nullptr) throw InvalidArgument("load_checkpoint: parameter '" + name + "' is null");
      if (!wanted(name)) continue;
      targets.push_back(make_target("model", name, p->value, p->global_shape, p->local_offset, p->placement));
    }
    if (optimizer != nullptr) {
      if (h.optimizer_type.empty()) {
        if (options.strict) {
          throw InvalidArgument("checkpoint '" + file + "' holds no optimizer state, but an optimizer (" +
                                optimizer->type_name() + ") was given to a strict load");
        }
      } else if (h.optimizer_type != optimizer->type_name()) {
        throw InvalidArgument("checkpoint '" + file + "' holds " + h.optimizer_type + " state, but the optimizer is " +
                              optimizer->type_name());
      } else {
        load_optimizer = true;
        for (const OptimizerState& s : optimizer->named_state()) {
          if (!wanted(parameter_of_state(s.name))) continue;
          targets.push_back(make_target("optimizer", s.name, s.tensor, s.global_shape, s.local_offset, s.placement));
        }
      }
    }

    std::vector<Target> present;
    for (Target& t : targets) {
      t.dataset = reader->find(t.path());
      if (t.dataset == nullptr) {
        if (options.strict) {
          throw InvalidArgument("checkpoint '" + file + "' has no dataset " + t.path() + " for " +
                                (t.section == "model" ? "parameter '" : "optimizer state '") + t.name + "'");
        }
        result.missing.push_back(t.path());
        continue;
      }
      if (t.dataset->shape != t.global_shape) {
        throw ShapeError("checkpoint '" + file + "': dataset " + t.path() + " has shape " + shape_str(t.dataset->shape) +
                         " but '" + t.name + "' has global shape " + shape_str(t.global_shape));
      }
      if (t.dataset->dtype != t.destination.dtype()) {
        throw ShapeError("checkpoint '" + file + "': dataset " + t.path() + " has dtype " +
                         std::string(dtype_name(t.dataset->dtype)) + " but '" + t.name + "' has dtype " +
                         std::string(dtype_name(t.destination.dtype())));
      }
      present.push_back(std::move(t));
    }
    targets = std::move(present);

    if (selected.empty()) {
      std::set<std::string> expected;
      for (const auto& [name, p] : params) expected.insert(dataset_path("model", name));
      if (load_optimizer) {
        for (const OptimizerState& s : optimizer->named_state()) expected.insert(dataset_path("optimizer", s.name));
      }
      for (const DatasetInfo& d : reader->datasets()) {
        if (d.section == "optimizer" && !load_optimizer) continue;
        if (expected.count(d.path)) continue;
        if (options.strict) {
          throw InvalidArgument("checkpoint '" + file + "' has dataset " + d.path +
                                ", which the model does not have (use a non-strict load to skip it)");
        }
        result.unexpected.push_back(d.path);
      }
    }

    // Each rank reads exactly its block, whatever layout wrote the file.
    for (Target& t : targets) {
      t.staged = reader->read(*t.dataset, t.offset, t.destination.shape());
      if (is_main_replica(mesh, t.placement)) t.checksum = block_checksum(t.staged, t.global_shape, t.offset);
    }
  });

  if (options.verify_checksums) {
    // The main replicas of the current layout tile every tensor exactly once, so their
    // shares add up to the checksum of the whole dataset.
    std::vector<std::uint64_t> sums;
    for (const Target& t : targets) sums.push_back(t.checksum);
    all_reduce_checksums(world, sums);
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (sums[i] != targets[i].dataset->checksum) {
        char detail[96];
        std::snprintf(detail, sizeof detail, "stored 0x%016" PRIx64 ", computed 0x%016" PRIx64,
                      targets[i].dataset->checksum, sums[i]);
        throw IoError("checkpoint '" + file + "': checksum mismatch in dataset " + targets[i].path() + " (" + detail +
                      "): the data is corrupted");
      }
    }
  }

  // Nothing is modified until every tensor has been read and verified on every rank.
  agree_on_success(comm, [&] {
    for (Target& t : targets) {
      t.destination.copy_from(t.staged);
      result.loaded.push_back(t.path());
    }
    if (load_optimizer) optimizer->set_step_count(reader->header().optimizer_step_count);
  });
  return result;
}

LoadResult load_checkpoint(const std::string& path, const Mesh& mesh, nn::Module& model, Optimizer* optimizer,
                           const LoadOptions& options) {
  return load_checkpoint(path, mesh, model.named_parameters(), optimizer, options);
}

}  // namespace tessera::io
