#include "field_stats.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "driver_common.hpp"
#include "field_data.hpp"
#include "tessera/agree.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/global_sum.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"
#include "tessera/mesh.hpp"
#include "tessera/version.hpp"

namespace tessera::run {
namespace {

// Times read at once per rank: bounds the memory of a long series, and is fixed (not a
// function of the rank count), so the sums' grouping is the same at every layout.
constexpr std::int64_t kTimeChunk = 32;

std::string g17(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

// YAML's double-quoted string for `s`.
std::string yaml_quoted(const std::string& s) {
  std::string q = "\"";
  for (char ch : s) q += (ch == '"' || ch == '\\') ? std::string("\\") + ch : std::string(1, ch);
  return q + "\"";
}

}  // namespace

int field_stats(const RunConfig& cfg, const Options& opts) {
  if (cfg.data.stats.empty()) {
    throw ConfigError(cfg.source + ": data.stats: `tessera-run stats` writes the statistics to the file data.stats "
                                   "names; set it (e.g. --set data.stats=stats.yaml)");
  }
  agree_on_success(MPI_COMM_WORLD, [&] { tessera::detail::require_replaceable_file(cfg.data.stats, "data.stats"); });
  // Every rank a latitude band of the data, whatever the config's parallelism.
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ParallelismConfig layout;
  layout.domain = world;
  Mesh mesh(MPI_COMM_WORLD, layout);
  const Log log(mesh.global_rank() == 0, cfg.log_level);
  DataConfig data = cfg.data;
  data.normalize = false;
  FieldDataInfo info;
  agree_on_success(mesh.world().mpi_comm(), [&] { info = read_field_data_info(data); });
  const domain::Decomposition d(mesh, {info.nlat, info.nlon});
  const auto box = d.box();
  log.info("stats: " + info.describe_files() + ": " + std::to_string(info.times) + " times x " +
           std::to_string(info.channels) + " channels on " + std::to_string(info.nlat) + "x" +
           std::to_string(info.nlon) + ", " + std::to_string(world) + " ranks (latitude bands)");

  // Two exact passes: the mean, then the mean squared deviation from it.
  const std::int64_t plane = box.lat.length * info.nlon;
  const double count = static_cast<double>(info.times) * static_cast<double>(info.nlat * info.nlon);
  std::vector<double> sum(static_cast<std::size_t>(info.channels), 0.0), squares(sum);
  std::vector<float> band;
  for (int pass = 0; pass < 2; ++pass) {
    for (std::int64_t t0 = 0; t0 < info.times; t0 += kTimeChunk) {
      const std::int64_t nt = std::min(kTimeChunk, info.times - t0);
      band.resize(host_buffer_elements(static_cast<long double>(nt) * info.channels * plane, sizeof(float),
                                       "data '" + info.describe_files() + "'"));
      agree_on_success(mesh.world().mpi_comm(),
                       [&] { read_field_band(info, t0, nt, box.lat.start, box.lat.length, band.data()); });
      for (std::int64_t c = 0; c < info.channels; ++c) {
        Tensor values = Tensor::empty({nt, box.lat.length, info.nlon}, DType::f64);
        double* v = values.data<double>();
        const double mean = sum[static_cast<std::size_t>(c)] / count;
        for (std::int64_t t = 0; t < nt; ++t) {
          const float* src = band.data() + (t * info.channels + c) * plane;
          for (std::int64_t i = 0; i < plane; ++i) {
            const double x = src[i];
            v[t * plane + i] = pass == 0 ? x : (x - mean) * (x - mean);
          }
        }
        (pass == 0 ? sum : squares)[static_cast<std::size_t>(c)] += domain::global_sum(d, values);
      }
    }
  }

  // Every rank holds the same sums (global_sum), so every rank refuses alike: a NaN or
  // infinite statistic (the data's values overflow a double's sum) is never written.
  for (std::int64_t c = 0; c < info.channels; ++c) {
    const double mean = sum[static_cast<std::size_t>(c)] / count;
    const double std = std::sqrt(squares[static_cast<std::size_t>(c)] / count);
    if (!std::isfinite(mean) || !std::isfinite(std)) {
      throw IoError("stats: variable '" + info.variables[static_cast<std::size_t>(c)] + "' of data '" +
                    info.describe_files() + "' has mean " + g17(mean) + " and std " + g17(std) +
                    ", which data.normalize cannot use; nothing written to data.stats (" + cfg.data.stats + ")");
    }
  }
  if (mesh.global_rank() == 0) {
    std::string text = "# tessera-run stats (tessera " + std::string(version_string) +
                       "): per-channel mean and standard deviation (population) over every time, latitude and\n"
                       "# longitude of the data, unweighted; data.stats reads them for data.normalize.\n";
    text += "source: " + yaml_quoted(info.describe_files()) + "\n";
    text += "config: " + yaml_quoted(opts.config) + "\n";
    text += "times: " + std::to_string(info.times) + "\n";
    text += "grid: [" + std::to_string(info.nlat) + ", " + std::to_string(info.nlon) + "]\n";
    text += "channels:\n";
    for (std::int64_t c = 0; c < info.channels; ++c) {
      const double mean = sum[static_cast<std::size_t>(c)] / count;
      const double std = std::sqrt(squares[static_cast<std::size_t>(c)] / count);
      text += "  " + yaml_quoted(info.variables[static_cast<std::size_t>(c)]) + ": {mean: " + g17(mean) +
              ", std: " + g17(std) + "}\n";
      log.info("  " + info.variables[static_cast<std::size_t>(c)] + ": mean " + g17(mean) + "  std " + g17(std));
    }
    const std::string tmp = cfg.data.stats + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << text;
      out.close();
      if (!out) {
        std::error_code ignored;
        std::filesystem::remove(tmp, ignored);  // (a full disk: leave no .tmp)
        throw IoError("data.stats: cannot write '" + tmp + "'");
      }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, cfg.data.stats, ec);
    if (ec) throw IoError("data.stats: cannot rename '" + tmp + "' to '" + cfg.data.stats + "': " + ec.message());
  }
  agree_on_success(mesh.world().mpi_comm(), [] {});
  log.info("wrote " + cfg.data.stats);
  return 0;
}

void read_field_stats(const std::string& path, const std::vector<std::string>& channels, std::vector<double>& mean,
                      std::vector<double>& std) {
  const std::string what = "data.stats file '" + path + "'";
  YAML::Node root;
  std::error_code missing;
  if (std::filesystem::exists(path, missing)) tessera::detail::require_regular_file(path, "data.stats file");
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw IoError(what + ": cannot read it (run `tessera-run stats CONFIG` to write it)");
  } catch (const YAML::Exception& e) {
    throw ConfigError(what + ": invalid YAML: " + e.what());
  }
  const YAML::Node table = root["channels"];
  if (!table.IsMap()) throw ConfigError(what + ": no 'channels' mapping");
  mean.clear();
  std.clear();
  for (const auto& name : channels) {
    const YAML::Node entry = table[name];
    if (!entry.IsMap() || !entry["mean"] || !entry["std"]) {
      throw ConfigError(what + ": no statistics for channel '" + name + "' (rerun tessera-run stats for these "
                                                                       "data.variables)");
    }
    double m = 0, s = 0;
    try {
      m = entry["mean"].as<double>();
      s = entry["std"].as<double>();
    } catch (const YAML::Exception&) {
      throw ConfigError(what + ": channel '" + name + "': mean and std must be numbers");
    }
    if (!std::isfinite(m) || !std::isfinite(s) || !(s > 0)) {
      throw ConfigError(what + ": channel '" + name + "' has mean " + g17(m) + ", std " + g17(s) +
                        ": normalisation needs a finite mean and a finite std > 0");
    }
    mean.push_back(m);
    std.push_back(s);
  }
}

}  // namespace tessera::run
