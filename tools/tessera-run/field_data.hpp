#pragma once
// The training data of tessera-run: a time series of gridded fields in HDF5,
// f32 [time, channel, lat, lon], read by every rank for its own latitude band only.
//
// Attributes of the dataset (scripts/generate-rossby-haurwitz writes them):
//   variables      "h,u,v"  channel names (optional: channels are then "c0", "c1", ...)
//   mean, std      f64 [channel]  per-channel statistics for normalisation (needed when
//                  data.normalize is true)
//   dt_seconds     f64  time between snapshots (optional)
//   latitude_grid  "cell_centres" | "with_poles"  (optional, default cell_centres)
//
// A sample is the pair (time t, time t + lead); the sample index is t.

#include <cstdint>
#include <string>
#include <vector>

#include "run_config.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/tensor.hpp"

namespace tessera::run {

// What every rank learns from the file header (identical everywhere).
struct FieldDataInfo {
  std::int64_t times = 0, channels = 0, nlat = 0, nlon = 0;  // of the selected channels
  std::vector<std::string> variables;                         // selected, in order
  std::vector<std::int64_t> channel_index;                    // selected -> file channel
  std::vector<double> mean, std;                              // selected (empty: no normalisation)
  double dt_seconds = 0;
  domain::LatitudeGrid latitude_grid = domain::LatitudeGrid::cell_centres;
};

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
