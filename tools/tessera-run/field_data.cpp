#include "field_data.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <glob.h>
#include <memory>
#include <sstream>
#include <utility>

#include "driver_common.hpp"
#include "field_stats.hpp"
#include "hdf5_support.hpp"
#include "netcdf_input.hpp"
#include "tessera/detail/finite.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"
#include "tessera/models/field_emulator.hpp"

namespace tessera::run {

namespace {

// "%.17g" of a double ("nan", "inf", "0").
std::string fmt_value(double v) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

std::string name_of(const DataConfig& c) { return "data file '" + c.path + "', dataset '" + c.dataset + "'"; }

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) {
    const auto b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
    out.push_back(b == std::string::npos ? "" : part.substr(b, e - b + 1));
  }
  return out;
}

// 1-D f64 dataset `name` of `n` values, or empty when the file has none of that length.
std::vector<double> optional_axis(hid_t file, const char* name, std::int64_t n) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) return {};
  H5Dataset d(H5Dopen2(file, name, H5P_DEFAULT));
  if (!d) return {};
  H5Space space(H5Dget_space(d.get()));
  if (H5Sget_simple_extent_ndims(space.get()) != 1 || H5Sget_simple_extent_npoints(space.get()) != n) return {};
  std::vector<double> v(host_buffer_elements(static_cast<long double>(n), sizeof(double),
                                             std::string("the coordinate '") + name + "'"));
  if (H5Dread(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) return {};
  return v;
}

// An f64 coordinate variable with text attributes.
CoordinateVariable text_axis(const std::string& name, const std::vector<double>& values,
                             const std::vector<std::pair<std::string, std::string>>& attributes) {
  CoordinateVariable axis{name, NumberType::f64, values, {}, {}};
  for (const auto& [key, text] : attributes) axis.attributes.push_back(AxisAttribute{key, true, text, {}, {}});
  return axis;
}

