// The shared layout: one file, parallel HDF5, collective metadata and hyperslab writes.
#include <algorithm>
#include <filesystem>

#include "io/checkpoint_collectives.hpp"
#include "io/checkpoint_save.hpp"
#include "tessera/agree.hpp"

namespace fs = std::filesystem;

namespace tessera::io::detail {

namespace {

// An upper estimate of the file's size: the data at its global shapes, plus HDF5's
// metadata (superblock, groups, object headers and attributes).
std::uint64_t estimated_file_bytes(const std::vector<Entry>& entries) {
  std::uint64_t bytes = std::uint64_t{64} << 10;
  for (const Entry& e : entries) {
    bytes += static_cast<std::uint64_t>(shape_numel(e.global_shape)) * dtype_size(e.host.dtype()) + 4096;
  }
  return bytes;
}

// A block of a C-order dataset as runs that are contiguous both in the block (which is
// contiguous in memory) and in the file: the innermost dimensions the block spans fully
// join its rows into longer runs. (file element index, block element index, elements).
struct Run {
  std::uint64_t file_element, block_element, elements;
};

std::vector<Run> block_runs(const Shape& global, const Shape& offset, const Shape& extent) {
  const int rank = static_cast<int>(global.size());
  std::vector<Run> runs;
  if (shape_numel(extent) == 0) return runs;
  if (rank == 0) return {{0, 0, 1}};
  // Dimensions j..rank-1 form one run: every dimension after j is spanned fully.
  int j = rank - 1;
  while (j > 0 && extent[j] == global[j]) --j;
  std::uint64_t run = 1;
  for (int d = j; d < rank; ++d) run *= static_cast<std::uint64_t>(extent[d]);
  const Shape strides = contiguous_strides(global);
  Shape index(static_cast<std::size_t>(j), 0);  // over dimensions 0..j-1 of the block
  for (std::uint64_t block_element = 0;; block_element += run) {
    std::uint64_t file_element = static_cast<std::uint64_t>(offset[j] * strides[j]);
    for (int d = 0; d < j; ++d) file_element += static_cast<std::uint64_t>((offset[d] + index[d]) * strides[d]);
    runs.push_back({file_element, block_element, run});
    int d = j - 1;
    for (; d >= 0; --d) {
      if (++index[d] < extent[d]) break;
      index[d] = 0;
    }
    if (d < 0) break;
  }
  return runs;
}

// (offset in the file, bytes, CRC-32C) of every piece this rank wrote, flattened for
// all_gather_vectors.
void add_piece(std::vector<std::int64_t>& pieces, const HashedPiece& piece) {
  pieces.push_back(static_cast<std::int64_t>(piece.offset));
  pieces.push_back(static_cast<std::int64_t>(piece.bytes));
  pieces.push_back(static_cast<std::int64_t>(piece.crc));
}

}  // namespace

// Rank 0 lays the file out with serial HDF5 (metadata, and every dataset contiguous at
// its global shape, allocated at creation, never filled: format.hpp, RawWriter), flushes
// it and keeps it open; every writing rank then writes its blocks' runs where they belong
// with pwrite, straight from the tensors, checksums and CRCs them on the way and fsyncs;
// rank 0 sets the checksum attributes to the sums of the ranks' shares, closes the file
// and fsyncs it, and joins the pieces' CRCs in file order with what lies between them
// (HDF5's metadata, read back) into the MANIFEST digest. No MPI-IO: its collectives
// busy-poll outside tessera's wait policy, and at 1-2 ranks its own buffering cost more
// than the write. The bytes on disk are the layout HDF5 chose, so any HDF5 reader (and
// h5py) reads the file as one.
void save_shared(SaveContext& c) {
  const std::string path = (fs::path(c.temp_dir) / checkpoint_file_name).string();
  const MPI_Comm comm = c.world.mpi_comm();
  const int rank = c.world.rank();
  // Rank 0: the file, open from the layout until the checksums are set.
  H5File file;
  SectionGroups sections;
  std::vector<H5Dataset> datasets;  // one per entry
  // Room for the whole file first, in one agreed step, so that HDF5's own writes do
  // not meet a full disk and the ranks' writes fail (if at all) in tessera's code.
  std::vector<std::int64_t> offsets;  // per entry: where its data starts in the file (rank 0)
  agree_on_success(comm, [&] {
    if (rank != 0) return;
    check_free_space(c.temp_dir, estimated_file_bytes(c.entries));
    file = H5File(TESSERA_CHECK_HDF5(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT)));
    sections = write_header_and_sections(file.get(), c.header);
    const H5Plist dcpl = laid_out_dataset_properties();
    for (const Entry& e : c.entries) {
      const H5Space space = make_space(e.global_shape);
      H5Dataset dataset(TESSERA_CHECK_HDF5(H5Dcreate2(sections.of(e.section), e.name.c_str(), file_type_of(e.host.dtype()),
                                                      space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)));
      write_dataset_attributes(dataset.get(), e.placement.str(), e.host.dtype(), 0);  // set once written
      offsets.push_back(shape_numel(e.global_shape) == 0 ? -1
                                                         : static_cast<std::int64_t>(storage_offset_of(dataset.get())));
      datasets.push_back(std::move(dataset));
    }
    // The metadata goes to disk before the blocks: the close rewrites only the checksums.
    TESSERA_CHECK_HDF5(H5Fflush(file.get(), H5F_SCOPE_LOCAL));
  });
  offsets = all_gather_vectors(c.world, offsets)[0];

