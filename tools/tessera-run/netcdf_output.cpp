#include "netcdf_output.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <hdf5_hl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "hdf5_support.hpp"
#include "tessera/agree.hpp"
#include "tessera/error.hpp"
#include "tessera/version.hpp"

namespace tessera::run {
namespace {

// The data go to the file as the host holds them: HDF5 is told they are little-endian.
static_assert(std::endian::native == std::endian::little, "the netCDF writer pwrites host floats as IEEE f32 LE");

// Link and attribute creation order, as netCDF-C keeps them (ncdump lists in that order).
constexpr unsigned kOrder = H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED;

void check(herr_t status, const std::string& what) {
  if (status < 0) throw IoError(what);
}

// A coordinate variable: a 1-D dataset of the axis' element type that is the dimension
// scale of its name, with the axis' attributes in their order. HDF5 converts the values
// (doubles) to that type, exactly: they came from it, or were checked to fit it.
H5Dataset create_axis(hid_t file, const CoordinateVariable& axis, int dimid, const std::string& what) {
  const hsize_t n = axis.values.size();
  const std::string& name = axis.name;
  H5Space space(H5Screate_simple(1, &n, nullptr));
  H5Plist dcpl(H5Pcreate(H5P_DATASET_CREATE));
  check(H5Pset_attr_creation_order(dcpl.get(), kOrder), what);
  // netCDF-C keeps a _FillValue attribute and the dataset's fill value equal (xarray
  // writes NaN on float coordinates): the copy does the same.
  for (const auto& a : axis.attributes) {
    if (a.name == "_FillValue" && !a.is_text && a.type == axis.type && !a.bytes.empty()) {
      check(H5Pset_fill_value(dcpl.get(), standard_type(a.type), a.bytes.data()), what + ": _FillValue of '" + name + "'");
    }
  }
  H5Dataset d(H5Dcreate2(file, name.c_str(), standard_type(axis.type), space.get(), H5P_DEFAULT, dcpl.get(),
                         H5P_DEFAULT));
  if (!d) throw IoError(what + ": cannot create coordinate '" + name + "'");
  check(H5Dwrite(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, axis.values.data()),
        what + ": writing '" + name + "'");
  check(H5DSset_scale(d.get(), name.c_str()), what + ": '" + name + "' as a dimension scale");
  write_int_attribute(d.get(), "_Netcdf4Dimid", dimid, what);
  for (const auto& a : axis.attributes) write_axis_attribute(d.get(), a, what + ", coordinate '" + name + "'");
  return d;
}

void text(hid_t obj, const char* name, const std::string& value, const std::string& what) {
  if (!value.empty()) write_string_attribute(obj, name, value, what);
}

// A full disk is found here, before HDF5 writes a byte: an HDF5 file whose metadata
// flush failed stays half closed, and HDF5 crashes closing it again inside MPI_Finalize.
// The space of the whole file (the variables' bytes and room for the metadata) is
// reserved once and released; a disk that fills in between still fails the writes.
void check_space(const CfOutputLayout& L, const std::string& tmp, const std::string& what) {
  const auto& a = L.axes;
  const long double plane = static_cast<long double>(a.lat.values.size()) * a.lon.values.size() * sizeof(float);
  long double bytes = 1 << 20;  // the metadata: attributes (the config), coordinates, B-trees
  for (const auto& v : L.variables) {
    bytes += plane * static_cast<long double>(a.time.values.size()) *
             static_cast<long double>(v.has_level ? a.level.values.size() : 1);
  }
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(what + ": cannot create '" + tmp + "': " + std::strerror(errno));
  const int rc = bytes > 9.0e18L ? EFBIG : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  ::close(fd);
  std::error_code ignored;
  std::filesystem::remove(tmp, ignored);
  if (rc != 0) {
    throw IoError(what + ": the forecast needs " + std::to_string(static_cast<long long>(bytes)) +
                  " bytes, which '" + tmp + "' cannot hold (" + std::strerror(rc) +
                  "); free space on its file system or name another predict.output");
  }
}

// Lays the file out and returns each data variable's storage offset.
std::vector<std::uint64_t> lay_out(const CfOutputLayout& L, const std::string& tmp) {
  tessera::detail::hdf5_errors_as_exceptions();
  const std::string what = "predict.output '" + L.path + "'";
  check_space(L, tmp, what);
  std::error_code ec;
  std::filesystem::remove(tmp, ec);
  H5Plist fcpl(H5Pcreate(H5P_FILE_CREATE));
  check(H5Pset_link_creation_order(fcpl.get(), kOrder), what);
  check(H5Pset_attr_creation_order(fcpl.get(), kOrder), what);
  H5File file(H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, fcpl.get(), H5P_DEFAULT));
  if (!file) throw IoError(what + ": cannot create '" + tmp + "'");

  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  // netCDF-C's provenance attribute (hidden by ncdump without -s), as other writers of
  // netCDF-4 through HDF5 set it.
  write_string_attribute(file.get(), "_NCProperties",
                         "version=2,tessera=" + std::string(version_string) + ",hdf5=" + std::to_string(major) + "." +
                             std::to_string(minor) + "." + std::to_string(release),
                         what);
  for (const auto& [k, v] : L.global_attributes) write_string_attribute(file.get(), k.c_str(), v, what);