// The header of tessera's own layout (without normalisation statistics).
FieldDataInfo read_tessera_info(const DataConfig& c) {
  tessera::detail::hdf5_errors_as_exceptions();
  const std::string what = name_of(c);
  H5File file(H5Fopen(c.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file) throw IoError("cannot open data file '" + c.path + "' (data.path): no such HDF5 file");
  H5Dataset dset(H5Dopen2(file.get(), c.dataset.c_str(), H5P_DEFAULT));
  if (!dset) throw IoError(what + ": no such dataset (data.dataset)");
  H5Space space(H5Dget_space(dset.get()));
  if (H5Sget_simple_extent_ndims(space.get()) != 4) {
    throw IoError(what + ": must have 4 dims [time, channel, lat, lon]");
  }
  hsize_t dims[4];
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  H5Type type(H5Dget_type(dset.get()));
  if (H5Tget_class(type.get()) != H5T_FLOAT) throw IoError(what + ": must hold floating-point values");

  FieldDataInfo info;
  info.format = FieldFormat::tessera;
  info.dataset = c.dataset;
  info.files = {c.path};
  info.times = static_cast<std::int64_t>(dims[0]);
  info.file_times = {info.times};
  info.nlat = static_cast<std::int64_t>(dims[2]);
  info.nlon = static_cast<std::int64_t>(dims[3]);
  const auto file_channels = static_cast<std::int64_t>(dims[1]);
  std::vector<std::string> names;
  if (attribute_exists(dset.get(), "variables")) {
    names = split_names(read_string_attribute(dset.get(), "variables", what));
    if (static_cast<std::int64_t>(names.size()) != file_channels) {
      throw IoError(what + ": attribute 'variables' names " + std::to_string(names.size()) + " channels, the data has " +
                    std::to_string(file_channels));
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto first = std::find(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(i), names[i]);
      if (first != names.begin() + static_cast<std::ptrdiff_t>(i)) {
        throw IoError(what + ": attribute 'variables' names channel '" + names[i] + "' twice (channels " +
                      std::to_string(first - names.begin()) + " and " + std::to_string(i) +
                      "); each channel needs its own name");
      }
    }
  } else {
    for (std::int64_t i = 0; i < file_channels; ++i) names.push_back("c" + std::to_string(i));
  }
  std::vector<std::string> units = split_names(string_attribute_or_empty(dset.get(), "units"));
  units.resize(names.size());
  if (c.variables.empty()) {
    for (std::int64_t i = 0; i < file_channels; ++i) info.channel_index.push_back(i);
  } else {
    for (const auto& v : c.variables) {
      std::int64_t found = -1;
      for (std::size_t i = 0; i < names.size(); ++i) {
        if (names[i] == v) found = static_cast<std::int64_t>(i);
      }
      if (found < 0) {
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
        throw ConfigError("data.variables: '" + v + "' is not a variable of " + what + " (it has " + list + ")");
      }
      info.channel_index.push_back(found);
    }
  }
  for (auto i : info.channel_index) {
    info.variables.push_back(names[static_cast<std::size_t>(i)]);
    FieldVariable var;
    var.name = names[static_cast<std::size_t>(i)];
    var.units = units[static_cast<std::size_t>(i)];
    info.sources.push_back(var);
  }
  info.channels = static_cast<std::int64_t>(info.channel_index.size());

  if (c.normalize && c.stats.empty()) {
    if (!attribute_exists(dset.get(), "mean") || !attribute_exists(dset.get(), "std")) {
      throw IoError(what + ": data.normalize needs the attributes 'mean' and 'std' (per channel) or a data.stats "
                           "file (tessera-run stats writes one); set data.normalize: false for data that is already "
                           "normalised");
    }
    const auto mean = read_double_attribute(dset.get(), "mean", what);
    const auto std = read_double_attribute(dset.get(), "std", what);
    if (static_cast<std::int64_t>(mean.size()) != file_channels || static_cast<std::int64_t>(std.size()) != file_channels) {
      throw IoError(what + ": attributes 'mean' and 'std' must have one value per channel (" +
                    std::to_string(file_channels) + ")");
    }
    for (auto i : info.channel_index) {
      const double m = mean[static_cast<std::size_t>(i)], s = std[static_cast<std::size_t>(i)];
      // A std of 0 (a constant channel), NaN, infinite or negative cannot normalise:
      // dividing by it, or silently using 1 instead, trains on something else than
      // the file's statistics say.
      if (!std::isfinite(m) || !std::isfinite(s) || !(s > 0)) {
        const bool bad_mean = !std::isfinite(m);
        throw IoError(what + ": attribute '" + (bad_mean ? "mean" : "std") + "' of variable '" +
                      names[static_cast<std::size_t>(i)] + "' is " + fmt_value(bad_mean ? m : s) +
                      ": normalisation needs a finite mean and a finite std > 0; fix the attributes, leave the "
                      "variable out of data.variables, or set data.normalize: false");
      }
      info.mean.push_back(m);
      info.std.push_back(s);
    }
  }
  if (attribute_exists(dset.get(), "dt_seconds")) info.dt_seconds = read_double_attribute(dset.get(), "dt_seconds", what)[0];
  if (attribute_exists(dset.get(), "latitude_grid")) {
    info.latitude_grid = models::parse_latitude_grid(read_string_attribute(dset.get(), "latitude_grid", what),
                                                     what + " attribute latitude_grid");
  }
  // The coordinates, for predictions: the file's axes when it has them, else the
  // regular grid its latitude_grid describes and times dt_seconds apart.
  auto& k = info.coords;
  k.lat = optional_axis(file.get(), "latitude", info.nlat);
  k.lon = optional_axis(file.get(), "longitude", info.nlon);
  k.time = optional_axis(file.get(), "time", info.times);
  const bool poles = info.latitude_grid == domain::LatitudeGrid::with_poles;
  for (std::int64_t i = 0; k.lat.empty() && i < info.nlat; ++i) {
    const auto n = static_cast<double>(info.nlat);
    k.lat.push_back(poles ? 90.0 - 180.0 * static_cast<double>(i) / (n - 1) : 90.0 - 180.0 * (i + 0.5) / n);
  }
  for (std::int64_t j = 0; k.lon.empty() && j < info.nlon; ++j) {
    k.lon.push_back(360.0 * static_cast<double>(j) / static_cast<double>(info.nlon));
  }
  for (std::int64_t t = 0; k.time.empty() && t < info.times; ++t) k.time.push_back(static_cast<double>(t) * info.dt_seconds);
  if (info.latitude_grid == domain::LatitudeGrid::explicit_rows && k.lat.empty()) {
    throw IoError(what + ": latitude_grid explicit_rows needs the rows' latitudes (a `latitude` axis)");
  }
  // The layout's time is seconds from the start of the series, which carries no date.
  k.time_units = "seconds since 2000-01-01 00:00:00";
  k.calendar = "proleptic_gregorian";
  info.orientation = GridOrientation{info.nlat, info.nlon, false, 0};
  // A forecast from this layout is written with CF's names and attributes (the layout
  // has no conventions of its own to keep).
  info.axes.time = text_axis("time", k.time,
                             {{"standard_name", "time"}, {"long_name", "time"}, {"units", k.time_units},
                              {"calendar", k.calendar}, {"axis", "T"}});
  info.axes.lat = text_axis("lat", k.lat,
                            {{"standard_name", "latitude"}, {"long_name", "latitude"}, {"units", "degrees_north"},
                             {"axis", "Y"}});
  info.axes.lon = text_axis("lon", k.lon,
                            {{"standard_name", "longitude"}, {"long_name", "longitude"}, {"units", "degrees_east"},
                             {"axis", "X"}});
  return info;
}

}  // namespace

