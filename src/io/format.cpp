#include "io/format.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

namespace tessera::io::detail {

std::string dataset_path(const std::string& section, const std::string& name) { return "/" + section + "/" + name; }

void write_header(hid_t file, const CheckpointHeader& h) {
  write_string_attribute(file, "format", h.format);
  write_int_attribute(file, "format_version", h.format_version);
  write_string_attribute(file, "tessera_version", h.tessera_version);
  write_string_attribute(file, "layout", std::string(checkpoint_layout_name(h.layout)));
  write_string_attribute(file, "mesh_data", std::string(data_parallel_mode_name(h.mesh.data)));
  write_int_attribute(file, "mesh_dp", h.dp);
  write_int_attribute(file, "mesh_tp", h.mesh.tensor);
  write_int_attribute(file, "mesh_domain", h.mesh.domain);
  write_int_attribute(file, "mesh_pipeline", h.mesh.pipeline);
  write_int_attribute(file, "world_size", h.world_size);
  write_int_attribute(file, "step", h.step);
  write_string_attribute(file, "metadata", h.metadata);
  write_string_attribute(file, "checksum_algorithm", h.checksum_algorithm);
  if (h.layout == CheckpointLayout::per_rank) write_int_array_attribute(file, "writer_ranks", h.writer_ranks);
}

CheckpointHeader read_header(hid_t file, const std::string& file_name) {
  CheckpointHeader h;
  try {
    h.format = read_string_attribute(file, "format");
  } catch (const Error&) {
    throw IoError("checkpoint: '" + file_name + "' is not a tessera checkpoint (no root attribute 'format')");
  }
  if (h.format != checkpoint_format_name) {
    throw IoError("checkpoint: '" + file_name + "' has format '" + h.format + "', expected '" +
                  checkpoint_format_name + "'");
  }
  try {
    h.format_version = read_int_attribute(file, "format_version");
    if (h.format_version < 1 || h.format_version > checkpoint_format_version) {
      throw IoError("checkpoint: '" + file_name + "' has format version " + std::to_string(h.format_version) +
                    "; this tessera reads versions 1 to " + std::to_string(checkpoint_format_version));
    }
    h.tessera_version = read_string_attribute(file, "tessera_version");
    h.layout = parse_checkpoint_layout(read_string_attribute(file, "layout"));
    h.mesh.data = parse_data_parallel_mode(read_string_attribute(file, "mesh_data"), "mesh_data");
    h.dp = read_int_attribute(file, "mesh_dp");
    h.mesh.tensor = static_cast<int>(read_int_attribute(file, "mesh_tp"));
    h.mesh.domain = static_cast<int>(read_int_attribute(file, "mesh_domain"));
    // Written since the pipeline dimension; a checkpoint from before it had no pipeline.
    h.mesh.pipeline =
        attribute_exists(file, "mesh_pipeline") ? static_cast<int>(read_int_attribute(file, "mesh_pipeline")) : 1;
    h.world_size = read_int_attribute(file, "world_size");
    h.step = read_int_attribute(file, "step");
    h.metadata = read_string_attribute(file, "metadata");
    h.checksum_algorithm = read_string_attribute(file, "checksum_algorithm");
    h.checksum = parse_checksum_algorithm(h.checksum_algorithm, file_name);
    if (h.layout == CheckpointLayout::per_rank) h.writer_ranks = read_int_array_attribute(file, "writer_ranks");
    if (link_exists(file, "/optimizer")) {
      H5Group group(TESSERA_CHECK_HDF5(H5Gopen2(file, "/optimizer", H5P_DEFAULT)));
      h.optimizer_type = read_string_attribute(group.get(), "type");
      h.optimizer_step_count = read_int_attribute(group.get(), "step_count");
    }
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw IoError("checkpoint: '" + file_name + "' has a damaged header: " + e.what());
  }
  return h;
}

void write_dataset_attributes(hid_t dataset, const std::string& placement, DType dtype, std::uint64_t checksum) {
  write_string_attribute(dataset, "placement", placement);
  write_string_attribute(dataset, "dtype", std::string(dtype_name(dtype)));
  write_uint_attribute(dataset, "checksum", checksum);
}

H5Group create_ordered_group(hid_t file, const std::string& name) {
  H5Plist gcpl(TESSERA_CHECK_HDF5(H5Pcreate(H5P_GROUP_CREATE)));
  TESSERA_CHECK_HDF5(H5Pset_link_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
  return H5Group(TESSERA_CHECK_HDF5(H5Gcreate2(file, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT)));
}

H5File create_memory_file() {
  H5Plist fapl(TESSERA_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)));
  // 1 MiB growth steps; no backing store: the image is written by write_memory_file.
  TESSERA_CHECK_HDF5(H5Pset_fapl_core(fapl.get(), std::size_t{1} << 20, /*backing_store=*/false));
  // The name only identifies the in-memory file inside HDF5; nothing is created on disk.
  static std::atomic<std::uint64_t> counter{0};
  const std::string name = "tessera-memory-file-" + std::to_string(counter.fetch_add(1));
  return H5File(TESSERA_CHECK_HDF5(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get())));
}

