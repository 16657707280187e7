#include "field_run_data.hpp"

#include <span>
#include <string>

#include "tessera/agree.hpp"
#include "tessera/detail/finite.hpp"
#include "tessera/error.hpp"
#include "tessera/models/field_emulator.hpp"

namespace tessera::run {

FieldRunData read_field_run_data(const RunConfig& cfg, const Mesh& mesh) {
  const MPI_Comm world = mesh.world().mpi_comm();
  FieldRunData d;
  agree_on_success(world, [&] { d.info = read_field_data_info(cfg.data); });
  const int dp_size = mesh.dp_size();
  if (cfg.data.batch_size % dp_size != 0) {
    throw ConfigError(cfg.source + ": data.batch_size (" + std::to_string(cfg.data.batch_size) +
                      ") must be divisible by the number of data-parallel replicas (" + std::to_string(dp_size) + ")");
  }
  d.local_batch = cfg.data.batch_size / dp_size;
  if (!cfg.data.validation_path.empty()) {
    agree_on_success(world, [&] { d.validation_info = read_validation_info(cfg.data, d.info); });
  }
  d.split = split_field_samples(cfg.data, d.info, cfg.data.validation_path.empty() ? nullptr : &d.validation_info);
  if (d.split.train < cfg.data.batch_size) {
    throw ConfigError(cfg.source + ": data.batch_size (" + std::to_string(cfg.data.batch_size) + ") exceeds the " +
                      std::to_string(d.split.train) + " samples of '" + cfg.data.path + "'");
  }
  return d;
}

void log_field_run_data(const Log& log, const RunConfig& cfg, const FieldRunData& d) {
  const FieldDataInfo& info = d.info;
  std::string variables;
  for (const auto& v : info.variables) variables += (variables.empty() ? "" : ",") + v;
  const std::string source = info.format == FieldFormat::netcdf
                                 ? info.describe_files() + " (netCDF" + (info.orientation.south_first ? ", south first" : "") +
                                       (info.orientation.lon_offset != 0 ? ", longitudes rotated" : "") + ")"
                                 : cfg.data.path + " [" + cfg.data.dataset + "]";
  log.info("data: " + source + ": " + std::to_string(info.times) + " times x " +
           variables + " on " + std::to_string(info.nlat) + "x" + std::to_string(info.nlon) + " (" +
           std::string(models::latitude_grid_name(info.latitude_grid)) + "), " + std::to_string(d.split.train) +
           " samples (t -> t+" + std::to_string(cfg.data.lead) + "), batch " + std::to_string(cfg.data.batch_size) +
           " (" + std::to_string(d.local_batch) + " per dp replica)");
  if (d.split.validation > 0) {
    log.info("validation: " + std::to_string(d.split.validation) + " samples " +
             (cfg.data.validation_path.empty()
                  ? "held out (t >= " + std::to_string(d.split.validation_first) + ", the last " +
                        fmt("%g", cfg.data.validation_fraction) + " of the times)"
                  : "of " + cfg.data.validation_path) +
             ", " + evaluation_schedule(cfg.schedule));
  }
}

FieldBands read_field_bands(const RunConfig& cfg, const FieldRunData& d, const Mesh& mesh, std::int64_t lat_start,
                            std::int64_t lat_count) {
  const MPI_Comm world = mesh.world().mpi_comm();
  FieldBands bands;
  agree_on_success(world, [&] { bands.data = std::make_unique<FieldData>(cfg.data, d.info, lat_start, lat_count); });
  if (!cfg.data.validation_path.empty()) {
    agree_on_success(world, [&] {
      bands.validation =
          std::make_unique<FieldData>(validation_file_config(cfg.data), d.validation_info, lat_start, lat_count);
    });
  }
  return bands;
}

namespace {

std::string channel_name(const FieldDataInfo& info, std::int64_t c) {
  const auto k = static_cast<std::size_t>(c);
  return k < info.variables.size() && info.variables.size() == static_cast<std::size_t>(info.channels)
             ? "variable '" + info.variables[k] + "'"
             : "channel " + std::to_string(c);
}

}  // namespace

std::string non_finite_batch(const Tensor& input, const Tensor& target, const FieldDataInfo& info,
                             const std::string& path, std::int64_t lat_start, std::int64_t step) {
  const char* names[] = {"input", "target"};
  const Tensor* read[] = {&input, &target};
  for (int k = 0; k < 2; ++k) {
    const Tensor host = read[k]->contiguous();
    const std::span<const float> v(host.data<float>(), static_cast<std::size_t>(host.numel()));
    const auto bad = tessera::detail::first_non_finite(v);
    if (!bad || host.shape().size() != 4) continue;
    const Shape& s = host.shape();  // (batch, channel, band lat, lon)
    const auto i = static_cast<std::int64_t>(*bad);
    return "the " + std::string(names[k]) + " batch of step " + std::to_string(step) + " of '" + path + "' holds " +
           tessera::detail::non_finite_kind(v[*bad]) + " at batch sample " + std::to_string(i / (s[1] * s[2] * s[3])) +
           ", " + channel_name(info, i / (s[2] * s[3]) % s[1]) + ", latitude row " +
           std::to_string(lat_start + i / s[3] % s[2]) + ", longitude " + std::to_string(i % s[3]);
  }
  return "";
}

}  // namespace tessera::run