domain::LatitudeSpec FieldDataInfo::latitude_spec() const {
  domain::LatitudeSpec spec(latitude_grid);
  if (latitude_grid == domain::LatitudeGrid::explicit_rows) spec.degrees = coords.lat;
  return spec;
}

std::string FieldDataInfo::describe_files() const {
  if (files.size() <= 1) return files.empty() ? "" : files.front();
  return files.front() + " .. " + files.back() + " (" + std::to_string(files.size()) + " files)";
}

namespace {

// A NaN or Inf in the data trains to a non-finite loss that reads as divergence (and
// makes NaN statistics and forecasts): named here, where its place is known.
void check_finite(const std::vector<float>& slab, std::int64_t plane, std::int64_t t0, std::int64_t lat_start,
                  std::int64_t nlon, const std::string& what) {
  const auto bad = tessera::detail::first_non_finite(std::span<const float>(slab));
  if (!bad) return;
  const auto at = static_cast<std::int64_t>(*bad);
  throw IoError(what + " holds " + tessera::detail::non_finite_kind(slab[*bad]) + " at time " +
                std::to_string(t0 + at / plane) + ", latitude row " + std::to_string(lat_start + at % plane / nlon) +
                ", longitude " + std::to_string(at % nlon) +
                ": tessera trains only on finite values (mark missing data with _FillValue in netCDF input, or "
                "fill it)");
}

// A device, FIFO or directory as a data file would be read until memory runs out or
// block: each file is refused by name before HDF5 opens it.
std::vector<std::string> regular_files(std::vector<std::string> files) {
  for (const auto& f : files) tessera::detail::require_regular_file(f, "data file (data.path)");
  return files;
}

}  // namespace