FileDigest write_memory_file(H5File& file, const std::string& path) {
  TESSERA_CHECK_HDF5(H5Fflush(file.get(), H5F_SCOPE_LOCAL));
  const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
  if (size < 0) TESSERA_CHECK_HDF5(static_cast<herr_t>(size));
  std::vector<unsigned char> image(static_cast<std::size_t>(size));
  TESSERA_CHECK_HDF5(H5Fget_file_image(file.get(), image.data(), image.size()));
  file.close();  // in memory: nothing left to fail on disk

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) throw IoError("checkpoint: cannot create '" + path + "': " + std::strerror(errno));
  std::size_t done = 0;
  int failure = 0;
  while (done < image.size()) {
    const ssize_t n = ::write(fd, image.data() + done, image.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failure = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (failure == 0 && ::fsync(fd) != 0) failure = errno;
  if (::close(fd) != 0 && failure == 0) failure = errno;
  if (failure != 0) {
    ::unlink(path.c_str());
    throw IoError("checkpoint: writing '" + path + "' (" + std::to_string(image.size()) + " bytes, " +
                  std::to_string(done) + " written) failed: " + std::strerror(failure));
  }
  return digest_bytes(std::filesystem::path(path).filename().string(), image.data(), image.size());
}

H5Plist laid_out_dataset_properties() {
  H5Plist dcpl(TESSERA_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE)));
  TESSERA_CHECK_HDF5(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS));
  TESSERA_CHECK_HDF5(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY));
  TESSERA_CHECK_HDF5(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
  return dcpl;
}

std::uint64_t storage_offset_of(hid_t dataset) {
  const haddr_t offset = H5Dget_offset(dataset);
  if (offset == HADDR_UNDEF) throw InternalError("checkpoint: a laid-out dataset has no storage offset");
  return static_cast<std::uint64_t>(offset);
}

void set_dataset_checksum(hid_t dataset, std::uint64_t checksum) {
  const H5Attribute attribute(TESSERA_CHECK_HDF5(H5Aopen(dataset, "checksum", H5P_DEFAULT)));
  TESSERA_CHECK_HDF5(H5Awrite(attribute.get(), H5T_NATIVE_UINT64, &checksum));
}

namespace {

void write_all(int fd, const std::string& path, const unsigned char* p, std::uint64_t bytes, std::uint64_t offset) {
  while (bytes > 0) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, std::uint64_t{1} << 30));
    const ssize_t n = ::pwrite(fd, p, chunk, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = n < 0 ? errno : EIO;
      throw IoError("checkpoint: writing " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                    " of '" + path + "' failed: " + std::strerror(saved));
    }
    p += n;
    bytes -= static_cast<std::uint64_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
}

// CRC-32C of the file's bytes [from, to), read back (HDF5's metadata and gaps).
std::uint32_t crc_of_file_range(int fd, const std::string& path, std::uint64_t from, std::uint64_t to, std::uint32_t crc) {
  std::vector<unsigned char> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(to - from, std::uint64_t{1} << 20)));
  while (from < to) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(to - from, buffer.size()));
    const ssize_t n = ::pread(fd, buffer.data(), want, static_cast<off_t>(from));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw IoError("checkpoint: reading back '" + path + "' at offset " + std::to_string(from) +
                    " failed: " + (n < 0 ? std::strerror(errno) : "the file is shorter than HDF5 laid it out"));
    }
    crc = crc32c(buffer.data(), static_cast<std::size_t>(n), crc);
    from += static_cast<std::uint64_t>(n);
  }
  return crc;
}

}  // namespace

RawWriter::RawWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY);
  if (fd_ < 0) throw IoError("checkpoint: cannot open '" + path_ + "' for writing: " + std::strerror(errno));
}

RawWriter::~RawWriter() {
  if (fd_ >= 0) ::close(fd_);  // a failed save: the error that got here is the one to report
}

