#include "tessera/io/checkpoint_reader.hpp"

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>

#include "io/format.hpp"
#include "io/manifest.hpp"
#include "io/step_files.hpp"
#include "tessera/agree.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/detail/finite.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/io/checksum.hpp"

namespace fs = std::filesystem;

namespace tessera::io {

using namespace detail;

std::string rank_file_name(std::int64_t rank) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "checkpoint.rank%05" PRId64 ".h5", rank);
  return buffer;
}

std::string resolve_checkpoint_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (!fs::exists(path, ec)) throw IoError("checkpoint: '" + path + "' does not exist");
  // A FIFO or a device is named as such (a FIFO would block HDF5's open), by the one check.
  if (!fs::is_directory(path, ec)) tessera::detail::require_regular_file(path, "checkpoint: the path");
  const fs::path file = fs::path(path) / checkpoint_file_name;
  if (fs::is_regular_file(file, ec)) return file.string();
  if (fs::exists(file, ec)) tessera::detail::require_regular_file(file.string(), "checkpoint: the file");
  if (const auto latest = latest_checkpoint(path)) {
    const fs::path target = fs::path(*latest) / checkpoint_file_name;
    if (!fs::is_regular_file(target, ec)) {
      throw IoError("checkpoint: '" + path + "/latest' points at '" + *latest + "', which holds no " +
                    checkpoint_file_name);
    }
    return target.string();
  }
  throw IoError("checkpoint: '" + path + "' holds neither " + checkpoint_file_name + " nor a 'latest' pointer");
}

struct CheckpointReader::Impl {
  std::string file;
  H5File handle;
  CheckpointHeader header;
  std::vector<DatasetInfo> datasets;
};

CheckpointReader::CheckpointReader(const std::string& path, Verify verify) : impl_(std::make_unique<Impl>()) {
  impl_->file = resolve_checkpoint_file(path);
  if (verify != Verify::none) {
    check_step_files(impl_->file, verify == Verify::opened_file ? StepScope::opened_file : StepScope::every_file);
  }
  impl_->handle = open_read_only(impl_->file);
  const hid_t file = impl_->handle.get();
  impl_->header = read_header(file, impl_->file);
  for (const char* section : {"model", "optimizer"}) {
    for (const std::string& name : list_links(file, std::string("/") + section)) {
      DatasetInfo info;
      info.section = section;
      info.name = name;
      info.path = dataset_path(section, name);
      try {
        H5Dataset dataset(TESSERA_CHECK_HDF5(H5Dopen2(file, info.path.c_str(), H5P_DEFAULT)));
        info.shape = dataset_shape(dataset.get());
        info.dtype = parse_dtype(read_string_attribute(dataset.get(), "dtype"), info.path);
        info.placement = read_string_attribute(dataset.get(), "placement");
        info.checksum = read_uint_attribute(dataset.get(), "checksum");
      } catch (const Error& e) {
        throw IoError("checkpoint: dataset " + info.path + " in '" + impl_->file + "' is damaged: " + e.what());
      }
      impl_->datasets.push_back(std::move(info));
    }
  }
}

CheckpointReader::~CheckpointReader() = default;
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;

CheckpointMetadata read_checkpoint_metadata(const std::string& path, Communicator& comm) {
  CheckpointMetadata out;
  agree_on_success(comm.mpi_comm(), [&] {
    if (comm.rank() != 0) return;
    CheckpointReader reader(path, CheckpointReader::Verify::opened_file);  // the header only
    out.metadata = reader.header().metadata;
    out.file = reader.file();
  });
  broadcast_text(comm, out.metadata, 0);
  broadcast_text(comm, out.file, 0);
  return out;
}
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;

const std::string& CheckpointReader::file() const { return impl_->file; }
const CheckpointHeader& CheckpointReader::header() const { return impl_->header; }
const std::vector<DatasetInfo>& CheckpointReader::datasets() const { return impl_->datasets; }

const DatasetInfo* CheckpointReader::find(const std::string& path) const {
  for (const DatasetInfo& d : impl_->datasets) {
    if (d.path == path) return &d;
  }
  return nullptr;
}