  const auto& c = L.axes;
  int dimid = 0;
  const H5Dataset time = create_axis(file.get(), c.time, dimid++, what);
  H5Dataset level;
  if (!c.level.name.empty()) level = create_axis(file.get(), c.level, dimid++, what);
  const H5Dataset lat = create_axis(file.get(), c.lat, dimid++, what);
  const H5Dataset lon = create_axis(file.get(), c.lon, dimid++, what);

  std::vector<std::uint64_t> offsets;
  for (const auto& v : L.variables) {
    std::vector<hsize_t> dims{c.time.values.size()};
    std::vector<hid_t> scales{time.get()};
    if (v.has_level) {
      dims.push_back(c.level.values.size());
      scales.push_back(level.get());
    }
    dims.insert(dims.end(), {c.lat.values.size(), c.lon.values.size()});
    scales.insert(scales.end(), {lat.get(), lon.get()});
    H5Space space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
    H5Plist dcpl(H5Pcreate(H5P_DATASET_CREATE));
    // Contiguous and allocated now: the ranks write its bytes at the offset HDF5 gives.
    check(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), what);
    check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), what);
    check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), what);
    check(H5Pset_attr_creation_order(dcpl.get(), kOrder), what);
    H5Dataset d(H5Dcreate2(file.get(), v.name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
    if (!d) throw IoError(what + ": cannot create variable '" + v.name + "'");
    for (std::size_t i = 0; i < scales.size(); ++i) {
      check(H5DSattach_scale(d.get(), scales[i], static_cast<unsigned>(i)), what + ": dimensions of '" + v.name + "'");
    }
    text(d.get(), "standard_name", v.standard_name, what);
    text(d.get(), "long_name", v.long_name, what);
    text(d.get(), "units", v.units, what);
    const haddr_t offset = H5Dget_offset(d.get());
    if (offset == HADDR_UNDEF) throw IoError(what + ": variable '" + v.name + "' has no storage offset");
    offsets.push_back(static_cast<std::uint64_t>(offset));
  }
  check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), what + ": flushing the layout");
  return offsets;
}

}  // namespace