std::vector<std::string> data_files(const DataConfig& c) {
  if (!c.path_list.empty()) return regular_files(c.path_list);
  if (c.path.find_first_of("*?[") == std::string::npos) return regular_files({c.path});
  glob_t g{};
  const int rc = ::glob(c.path.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  for (std::size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (files.empty()) throw IoError("data.path '" + c.path + "' matches no file");
  std::sort(files.begin(), files.end());
  return regular_files(std::move(files));
}

bool is_netcdf_input(const DataConfig& c, const std::vector<std::string>& files) {
  if (c.format != "auto") return c.format == "netcdf";
  if (files.size() > 1 || !c.path_list.empty()) return true;
  std::string p = files.front();
  for (auto& ch : p) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* tail : {".nc", ".nc4", ".cdf"}) {
    const std::string t = tail;
    if (p.size() >= t.size() && p.compare(p.size() - t.size(), t.size(), t) == 0) return true;
  }
  return false;
}

FieldDataInfo read_field_data_info(const DataConfig& c) {
  const std::vector<std::string> files = data_files(c);
  FieldDataInfo info;
  if (is_netcdf_input(c, files)) {
    info = read_netcdf_info(c, files);
    if (c.normalize && c.stats.empty()) {
      throw ConfigError("data.normalize needs each channel's mean and std, which netCDF data '" + info.describe_files() +
                        "' does not carry: run `tessera-run stats CONFIG` to write them to a file and name it in "
                        "data.stats, or set data.normalize: false");
    }
  } else {
    if (files.size() != 1) {
      throw ConfigError("data.path names " + std::to_string(files.size()) +
                        " files: only netCDF input (data.format: netcdf) reads several files along time");
    }
    DataConfig one = c;
    one.path = files.front();
    info = read_tessera_info(one);
  }
  if (c.normalize && !c.stats.empty()) read_field_stats(c.stats, info.variables, info.mean, info.std);
  if (info.times <= c.lead) {
    throw ConfigError("data.lead (" + std::to_string(c.lead) + ") leaves no sample in data '" + info.describe_files() +
                      "', which has " + std::to_string(info.times) + " times");
  }
  return info;
}

void read_field_band(const FieldDataInfo& info, std::int64_t t0, std::int64_t nt, std::int64_t lat_start,
                     std::int64_t lat_count, float* out) {
  if (info.format == FieldFormat::netcdf) {
    read_netcdf_band(info, t0, nt, lat_start, lat_count, out);
    return;
  }
  tessera::detail::hdf5_errors_as_exceptions();
  const std::string& path = info.files.front();
  const std::string what = "data file '" + path + "', dataset '" + info.dataset + "'";
  H5File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file) throw IoError("cannot open data file '" + path + "' (data.path)");
  H5Dataset dset(H5Dopen2(file.get(), info.dataset.c_str(), H5P_DEFAULT));
  if (!dset) throw IoError(what + ": no such dataset");
  H5Space space(H5Dget_space(dset.get()));
  const std::int64_t plane = lat_count * info.nlon;
  // One hyperslab read per selected channel: [the times, channel, this band, all lon].
  std::vector<float> slab(host_buffer_elements(static_cast<long double>(nt) * plane, sizeof(float), what));
  for (std::int64_t ci = 0; ci < info.channels; ++ci) {
    const hsize_t start[4] = {static_cast<hsize_t>(t0), static_cast<hsize_t>(info.channel_index[ci]),
                              static_cast<hsize_t>(lat_start), 0};
    const hsize_t count[4] = {static_cast<hsize_t>(nt), 1, static_cast<hsize_t>(lat_count),
                              static_cast<hsize_t>(info.nlon)};
    H5Space mem(H5Screate_simple(4, count, nullptr));
    if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
        H5Dread(dset.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, slab.data()) < 0) {
      throw IoError(what + ": cannot read channel " + info.variables[ci] + ", latitudes [" + std::to_string(lat_start) +
                    ", " + std::to_string(lat_start + lat_count) + ")");
    }
    check_finite(slab, plane, t0, lat_start, info.nlon, what + ", variable '" + info.variables[ci] + "'");
    for (std::int64_t t = 0; t < nt; ++t) {
      std::memcpy(out + (t * info.channels + ci) * plane, slab.data() + t * plane, plane * sizeof(float));
    }
  }
}

ValidationSplit split_field_samples(const DataConfig& c, const FieldDataInfo& info,
                                    const FieldDataInfo* validation_file) {
  ValidationSplit split;
  split.train = info.times - c.lead;
  if (validation_file != nullptr) {
    split.validation = validation_file->times - c.lead;
  } else if (c.validation_fraction > 0) {
    const std::int64_t held = std::max<std::int64_t>(
        c.lead + 1, std::llround(c.validation_fraction * static_cast<double>(info.times)));
    split.train = info.times - held - c.lead;
    split.validation_first = info.times - held;
    split.validation = held - c.lead;
    if (split.train < 1) {
      char fraction[32];
      std::snprintf(fraction, sizeof fraction, "%g", c.validation_fraction);
      throw ConfigError("data.validation (" + std::string(fraction) + ") holds out " +
                        std::to_string(held) + " of the " + std::to_string(info.times) + " times of " + name_of(c) +
                        ", which leaves no training sample (t -> t+" + std::to_string(c.lead) +
                        "); hold out a smaller fraction");
    }
  }
  return split;
}