Tensor CheckpointReader::read(const DatasetInfo& info, const Shape& offset, const Shape& count) const {
  if (offset.size() != info.shape.size() || count.size() != info.shape.size()) {
    throw ShapeError("checkpoint: block " + shape_str(count) + " at " + shape_str(offset) + " does not match dataset " +
                     info.path + " of shape " + shape_str(info.shape));
  }
  for (std::size_t d = 0; d < info.shape.size(); ++d) {
    if (offset[d] < 0 || count[d] < 0 || offset[d] + count[d] > info.shape[d]) {
      throw ShapeError("checkpoint: block " + shape_str(count) + " at " + shape_str(offset) +
                       " lies outside dataset " + info.path + " of shape " + shape_str(info.shape));
    }
  }
  Tensor out = Tensor::empty(count, info.dtype);
  if (out.numel() == 0) return out;
  try {
    H5Dataset dataset(TESSERA_CHECK_HDF5(H5Dopen2(impl_->handle.get(), info.path.c_str(), H5P_DEFAULT)));
    H5Space file_space(TESSERA_CHECK_HDF5(H5Dget_space(dataset.get())));
    select_block(file_space, offset, count);
    const H5Space memory_space = make_space(count);
    TESSERA_CHECK_HDF5(H5Dread(dataset.get(), memory_type_of(info.dtype), memory_space.get(), file_space.get(),
                               H5P_DEFAULT, out.data()));
  } catch (const Hdf5Error& e) {
    throw Hdf5Error("checkpoint: reading dataset " + info.path + " of '" + impl_->file + "' failed: " + e.what());
  }
  return out;
}

Tensor CheckpointReader::read(const DatasetInfo& info) const {
  return read(info, Shape(info.shape.size(), 0), info.shape);
}

namespace {

std::string hex(std::uint64_t v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "0x%016" PRIx64, v);
  return buffer;
}

// Each slice of a per_rank checkpoint against its own checksum, so a damaged rank file
// is named.
void verify_slices(const CheckpointReader& reader, VerifyReport& report) {
  const fs::path dir = fs::path(reader.file()).parent_path();
  for (std::int64_t rank : reader.header().writer_ranks) {
    const std::string path = (dir / rank_file_name(rank)).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      report.failed.push_back("slice file " + path + " is missing");
      continue;
    }
    try {
      H5File file = open_read_only(path);
      for (const char* section : {"model", "optimizer"}) {
        for (const std::string& name : list_links(file.get(), std::string("/") + section)) {
          const std::string dpath = dataset_path(section, name);
          H5Dataset dataset(TESSERA_CHECK_HDF5(H5Dopen2(file.get(), dpath.c_str(), H5P_DEFAULT)));
          const Shape shape = dataset_shape(dataset.get());
          const DType dtype = parse_dtype(read_string_attribute(dataset.get(), "dtype"), dpath);
          const auto global = read_int_array_attribute(dataset.get(), "global_shape");
          const auto offset = read_int_array_attribute(dataset.get(), "offset");
          Tensor block = Tensor::empty(shape, dtype);
          if (block.numel() > 0) {
            TESSERA_CHECK_HDF5(
                H5Dread(dataset.get(), memory_type_of(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, block.data()));
          }
          const std::uint64_t stored = read_uint_attribute(dataset.get(), "checksum");
          const std::uint64_t computed = block_checksum(block, Shape(global.begin(), global.end()),
                                                        Shape(offset.begin(), offset.end()), reader.header().checksum);
          if (stored != computed) {
            report.failed.push_back("slice " + dpath + " in " + path + ": checksum mismatch (stored " + hex(stored) +
                                    ", computed " + hex(computed) + ")");
          }
        }
      }
    } catch (const Error& e) {
      report.failed.push_back("slice file " + path + ": " + e.what());
    }
  }
}

// A dataset's values that are not finite, as a verify problem: how many, and where the
// first one is (a training run that blew up saves NaN weights with good checksums; they
// would train or predict NaN). nullopt when every value is finite (or the dtype is integer).
std::optional<std::string> non_finite_problem(const DatasetInfo& d, const Tensor& data) {
  const auto n = static_cast<std::size_t>(data.numel());
  tessera::detail::NonFiniteValues found;
  double first_value = 0;
  switch (data.dtype()) {
    case DType::f32: {
      const std::span<const float> v(data.data<float>(), n);
      found = tessera::detail::count_non_finite(v);
      if (found.count > 0) first_value = v[found.first];
      break;
    }
    case DType::f64: {
      const std::span<const double> v(data.data<double>(), n);
      found = tessera::detail::count_non_finite(v);
      if (found.count > 0) first_value = v[found.first];
      break;
    }
    case DType::bf16: {
      std::vector<float> wide(n);
      for (std::size_t i = 0; i < n; ++i) wide[i] = static_cast<float>(data.data<bfloat16>()[i]);
      found = tessera::detail::count_non_finite(std::span<const float>(wide));
      if (found.count > 0) first_value = wide[found.first];
      break;
    }
    case DType::i64: break;
  }
  if (found.count == 0) return std::nullopt;
  // The first one's index in the dataset's shape (C order).
  Shape index(d.shape.size(), 0);
  auto flat = static_cast<std::int64_t>(found.first);
  for (std::size_t k = d.shape.size(); k-- > 0;) {
    if (d.shape[k] > 0) {
      index[k] = flat % d.shape[k];
      flat /= d.shape[k];
    }
  }
  return "dataset " + d.path + ": " + std::to_string(found.count) + " of " + std::to_string(n) +
         " values are not finite, the first (" + tessera::detail::non_finite_kind(first_value) + ") at index " +
         shape_str(index) + ": these values cannot train or predict (load an earlier step, or fix the tensor at its "
         "source)";
}

}  // namespace

