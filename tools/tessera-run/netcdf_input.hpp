#pragma once
// netCDF-4 / CF input of tessera-run's field emulator (docs/driver.md, "netCDF").
//
// A netCDF-4 file is an HDF5 file that follows netCDF's conventions: every dimension is
// an HDF5 dimension scale (normally its coordinate variable: time, lat, lon, level) and
// every variable has its dimensions attached as scales. tessera reads them with the
// parallel HDF5 it already links (no netCDF-C: see docs/driver.md, "Why HDF5 and not
// netCDF-C"); each rank opens the files and reads only the hyperslab of its latitude
// band. netCDF-3 (classic, CDF-1/2/5) files are refused with the nccopy command that
// converts them.
//
// What is read:
// - variables (time, lat, lon) or (time, level, lat, lon), in that order, selected by
//   name (data.variables; all such variables when empty); a level variable gives one
//   channel per level ("t@500");
// - the coordinates: `time` (CF units "<unit> since <date>", evenly spaced, also across
//   files), `lat`/`latitude` (north-to-south or south-to-north: south-to-north files are
//   flipped), `lon`/`longitude` (any origin, e.g. -180..180: rotated so that the
//   smallest longitude in [0, 360) comes first), an optional level coordinate;
// - units, long_name, standard_name; packing (scale_factor, add_offset) is undone and a
//   _FillValue / missing_value in the data is an error naming the variable, file and time;
// - the coordinate variables as the file holds them (FieldDataInfo::axes: names, order,
//   element types, attributes) and the mapping of the internal grid onto the file's
//   (FieldDataInfo::orientation), which predict's writer uses to write the input's grid back.
// Several files (a list or a glob) are ordered by their first time and must share the
// variables, the grid and the time units.

#include <string>
#include <vector>

#include "field_data.hpp"
#include "run_config.hpp"

namespace tessera::run {

// The header of `files` (no normalisation statistics: field_data.cpp adds them).
// IoError / ConfigError naming the file, the variable and the key.
FieldDataInfo read_netcdf_info(const DataConfig& config, const std::vector<std::string>& files);
// read_field_band for netCDF input.
void read_netcdf_band(const FieldDataInfo& info, std::int64_t t0, std::int64_t nt, std::int64_t lat_start,
                      std::int64_t lat_count, float* out);

}  // namespace tessera::run
