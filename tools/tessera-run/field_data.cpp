#include "field_data.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "driver_common.hpp"
#include "tessera/error.hpp"
#include "tessera/models/field_emulator.hpp"

namespace tessera::run {

namespace {

// RAII for the few HDF5 handles the reader opens.
struct Handle {
  hid_t id = H5I_INVALID_HID;
  herr_t (*close)(hid_t) = nullptr;
  Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~Handle() {
    if (id >= 0 && close) close(id);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

// Silences HDF5's own error stack printing while alive: our errors say what failed.
struct QuietHdf5 {
  H5E_auto2_t func = nullptr;
  void* data = nullptr;
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func, &data);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func, data); }
};

// "%.17g" of a double ("nan", "inf", "0").
std::string fmt_value(double v) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

std::string name_of(const DataConfig& c) { return "data file '" + c.path + "', dataset '" + c.dataset + "'"; }

bool has_attribute(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

std::string read_string_attribute(hid_t obj, const char* name, const std::string& what) {
  Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (attr.id < 0) throw IoError(what + ": cannot open attribute '" + name + "'");
  Handle type(H5Aget_type(attr.id), H5Tclose);
  if (H5Tget_class(type.id) != H5T_STRING) throw IoError(what + ": attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(type.id) > 0) {
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.id, H5T_VARIABLE);
    H5Tset_cset(mem.id, H5Tget_cset(type.id));
    char* text = nullptr;
    if (H5Aread(attr.id, mem.id, &text) < 0) throw IoError(what + ": cannot read attribute '" + name + "'");
    std::string s = text ? text : "";
    H5free_memory(text);
    return s;
  }
  const std::size_t n = H5Tget_size(type.id);
  std::string s(n, '\0');
  if (H5Aread(attr.id, type.id, s.data()) < 0) throw IoError(what + ": cannot read attribute '" + name + "'");
  return std::string(s.c_str());
}

std::vector<double> read_double_attribute(hid_t obj, const char* name, const std::string& what) {
  Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (attr.id < 0) throw IoError(what + ": cannot open attribute '" + name + "'");
  Handle space(H5Aget_space(attr.id), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.id);
  if (n < 1) throw IoError(what + ": attribute '" + name + "' is empty");
  std::vector<double> values(static_cast<std::size_t>(n));
  if (H5Aread(attr.id, H5T_NATIVE_DOUBLE, values.data()) < 0) {
    throw IoError(what + ": attribute '" + name + "' is not numeric");
  }
  return values;
}

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

}  // namespace

