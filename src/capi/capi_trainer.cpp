// C API: online training of a field emulator from a running code (tessera_trainer.h,
// docs/online-training.md). Everything that trains is the library's, as tessera-run uses
// it: the config parser (train/run_config.hpp), the model's construction and
// initialisation, the forward/backward and the optimizer step (train/training_step.hpp),
// and the checkpoints (io/checkpoint.hpp); this file checks the caller's arrays and holds
// the handle.

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "capi/capi_internal.hpp"
#include "tessera/agree.hpp"
#include "tessera/detail/finite.hpp"
#include "tessera/domain/redistribution.hpp"
#include "tessera/io/async_checkpoint.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/ops.hpp"
#include "tessera/train/run_config.hpp"
#include "tessera/train/training_step.hpp"

struct tessera_trainer {
  tessera::train::RunConfig config;
  tessera::models::FieldEmulatorConfig arch;
  std::unique_ptr<tessera::Mesh> mesh;
  std::unique_ptr<tessera::models::FieldEmulator> model;
  std::unique_ptr<tessera::dp::DataParallel> data_parallel;
  std::unique_ptr<tessera::train::TrainingStep> step;
  std::int64_t steps = 0;
  // optimizer.accumulate: the micro-batches of the next step taken so far, and the batch
  // size B of its first one (every micro-batch of a step has as many samples, so that
  // their average is the mean over the step's samples, as in tessera-run).
  std::int64_t micro = 0;
  std::int64_t micro_batch = 0;
  // tessera_trainer_use_decomp: the code's decomposition (kept alive) and the plan that
  // moves its boxes to the trainer's bands and predictions back; none: the bands.
  std::shared_ptr<tessera_decomp_state> decomp;
  std::unique_ptr<tessera::domain::Redistribution> plan;
  // checkpoint.async: started by the first tessera_trainer_save (collective there);
  // destroyed first, so a write in flight ends before the rest goes.
  std::unique_ptr<tessera::io::AsyncCheckpointer> async_saver;
};

using namespace tessera;
using tessera::capi::guarded;
using tessera::capi::require;

