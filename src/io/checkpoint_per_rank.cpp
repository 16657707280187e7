// The per_rank layout: each writing rank's slice file with serial HDF5, its blocks
// written by tessera where HDF5 laid them out (RawWriter in format.hpp), then
// rank 0's index file of virtual datasets over the slices, built in memory and written
// in one piece (create_memory_file / write_memory_file).
#include <filesystem>
#include <map>

#include "io/checkpoint_collectives.hpp"
#include "io/checkpoint_save.hpp"
#include "tessera/agree.hpp"

namespace fs = std::filesystem;

namespace tessera::io::detail {

namespace {

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

// The slice file at full speed (format.hpp, RawWriter): HDF5 writes the layout and the
// metadata only, then the blocks go from the tensors' memory to the file, checksummed
// and CRC'd on the way; their checksums (this slice's shares) fill the placeholders in
// `slice_checksums`. Space for the whole file is checked first, so HDF5's own small
// writes do not meet a full disk.
FileDigest write_slice_file(SaveContext& c, std::vector<std::uint64_t>& slice_checksums) {
  const int rank = c.world.rank();
  const std::string path = (fs::path(c.temp_dir) / rank_file_name(rank)).string();
  std::uint64_t bytes = std::uint64_t{64} << 10;  // metadata, generously
  for (const Entry& e : c.entries) {
    if (e.writer) bytes += static_cast<std::uint64_t>(e.host.nbytes()) + 4096;
  }
  check_free_space(c.temp_dir, bytes);
  H5File file(TESSERA_CHECK_HDF5(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT)));
  write_header(file.get(), c.header);
  write_int_attribute(file.get(), "rank", rank);
  std::map<std::string, H5Group> groups;
  const H5Plist dcpl = laid_out_dataset_properties();
  std::vector<RawBlock> blocks;
  std::vector<std::size_t> block_entries;  // the entry of each block
  std::vector<H5Dataset> block_datasets;   // open until their checksums are known
  for (std::size_t i = 0; i < c.entries.size(); ++i) {
    const Entry& e = c.entries[i];
    if (!e.writer) continue;
    auto group = groups.find(e.section);
    if (group == groups.end()) group = groups.emplace(e.section, create_ordered_group(file.get(), e.section)).first;
    const H5Space space = make_space(e.host.shape());
    H5Dataset dataset(TESSERA_CHECK_HDF5(H5Dcreate2(group->second.get(), e.name.c_str(), file_type_of(e.host.dtype()),
                                                    space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)));
    write_dataset_attributes(dataset.get(), e.placement.str(), e.host.dtype(), 0);  // set once written
    write_int_array_attribute(dataset.get(), "global_shape", e.global_shape);
    write_int_array_attribute(dataset.get(), "offset", e.offset);
    if (e.host.numel() > 0) {
      blocks.push_back(raw_block_of(e, {{storage_offset_of(dataset.get()), 0, static_cast<std::uint64_t>(e.host.nbytes())}}));
      block_entries.push_back(i);
      block_datasets.push_back(std::move(dataset));
    }
  }
  // The metadata goes to disk before the blocks: the close below rewrites only the
  // checksums, in place.
  TESSERA_CHECK_HDF5(H5Fflush(file.get(), H5F_SCOPE_LOCAL));
  c.hook.maybe_fail(rank, "write", "writing the blocks of " + path);
  RawWriter writer(path);
  WrittenBlocks written = writer.write(blocks);
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    slice_checksums[block_entries[k]] = written.checksums[k];
    set_dataset_checksum(block_datasets[k].get(), written.checksums[k]);
  }
  block_datasets.clear();
  for (auto& [name, group] : groups) group.close();
  file.close();
  writer.sync_and_close();
  return digest_with_pieces(path, std::move(written.pieces));
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

FileDigest write_index_file(SaveContext& c, const std::vector<std::vector<std::int64_t>>& records_by_rank) {
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
    H5File file = create_memory_file();
    SectionGroups sections = write_header_and_sections(file.get(), c.header);
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
      H5Dataset dataset(TESSERA_CHECK_HDF5(H5Dcreate2(sections.of(e.section), e.name.c_str(), file_type_of(e.host.dtype()),
                                                      space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)));
      write_dataset_attributes(dataset.get(), e.placement.str(), e.host.dtype(), e.checksum);
    }
    c.hook.maybe_fail(c.world.rank(), "index", "writing the index " + path);
    sections.close();
    return write_memory_file(file, path);
  }
}

}  // namespace

void save_per_rank(SaveContext& c) {
  const auto records = all_gather_vectors(c.world, slice_records(c));
  for (std::size_t r = 0; r < records.size(); ++r) {
    if (!records[r].empty()) c.header.writer_ranks.push_back(static_cast<std::int64_t>(r));
  }
  // This rank's shares of the checksums, computed as its slice file is written; their
  // sums over the ranks go to the index.
  std::vector<std::uint64_t> slice_checksums(c.entries.size(), 0);
  std::vector<std::int64_t> my_file;  // this rank's slice file digest, packed (none: empty)
  agree_on_success(c.world.mpi_comm(), [&] {
    if (!records[static_cast<std::size_t>(c.world.rank())].empty()) {
      my_file = pack_digest(write_slice_file(c, slice_checksums));
    } else {
      // A rank holding only replicas writes no file; the hook still fires here.
      c.hook.maybe_fail(c.world.rank(), "write", "holding only replicas");
    }
  });
  all_reduce_checksums(c.world, slice_checksums);
  for (std::size_t i = 0; i < c.entries.size(); ++i) c.entries[i].checksum = slice_checksums[i];
  for (const auto& packed : all_gather_vectors(c.world, my_file)) {
    if (!packed.empty()) c.files.push_back(unpack_digest(packed));
  }
  agree_on_success(c.world.mpi_comm(), [&] {
    if (c.world.rank() == 0) {
      c.files.push_back(write_index_file(c, records));
    } else {
      c.hook.maybe_fail(c.world.rank(), "index", "rank 0 writes the index");
    }
  });
}

}  // namespace tessera::io::detail