FieldDataInfo read_field_data_info(const DataConfig& c) {
  QuietHdf5 quiet;
  const std::string what = name_of(c);
  Handle file(H5Fopen(c.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file.id < 0) throw IoError("cannot open data file '" + c.path + "' (data.path): no such HDF5 file");
  Handle dset(H5Dopen2(file.id, c.dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (dset.id < 0) throw IoError(what + ": no such dataset (data.dataset)");
  Handle space(H5Dget_space(dset.id), H5Sclose);
  if (H5Sget_simple_extent_ndims(space.id) != 4) {
    throw IoError(what + ": must have 4 dims [time, channel, lat, lon]");
  }
  hsize_t dims[4];
  H5Sget_simple_extent_dims(space.id, dims, nullptr);
  Handle type(H5Dget_type(dset.id), H5Tclose);
  if (H5Tget_class(type.id) != H5T_FLOAT) throw IoError(what + ": must hold floating-point values");

  FieldDataInfo info;
  info.times = static_cast<std::int64_t>(dims[0]);
  info.nlat = static_cast<std::int64_t>(dims[2]);
  info.nlon = static_cast<std::int64_t>(dims[3]);
  const auto file_channels = static_cast<std::int64_t>(dims[1]);
  std::vector<std::string> names;
  if (has_attribute(dset.id, "variables")) {
    names = split_names(read_string_attribute(dset.id, "variables", what));
    if (static_cast<std::int64_t>(names.size()) != file_channels) {
      throw IoError(what + ": attribute 'variables' names " + std::to_string(names.size()) + " channels, the data has " +
                    std::to_string(file_channels));
    }
  } else {
    for (std::int64_t i = 0; i < file_channels; ++i) names.push_back("c" + std::to_string(i));
  }
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
  for (auto i : info.channel_index) info.variables.push_back(names[static_cast<std::size_t>(i)]);
  info.channels = static_cast<std::int64_t>(info.channel_index.size());

  if (c.normalize) {
    if (!has_attribute(dset.id, "mean") || !has_attribute(dset.id, "std")) {
      throw IoError(what + ": data.normalize needs the attributes 'mean' and 'std' (per channel); set "
                           "data.normalize: false for data that is already normalised");
    }
    const auto mean = read_double_attribute(dset.id, "mean", what);
    const auto std = read_double_attribute(dset.id, "std", what);
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
  if (has_attribute(dset.id, "dt_seconds")) info.dt_seconds = read_double_attribute(dset.id, "dt_seconds", what)[0];
  if (has_attribute(dset.id, "latitude_grid")) {
    info.latitude_grid = models::parse_latitude_grid(read_string_attribute(dset.id, "latitude_grid", what),
                                                     what + " attribute latitude_grid");
  }
  if (info.times <= c.lead) {
    throw ConfigError("data.lead (" + std::to_string(c.lead) + ") leaves no sample in " + what + ", which has " +
                      std::to_string(info.times) + " times");
  }
  return info;
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
  return v;
}

FieldDataInfo read_validation_info(const DataConfig& c, const FieldDataInfo& train) {
  DataConfig v = validation_file_config(c);
  v.variables = train.variables;  // by name: the file may order its channels otherwise
  v.normalize = false;            // the training statistics normalise it (below)
  const std::string what = "data.validation: " + name_of(v);
  if (std::FILE* f = std::fopen(v.path.c_str(), "rb")) {
    std::fclose(f);
  } else {  // (read_field_data_info would blame data.path)
    throw IoError("data.validation: cannot read '" + v.path + "': " + std::strerror(errno));
  }
  FieldDataInfo info = naming_key("data.validation", [&] { return read_field_data_info(v); });
  if (info.nlat != train.nlat || info.nlon != train.nlon || info.latitude_grid != train.latitude_grid) {
    throw ConfigError(what + ": its grid " + std::to_string(info.nlat) + "x" + std::to_string(info.nlon) +
                      " differs from the training data's " + std::to_string(train.nlat) + "x" +
                      std::to_string(train.nlon) + " (or its latitude_grid does)");
  }
  info.mean = train.mean;
  info.std = train.std;
  return info;
}

FieldData::FieldData(const DataConfig& c, const FieldDataInfo& info, std::int64_t lat_start, std::int64_t lat_count)
    : info_(info), lead_(c.lead), lat_count_(lat_count) {
  QuietHdf5 quiet;
  const std::string what = name_of(c);
  Handle file(H5Fopen(c.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file.id < 0) throw IoError("cannot open data file '" + c.path + "' (data.path)");
  Handle dset(H5Dopen2(file.id, c.dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (dset.id < 0) throw IoError(what + ": no such dataset");
  Handle space(H5Dget_space(dset.id), H5Sclose);
  const std::int64_t plane = lat_count * info.nlon;
  values_.resize(static_cast<std::size_t>(info.times * info.channels * plane));
  // One hyperslab read per selected channel: [all times, channel, this band, all lon].
  std::vector<float> slab(static_cast<std::size_t>(info.times * plane));
  for (std::int64_t ci = 0; ci < info.channels; ++ci) {
    const hsize_t start[4] = {0, static_cast<hsize_t>(info.channel_index[ci]), static_cast<hsize_t>(lat_start), 0};
    const hsize_t count[4] = {static_cast<hsize_t>(info.times), 1, static_cast<hsize_t>(lat_count),
                              static_cast<hsize_t>(info.nlon)};
    Handle mem(H5Screate_simple(4, count, nullptr), H5Sclose);
    if (H5Sselect_hyperslab(space.id, H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
        H5Dread(dset.id, H5T_NATIVE_FLOAT, mem.id, space.id, H5P_DEFAULT, slab.data()) < 0) {
      throw IoError(what + ": cannot read channel " + info.variables[ci] + ", latitudes [" + std::to_string(lat_start) +
                    ", " + std::to_string(lat_start + lat_count) + ")");
    }
    const double m = info.mean.empty() ? 0.0 : info.mean[ci];
    const double s = info.std.empty() ? 1.0 : info.std[ci];
    for (std::int64_t t = 0; t < info.times; ++t) {
      const float* src = slab.data() + t * plane;
      float* dst = values_.data() + (t * info.channels + ci) * plane;
      for (std::int64_t i = 0; i < plane; ++i) dst[i] = static_cast<float>((src[i] - m) / s);
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
