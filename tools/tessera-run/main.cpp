// tessera-run: the srun/mpiexec-launched training driver (docs/driver.md).
//
//   tessera-run CONFIG.yaml [--dry-run] [--set KEY=VALUE ...] [--kill-after-step N]
//
// Trains the field emulator (models/field_emulator.hpp) to predict the next state of a
// gridded dataset on a (dp, tp, domain) mesh, or (model.type: decoder, train_decoder.cpp)
// the decoder-only transformer (models/decoder.hpp) on a token stream on a (dp, tp)
// mesh, with checkpoints and resume. The config
// is parsed on every rank before MPI_Init: a bad config fails every rank alike, rank 0
// reports it once, and every rank exits with status 1 (2 for a usage error).

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "driver_common.hpp"
#include "field_data.hpp"
#include "train_decoder.hpp"
#include "run_config.hpp"
#include "tessera/agree.hpp"
#include "tessera/clip.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/dp/memory.hpp"
#include "tessera/dp/sampler.hpp"
#include "tessera/error.hpp"
#include "tessera/init.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/ops.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/parallelize.hpp"
#include "tessera/version.hpp"

namespace tessera::run {
namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

const char* kUsage =
    "usage: tessera-run CONFIG.yaml [--dry-run] [--set KEY=VALUE ...] [--kill-after-step N]\n"
    "  --dry-run            validate the config and the data, print the mesh and the per-rank\n"
    "                       memory plan, and exit without training\n"
    "  --set KEY=VALUE      override a config key (dotted path, VALUE as YAML), e.g.\n"
    "                       --set parallelism.tensor=2 --set resume=latest\n"
    "  --kill-after-step N  test hook: every rank kills itself (SIGKILL) after step N, as a\n"
    "                       crashed or preempted job would\n"
    "  --help               this text\n"
    "Launch with mpiexec -n N or srun; see docs/driver.md for the config keys.\n";

// Throws InvalidArgument (a usage error) for anything it does not understand.
Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const std::string& flag) -> std::string {
      if (i + 1 >= argc) throw InvalidArgument(flag + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--dry-run") {
      o.dry_run = true;
    } else if (a == "--set") {
      o.overrides.push_back(value(a));
    } else if (a.rfind("--set=", 0) == 0) {
      o.overrides.push_back(a.substr(6));
    } else if (a == "--kill-after-step") {
      const std::string v = value(a);
      char* end = nullptr;
      o.kill_after_step = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || o.kill_after_step < 1) {
        throw InvalidArgument("--kill-after-step needs an integer >= 1, got '" + v + "'");
      }
    } else if (!a.empty() && a[0] == '-') {
      throw InvalidArgument("unknown option '" + a + "'");
    } else if (o.config.empty()) {
      o.config = a;
    } else {
      throw InvalidArgument("more than one config file given ('" + o.config + "' and '" + a + "')");
    }
  }
  if (o.config.empty() && !o.help) throw InvalidArgument("no config file given");
  return o;
}

// The model as trained: the config's architecture on the data's grid and channels.
models::FieldEmulatorConfig model_config(const RunConfig& cfg, const FieldDataInfo& info) {
  models::FieldEmulatorConfig m = cfg.model;
  m.channels = info.channels;
  m.nlat = info.nlat;
  m.nlon = info.nlon;
  m.latitude_grid = info.latitude_grid;
  m.variables = info.variables;
  m.mean = info.mean;
  m.std = info.std;
  m.dt_seconds = info.dt_seconds * static_cast<double>(cfg.data.lead);
  m.validate();
  return m;
}

// Bytes of the activations one local sample keeps between forward and backward (the
// layers' caches, the halo-padded inputs and the im2col workspace of the convolutions):
// an estimate for the memory plan, not a measurement.
std::int64_t activation_bytes_per_sample(const models::FieldEmulatorConfig& m, std::int64_t lat_local, int tp) {
  const std::int64_t k = m.kernel, halo = k - 1;
  const std::int64_t plane = lat_local * m.nlon, padded = (lat_local + halo) * (m.nlon + halo);
  const std::int64_t hidden_local = m.mlp_hidden / tp;
  std::int64_t floats = m.channels * padded + m.channels * k * k * plane + m.width * plane;  // encoder
  floats += m.n_blocks * (3 * m.width + 2 * hidden_local) * plane;                           // blocks
  floats += 2 * m.width * plane;                                                              // GELU
  floats += m.width * padded + m.width * k * k * plane + m.channels * plane;                  // decoder
  return floats * static_cast<std::int64_t>(sizeof(float));
}

