#include "predict_rollout.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "field_data.hpp"
#include "netcdf_output.hpp"
#include "tessera/agree.hpp"
#include "tessera/detail/finite.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/version.hpp"

namespace tessera::run {
namespace {

std::string seconds_text(double s) {
  char b[32];
  if (s < 60) {
    std::snprintf(b, sizeof b, "%.1fs", s);
  } else {
    std::snprintf(b, sizeof b, "%lldm%02llds", static_cast<long long>(s) / 60, static_cast<long long>(s) % 60);
  }
  return b;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

// The data variables behind the model's channel names ("t@500" -> "t"), in order.
std::vector<std::string> source_variables(const std::vector<std::string>& channels) {
  std::vector<std::string> names;
  for (const auto& c : channels) {
    const std::string n = c.substr(0, c.find('@'));
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  return names;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

// A forecast replaces no file unless --force asks for it: an earlier forecast (or the
// input itself, named as the output by mistake) would otherwise be lost without a word.
// A dangling symbolic link counts as existing: the rename would replace it.
void refuse_existing_output(const std::string& path, bool force) {
  std::error_code ec;
  if (force || !std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return;
  throw IoError("predict.output '" + path + "' exists; give --force to replace it, or name another predict.output");
}

// The input's axes as the forecast writes them: the grid and the level as they are,
// the time with the output times in the input's units, in the input's element type
// when it holds them exactly (float64 otherwise, with a warning). A `bounds` attribute
// is left out (its variable is not written, and CF forbids one that names nothing), and
// so is time's `actual_range` (it describes the input's times, not the forecast's).
FileAxes output_axes(const FieldDataInfo& info, std::vector<double> times, const Log& log) {
  FileAxes axes = info.axes;
  axes.time.values = std::move(times);
  auto drop = [](CoordinateVariable& axis, const char* name) {
    std::erase_if(axis.attributes, [&](const AxisAttribute& a) { return a.name == name; });
  };
  if (!holds_exactly(axes.time.type, axes.time.values)) {
    log.warn("predict.output: the output times are not all " + std::string(number_type_name(axes.time.type)) +
             " values in '" + info.coords.time_units + "'; coordinate '" + axes.time.name +
             "' is written as float64 (the input's is " + number_type_name(axes.time.type) + ")");
    axes.time.type = NumberType::f64;
    // A fill value of the input's type no longer matches the variable's, and the
    // forecast's times have no gaps to mark.
    drop(axes.time, "_FillValue");
    drop(axes.time, "missing_value");
  }
  drop(axes.time, "actual_range");
  for (CoordinateVariable* axis : {&axes.time, &axes.level, &axes.lat, &axes.lon}) {
    drop(*axis, "bounds");
    for (const auto& name : axis->not_copied) {
      log.warn("predict.output: attribute '" + name + "' of coordinate '" + axis->name +
               "' is not copied (tessera copies text and numeric attributes only)");
    }
  }
  return axes;
}

// Throws ConfigError naming the step, the variable and the checkpoint where the band
// `out` f32 [1, channels, lat, lon] holds a value that is not finite.
void check_forecast_finite(const Tensor& out, std::int64_t step, const FieldDataInfo& info,
                           const std::string& checkpoint_file) {
  const std::span<const float> v(out.data<float>(), static_cast<std::size_t>(out.numel()));
  const auto bad = tessera::detail::first_non_finite(v);
  if (!bad) return;
  const std::size_t per_channel = v.size() / static_cast<std::size_t>(std::max<std::int64_t>(1, info.channels));
  throw ConfigError("predict: step " + std::to_string(step) + " of the forecast holds " +
                    tessera::detail::non_finite_kind(v[*bad]) + " (variable '" + info.variables[*bad / per_channel] +
                    "'): the weights of '" + checkpoint_file +
                    "' are not finite or the model blew up; nothing written to predict.output " +
                    "(check the checkpoint with `tessera-ckpt verify`, or predict fewer steps)");
}

}  // namespace

void check_predict_output(const RunConfig& cfg, const Options& opts) {
  agree_on_success(MPI_COMM_WORLD, [&] {
    tessera::detail::require_replaceable_file(cfg.predict.output, "predict.output");
    refuse_existing_output(cfg.predict.output, opts.force);
  });
}

std::string predict_checkpoint(const RunConfig& cfg) {
  const std::string checkpoint = cfg.predict.checkpoint.empty() ? cfg.checkpoint.dir : cfg.predict.checkpoint;
  if (checkpoint.empty()) {
    throw ConfigError(cfg.source + ": predict.checkpoint: no checkpoint to load (set predict.checkpoint, or "
                                   "checkpoint.dir for its latest step)");
  }
  return checkpoint;
}

int write_rollout(const RunConfig& cfg, const Options& opts, const Mesh& mesh, const Log& log,
                  const RolloutModel& model) {
  const PredictConfig& pc = cfg.predict;
  const MPI_Comm world = mesh.world().mpi_comm();
  const std::string& checkpoint_file = model.checkpoint_file;
  const std::int64_t checkpoint_step = model.checkpoint_step;
  // The initial condition: the model's variables, in physical units (the model's step
  // normalises with its own statistics).
  DataConfig data = cfg.data;
  data.normalize = false;
  data.lead = 0;  // any number of times will do
  if (!model.variables.empty()) data.variables = source_variables(model.variables);
  FieldDataInfo info;
  agree_on_success(world, [&] { info = read_field_data_info(data); });
  if (!model.variables.empty() && info.variables != model.variables) {
    throw ConfigError("data.variables: the data's channels " + joined(info.variables) + " differ from the model's " +
                      joined(model.variables) + " (checkpoint '" + checkpoint_file + "')");
  }
  if (info.channels != model.channels || info.nlat != model.nlat || info.nlon != model.nlon ||
      !(info.latitude_spec() == model.latitude_spec)) {
    throw ConfigError("data.path: the grid of '" + info.describe_files() + "' (" + std::to_string(info.channels) +
                      " channels on " + std::to_string(info.nlat) + "x" + std::to_string(info.nlon) + ", " +
                      std::string(models::latitude_grid_name(info.latitude_grid)) + ") is not the model's (" +
                      std::to_string(model.channels) + " on " + std::to_string(model.nlat) + "x" +
                      std::to_string(model.nlon) + ", " + std::string(models::latitude_grid_name(model.latitude_spec.grid)) +
                      ", checkpoint '" + checkpoint_file + "')");
  }
  if (pc.initial_time >= info.times) {
    throw ConfigError(cfg.source + ": predict.initial_time (" + std::to_string(pc.initial_time) + ") is past the " +
                      std::to_string(info.times) + " times of '" + info.describe_files() + "'");
  }
  // One model step in the data's time units: the model's own step (data.lead snapshots
  // when it was trained), else data.lead snapshots of these data.
  const auto& time = info.coords.time;
  double step_units = model.dt_seconds / info.coords.time_unit_seconds;
  if (!(model.dt_seconds > 0)) {
    if (time.size() < 2) {
      throw ConfigError("predict: the checkpoint records no time step and '" + info.describe_files() +
                        "' has one time: the output's times are unknown");
    }
    step_units = static_cast<double>(cfg.data.lead) * (time[1] - time[0]);
  }

  CfOutputLayout layout;
  layout.path = pc.output;
  std::vector<double> output_times;
  for (std::int64_t k = 0; k <= pc.steps; ++k) {
    output_times.push_back(time[static_cast<std::size_t>(pc.initial_time)] + static_cast<double>(k) * step_units);
  }
  layout.axes = output_axes(info, std::move(output_times), log);
  layout.orientation = info.orientation;
  layout.variables = info.sources;
  const std::string initial = info.describe_files() + ", time index " + std::to_string(pc.initial_time);
  layout.global_attributes = {
      {"Conventions", "CF-1.8"},
      {"title", model.title + ": " + std::to_string(pc.steps) + " steps from " + initial},
      {"institution", "tessera"},
      {"source", "tessera " + std::string(version_string) + " " + model.description},
      {"history", utc_now() + " tessera-run predict " + opts.config + " (checkpoint " + checkpoint_file + ", step " +
                      std::to_string(checkpoint_step) + ", " + std::to_string(mesh.world_size()) + " ranks)"},
      {"tessera_version", version_string},
      {"tessera_checkpoint", checkpoint_file},
      {"tessera_checkpoint_step", std::to_string(checkpoint_step)},
      {"tessera_initial_condition", initial},
      {"tessera_config", cfg.text},
  };
  CfWriter writer(layout, mesh.world());
  // One writer per latitude band: the tp and dp replicas hold the same values.
  const bool writes = mesh.coords().tp == 0 && mesh.coords().dp == 0;

  const auto box = model.decomposition->box();
  const Shape shape{1, info.channels, box.lat.length, info.nlon};
  Tensor host = Tensor::empty(shape, DType::f32);
  agree_on_success(world,
                   [&] { read_field_band(info, pc.initial_time, 1, box.lat.start, box.lat.length, host.data<float>()); });
  if (writes) writer.write(0, box.lat.start, box.lat.length, host.data<float>());
  log.info("predict: " + model.description + " from " + checkpoint_file + " (step " + std::to_string(checkpoint_step) +
           "); " + std::to_string(pc.steps) + " steps of " + fmt("%g", model.dt_seconds) + " s from " + initial +
           " -> " + pc.output);

  Tensor state = host.to(mesh.device());
  const auto start = std::chrono::steady_clock::now();
  auto window_start = start;
  std::int64_t window_steps = 0;
  for (std::int64_t k = 1; k <= pc.steps; ++k) {
    state = model.step(state);
    const Tensor out = state.to(Device::host()).contiguous();
    // A NaN forecast is lost output, not a result: refused on every rank (the writer
    // then removes its unfinished file).
    agree_on_success(world, [&] { check_forecast_finite(out, k, info, checkpoint_file); });
    if (writes) writer.write(k, box.lat.start, box.lat.length, out.data<float>());
    ++window_steps;
    if (k % pc.log_every == 0 || k == pc.steps) {
      const auto now = std::chrono::steady_clock::now();
      const double window = std::chrono::duration<double>(now - window_start).count() / static_cast<double>(window_steps);
      const double wall = std::chrono::duration<double>(now - start).count();
      const double eta = wall / static_cast<double>(k) * static_cast<double>(pc.steps - k);
      char line[256];
      std::snprintf(line, sizeof line, "predict %6lld/%lld  step %.1f ms  %.3e grid points/s  eta %s",
                    static_cast<long long>(k), static_cast<long long>(pc.steps), 1e3 * window,
                    static_cast<double>(info.nlat * info.nlon) / window, seconds_text(eta).c_str());
      log.info(line);
      window_start = now;
      window_steps = 0;
    }
  }
  writer.finish();
  log.info("wrote " + pc.output + ": " + std::to_string(pc.steps + 1) + " times (the initial state and " +
           std::to_string(pc.steps) + " steps) x " + joined(info.variables) + " on " + std::to_string(info.nlat) + "x" +
           std::to_string(info.nlon));
  return 0;
}

}  // namespace tessera::run