DataConfig validation_file_config(const DataConfig& c) {
  DataConfig v = c;
  v.path = c.validation_path;
  v.path_list.clear();
  return v;
}

FieldDataInfo read_validation_info(const DataConfig& c, const FieldDataInfo& train) {
  DataConfig v = validation_file_config(c);
  // By name: the file may order its channels otherwise (netCDF: variables, not channels).
  v.variables = train.variables;
  if (train.format == FieldFormat::netcdf) {
    v.variables.clear();
    for (const auto& var : train.sources) v.variables.push_back(var.name);
  }
  v.normalize = false;            // the training statistics normalise it (below)
  const std::string what = "data.validation: " + name_of(v);
  // Named here: read_field_data_info would blame data.path. (No open: a FIFO would block it.)
  std::error_code missing;
  if (!std::filesystem::exists(v.path, missing)) {
    throw IoError("data.validation: cannot read '" + v.path + "': " +
                  (missing ? missing.message() : std::string(std::strerror(ENOENT))));
  }
  tessera::detail::require_regular_file(v.path, "data.validation file");
  FieldDataInfo info = naming_key("data.validation", [&] { return read_field_data_info(v); });
  if (info.nlat != train.nlat || info.nlon != train.nlon || !(info.latitude_spec() == train.latitude_spec())) {
    throw ConfigError(what + ": its grid " + std::to_string(info.nlat) + "x" + std::to_string(info.nlon) +
                      " differs from the training data's " + std::to_string(train.nlat) + "x" +
                      std::to_string(train.nlon) + " (or its latitude grid or latitudes do)");
  }
  info.mean = train.mean;
  info.std = train.std;
  return info;
}

std::size_t FieldData::band_elements(const FieldDataInfo& info, std::int64_t lat_count) {
  const std::int64_t plane = lat_count * info.nlon;
  return host_buffer_elements(static_cast<long double>(info.times) * info.channels * plane, sizeof(float),
                              "data '" + info.describe_files() + "': this rank's band of " +
                                  std::to_string(info.times) + " times x " + std::to_string(info.channels) +
                                  " channels x " + std::to_string(lat_count) + " x " + std::to_string(info.nlon));
}

FieldData::FieldData(const DataConfig& c, const FieldDataInfo& info, std::int64_t lat_start, std::int64_t lat_count)
    : info_(info), lead_(c.lead), lat_count_(lat_count) {
  const std::int64_t plane = lat_count * info.nlon;
  values_.resize(band_elements(info, lat_count));
  read_field_band(info, 0, info.times, lat_start, lat_count, values_.data());
  for (std::int64_t t = 0; t < info.times; ++t) {
    for (std::int64_t ci = 0; ci < info.channels; ++ci) {
      const double m = info.mean.empty() ? 0.0 : info.mean[ci];
      const double s = info.std.empty() ? 1.0 : info.std[ci];
      float* v = values_.data() + (t * info.channels + ci) * plane;
      for (std::int64_t i = 0; i < plane; ++i) v[i] = static_cast<float>((v[i] - m) / s);
    }
  }
}

void FieldData::batch(const std::vector<std::int64_t>& indices, Tensor& input, Tensor& target) const {
  const auto n = static_cast<std::int64_t>(indices.size());
  const Shape shape{n, info_.channels, lat_count_, info_.nlon};
  if (!input.defined() || input.shape() != shape) input = Tensor::empty(shape, DType::f32);
  if (!target.defined() || target.shape() != shape) target = Tensor::empty(shape, DType::f32);
  const std::int64_t frame = info_.channels * lat_count_ * info_.nlon;
  for (std::int64_t b = 0; b < n; ++b) {
    const std::int64_t t = indices[static_cast<std::size_t>(b)];
    if (t < 0 || t >= samples()) throw InternalError("sample index " + std::to_string(t) + " out of range");
    std::memcpy(input.data<float>() + b * frame, values_.data() + t * frame, frame * sizeof(float));
    std::memcpy(target.data<float>() + b * frame, values_.data() + (t + lead_) * frame, frame * sizeof(float));
  }
}

}  // namespace tessera::run