WrittenBlocks RawWriter::write(const std::vector<RawBlock>& blocks) {
  // Bytes per chunk: small enough to stay in L2 between the checksum, the CRC and the
  // copy into the page cache, large enough that a chunk's pwrite and write-back start
  // cost nothing beside it.
  constexpr std::uint64_t kChunk = std::uint64_t{1} << 20;
  WrittenBlocks out;
  out.checksums.reserve(blocks.size());
  for (const RawBlock& b : blocks) {
    std::uint64_t size = 0;  // the runs tile the block in order
    for (const RawRun& r : b.runs) {
      if (r.block_offset != size) throw InternalError("checkpoint: the runs of a block do not tile it in order");
      size += r.bytes;
    }
    if (size % b.element_size != 0 || kChunk % b.element_size != 0) {
      throw InternalError("checkpoint: a block of " + std::to_string(size) + " bytes is not made of " +
                          std::to_string(b.element_size) + "-byte elements");
    }
    std::uint64_t sum = 0;
    std::size_t run = 0;
    std::uint32_t crc = 0;  // of runs[run]'s bytes so far
    for (std::uint64_t at = 0; at < size;) {
      const std::uint64_t end = std::min(size, at + kChunk);
      if (b.checksum) {
        sum += b.checksum(static_cast<std::int64_t>(at / b.element_size),
                          static_cast<std::int64_t>((end - at) / b.element_size));
      }
      std::uint64_t low = UINT64_MAX, high = 0;  // the file range this chunk went to
      const std::uint64_t chunk_bytes = end - at;
      while (at < end) {
        const RawRun& r = b.runs[run];
        const std::uint64_t run_end = r.block_offset + r.bytes;
        const std::uint64_t n = std::min(end, run_end) - at;
        const std::uint64_t file_at = r.file_offset + (at - r.block_offset);
        crc = crc32c(b.data + at, static_cast<std::size_t>(n), crc);
        write_all(fd_, path_, b.data + at, n, file_at);
        low = std::min(low, file_at);
        high = std::max(high, file_at + n);
        at += n;
        if (at == run_end) {
          out.pieces.push_back({r.file_offset, r.bytes, crc});
          crc = 0;
          ++run;
        }
      }
#if defined(__linux__)
      // The write-back of this chunk's whole pages starts now, while the next chunks are
      // hashed, and fsync waits for less (a page the next chunk completes is left to it,
      // not written twice). Only for a chunk that filled its file range alone: the runs
      // of a block split along a later dim (a row-parallel weight in the shared file)
      // interleave with other ranks' runs, and starting the write-back there would catch
      // pages another rank is still filling, which its writes then wait for and which go
      // to disk twice (2 ranks, 256 MiB shared save: 425-557 ms with, 341-388 without).
      // Advisory: a failure here shows at fsync.
      static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
      const bool filled_alone = high - low == chunk_bytes;
      high -= high % page;
      if (filled_alone && high > low) {
        (void)::sync_file_range(fd_, static_cast<off_t>(low), static_cast<off_t>(high - low), SYNC_FILE_RANGE_WRITE);
      }
#endif
    }
    out.checksums.push_back(sum);
  }
  return out;
}

void RawWriter::sync_and_close() {
  const int fd = std::exchange(fd_, -1);
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    throw IoError("checkpoint: fsync of '" + path_ + "' failed: " + std::strerror(saved));
  }
  // Closed once, also when close reports an error (the descriptor is gone either way).
  if (::close(fd) != 0) throw IoError("checkpoint: closing '" + path_ + "' failed: " + std::strerror(errno));
}

FileDigest digest_with_pieces(const std::string& path, std::vector<HashedPiece> pieces) {
  std::sort(pieces.begin(), pieces.end(), [](const HashedPiece& a, const HashedPiece& b) { return a.offset < b.offset; });
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw IoError("checkpoint: cannot open '" + path + "': " + std::strerror(errno));
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw IoError("checkpoint: cannot stat '" + path + "': " + std::strerror(errno));
    const auto size = static_cast<std::uint64_t>(st.st_size);
    std::uint32_t crc = 0;
    std::uint64_t at = 0;
    for (const HashedPiece& p : pieces) {
      if (p.offset < at || p.offset + p.bytes > size) {
        throw InternalError("checkpoint: a written piece of " + std::to_string(p.bytes) + " bytes at " +
                            std::to_string(p.offset) + " overlaps another or lies past the end of '" + path + "' (" +
                            std::to_string(size) + " bytes)");
      }
      crc = crc_of_file_range(fd, path, at, p.offset, crc);
      crc = crc32c_combine(crc, p.crc, p.bytes);
      at = p.offset + p.bytes;
    }
    crc = crc_of_file_range(fd, path, at, size, crc);
    ::close(fd);
    return {std::filesystem::path(path).filename().string(), size, crc};
  } catch (...) {
    ::close(fd);
    throw;
  }
}

void check_free_space(const std::string& dir, std::uint64_t bytes) {
  const std::string probe = (std::filesystem::path(dir) / ".space-probe").string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) throw IoError("checkpoint: cannot create '" + probe + "': " + std::strerror(errno));
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  ::close(fd);
  ::unlink(probe.c_str());
  if (rc != 0 && rc != EOPNOTSUPP && rc != ENOSYS && rc != EINVAL) {
    throw IoError("checkpoint: '" + dir + "' cannot take the " + std::to_string(bytes) +
                  " bytes of this checkpoint: " + std::strerror(rc));
  }
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw IoError("checkpoint: cannot open '" + path + "' to fsync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw IoError("checkpoint: fsync of '" + path + "' failed: " + std::strerror(saved));
}

}  // namespace tessera::io::detail

#include <filesystem>

namespace tessera::io::detail {

void rename_path(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::rename(from, to, ec);
  if (ec) throw IoError("checkpoint: cannot rename '" + from + "' to '" + to + "': " + ec.message());
}

}  // namespace tessera::io::detail
