#include "predict_field_emulator.hpp"

#include <memory>
#include <string>

#include "predict_rollout.hpp"
#include "tessera/agree.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/models/load_model.hpp"

namespace tessera::run {

int predict_field_emulator(const RunConfig& cfg, const Options& opts) {
  if (cfg.model_type != "field_emulator") {
    throw ConfigError(cfg.source + ": tessera-run predict rolls out the field emulator; model.type is " + cfg.model_type);
  }
  check_predict_output(cfg, opts);
  Mesh mesh(MPI_COMM_WORLD, cfg.parallelism, run_device(cfg));
  const MPI_Comm world = mesh.world().mpi_comm();
  const Log log(mesh.global_rank() == 0, cfg.log_level);
  start_run(log, cfg, mesh);

  const std::string checkpoint = predict_checkpoint(cfg);
  RolloutModel rollout;
  agree_on_success(world, [&] {
    rollout.checkpoint_file = io::resolve_checkpoint_file(checkpoint);
    rollout.checkpoint_step =
        io::CheckpointReader(rollout.checkpoint_file, io::CheckpointReader::Verify::opened_file).header().step;
  });
  std::unique_ptr<models::FieldEmulator> model = load_model(checkpoint, mesh);
  model->set_compute_precision(cfg.precision);  // the f32 weights, rolled out in the run's numerics
  const models::FieldEmulatorConfig& arch = model->config();
  rollout.description = model->describe();
  rollout.variables = arch.variables;
  rollout.channels = arch.channels;
  rollout.nlat = arch.nlat;
  rollout.nlon = arch.nlon;
  rollout.latitude_spec = arch.latitude_spec();
  rollout.dt_seconds = arch.dt_seconds;
  rollout.decomposition = &model->decomposition();
  rollout.step = [&](const Tensor& state) { return model->predict(state); };
  return write_rollout(cfg, opts, mesh, log, rollout);
}

}  // namespace tessera::run
