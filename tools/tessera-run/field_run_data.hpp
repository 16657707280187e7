#pragma once
// The gridded data of a training run, whatever model learns from it (the field emulator,
// an imported ONNX graph): the file headers, the validation split, the batch per dp
// replica with their checks, the log lines that describe them, and each rank's bands.

#include <cstdint>
#include <memory>
#include <string>

#include "driver_common.hpp"
#include "field_data.hpp"
#include "run_config.hpp"
#include "tessera/mesh.hpp"

namespace tessera::run {

struct FieldRunData {
  FieldDataInfo info;             // data.path
  FieldDataInfo validation_info;  // data.validation's file (unset without one)
  ValidationSplit split;
  std::int64_t local_batch = 0;   // data.batch_size per dp replica
};

// Reads the headers and checks data.batch_size against the replicas and the samples
// (ConfigError naming the key). Collective over the mesh's world.
FieldRunData read_field_run_data(const RunConfig& cfg, const Mesh& mesh);

// The "data: ..." line, and the "validation: ..." line when there is validation.
void log_field_run_data(const Log& log, const RunConfig& cfg, const FieldRunData& data);

// Rows [lat_start, lat_start + lat_count) of the training data and of the validation
// file (null without one). Collective over the mesh's world.
struct FieldBands {
  std::unique_ptr<FieldData> data, validation;
};
FieldBands read_field_bands(const RunConfig& cfg, const FieldRunData& data, const Mesh& mesh,
                            std::int64_t lat_start, std::int64_t lat_count);

// A sentence naming the first NaN or Inf of a batch as read (`input`, then `target`, f32
// [batch, channel, band lat, lon] on the host; the band starts at global row
// `lat_start`): the file, the step, the sample, the variable and the place; "" when both
// are finite. For TrainingTask::batch_problem. Local.
std::string non_finite_batch(const Tensor& input, const Tensor& target, const FieldDataInfo& info,
                             const std::string& path, std::int64_t lat_start, std::int64_t step);

}  // namespace tessera::run