int train_field_emulator(const RunConfig& cfg, const Options& opts) {
  Mesh mesh(MPI_COMM_WORLD, cfg.parallelism, run_device(cfg));
  const MPI_Comm world = mesh.world().mpi_comm();
  const Log log(mesh.global_rank() == 0, cfg.log_level);
  start_run(log, cfg, mesh);

  FieldDataInfo info;
  agree_on_success(world, [&] { info = read_field_data_info(cfg.data); });
  const models::FieldEmulatorConfig arch = model_config(cfg, info);
  const int dp_size = mesh.dp_size();
  if (cfg.data.batch_size % dp_size != 0) {
    throw ConfigError(cfg.source + ": data.batch_size (" + std::to_string(cfg.data.batch_size) +
                      ") must be divisible by the number of data-parallel replicas (" + std::to_string(dp_size) + ")");
  }
  const std::int64_t local_batch = cfg.data.batch_size / dp_size;
  const std::int64_t samples = info.times - cfg.data.lead;
  if (samples < cfg.data.batch_size) {
    throw ConfigError(cfg.source + ": data.batch_size (" + std::to_string(cfg.data.batch_size) + ") exceeds the " +
                      std::to_string(samples) + " samples of '" + cfg.data.path + "'");
  }

  auto model = std::make_unique<models::FieldEmulator>(arch, mesh);
  const domain::Decomposition& decomposition = model->decomposition();
  const auto box = decomposition.box();
  const std::int64_t grid_points = info.nlat * info.nlon;
  std::int64_t global_parameters = 0;
  for (const auto& [name, p] : model->named_parameters()) global_parameters += shape_numel(p->global_shape);

  std::string variables;
  for (const auto& v : info.variables) variables += (variables.empty() ? "" : ",") + v;
  log.info("model: " + model->describe() + ", " + std::to_string(global_parameters) + " parameters");
  log.info("data: " + cfg.data.path + " [" + cfg.data.dataset + "]: " + std::to_string(info.times) + " times x " +
           variables + " on " + std::to_string(info.nlat) + "x" + std::to_string(info.nlon) + " (" +
           std::string(models::latitude_grid_name(info.latitude_grid)) + "), " + std::to_string(samples) +
           " samples (t -> t+" + std::to_string(cfg.data.lead) + "), batch " + std::to_string(cfg.data.batch_size) +
           " (" + std::to_string(local_batch) + " per dp replica)");
  log.debug("rank 0 holds " + box.str());

  const std::int64_t data_bytes =
      info.times * info.channels * box.lat.length * info.nlon * static_cast<std::int64_t>(sizeof(float));
  if (opts.dry_run) {
    const dp::MemoryReport plan = dp::plan_memory(*model, dp::MemoryPlanLayout::of(mesh), optimizer_kind(cfg.optimizer));
    print_memory_plan(log, mesh, "lat band", box.lat.start, box.lat.start + box.lat.length, plan,
                      local_batch * activation_bytes_per_sample(arch, box.lat.length, mesh.tp_size()), data_bytes);
    log.info("dry run: the config is valid; nothing was trained");
    return 0;
  }

  std::unique_ptr<FieldData> data;
  agree_on_success(world, [&] { data = std::make_unique<FieldData>(cfg.data, info, box.lat.start, box.lat.length); });

  // Same master weights at every layout (counter-based init), before dp shards them.
  nn::initialize_parameters(*model, cfg.schedule.seed);
  std::unique_ptr<dp::DataParallel> data_parallel;
  if (cfg.parallelism.data != DataParallelMode::none) {
    data_parallel = std::make_unique<dp::DataParallel>(*model, mesh);
  }
  const NamedParameters params = model->named_parameters();
  std::unique_ptr<Optimizer> optimizer = make_optimizer(cfg.optimizer, params);

  // ---- resume
  std::int64_t start_step = 0;
  {
    const std::optional<std::string> path = resume_path(cfg, log);
    if (path) {
      // The architecture must match, checked before any weight is read: the same FQNs
      // could hold different shapes or meaning.
      const io::CheckpointMetadata header = io::read_checkpoint_metadata(*path, mesh.world());
      const auto saved = models::model_config_from_metadata(header.metadata, header.file);
      if (!(saved == arch)) {
        throw ConfigError("resume: the model in '" + header.file + "' differs from this config's: " +
                          first_difference(saved.to_yaml(), arch.to_yaml()));
      }
      const io::LoadResult loaded = io::load_checkpoint(header.file, mesh, *model, optimizer.get());
      start_step = loaded.step;
      log.info("resumed from " + loaded.file + " at step " + std::to_string(loaded.step) + " (saved at " +
               loaded.saved_mesh.str() + " on " + std::to_string(loaded.saved_world_size) +
               " ranks; now " + mesh.config().str() + " on " + std::to_string(mesh.world_size()) + ")");
    }
  }
  if (start_step >= cfg.schedule.steps) {
    log.info("nothing to do: the run is at step " + std::to_string(start_step) + " of " +
             std::to_string(cfg.schedule.steps));
    return 0;
  }

  dp::DistributedSampler sampler(samples, mesh, {.shuffle = cfg.data.shuffle, .seed = cfg.schedule.seed,
                                                  .drop_last = true});
  const std::int64_t batches_per_epoch = sampler.num_batches(local_batch, /*drop_last_batch=*/true);
  if (batches_per_epoch < 1) {
    throw ConfigError(cfg.source + ": data.batch_size " + std::to_string(cfg.data.batch_size) +
                      " leaves no full batch per epoch");
  }

  const auto save = [&](std::int64_t step) {
    io::SaveOptions so;
    so.layout = cfg.checkpoint.layout;
    so.step = step;
    so.keep_last = cfg.checkpoint.keep_last;
    so.metadata = models::model_metadata(
        arch, "run:\n  config: \"" + cfg.source + "\"\n  seed: " + std::to_string(cfg.schedule.seed) +
                  "\n  batch_size: " + std::to_string(cfg.data.batch_size) + "\n  data: \"" + cfg.data.path +
                  "\"\n  lead: " + std::to_string(cfg.data.lead) + "\n");
    const std::string dir = io::save_checkpoint(cfg.checkpoint.dir, mesh, *model, optimizer.get(), so);
    log.info("checkpoint: " + dir + " (" + std::string(io::checkpoint_layout_name(cfg.checkpoint.layout)) + ")");
    return dir;
  };

  log.info("training: steps " + std::to_string(start_step + 1) + ".." + std::to_string(cfg.schedule.steps) + ", " +
           cfg.optimizer.type + " lr " + fmt("%g", cfg.optimizer.lr) + ", seed " +
           std::to_string(cfg.schedule.seed));

  Tensor x_read, y_read, x, y;  // as read (host, reused between steps) and as trained (mesh's device)
  Communicator& dp_comm = mesh.dp();
  double window_loss = 0, window_persistence = 0, window_time = 0;
  std::int64_t window_steps = 0;
  double run_time = 0;
  double last_loss = NAN, last_persistence = NAN, first_loss = NAN, first_persistence = NAN;
  std::string last_checkpoint;

  for (std::int64_t step = start_step + 1; step <= cfg.schedule.steps; ++step) {
    const std::int64_t position = step - 1;
    sampler.set_epoch(position / batches_per_epoch);
    data->batch(sampler.batch(position % batches_per_epoch, local_batch), x_read, y_read);
    x = x_read.to(mesh.device());  // no copy on the host
    y = y_read.to(mesh.device());

    mesh.world().barrier();  // so the step time is the slowest rank's, not rank 0's share
    const auto t0 = std::chrono::steady_clock::now();
    optimizer->zero_grad();
    const Tensor prediction = model->forward(x);
    const domain::LossResult loss = domain::lat_weighted_mse(prediction, y, decomposition, info.latitude_grid);
    model->backward(loss.grad);
    if (data_parallel) data_parallel->finish_gradient_sync();
    if (mesh.tp_size() > 1) tp::sync_replicated_gradients(*model, mesh.tp());
    domain::sync_domain_gradients(*model, mesh);
    const bool log_step = step % cfg.schedule.log_every == 0 || step == cfg.schedule.steps;
    const double lr = learning_rate_at(cfg.optimizer, step, cfg.schedule.steps);
    const double grad_norm = clip_and_step(cfg, params, *optimizer, mesh, step, log_step);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // The baseline on the same batch: predict "no change".
    const double persistence = domain::lat_weighted_mse(x, y, decomposition, info.latitude_grid).value;
    window_loss += loss.value;
    window_persistence += persistence;
    window_time += seconds;
    run_time += seconds;
    ++window_steps;

    if (log_step) {
      // Each dp replica saw its own part of the global batches: average over dp.
      Tensor sums = Tensor::from_vector(std::vector<double>{window_loss, window_persistence}, {2});
      dp_comm.all_reduce(sums, ReduceOp::avg);
      const auto v = sums.to_vector<double>();
      last_loss = v[0] / window_steps;
      last_persistence = v[1] / window_steps;
      if (std::isnan(first_loss)) {
        first_loss = last_loss;
        first_persistence = last_persistence;
      }
      const double step_time = window_time / window_steps;
      const double samples_per_s = cfg.data.batch_size / step_time;
      char line[320];
      std::snprintf(line, sizeof line,
                    "step %6lld/%lld  loss %.6e  persistence %.6e  lr %.3e  grad_norm %.3e  step %.1f ms  "
                    "%.1f samples/s  %.3e grid points/s",
                    static_cast<long long>(step), static_cast<long long>(cfg.schedule.steps), last_loss,
                    last_persistence, lr, grad_norm, 1e3 * step_time, samples_per_s, samples_per_s * grid_points);
      log.info(line);
      window_loss = window_persistence = window_time = 0;
      window_steps = 0;
    }
    after_step(cfg, opts, log, step, save, last_checkpoint);
  }

  const std::int64_t steps_run = cfg.schedule.steps - start_step;
  const double step_time = run_time / static_cast<double>(steps_run);
  const double samples_per_s = cfg.data.batch_size / step_time;
  char line[400];
  std::snprintf(line, sizeof line,
                "summary: %lld steps (%lld..%lld) in %.2f s: %.1f ms/step, %.1f samples/s, %.3e grid points/s",
                static_cast<long long>(steps_run), static_cast<long long>(start_step + 1),
                static_cast<long long>(cfg.schedule.steps), run_time, 1e3 * step_time, samples_per_s,
                samples_per_s * grid_points);
  log.info(line);
  std::snprintf(line, sizeof line, "summary: first logged loss %.6e (persistence %.6e)", first_loss, first_persistence);
  log.info(line);
  const bool below = last_loss < last_persistence;
  std::snprintf(line, sizeof line,
                "summary: final loss %.6e persistence %.6e ratio %.4f (%s the persistence baseline; mean of "
                "the last logged window)",
                last_loss, last_persistence, last_loss / last_persistence, below ? "below" : "NOT below");
  log.info(line);
  if (!last_checkpoint.empty()) log.info("summary: last checkpoint " + last_checkpoint);
  return 0;
}

}  // namespace
}  // namespace tessera::run