  std::vector<std::int64_t> pieces;                           // this rank's (offset, bytes, crc) triples
  std::vector<std::uint64_t> checksums(c.entries.size(), 0);  // this rank's shares, then the sums
  agree_on_success(comm, [&] {
    std::vector<RawBlock> blocks;
    std::vector<std::size_t> block_entries;  // the entry of each block
    for (std::size_t i = 0; i < c.entries.size(); ++i) {
      const Entry& e = c.entries[i];
      if (!e.writer || e.host.numel() == 0) continue;
      const std::uint64_t element = dtype_size(e.host.dtype());
      std::vector<RawRun> runs;
      for (const Run& r : block_runs(e.global_shape, e.offset, e.host.shape())) {
        runs.push_back({static_cast<std::uint64_t>(offsets[i]) + r.file_element * element, r.block_element * element,
                        r.elements * element});
      }
      blocks.push_back(raw_block_of(e, std::move(runs)));
      block_entries.push_back(i);
    }
    if (!blocks.empty()) {
      RawWriter writer(path);
      const WrittenBlocks written = writer.write(blocks);
      writer.sync_and_close();
      for (const HashedPiece& piece : written.pieces) add_piece(pieces, piece);
      for (std::size_t k = 0; k < blocks.size(); ++k) checksums[block_entries[k]] = written.checksums[k];
    }
    c.hook.maybe_fail(rank, "write", "writing the blocks of " + path);
  });
  all_reduce_checksums(c.world, checksums);
  for (std::size_t i = 0; i < c.entries.size(); ++i) c.entries[i].checksum = checksums[i];
  const auto all_pieces = all_gather_vectors(c.world, pieces);
  agree_on_success(comm, [&] {
    c.hook.maybe_fail(rank, "index", "finishing " + path);
    if (rank != 0) return;
    for (std::size_t i = 0; i < c.entries.size(); ++i) set_dataset_checksum(datasets[i].get(), c.entries[i].checksum);
    datasets.clear();
    sections.close();
    file.close();
    fsync_path(path, false);  // the checksums rank 0 just set
    std::vector<HashedPiece> hashed;  // every rank's pieces
    for (const auto& list : all_pieces) {
      for (std::size_t k = 0; k + 2 < list.size(); k += 3) {
        hashed.push_back({static_cast<std::uint64_t>(list[k]), static_cast<std::uint64_t>(list[k + 1]),
                          static_cast<std::uint32_t>(list[k + 2])});
      }
    }
    c.files.push_back(digest_with_pieces(path, std::move(hashed)));
  });
}

}  // namespace tessera::io::detail