VerifyReport verify_checkpoint(const std::string& path) {
  VerifyReport report;
  // Every file against the MANIFEST first, by the rule a load applies. A damaged file
  // is reported and not opened: HDF5 may crash on damaged metadata, so its datasets
  // cannot be checked one by one.
  const std::string file = resolve_checkpoint_file(path);
  for (const StepProblem& p : step_file_problems(file, StepScope::every_file)) {
    report.failed.push_back("file " + p.name + ": " + p.message);
  }
  if (!report.ok()) {
    report.failed.push_back("datasets not checked: a file that is not verified is not opened (HDF5 may crash on it)");
    return report;
  }
  const CheckpointReader reader(file, CheckpointReader::Verify::none);  // checked above
  if (reader.header().layout == CheckpointLayout::per_rank) verify_slices(reader, report);
  for (const DatasetInfo& d : reader.datasets()) {
    try {
      const Tensor data = reader.read(d);
      const std::uint64_t computed = block_checksum(data, d.shape, Shape(d.shape.size(), 0), reader.header().checksum);
      if (computed != d.checksum) {
        report.failed.push_back("dataset " + d.path + ": checksum mismatch (stored " + hex(d.checksum) +
                                ", computed " + hex(computed) + ")");
      } else if (const auto problem = non_finite_problem(d, data)) {
        report.failed.push_back(*problem);
      } else {
        report.passed.push_back(d.path);
      }
    } catch (const Error& e) {
      report.failed.push_back("dataset " + d.path + ": " + e.what());
    }
  }
  return report;
}

void merge_checkpoint(const std::string& path, const std::string& output_file) {
  // The output is renamed into place: a device or FIFO of that name would be replaced.
  tessera::detail::require_replaceable_file(output_file, "merge output");
  const CheckpointReader reader(path);
  const std::string temporary = output_file + ".tmp-merge";
  std::error_code ec;
  fs::remove(temporary, ec);
  try {
    {
      H5File out(TESSERA_CHECK_HDF5(H5Fcreate(temporary.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT)));
      CheckpointHeader header = reader.header();
      header.layout = CheckpointLayout::shared;
      header.writer_ranks.clear();
      write_header(out.get(), header);
      write_string_attribute(out.get(), "merged_from", reader.file());
      H5Group model = create_ordered_group(out.get(), "model");
      H5Group optimizer;
      if (!header.optimizer_type.empty()) {
        optimizer = create_ordered_group(out.get(), "optimizer");
        write_string_attribute(optimizer.get(), "type", header.optimizer_type);
        write_int_attribute(optimizer.get(), "step_count", header.optimizer_step_count);
      }
      for (const DatasetInfo& d : reader.datasets()) {
        const Tensor data = reader.read(d);
        const H5Space space = make_space(d.shape);
        const hid_t group = d.section == "model" ? model.get() : optimizer.get();
        if (group < 0) throw IoError("checkpoint: '" + reader.file() + "' has optimizer tensors but no optimizer type");
        H5Dataset dataset(TESSERA_CHECK_HDF5(H5Dcreate2(group, d.name.c_str(), file_type_of(d.dtype), space.get(),
                                                        H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
        if (data.numel() > 0) {
          TESSERA_CHECK_HDF5(
              H5Dwrite(dataset.get(), memory_type_of(d.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
        }
        write_dataset_attributes(dataset.get(), d.placement, d.dtype, d.checksum);
      }
      optimizer.close();
      model.close();
      out.close();
    }
    fsync_path(temporary, false);
    const FileDigest digest = digest_file(fs::path(temporary).parent_path().string(),
                                          fs::path(temporary).filename().string());
    rename_path(temporary, output_file);
    // Listed in its directory's MANIFEST (which fsyncs the directory, so the rename too),
    // so the merged file is read under the rule of a step directory's files.
    update_manifest(fs::absolute(output_file).parent_path().string(),
                    {{fs::path(output_file).filename().string(), digest.size, digest.crc}});
  } catch (...) {
    fs::remove(temporary, ec);
    throw;
  }
}

}  // namespace tessera::io