int main(int argc, char** argv) {
  using namespace tessera;
  using namespace tessera::run;

  // Everything up to MPI_Init is local and deterministic: the same arguments and file
  // give every rank the same verdict.
  Options opts;
  std::optional<RunConfig> cfg;
  std::string error;
  int error_status = 0;
  try {
    opts = parse_args(argc, argv);
    if (!opts.help) cfg = parse_run_config(opts.config, opts.overrides);
  } catch (const InvalidArgument& e) {
    error = e.what();
    error_status = kExitUsage;
  } catch (const std::exception& e) {
    error = e.what();
    error_status = kExitError;
  }

  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  if (opts.help) {
    if (rank == 0) std::cout << kUsage;
  } else {
    try {
      // A rank that could not read the file (a node without the file system) would
      // otherwise disagree with the others: agree first, then go on together.
      agree_on_success(MPI_COMM_WORLD, [&] {
        if (error_status == kExitUsage) throw InvalidArgument(error);
        if (error_status != 0) throw ConfigError(error);
      });
      status = cfg->model_type == "decoder" ? train_decoder(*cfg, opts) : train_field_emulator(*cfg, opts);
    } catch (const std::exception& e) {
      status = error_status == kExitUsage ? kExitUsage : kExitError;
      if (rank == 0) {
        // Every rank parsed the same file: rank 0's own message needs no "(on rank ...)".
        std::cerr << "tessera-run: error: " << (error.empty() ? e.what() : error.c_str()) << "\n";
        if (status == kExitUsage) std::cerr << kUsage;
      }
    }
  }
  MPI_Finalize();
  return status;
}
