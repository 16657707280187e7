#include "netcdf_input.hpp"

#include <hdf5.h>
#include <hdf5_hl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "driver_common.hpp"
#include "hdf5_support.hpp"
#include "tessera/detail/finite.hpp"
#include "tessera/error.hpp"

namespace tessera::run {
namespace {

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string fmt_g(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// netCDF-3 files start with "CDF" and a version byte; HDF5 (netCDF-4) files with the
// HDF5 signature. A netCDF-3 file gets a message with the command that converts it.
void check_signature(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open data file '" + path + "' (data.path): " + std::strerror(errno));
  char head[4] = {0, 0, 0, 0};
  in.read(head, 4);
  if (head[0] == 'C' && head[1] == 'D' && head[2] == 'F' && (head[3] == 1 || head[3] == 2 || head[3] == 5)) {
    throw IoError("data file '" + path + "' is a netCDF-3 (classic) file; tessera reads netCDF-4 (HDF5-based) "
                  "files: convert it with `nccopy -k netCDF-4 " + path + " OUT.nc`");
  }
}

enum class Axis { none, time, level, lat, lon };

// One dimension scale (coordinate variable) of a file.
struct Scale {
  std::string name;
  Axis axis = Axis::none;
  std::vector<double> values;
  std::string units, calendar, standard_name;
  CoordinateVariable variable;  // as the file holds it (without values: `values` has them)
};

Axis classify(const std::string& name, const std::string& axis, const std::string& standard_name,
              const std::string& units) {
  const std::string n = lower(name), u = lower(units);
  if (n == "time" || axis == "T" || standard_name == "time") return Axis::time;
  if (n == "lat" || n == "latitude" || standard_name == "latitude" || axis == "Y" || u == "degrees_north" ||
      u == "degree_north" || u == "degrees_n") {
    return Axis::lat;
  }
  if (n == "lon" || n == "longitude" || standard_name == "longitude" || axis == "X" || u == "degrees_east" ||
      u == "degree_east" || u == "degrees_e") {
    return Axis::lon;
  }
  return Axis::level;  // any other scale may be the level of a 4-D variable
}

std::vector<double> read_1d(hid_t dset, const std::string& what) {
  H5Space space(H5Dget_space(dset));
  if (H5Sget_simple_extent_ndims(space.get()) != 1) throw IoError(what + ": a coordinate must be 1-D");
  std::vector<double> v(
      host_buffer_elements(static_cast<long double>(H5Sget_simple_extent_npoints(space.get())), sizeof(double), what));
  if (!v.empty() && H5Dread(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) {
    throw IoError(what + ": cannot read its values as numbers");
  }
  return v;
}

std::string object_name(hid_t obj) {
  char buffer[512];
  const ssize_t n = H5Iget_name(obj, buffer, sizeof buffer);
  std::string s = n > 0 ? std::string(buffer, static_cast<std::size_t>(std::min<ssize_t>(n, sizeof buffer - 1))) : "";
  return s.empty() || s[0] != '/' ? s : s.substr(1);
}

herr_t scale_name_visitor(hid_t, unsigned, hid_t scale, void* data) {
  *static_cast<std::string*>(data) = object_name(scale);
  return 1;  // the first scale attached to the dimension names it
}

// One netCDF-4 file's dimension scales and its (time, [level,] lat, lon) variables.
struct FileHeader {
  std::string path;
  std::map<std::string, Scale> scales;
  struct Var {
    std::vector<std::string> dims;  // scale names, in order
    FieldVariable meta;
  };
  std::vector<std::string> var_order;  // candidate variables, in file order
  std::map<std::string, Var> vars;     // every non-scale dataset with attached scales
  std::vector<std::string> others;     // datasets that are neither
};

FileHeader read_header(const std::string& path) {
  check_signature(path);
  tessera::detail::hdf5_errors_as_exceptions();
  FileHeader h;
  h.path = path;
  H5File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file) throw IoError("cannot open data file '" + path + "' (data.path): not a netCDF-4 (HDF5) file");
  // The root group's links in creation order (netCDF-C and h5py with track_order keep
  // it), or by name when the file does not track it.
  for (const auto& name : io::detail::list_links(file.get(), "/")) {
    H5O_info_t oi{};
    if (H5Oget_info_by_name(file.get(), name.c_str(), &oi, H5P_DEFAULT) < 0 || oi.type != H5O_TYPE_DATASET) continue;
    H5Dataset d(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT));
    if (!d) continue;
    const std::string what = "netCDF file '" + path + "', variable '" + name + "'";
    if (H5DSis_scale(d.get()) > 0) {
      Scale s;
      s.name = name;
      s.units = string_attribute_or_empty(d.get(), "units");
      s.calendar = string_attribute_or_empty(d.get(), "calendar");
      s.standard_name = string_attribute_or_empty(d.get(), "standard_name");
      s.axis = classify(name, string_attribute_or_empty(d.get(), "axis"), s.standard_name, s.units);
      // A dimension without a coordinate variable has no values worth reading.
      const std::string label = string_attribute_or_empty(d.get(), "NAME");
      if (label.rfind("This is a netCDF dimension but not a netCDF variable", 0) != 0) {
        s.values = read_1d(d.get(), what);
        s.variable.name = name;
        read_axis_metadata(d.get(), s.variable, what);
      }
      h.scales[name] = std::move(s);
      continue;
    }
    H5Space space(H5Dget_space(d.get()));
    const int rank = H5Sget_simple_extent_ndims(space.get());
    FileHeader::Var v;
    for (int i = 0; i < rank; ++i) {
      std::string dim;
      if (H5DSget_num_scales(d.get(), static_cast<unsigned>(i)) > 0) {
        int idx = 0;
        H5DSiterate_scales(d.get(), static_cast<unsigned>(i), &idx, scale_name_visitor, &dim);
      }
      v.dims.push_back(dim);
    }
    auto& m = v.meta;
    m.name = name;
    m.units = string_attribute_or_empty(d.get(), "units");
    m.long_name = string_attribute_or_empty(d.get(), "long_name");
    m.standard_name = string_attribute_or_empty(d.get(), "standard_name");
    m.has_level = rank == 4;
    if (attribute_exists(d.get(), "scale_factor")) m.scale_factor = read_double_attribute(d.get(), "scale_factor", what)[0];
    if (attribute_exists(d.get(), "add_offset")) m.add_offset = read_double_attribute(d.get(), "add_offset", what)[0];
    for (const char* fill : {"_FillValue", "missing_value"}) {
      if (!attribute_exists(d.get(), fill)) continue;
      for (double x : read_double_attribute(d.get(), fill, what)) m.fill.push_back(x);
      m.has_fill = true;
    }
    h.vars[name] = std::move(v);
    h.var_order.push_back(name);
  }
  return h;
}

std::string dims_text(const std::vector<std::string>& dims) {
  std::string s;
  for (const auto& d : dims) s += (s.empty() ? "" : ", ") + (d.empty() ? std::string("<unnamed>") : d);
  return "(" + s + ")";
}

// The axis roles of `var`'s dimensions, or an empty list when it is not (time, [level,] lat, lon).
std::vector<Axis> roles(const FileHeader& h, const FileHeader::Var& var) {
  std::vector<Axis> r;
  for (const auto& d : var.dims) {
    const auto it = h.scales.find(d);
    r.push_back(it == h.scales.end() ? Axis::none : it->second.axis);
  }
  if (r.size() == 3 && r[0] == Axis::time && r[1] == Axis::lat && r[2] == Axis::lon) return r;
  if (r.size() == 4 && r[0] == Axis::time && r[1] == Axis::level && r[2] == Axis::lat && r[3] == Axis::lon) return r;
  return {};
}

const Scale& scale_of(const FileHeader& h, const FileHeader::Var& var, std::size_t dim, const char* role) {
  const Scale& s = h.scales.at(var.dims[dim]);
  if (s.values.empty()) {
    throw IoError("netCDF file '" + h.path + "': dimension '" + s.name + "' (" + role +
                  ") has no coordinate variable: tessera needs its values");
  }
  return s;
}

// Seconds per unit of a CF time ("hours since 2000-01-01").
double unit_seconds(const std::string& units, const std::string& what) {
  const auto since = units.find(" since ");
  const std::string unit = lower(units.substr(0, since));
  if (since == std::string::npos) {
    throw IoError(what + ": time units '" + units + "' are not CF's '<unit> since <date>'");
  }
  if (unit == "seconds" || unit == "second" || unit == "s" || unit == "sec" || unit == "secs") return 1;
  if (unit == "minutes" || unit == "minute" || unit == "min" || unit == "mins") return 60;
  if (unit == "hours" || unit == "hour" || unit == "h" || unit == "hr" || unit == "hrs") return 3600;
  if (unit == "days" || unit == "day" || unit == "d") return 86400;
  throw IoError(what + ": time unit '" + unit + "' is not one of seconds, minutes, hours, days");
}

}  // namespace

FieldDataInfo read_netcdf_info(const DataConfig& c, const std::vector<std::string>& files) {
  std::vector<FileHeader> headers;
  for (const auto& f : files) headers.push_back(read_header(f));
  const FileHeader& first = headers.front();

  // The variables: data.variables by name, or every (time, [level,] lat, lon) variable.
  std::vector<std::string> names = c.variables;
  if (names.empty()) {
    for (const auto& n : first.var_order) {
      if (!roles(first, first.vars.at(n)).empty()) names.push_back(n);
    }
    if (names.empty()) {
      throw IoError("netCDF file '" + first.path +
                    "' has no variable with dimensions (time, [level,] lat, lon) and CF coordinates");
    }
  }
  FieldDataInfo info;
  info.format = FieldFormat::netcdf;
  std::string level_scale;
  for (const auto& n : names) {
    for (const auto& h : headers) {
      const auto it = h.vars.find(n);
      if (it == h.vars.end()) {
        std::string list;
        for (const auto& v : h.var_order) list += (list.empty() ? "" : ", ") + v;
        throw ConfigError("data.variables: '" + n + "' is not a variable of netCDF file '" + h.path + "' (it has " +
                          (list.empty() ? std::string("no data variables") : list) + ")");
      }
      if (roles(h, it->second).empty()) {
        throw IoError("netCDF file '" + h.path + "', variable '" + n + "': dimensions " + dims_text(it->second.dims) +
                      ", expected (time, [level,] lat|latitude, lon|longitude) with their coordinate variables");
      }
    }
    const auto& var = first.vars.at(n);
    if (var.meta.has_level) {
      if (!level_scale.empty() && level_scale != var.dims[1]) {
        throw IoError("netCDF file '" + first.path + "': variables on different level axes ('" + level_scale +
                      "' and '" + var.dims[1] + "'); select variables of one level axis in data.variables");
      }
      level_scale = var.dims[1];
    }
    info.sources.push_back(var.meta);
  }

  // The grid (from the first variable; every variable and file must share it).
  const auto& v0 = first.vars.at(names.front());
  const std::size_t ilat = v0.dims.size() - 2, ilon = v0.dims.size() - 1;
  const Scale& lat = scale_of(first, v0, ilat, "latitude");
  const Scale& lon = scale_of(first, v0, ilon, "longitude");
  const std::string time_name = v0.dims[0];
  for (const auto& n : names) {
    for (const auto& h : headers) {
      const auto& v = h.vars.at(n);
      const Scale& la = scale_of(h, v, v.dims.size() - 2, "latitude");
      const Scale& lo = scale_of(h, v, v.dims.size() - 1, "longitude");
      if (la.values != lat.values || lo.values != lon.values) {
        throw IoError("netCDF file '" + h.path + "', variable '" + n + "': its latitudes or longitudes differ from '" +
                      first.path + "', variable '" + names.front() + "' (one grid for every variable and file)");
      }
    }
  }
  info.nlat = static_cast<std::int64_t>(lat.values.size());
  info.nlon = static_cast<std::int64_t>(lon.values.size());
  const std::string grid_what = "netCDF file '" + first.path + "'";
  if (info.nlat < 2 || info.nlon < 2) throw IoError(grid_what + ": the grid must have at least 2 latitudes and longitudes");

  // Latitudes: north first inside tessera; a south-first file is flipped on reading.
  const auto& la = lat.values;
  bool decreasing = true, increasing = true;
  for (std::size_t i = 1; i < la.size(); ++i) {
    decreasing = decreasing && la[i] < la[i - 1];
    increasing = increasing && la[i] > la[i - 1];
  }
  if (!decreasing && !increasing) throw IoError(grid_what + ": latitude '" + lat.name + "' is not monotonic");
  info.orientation.nlat = info.nlat;
  info.orientation.nlon = info.nlon;
  info.orientation.south_first = increasing;
  info.coords.lat = la;
  if (increasing) std::reverse(info.coords.lat.begin(), info.coords.lat.end());
  // A global grid is one of the two built-in ones; anything else (a regional or
  // limited-area grid, uneven spacing) is weighted by its own latitudes, never as if it
  // were global.
  const double tolerance = 1e-4;  // degrees: a float32 axis rounds by up to ~4e-6
  const auto n = static_cast<double>(la.size());
  bool poles = true, centres = true;
  for (std::size_t i = 0; i < info.coords.lat.size(); ++i) {
    const double phi = info.coords.lat[i];
    poles = poles && std::abs(phi - (90.0 - 180.0 * static_cast<double>(i) / (n - 1))) < tolerance;
    centres = centres && std::abs(phi - (90.0 - 180.0 * (static_cast<double>(i) + 0.5) / n)) < tolerance;
  }
  info.latitude_grid = poles     ? domain::LatitudeGrid::with_poles
                       : centres ? domain::LatitudeGrid::cell_centres
                                 : domain::LatitudeGrid::explicit_rows;

  // Longitudes: eastward, starting at the smallest in [0, 360) (so -180..180 and 0..360
  // files give the same internal grid).
  const auto& lo = lon.values;
  for (std::size_t j = 1; j < lo.size(); ++j) {
    if (!(lo[j] > lo[j - 1])) throw IoError(grid_what + ": longitude '" + lon.name + "' must increase eastward");
  }
  if (lo.back() - lo.front() >= 360) throw IoError(grid_what + ": longitude '" + lon.name + "' spans 360 degrees or more");
  auto wrap = [](double x) { return std::fmod(std::fmod(x, 360.0) + 360.0, 360.0); };
  std::int64_t start = 0;
  for (std::int64_t j = 1; j < info.nlon; ++j) {
    if (wrap(lo[static_cast<std::size_t>(j)]) < wrap(lo[static_cast<std::size_t>(start)])) start = j;
  }
  info.orientation.lon_offset = start;
  for (std::int64_t j = 0; j < info.nlon; ++j) {
    info.coords.lon.push_back(wrap(lo[static_cast<std::size_t>(info.orientation.file_column(j))]));
  }
  // A forecast writes the grid back as the file holds it: the same names, order, values
  // and attributes.
  info.axes.lat = lat.variable;
  info.axes.lat.values = la;
  info.axes.lon = lon.variable;
  info.axes.lon.values = lo;

  // The level axis.
  if (!level_scale.empty()) {
    const Scale& lev = first.scales.at(level_scale);
    if (lev.values.empty()) {
      throw IoError(grid_what + ": dimension '" + lev.name + "' (level) has no coordinate variable");
    }
    info.coords.level = lev.values;
    info.axes.level = lev.variable;
    info.axes.level.values = lev.values;
    for (const auto& h : headers) {
      const auto it = h.scales.find(level_scale);
      if (it == h.scales.end() || it->second.values != lev.values) {
        throw IoError("netCDF file '" + h.path + "': its level axis '" + level_scale + "' differs from '" + first.path +
                      "''s");
      }
    }
  }

  // The channels: one per variable, or per level of a level variable.
  for (std::size_t vi = 0; vi < info.sources.size(); ++vi) {
    const auto& var = info.sources[vi];
    const std::int64_t levels = var.has_level ? static_cast<std::int64_t>(info.coords.level.size()) : 1;
    for (std::int64_t l = 0; l < levels; ++l) {
      info.channel_index.push_back(static_cast<std::int64_t>(vi));
      info.channel_level.push_back(var.has_level ? l : -1);
      info.variables.push_back(var.has_level ? var.name + "@" + fmt_g(info.coords.level[static_cast<std::size_t>(l)])
                                             : var.name);
    }
  }
  info.channels = static_cast<std::int64_t>(info.channel_index.size());

  // Time: the files ordered by their first time, one evenly spaced axis over all of them.
  std::vector<std::size_t> order(headers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto times_of = [&](const FileHeader& h) -> const Scale& {
    const auto it = h.scales.find(time_name);
    if (it == h.scales.end() || it->second.values.empty()) {
      throw IoError("netCDF file '" + h.path + "': no values for the time coordinate '" + time_name + "'");
    }
    return it->second;
  };
  for (const auto& h : headers) {
    if (times_of(h).units != times_of(first).units) {
      throw IoError("netCDF file '" + h.path + "': time units '" + times_of(h).units + "' differ from '" + first.path +
                    "''s '" + times_of(first).units + "' (write every file in the same units)");
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return times_of(headers[a]).values.front() < times_of(headers[b]).values.front();
  });
  const Scale& t0 = times_of(first);
  info.coords.time_units = t0.units;
  info.coords.calendar = t0.calendar.empty() ? "standard" : t0.calendar;
  info.coords.time_unit_seconds = unit_seconds(t0.units, "netCDF file '" + first.path + "', variable '" + time_name + "'");
  for (std::size_t i : order) {
    const auto& h = headers[i];
    const auto& tv = times_of(h).values;
    info.files.push_back(h.path);
    info.file_times.push_back(static_cast<std::int64_t>(tv.size()));
    for (double t : tv) {
      auto& all = info.coords.time;
      if (all.size() >= 2) {
        const double dt = all[1] - all[0], step = t - all.back();
        if (!(std::abs(step - dt) <= 1e-6 * std::abs(dt))) {
          throw IoError("netCDF file '" + h.path + "': time " + fmt_g(t) + " " + t0.units + " follows " +
                        fmt_g(all.back()) + ": the times of the data (over all files) must be evenly spaced (" +
                        fmt_g(dt) + " apart), since samples pair time t with t + data.lead");
        }
      } else if (!all.empty() && !(t > all.back())) {
        throw IoError("netCDF file '" + h.path + "': time " + fmt_g(t) + " does not follow " + fmt_g(all.back()) +
                      " (times must increase; two files may overlap)");
      }
      all.push_back(t);
    }
  }
  info.times = static_cast<std::int64_t>(info.coords.time.size());
  info.axes.time = t0.variable;
  info.axes.time.values = info.coords.time;
  if (info.times >= 2) {
    info.dt_seconds = (info.coords.time[1] - info.coords.time[0]) * info.coords.time_unit_seconds;
  }
  return info;
}

void read_netcdf_band(const FieldDataInfo& info, std::int64_t t0, std::int64_t nt, std::int64_t lat_start,
                      std::int64_t lat_count, float* out) {
  tessera::detail::hdf5_errors_as_exceptions();
  const std::int64_t nlon = info.nlon, nlev = static_cast<std::int64_t>(info.coords.level.size());
  // The file rows of the band: the same rows counted from the other pole when the file
  // runs south to north (read in one hyperslab, reordered in memory).
  const GridOrientation& o = info.orientation;
  const std::int64_t row0 = o.first_file_row(lat_start, lat_count);
  std::vector<double> slab;
  std::int64_t file_first = 0;  // global index of the file's first time
  for (std::size_t f = 0; f < info.files.size(); file_first += info.file_times[f], ++f) {
    const std::int64_t a = std::max(t0, file_first), b = std::min(t0 + nt, file_first + info.file_times[f]);
    if (a >= b) continue;
    const std::string& path = info.files[f];
    H5File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    if (!file) throw IoError("cannot open data file '" + path + "' (data.path)");
    std::int64_t channel = 0;
    for (const auto& var : info.sources) {
      const std::string what = "netCDF file '" + path + "', variable '" + var.name + "'";
      H5Dataset d(H5Dopen2(file.get(), var.name.c_str(), H5P_DEFAULT));
      if (!d) throw IoError(what + ": cannot open it");
      H5Space space(H5Dget_space(d.get()));
      const std::int64_t levels = var.has_level ? nlev : 1;
      std::vector<hsize_t> start{static_cast<hsize_t>(a - file_first)}, count{static_cast<hsize_t>(b - a)};
      if (var.has_level) {
        start.push_back(0);
        count.push_back(static_cast<hsize_t>(nlev));
      }
      start.insert(start.end(), {static_cast<hsize_t>(row0), 0});
      count.insert(count.end(), {static_cast<hsize_t>(lat_count), static_cast<hsize_t>(nlon)});
      slab.resize(host_buffer_elements(static_cast<long double>(b - a) * levels * lat_count * nlon, sizeof(double),
                                       what));
      H5Space mem(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr));
      if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
          H5Dread(d.get(), H5T_NATIVE_DOUBLE, mem.get(), space.get(), H5P_DEFAULT, slab.data()) < 0) {
        throw IoError(what + ": cannot read times [" + std::to_string(a - file_first) + ", " +
                      std::to_string(b - file_first) + "), latitudes [" + std::to_string(row0) + ", " +
                      std::to_string(row0 + lat_count) + ")");
      }
      for (std::int64_t t = a; t < b; ++t) {
        for (std::int64_t l = 0; l < levels; ++l) {
          float* dst = out + ((t - t0) * info.channels + channel + l) * lat_count * nlon;
          const double* src = slab.data() + ((t - a) * levels + l) * lat_count * nlon;
          for (std::int64_t r = 0; r < lat_count; ++r) {
            const double* row = src + (o.file_row(lat_start + r) - row0) * nlon;
            for (std::int64_t j = 0; j < nlon; ++j) {
              const double raw = row[o.file_column(j)];
              if (var.has_fill && std::find(var.fill.begin(), var.fill.end(), raw) != var.fill.end()) {
                throw IoError(what + ": a missing value (_FillValue/missing_value) at time index " +
                              std::to_string(t - file_first) + ": the emulator needs complete fields");
              }
              const float value = static_cast<float>(raw * var.scale_factor + var.add_offset);
              if (!std::isfinite(value)) {  // (a NaN that no _FillValue declares)
                throw IoError(what + ": " + tessera::detail::non_finite_kind(value) + " at time index " +
                              std::to_string(t - file_first) + " that no _FillValue or missing_value declares: " +
                              "tessera trains only on finite values");
              }
              dst[r * nlon + j] = value;
            }
          }
        }
      }
      channel += levels;
    }
  }
}

}  // namespace tessera::run
