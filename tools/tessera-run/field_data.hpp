#pragma once
// The training data of tessera-run: a time series of gridded fields, read by every rank
// for its own latitude band only. Two formats (data.format):
//
// tessera's own HDF5 layout: one dataset f32 [time, channel, lat, lon], latitude north
// first. Attributes of the dataset (scripts/generate-rossby-haurwitz writes them):
//   variables      "h,u,v"  channel names (optional: channels are then "c0", "c1", ...)
//   units          "m,m/s,m/s"  (optional; written into predictions)
//   mean, std      f64 [channel]  per-channel statistics for normalisation (needed when
//                  data.normalize is true and no data.stats file is given)
//   dt_seconds     f64  time between snapshots (optional)
//   latitude_grid  "cell_centres" | "with_poles" | "explicit_rows" (with a `latitude`
//                  axis) | "unweighted"  (optional, default cell_centres)
// and, optional, 1-D datasets /latitude, /longitude (degrees) and /time (seconds).
//
// netCDF-4 / CF (netcdf_input.hpp): one file, a list or a glob of files along time, each
// variable (time, [level,] lat, lon) with CF coordinates, in either latitude order and
// with any longitude origin.
//
// Internally every field is [time, channel, lat, lon] with latitude north first and
// longitude eastward from the first longitude at or east of 0 degrees (FieldCoordinates).
// A variable with a level dimension gives one channel per level, named "name@level".
//
// A sample is the pair (time t, time t + lead); the sample index is t.

#include <cstdint>
#include <string>
#include <vector>

#include "cf_axes.hpp"
#include "run_config.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/tensor.hpp"

namespace tessera::run {

enum class FieldFormat { tessera, netcdf };

// A netCDF variable the channels come from (netCDF input), or one channel (tessera layout).
struct FieldVariable {
  std::string name;
  std::string units, long_name, standard_name;  // "" when the file has none
  bool has_level = false;                       // netCDF: (time, level, lat, lon)
  double scale_factor = 1, add_offset = 0;      // netCDF packing: value = stored x scale + offset
  bool has_fill = false;                        // netCDF: _FillValue or missing_value marks a gap
  std::vector<double> fill;
};

// The grid and the time axis in tessera's orientation: latitudes north first (degrees
// north), longitudes eastward in [0, 360) starting at the smallest.
struct FieldCoordinates {
  std::vector<double> lat, lon;
  std::vector<double> time;        // every time of the data, in time_units
  std::string time_units;          // "hours since 2000-01-01 00:00:00"
  std::string calendar = "standard";
  double time_unit_seconds = 1;    // seconds per unit of `time`
  std::vector<double> level;       // empty when no variable has a level dimension
};

// What every rank learns from the file header (identical everywhere).
struct FieldDataInfo {
  std::int64_t times = 0, channels = 0, nlat = 0, nlon = 0;  // of the selected channels
  std::vector<std::string> variables;                         // selected, in order
  std::vector<std::int64_t> channel_index;                    // selected -> file channel
  std::vector<double> mean, std;                              // selected (empty: no normalisation)
  double dt_seconds = 0;
  domain::LatitudeGrid latitude_grid = domain::LatitudeGrid::cell_centres;

  FieldFormat format = FieldFormat::tessera;
  std::string dataset;                       // tessera: the HDF5 dataset
  std::vector<std::string> files;            // the data files, in time order
  std::vector<std::int64_t> file_times;      // times in each file
  std::vector<FieldVariable> sources;        // netCDF: the selected variables; tessera: one per channel
  std::vector<std::int64_t> channel_level;   // netCDF: channel -> level index (-1: none); channel_index
                                             // is then channel -> index into `sources`
  GridOrientation orientation;               // where the internal grid lies in the files (netCDF: either
                                             // latitude order, any longitude origin; tessera: as inside)
  FieldCoordinates coords;
  // The coordinate variables as a forecast should write them: netCDF input's own (names,
  // file order, element types, attributes); for tessera's layout, CF's time/lat/lon.
  FileAxes axes;

  std::string describe_files() const;        // "a.nc" or "a.nc .. d.nc (4 files)"
  // The loss weights' geometry: the grid, with the file's own (north-first) latitudes
  // for explicit_rows (a regional grid).
  domain::LatitudeSpec latitude_spec() const;
};

// The files data.path names: a list (data.path as a YAML list), a glob (sorted), or the
// one path. IoError naming data.path when a glob matches nothing.
std::vector<std::string> data_files(const DataConfig& config);
// Whether data.format (auto: several files, or a name ending in .nc, .nc4 or .cdf) picks
// the netCDF reader (netcdf_input.hpp) for `files`.
bool is_netcdf_input(const DataConfig& config, const std::vector<std::string>& files);
// Physical values (no normalisation) of times [t0, t0 + nt) and rows [lat_start,
// lat_start + lat_count) of every selected channel: out f32 [nt, channels, lat_count, nlon].
// Throws IoError naming the file and variable.
void read_field_band(const FieldDataInfo& info, std::int64_t t0, std::int64_t nt, std::int64_t lat_start,
                     std::int64_t lat_count, float* out);

// Reads the header; throws IoError / ConfigError naming the file, dataset and key.
FieldDataInfo read_field_data_info(const DataConfig& config);

// data.validation for the fields. A fraction holds out the last frames of the series
// (round(fraction x times), at least lead + 1): training samples use only the earlier
// frames and validation samples only the held-out ones, so no frame is in both. A file
// validates on all its samples. ConfigError naming data.validation when a part is empty.
ValidationSplit split_field_samples(const DataConfig& config, const FieldDataInfo& info,
                                    const FieldDataInfo* validation_file);
// The validation file's header (data.validation, the same data.dataset): the training
// file's variables, by name, on the same grid; normalised with the training file's mean
// and std (the model's). Throws IoError / ConfigError naming data.validation.
FieldDataInfo read_validation_info(const DataConfig& config, const FieldDataInfo& train);
// `config` with the validation file as its path (to build its FieldData).
DataConfig validation_file_config(const DataConfig& config);

class FieldData {
 public:
  // Reads rows [lat_start, lat_start + lat_count) of every time and selected channel,
  // normalised when info.mean/std are set. Throws IoError naming the file.
  FieldData(const DataConfig& config, const FieldDataInfo& info, std::int64_t lat_start, std::int64_t lat_count);
  // The elements of such a band, once they are known to fit in the node's available
  // memory (host_buffer_elements: an IoError naming the file and the band otherwise).
  // Local; callable before the band is read (a --dry-run's memory plan).
  static std::size_t band_elements(const FieldDataInfo& info, std::int64_t lat_count);

  std::int64_t samples() const { return info_.times - lead_; }
  // Inputs and targets of `indices`: f32 [indices.size(), channels, lat_count, nlon].
  void batch(const std::vector<std::int64_t>& indices, Tensor& input, Tensor& target) const;
  std::int64_t bytes() const { return static_cast<std::int64_t>(values_.size() * sizeof(float)); }

 private:
  FieldDataInfo info_;
  std::int64_t lead_, lat_count_;
  std::vector<float> values_;  // [time, channel, lat_count, nlon]
};

}  // namespace tessera::run