namespace {

template <class Handle>
Handle& trainer_of(Handle* t) {
  require(t, "the trainer handle");
  if (!t->model) throw InvalidArgument("the trainer handle is not initialised");
  return *t;
}

// The config's keys that a trainer cannot honour, refused by name (every rank parses the
// same file, so every rank refuses alike).
void check_trainer_config(const train::RunConfig& c) {
  if (c.model_type != "field_emulator") {
    throw ConfigError(c.source + ": model.type " + c.model_type +
                      ": the trainer trains a field emulator (model.type field_emulator)");
  }
}

// data.normalize's statistics, which the caller gives (tessera-run reads the same numbers
// from its data file): both or neither, exactly when the config normalises.
// mean_count/std_count: the lengths of the caller's arrays, -1 where the caller cannot tell
// (the C form, whose arrays are `channels` long by contract).
void check_statistics(const train::RunConfig& c, std::int64_t channels, const double* mean,
                      std::int64_t mean_count, const double* std, std::int64_t std_count, train::FieldGrid& grid) {
  for (const auto& [count, name] : {std::pair{mean_count, "mean"}, std::pair{std_count, "std"}}) {
    if (count >= 0 && count != channels) {
      throw InvalidArgument(std::string(name) + " has " + std::to_string(count) + " values, channels is " +
                            std::to_string(channels));
    }
  }
  if ((mean == nullptr) != (std == nullptr)) {
    throw InvalidArgument(std::string("mean and std come together: ") + (mean ? "std" : "mean") + " is NULL");
  }
  if (mean == nullptr) {
    if (c.data.normalize) {
      throw ConfigError(c.source + ": data.normalize is true (the default), but no per-channel mean and std were "
                        "given: pass them to tessera_trainer_create_normalized, or set data.normalize: false for "
                        "fields that are already of order 1");
    }
    return;
  }
  if (!c.data.normalize) {
    throw ConfigError(c.source + ": data.normalize is false, but a per-channel mean and std were given: set "
                      "data.normalize: true or call tessera_trainer_create");
  }
  for (std::int64_t i = 0; i < channels; ++i) {
    const double m = mean[i], s = std[i];
    // As tessera-run refuses such file attributes: a constant channel (std 0), NaN or
    // infinity cannot normalise.
    if (!std::isfinite(m) || !std::isfinite(s) || !(s > 0)) {
      const bool bad_mean = !std::isfinite(m);
      char value[32];
      std::snprintf(value, sizeof value, "%g", bad_mean ? m : s);
      throw InvalidArgument(std::string(bad_mean ? "mean[" : "std[") + std::to_string(i) + "] is " + value +
                            ": normalisation needs a finite mean and a finite std > 0 per channel");
    }
    grid.mean.push_back(m);
    grid.std.push_back(s);
  }
}

// The loss weights' geometry: one of the built-in grids, or the caller's latitudes
// (`latitudes`, `count` of them; -1: nlat) for TESSERA_LATITUDES_EXPLICIT.
void set_latitudes(train::FieldGrid& grid, int latitude_grid, const double* latitudes, std::int64_t count) {
  switch (latitude_grid) {
    case TESSERA_LATITUDES_CELL_CENTRES: grid.latitude_grid = domain::LatitudeGrid::cell_centres; break;
    case TESSERA_LATITUDES_WITH_POLES: grid.latitude_grid = domain::LatitudeGrid::with_poles; break;
    case TESSERA_LATITUDES_UNWEIGHTED: grid.latitude_grid = domain::LatitudeGrid::unweighted; break;
    case TESSERA_LATITUDES_EXPLICIT: grid.latitude_grid = domain::LatitudeGrid::explicit_rows; break;
    default:
      throw InvalidArgument("latitude_grid must be TESSERA_LATITUDES_CELL_CENTRES (0), _WITH_POLES (1), "
                            "_UNWEIGHTED (2) or _EXPLICIT (3, with the latitudes), got " + std::to_string(latitude_grid));
  }
  if (grid.latitude_grid != domain::LatitudeGrid::explicit_rows) return;
  require(latitudes, "latitudes (TESSERA_LATITUDES_EXPLICIT needs every row's latitude)");
  if (grid.nlat < 1) return;  // field_emulator_config names the grid
  if (count >= 0 && count != grid.nlat) {
    throw InvalidArgument("latitudes has " + std::to_string(count) + " values for " + std::to_string(grid.nlat) +
                          " rows (one per row)");
  }
  grid.latitudes.assign(latitudes, latitudes + grid.nlat);
  domain::LatitudeSpec::from_latitudes(grid.latitudes).validate(grid.nlat);  // names the row
}

void create(const char* config_path, MPI_Comm comm, std::int64_t channels, std::int64_t nlat, std::int64_t nlon,
            int latitude_grid, const double* latitudes, std::int64_t latitudes_count, const double* mean,
            std::int64_t mean_count, const double* std, std::int64_t std_count, tessera_trainer_t** out) {
  require(out, "the output handle pointer");
  *out = nullptr;
  capi::require_mpi();
  if (comm == MPI_COMM_NULL) throw InvalidArgument("comm is MPI_COMM_NULL");
  auto t = std::make_unique<tessera_trainer>();
  agree_on_success(comm, [&] {
    train::FieldGrid grid;
    require(config_path, "config_path");
    grid.nlat = nlat;
    set_latitudes(grid, latitude_grid, latitudes, latitudes_count);
    t->config = train::parse_run_config(config_path, {});
    check_trainer_config(t->config);
    check_statistics(t->config, channels, mean, mean_count, std, std_count, grid);
    grid.channels = channels;
    grid.nlat = nlat;
    grid.nlon = nlon;
    t->arch = train::field_emulator_config(t->config, grid);  // names model.channels, nlat, nlon when < 1
  });
  const train::RunConfig& cfg = t->config;
  // Ranks weighting the rows differently would train one model on different losses.
  std::string weights(models::latitude_grid_name(t->arch.latitude_grid));
  for (double phi : t->arch.latitudes) {
    char bits[32];
    std::snprintf(bits, sizeof bits, " %a", phi);  // exact
    weights += bits;
  }
  require_same_on_all_ranks(comm, weights, "tessera_trainer_create: the ranks passed different latitudes");
  t->mesh = std::make_unique<Mesh>(comm, cfg.parallelism, train::training_device(cfg, comm));
  if (!t->arch.mean.empty()) {
    // Ranks that normalise differently would train one model on different data: the
    // largest of each value and of its negation must agree.
    const std::size_t n = t->arch.mean.size();
    std::vector<double> v(t->arch.mean);
    v.insert(v.end(), t->arch.std.begin(), t->arch.std.end());
    for (std::size_t i = 0; i < 2 * n; ++i) v.push_back(-v[i]);
    Tensor extremes = Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
    t->mesh->world().all_reduce(extremes, ReduceOp::max);
    const auto e = extremes.to_vector<double>();
    for (std::size_t i = 0; i < 2 * n; ++i) {
      if (e[i] != -e[2 * n + i]) {
        throw InvalidArgument(std::string(i < n ? "mean[" : "std[") + std::to_string(i % n) +
                              "] differs between the ranks; every rank must pass the same statistics");
      }
    }
  }
  t->model = train::build_field_emulator(cfg, t->arch, *t->mesh).model;
  t->data_parallel = train::start_training(cfg, *t->model, *t->mesh);
  t->step = std::make_unique<train::TrainingStep>(cfg.optimizer, cfg.schedule.steps, *t->mesh, *t->model,
                                                  t->data_parallel.get());
  *out = t.release();
}

// The box of the caller's arrays on this rank: the code's (tessera_trainer_use_decomp) or
// the trainer's band.
domain::LocalBox caller_box(const tessera_trainer& t) {
  return t.plan ? t.plan->code().box() : t.model->decomposition().box();
}

// Every rank's B must agree before a transfer (the plan checks later transfers locally).
std::int64_t agree_batch(const tessera_trainer& t, std::int64_t batch) {
  Tensor b = Tensor::from_vector(std::vector<std::int64_t>{batch, -batch}, {2});
  t.mesh->world().all_reduce(b, ReduceOp::max);
  const auto v = b.to_vector<std::int64_t>();
  if (v[0] != -v[1]) {
    throw ShapeError("the ranks pass different batch sizes B (from " + std::to_string(-v[1]) + " to " +
                     std::to_string(v[0]) + "); every dp replica must train on as many samples");
  }
  return v[0];
}

// The code's boxes -> the trainer's bands, in the caller's dtype (copied, exact), all the
// fields in one transfer.
std::vector<Tensor> to_bands(tessera_trainer& t, const std::vector<Tensor>& code) {
  (void)agree_batch(t, code.front().size(0));
  std::vector<Tensor> bands;
  const Shape leading(code.front().shape().begin(), code.front().shape().end() - 2);
  for (const Tensor& c : code) bands.push_back(Tensor::empty(t.plan->model_shape(leading), c.dtype()));
  t.plan->to_model(code, bands);
  return bands;
}

// The caller's f32 or f64 (B, channels, band lat, nlon) fields (after
// tessera_trainer_use_decomp: over the code's box, moved to the band) as the model's f32 tensors
// on its device (f64 rounded once, here), normalised when `normalize` (then always a copy:
// the caller's arrays are read only); every argument error is agreed over the mesh before
// the collectives that follow.
std::vector<Tensor> fields(tessera_trainer& t, const std::vector<std::pair<const void*, const char*>>& arrays,
                           tessera_dtype_t dtype, tessera_order_t order, int ndim, const std::int64_t* shape,
                           bool normalize) {
  std::vector<Tensor> views, out;
  agree_on_success(t.mesh->world().mpi_comm(), [&] {
    if (dtype != TESSERA_F32 && dtype != TESSERA_F64) {
      throw InvalidArgument("dtype: trainer fields must be TESSERA_F32 (0) or TESSERA_F64 (1), got " +
                            std::to_string(dtype));
    }
    for (const auto& [data, what] : arrays) {
      views.push_back(capi::batch_view(capi::array_view(const_cast<void*>(data), dtype, order, ndim, shape, what),
                                       t.arch.channels, caller_box(t), what));
    }
  });
  if (t.plan) views = to_bands(t, views);
  agree_on_success(t.mesh->world().mpi_comm(), [&] {
    for (std::size_t k = 0; k < views.size(); ++k) {
      const void* data = arrays[k].first;
      Tensor v = views[k];
      if (v.dtype() != DType::f32) v = ops::cast(v, DType::f32);
      v = v.to(t.mesh->device());
      if (normalize) {
        v = v.data() == data ? v.contiguous().clone() : v.contiguous();
        t.model->normalize(v);
      }
      out.push_back(v);
    }
  });
  return out;
}

// The first NaN or Inf of this rank's input or target of step `step` (f32 batches of
// (B, C, band lat, band lon) from fields()), as the sentence a divergence report gives
// in place of the lr advice; "" when both are finite. Local.
std::string batch_problem(const tessera_trainer& t, const std::vector<Tensor>& xy, std::int64_t step) {
  const char* names[] = {"input", "target"};
  for (std::size_t k = 0; k < xy.size() && k < 2; ++k) {
    const Tensor host = xy[k].to(Device::host()).contiguous();
    const std::span<const float> values(host.data<float>(), static_cast<std::size_t>(host.numel()));
    const auto bad = tessera::detail::first_non_finite(values);
    if (!bad) continue;
    std::string where = "element " + std::to_string(*bad);
    const Shape& s = host.shape();
    if (s.size() == 4) {
      const auto box = t.model->decomposition().box();
      auto i = static_cast<std::int64_t>(*bad);
      const std::int64_t lon = i % s[3], row = i / s[3] % s[2], channel = i / (s[3] * s[2]) % s[1],
                         sample = i / (s[3] * s[2] * s[1]);
      where = "sample " + std::to_string(sample) + ", channel " + std::to_string(channel) + ", latitude row " +
              std::to_string(box.lat.start + row) + ", longitude " + std::to_string(box.lon.start + lon);
    }
    return "the " + std::string(names[k]) + " batch of step " + std::to_string(step) + " (tessera_trainer_step's " +
           names[k] + ") holds " + tessera::detail::non_finite_kind(values[*bad]) + " at " + where;
  }
  return "";
}

}  // namespace