CfWriter::CfWriter(const CfOutputLayout& L, Communicator& comm) : comm_(comm), path_(L.path), tmp_(L.path + ".tmp") {
  nlat_ = static_cast<std::int64_t>(L.axes.lat.values.size());
  nlon_ = static_cast<std::int64_t>(L.axes.lon.values.size());
  nlev_ = static_cast<std::int64_t>(L.axes.level.values.size());
  orientation_ = L.orientation;
  std::vector<std::uint64_t> offsets(L.variables.size());
  try {
    agree_on_success(comm.mpi_comm(), [&] {
      if (comm.rank() == 0) offsets = lay_out(L, tmp_);
    });
  } catch (...) {
    remove_unfinished();  // (a full disk fails the layout half way: leave no .tmp)
    throw;
  }
  // HDF5 offsets fit in int64 (file sizes are off_t), the dtype the collectives take.
  Tensor shared = Tensor::zeros({static_cast<std::int64_t>(offsets.size())}, DType::i64);
  std::memcpy(shared.data(), offsets.data(), offsets.size() * sizeof(std::uint64_t));
  comm.broadcast(shared, 0);
  std::memcpy(offsets.data(), shared.data(), offsets.size() * sizeof(std::uint64_t));
  const std::uint64_t plane = static_cast<std::uint64_t>(nlat_ * nlon_) * sizeof(float);
  for (std::size_t v = 0; v < L.variables.size(); ++v) {
    const std::int64_t levels = L.variables[v].has_level ? nlev_ : 1;
    for (std::int64_t l = 0; l < levels; ++l) {
      channel_offset_.push_back(offsets[v] + static_cast<std::uint64_t>(l) * plane);
      channel_stride_.push_back(static_cast<std::uint64_t>(levels) * plane);
    }
  }
  channels_ = static_cast<std::int64_t>(channel_offset_.size());
}

CfWriter::~CfWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!renamed_) remove_unfinished();
}

void CfWriter::remove_unfinished() const {
  if (comm_.rank() != 0) return;
  std::error_code ec;
  std::filesystem::remove(tmp_, ec);
}

void CfWriter::write(std::int64_t time_index, std::int64_t lat_start, std::int64_t lat_count, const float* band) {
  if (!error_.empty()) return;
  if (fd_ < 0) fd_ = ::open(tmp_.c_str(), O_WRONLY);
  if (fd_ < 0) {
    error_ = "predict.output: cannot open '" + tmp_ + "' for writing: " + std::strerror(errno);
    return;
  }
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(nlon_) * sizeof(float);
  // The band's rows are contiguous in the file too (reversed when it runs south to
  // north): each channel's band is put in the file's order and written in one piece.
  const GridOrientation& o = orientation_;
  const std::int64_t row0 = o.first_file_row(lat_start, lat_count);
  file_order_.resize(static_cast<std::size_t>(lat_count * nlon_));
  for (std::int64_t c = 0; c < channels_; ++c) {
    const float* src = band + c * lat_count * nlon_;
    for (std::int64_t r = 0; r < lat_count; ++r) {
      float* dst = file_order_.data() + (o.file_row(lat_start + r) - row0) * nlon_;
      for (std::int64_t j = 0; j < nlon_; ++j) dst[o.file_column(j)] = src[r * nlon_ + j];
    }
    const auto* p = reinterpret_cast<const unsigned char*>(file_order_.data());
    std::uint64_t bytes = static_cast<std::uint64_t>(lat_count) * row_bytes;
    std::uint64_t at = channel_offset_[static_cast<std::size_t>(c)] +
                       static_cast<std::uint64_t>(time_index) * channel_stride_[static_cast<std::size_t>(c)] +
                       static_cast<std::uint64_t>(row0) * row_bytes;
    while (bytes > 0) {
      const ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = "predict.output: writing '" + tmp_ + "' at offset " + std::to_string(at) +
                 " failed: " + std::strerror(n < 0 ? errno : EIO);
        return;
      }
      p += n;
      bytes -= static_cast<std::uint64_t>(n);
      at += static_cast<std::uint64_t>(n);
    }
  }
}

void CfWriter::finish() {
  if (fd_ >= 0) {
    if (::fsync(fd_) != 0 && error_.empty()) error_ = "predict.output: fsync of '" + tmp_ + "': " + std::strerror(errno);
    if (::close(fd_) != 0 && error_.empty()) error_ = "predict.output: closing '" + tmp_ + "': " + std::strerror(errno);
    fd_ = -1;
  }
  agree_on_success(comm_.mpi_comm(), [&] {
    if (!error_.empty()) throw IoError(error_);
  });
  agree_on_success(comm_.mpi_comm(), [&] {
    if (comm_.rank() != 0) return;
    std::error_code ec;
    std::filesystem::rename(tmp_, path_, ec);
    if (ec) throw IoError("predict.output: cannot rename '" + tmp_ + "' to '" + path_ + "': " + ec.message());
  });
  renamed_ = true;
}

}  // namespace tessera::run
