// The pipeline bubble: one training step (forward and backward of every microbatch) of
// a stack of GELU MLP layers split over p = the number of ranks stages, for
// m = p, 2p, 4p, 8p microbatches, GPipe and 1F1B. Counters:
//   bubble     the idle fraction of the busiest stage, 1 - (its compute time) / (the
//              step's time): the time the pipeline's bottleneck waits on the schedule's
//              fill and drain and on messages;
//   theory     (p - 1) / (m + p - 1), the schedules' bubble when the stages are equally
//              fast, a backward costs a fixed multiple of a forward and messages are free;
//   idle       1 - (a stage's compute time) / (the step's time), averaged over the stages:
//              the bubble plus what the faster stages wait for the slowest one;
//   imbalance  the slowest stage's compute time over the fastest's, minus 1. The stages
//              hold the same layers, so this is what the machine makes of equal work
//              (docs/pipeline.md: one core of the 2-core test machine runs them ~10 %
//              slower than the other).
// With stages of unequal speed the theory holds for the busiest stage, not for the
// average: a faster stage also idles in the steady state, waiting for the slowest one.
// benchmarks/pipeline_bubble_model.py replays the schedules with message costs and an
// imbalance, and prints both figures.
//
//   mpiexec -bind-to core -n 2 bench_pipeline [--hidden=256] [--rows=32] [--layers=2]
//                                             [--activations=stash|recompute] [--threads=1]
//
// --rows is the rows of one microbatch (the batch grows with m, so the work per
// microbatch is fixed); --layers the Linear + GELU pairs per stage; --activations how
// the stages keep their activations (pp/pipeline.hpp). Run one rank per core, bound to
// it (-bind-to core; srun --cpu-bind=cores): a rank that shares its core with another
// stage is idle when it is descheduled, not only in the bubble, and unbound ranks that
// the scheduler moves between cores measured a larger bubble (docs/pipeline.md).
//
// The measured bubble sits above theory by what the schedule does not model: the
// stage-boundary messages, the loss on the last stage and, with --activations=recompute,
// the forward re-run before a backward that 1F1B's last stage skips (so the stages'
// work differs by one forward per microbatch).

#include <memory>
#include <numeric>

#include "bench_support.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/pp/pipeline.hpp"

using namespace tessera;

namespace {

struct State {
  std::unique_ptr<Mesh> mesh;
  std::int64_t hidden = 256, rows = 32, layers = 2;
  pp::StageActivations activations = pp::StageActivations::stash;
};
State g;

void BM_pipeline(benchmark::State& state, pp::Schedule schedule) {
  const int p = g.mesh->pp_size();
  const int m = static_cast<int>(state.range(0)) * p;
  nn::Sequential model;
  for (std::int64_t i = 0; i < g.layers * p; ++i) {
    model.append(std::make_unique<nn::Linear>(g.hidden, g.hidden));
    model.append(std::make_unique<nn::GELU>());
  }
  pp::PipelineOptions options;
  options.schedule = schedule;
  options.microbatches = m;
  options.activations = g.activations;
  pp::Pipeline pipeline(model, *g.mesh, options);
  nn::initialize_parameters(model, 1);
  const std::int64_t batch_rows = g.rows * m;
  std::vector<float> values(static_cast<std::size_t>(batch_rows * g.hidden));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
  const Tensor batch = Tensor::from_vector(values, {batch_rows, g.hidden});
  // A loss whose gradient is the output itself (0.5 |y|^2): cheap beside the layers.
  auto loss = [](const Tensor& y, const pp::Microbatch&, Tensor& grad) {
    grad = y;
    return 0.0;
  };
  // One step before timing: the first fills the allocator's cache (page faults) and the
  // stash's free lists, which later steps reuse.
  model.zero_grad();
  pipeline.train_step(batch, loss);
  double bubble_sum = 0, idle_sum = 0, imbalance_sum = 0;
  for (auto _ : state) {
    model.zero_grad();
    const double t = bench::timed(g.mesh->world(), [&] { pipeline.train_step(batch, loss); });
    state.SetIterationTime(t);
    // Against the step's time (the slowest rank's, as the schedule's model counts it),
    // not the stage's own span: a stage that finishes early is idle until the step ends.
    const auto& times = pipeline.last_step_times();
    Tensor idle = Tensor::from_vector<double>({1.0 - times.compute_seconds / t}, {1});
    g.mesh->pp().all_reduce(idle, ReduceOp::avg);
    idle_sum += idle.to_vector<double>()[0];
    Tensor slowest = Tensor::from_vector<double>({times.compute_seconds}, {1});
    Tensor fastest = slowest.clone();
    g.mesh->pp().all_reduce(slowest, ReduceOp::max);
    g.mesh->pp().all_reduce(fastest, ReduceOp::min);
    const double busiest = slowest.to_vector<double>()[0];
    bubble_sum += 1.0 - busiest / t;
    imbalance_sum += busiest / fastest.to_vector<double>()[0] - 1.0;
  }
  const auto per_step = [&](double sum) { return sum / static_cast<double>(state.iterations()); };
  state.counters["p"] = p;
  state.counters["m"] = m;
  state.counters["bubble"] = per_step(bubble_sum);
  state.counters["theory"] = pp::schedule_bubble_fraction(p, m);
  state.counters["idle"] = per_step(idle_sum);
  state.counters["imbalance"] = per_step(imbalance_sum);
}

void register_all(const bench::Flags& flags) {
  ParallelismConfig config;
  MPI_Comm_size(MPI_COMM_WORLD, &config.pipeline);
  g.mesh = std::make_unique<Mesh>(MPI_COMM_WORLD, config);
  g.hidden = bench::int_list(flags.at("hidden"), "hidden").front();
  g.rows = bench::int_list(flags.at("rows"), "rows").front();
  g.layers = bench::int_list(flags.at("layers"), "layers").front();
  g.activations = pp::parse_stage_activations(flags.at("activations"), "--activations");
  benchmark::AddCustomContext("mesh", "pipeline " + std::to_string(config.pipeline));
  benchmark::AddCustomContext("activations", std::string(pp::stage_activations_name(g.activations)));
  for (auto schedule : {pp::Schedule::gpipe, pp::Schedule::one_f_one_b}) {
    auto* b = benchmark::RegisterBenchmark(("pipeline_" + std::string(pp::schedule_name(schedule))).c_str(),
                                           BM_pipeline, schedule);
    for (long k : {1, 2, 4, 8}) b->Arg(k);  // m = k * p
    b->UseManualTime()->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run(argc, argv, "bench_pipeline", {{"hidden", "256"}, {"rows", "32"}, {"layers", "2"}, {"activations", "stash"}}, register_all);
}