extern "C" {

int tessera_trainer_create(const char* config_path, MPI_Comm comm, int64_t channels, int64_t nlat, int64_t nlon,
                           int latitude_grid, tessera_trainer_t** trainer) {
  return guarded("tessera_trainer_create",
                 [&] { create(config_path, comm, channels, nlat, nlon, latitude_grid, nullptr, -1, nullptr, -1, nullptr, -1, trainer); });
}

int tessera_trainer_create_f(const char* config_path, MPI_Fint comm, int64_t channels, int64_t nlat, int64_t nlon,
                             int latitude_grid, tessera_trainer_t** trainer) {
  return guarded("tessera_trainer_create_f", [&] {
    create(config_path, capi::comm_from_fortran(comm), channels, nlat, nlon, latitude_grid, nullptr, -1, nullptr, -1,
           nullptr, -1, trainer);
  });
}

int tessera_trainer_create_normalized(const char* config_path, MPI_Comm comm, int64_t channels, int64_t nlat,
                                      int64_t nlon, int latitude_grid, const double* mean, const double* std,
                                      tessera_trainer_t** trainer) {
  return guarded("tessera_trainer_create_normalized",
                 [&] { create(config_path, comm, channels, nlat, nlon, latitude_grid, nullptr, -1, mean, -1, std, -1, trainer); });
}

int tessera_trainer_create_normalized_f(const char* config_path, MPI_Fint comm, int64_t channels, int64_t nlat,
                                        int64_t nlon, int latitude_grid, const double* mean, int64_t mean_count,
                                        const double* std, int64_t std_count, tessera_trainer_t** trainer) {
  return guarded("tessera_trainer_create_normalized_f", [&] {
    create(config_path, capi::comm_from_fortran(comm), channels, nlat, nlon, latitude_grid, nullptr, -1, mean,
           mean_count, std, std_count, trainer);
  });
}

int tessera_trainer_create_latitudes(const char* config_path, MPI_Comm comm, int64_t channels, int64_t nlat,
                                     int64_t nlon, const double* latitudes, const double* mean, const double* std,
                                     tessera_trainer_t** trainer) {
  return guarded("tessera_trainer_create_latitudes", [&] {
    create(config_path, comm, channels, nlat, nlon, TESSERA_LATITUDES_EXPLICIT, latitudes, -1, mean, -1, std, -1,
           trainer);
  });
}

int tessera_trainer_create_latitudes_f(const char* config_path, MPI_Fint comm, int64_t channels, int64_t nlat,
                                       int64_t nlon, const double* latitudes, int64_t latitudes_count,
                                       const double* mean, int64_t mean_count, const double* std, int64_t std_count,
                                       tessera_trainer_t** trainer) {
  return guarded("tessera_trainer_create_latitudes_f", [&] {
    create(config_path, capi::comm_from_fortran(comm), channels, nlat, nlon, TESSERA_LATITUDES_EXPLICIT, latitudes,
           latitudes_count, mean, mean_count, std, std_count, trainer);
  });
}

int tessera_trainer_destroy(tessera_trainer_t** trainer) {
  return guarded("tessera_trainer_destroy", [&] {
    require(trainer, "the handle pointer");
    delete *trainer;
    *trainer = nullptr;
  });
}

int tessera_trainer_box(const tessera_trainer_t* trainer, int64_t* lat_start, int64_t* lat_count,
                        int64_t* lon_start, int64_t* lon_count) {
  return guarded("tessera_trainer_box", [&] {
    require(lat_start, "lat_start");
    require(lat_count, "lat_count");
    require(lon_start, "lon_start");
    require(lon_count, "lon_count");
    const domain::LocalBox box = trainer_of(trainer).model->decomposition().box();
    *lat_start = box.lat.start;
    *lat_count = box.lat.length;
    *lon_start = box.lon.start;
    *lon_count = box.lon.length;
  });
}

int tessera_trainer_mesh(const tessera_trainer_t* trainer, int* sizes, int* coords) {
  return guarded("tessera_trainer_mesh", [&] {
    require(sizes, "sizes");
    require(coords, "coords");
    const Mesh& mesh = *trainer_of(trainer).mesh;
    sizes[0] = mesh.dp_size();
    sizes[1] = mesh.tp_size();
    sizes[2] = mesh.domain_size();
    coords[0] = mesh.coords().dp;
    coords[1] = mesh.coords().tp;
    coords[2] = mesh.coords().domain;
  });
}

int tessera_trainer_steps(const tessera_trainer_t* trainer, int64_t* steps) {
  return guarded("tessera_trainer_steps", [&] {
    require(steps, "steps");
    *steps = trainer_of(trainer).steps;
  });
}

int tessera_trainer_pending(const tessera_trainer_t* trainer, int64_t* micro_batches) {
  return guarded("tessera_trainer_pending", [&] {
    require(micro_batches, "micro_batches");
    *micro_batches = trainer_of(trainer).micro;
  });
}

int tessera_trainer_use_decomp(tessera_trainer_t* trainer, const tessera_decomp_t* decomp) {
  return guarded("tessera_trainer_use_decomp", [&] {
    tessera_trainer& t = trainer_of(trainer);
    const Mesh& mesh = *t.mesh;
    if (decomp == nullptr) {  // the trainer's own bands again
      t.plan.reset();
      t.decomp.reset();
      return;
    }
    const domain::Decomposition* code = nullptr;
    agree_on_success(mesh.world().mpi_comm(), [&] {
      code = &capi::decomposition_of(decomp);
      const int n = code->comm().size(), m = mesh.world_size();
      if (n != m) {
        throw InvalidArgument("tessera_trainer_use_decomp: the decomposition's communicator has " + std::to_string(n) +
                              " ranks, the trainer's " + std::to_string(m) + "; both must hold the same ranks");
      }
      int same = MPI_UNEQUAL;
      MPI_Comm_compare(code->comm().mpi_comm(), mesh.world().mpi_comm(), &same);
      if (same == MPI_UNEQUAL) {
        throw InvalidArgument("tessera_trainer_use_decomp: the decomposition's communicator and the trainer's both "
                              "have " + std::to_string(n) + " ranks but not the same processes");
      }
      if (mesh.dp_size() > 1) {
        throw InvalidArgument("tessera_trainer_use_decomp: " + t.config.source + " sets parallelism.data over " +
                              std::to_string(mesh.dp_size()) + " replicas, which train on different samples; the "
                              "code's one state cannot feed them (data: none)");
      }
      if (mesh.tp_size() * mesh.domain_size() != m) {
        throw InvalidArgument("tessera_trainer_use_decomp: the trainer's mesh has " + std::to_string(m) +
                              " ranks but tensor x domain is " + std::to_string(mesh.tp_size() * mesh.domain_size()));
      }
      if (code->global_lat() != t.arch.nlat || code->global_lon() != t.arch.nlon) {
        throw InvalidArgument("tessera_trainer_use_decomp: the decomposition's grid is " +
                              std::to_string(code->global_lat()) + " x " + std::to_string(code->global_lon()) +
                              " (nlat x nlon), the trainer's " + std::to_string(t.arch.nlat) + " x " +
                              std::to_string(t.arch.nlon) + "; the two grids must be the same");
      }
    });
    // The model's layout of the plan is the trainer's mesh: model rank tp * D + domain
    // holds domain rank `domain`'s band (redistribution.hpp), here every rank of the
    // mesh, named by its rank in the decomposition's communicator.
    const int D = mesh.domain_size();
    const int mine = mesh.coords().tp * D + mesh.coords().domain;
    std::vector<int> index(static_cast<std::size_t>(mesh.world_size()));
    MPI_Allgather(&mine, 1, MPI_INT, index.data(), 1, MPI_INT, code->comm().mpi_comm());
    std::vector<int> ranks(index.size());
    for (std::size_t r = 0; r < index.size(); ++r) ranks[static_cast<std::size_t>(index[r])] = static_cast<int>(r);
    auto plan = std::make_unique<domain::Redistribution>(*code, domain::ModelRanks::list(ranks),
                                                         domain::ModelLayout{{D, 1}, mesh.tp_size()});
    agree_on_success(mesh.world().mpi_comm(), [&] {
      if (!(plan->model_box() == t.model->decomposition().box())) {
        throw InternalError("tessera_trainer_use_decomp: the trainer's band " + t.model->decomposition().box().str() +
                            " is not the plan's " + plan->model_box().str());
      }
    });
    t.plan = std::move(plan);
    t.decomp = decomp->state;
  });
}

int tessera_trainer_step(tessera_trainer_t* trainer, const void* input, const void* target, tessera_dtype_t dtype,
                         tessera_order_t order, int ndim, const int64_t* shape, double* loss) {
  return guarded("tessera_trainer_step", [&] {
    tessera_trainer& t = trainer_of(trainer);
    const std::vector<Tensor> xy = fields(t, {{input, "trainer input"}, {target, "trainer target"}}, dtype, order,
                                          ndim, shape, !t.arch.mean.empty());
    // The replicas' losses are averaged as equals, and the dp gradient reduction averages
    // too: that is the mean over all samples only when every replica has as many.
    const std::vector<std::int64_t> b{agree_batch(t, xy[0].size(0))};
    const std::int64_t accumulate = t.config.optimizer.accumulate;
    if (t.micro > 0 && b[0] != t.micro_batch) {
      throw ShapeError("batch size B " + std::to_string(b[0]) + " in micro-batch " + std::to_string(t.micro + 1) +
                       " of " + std::to_string(accumulate) + " (optimizer.accumulate) of step " +
                       std::to_string(t.steps + 1) + ", whose first micro-batch had B " +
                       std::to_string(t.micro_batch) + "; every micro-batch of a step must have as many samples");
    }
    // TrainingStep's accumulation, spread over the calls: begin() zeroes the gradients
    // before the first micro-batch, finish() reduces, averages and updates after the last.
    if (t.micro == 0) {
      t.step->begin();
      t.micro_batch = b[0];
    }
    t.step->before_backward(t.micro);
    const double value = train::field_emulator_forward_backward(*t.model, xy[0], xy[1]);
    // A loss that is not finite: what this rank's batch held, for finish()'s report.
    if (!std::isfinite(value)) t.step->note_non_finite_loss(t.steps + 1, batch_problem(t, xy, t.steps + 1));
    if (++t.micro == accumulate) {
      t.micro = 0;  // a failed update (divergence) leaves no half step behind
      // The norm is measured every step (one all-reduce), so that a step whose gradients
      // are not finite stops here, naming its cause, instead of writing NaN weights.
      t.step->finish(t.steps + 1, /*measure_norm=*/true);
      ++t.steps;
    }
    Tensor mean = Tensor::from_vector(std::vector<double>{value}, {1});
    t.mesh->dp().all_reduce(mean, ReduceOp::avg);
    if (loss != nullptr) *loss = mean.to_vector<double>()[0];
  });
}

int tessera_trainer_predict(tessera_trainer_t* trainer, const void* input, void* output, tessera_dtype_t dtype,
                            tessera_order_t order, int ndim, const int64_t* shape) {
  return guarded("tessera_trainer_predict", [&] {
    tessera_trainer& t = trainer_of(trainer);
    Tensor in = fields(t, {{input, "trainer input"}}, dtype, order, ndim, shape, /*normalize=*/false)[0];
    Tensor out;
    agree_on_success(t.mesh->world().mpi_comm(), [&] {
      out = capi::array_view(output, dtype, order, ndim, shape, "trainer output");
      out = t.plan ? capi::batch_view(out, t.arch.channels, caller_box(t), "trainer output") : out.reshape(in.shape());
    });
    // predict() copies the input first (the output may be the input array) and, under
    // data.normalize, normalises it and returns physical units (without: scale 1, shift 0).
    // With a code decomposition the input is already the bands' copy.
    Tensor y = t.model->predict(in);
    if (t.data_parallel) t.data_parallel->finish_evaluation();
    if (y.dtype() != out.dtype()) y = ops::cast(y, out.dtype());
    if (t.plan) {
      // The bands' prediction back into the code's boxes (each cell from tp rank 0).
      const Shape leading(out.shape().begin(), out.shape().end() - 2);
      t.plan->to_code({y.to(Device::host()).contiguous().reshape(t.plan->model_shape(leading))}, {out});
    } else {
      out.copy_from(y);
    }
  });
}

int tessera_trainer_save(tessera_trainer_t* trainer, const char* dir) {
  return guarded("tessera_trainer_save", [&] {
    tessera_trainer& t = trainer_of(trainer);
    const train::RunConfig& cfg = t.config;
    if (t.micro > 0) {
      throw InvalidArgument("tessera_trainer_save: " + std::to_string(t.micro) + " of the " +
                            std::to_string(cfg.optimizer.accumulate) + " micro-batches (optimizer.accumulate) of step " +
                            std::to_string(t.steps + 1) +
                            " are accumulated, and a checkpoint holds no partial gradients: save after the step's "
                            "last tessera_trainer_step");
    }
    const std::string root = dir != nullptr && *dir != '\0' ? dir : cfg.checkpoint.dir;
    if (root.empty()) {
      throw ConfigError("tessera_trainer_save: no directory given and " + cfg.source + " sets no checkpoint.dir");
    }
    io::SaveOptions so;
    so.layout = cfg.checkpoint.layout;
    so.step = t.steps;
    so.keep_last = cfg.checkpoint.keep_last;
    so.metadata = models::model_metadata(t.arch, "run:\n  config: \"" + cfg.source + "\"\n  seed: " +
                                                     std::to_string(cfg.schedule.seed) +
                                                     "\n  trainer: tessera_trainer\n  lead: " +
                                                     std::to_string(cfg.data.lead) + "\n");
    if (cfg.checkpoint.async) {
      // The snapshot now; the files in the background (tessera_trainer_wait_save).
      if (!t.async_saver) t.async_saver = std::make_unique<io::AsyncCheckpointer>(*t.mesh);
      t.async_saver->save(root, *t.model, &t.step->optimizer(), so);
      return;
    }
    io::save_checkpoint(root, *t.mesh, *t.model, &t.step->optimizer(), so);
  });
}

int tessera_trainer_wait_save(tessera_trainer_t* trainer) {
  return guarded("tessera_trainer_wait_save", [&] {
    tessera_trainer& t = trainer_of(trainer);
    if (t.async_saver) t.async_saver->wait();
  });
}

int tessera_trainer_restore(tessera_trainer_t* trainer, const char* path) {
  return guarded("tessera_trainer_restore", [&] {
    tessera_trainer& t = trainer_of(trainer);
    if (t.async_saver) t.async_saver->wait();  // the checkpoint being written may be the one asked for
    const std::string from = path != nullptr && *path != '\0' ? path : t.config.checkpoint.dir;
    if (from.empty()) {
      throw ConfigError("tessera_trainer_restore: no path given and " + t.config.source + " sets no checkpoint.dir");
    }
    const io::CheckpointMetadata header = io::read_checkpoint_metadata(from, t.mesh->world());
    agree_on_success(t.mesh->world().mpi_comm(),
                     [&] { train::check_saved_field_emulator(header, t.arch, "tessera_trainer_restore"); });
    const io::LoadResult loaded = io::load_checkpoint(header.file, *t.mesh, *t.model, &t.step->optimizer());
    t.steps = loaded.step;
    t.micro = 0;  // the next call starts a step: begin() zeroes what was accumulated
    t.step->weights_loaded();  // begin() notes whether the loaded weights are finite
  });
}

}  // extern "C"
