// A column -> GELU -> row tensor-parallel MLP (hidden 4H), forward + backward, over
// sizes and tp = the number of ranks. GFLOP/s counts the six GEMMs of forward and
// backward (48 N H^2 flops); parallel efficiency against the serial layer on one rank,
// E = T(1) / (tp * T(tp)), comes from a sweep over rank counts (scripts/bench-sweep).
//
//   mpiexec -n 2 bench_tp_mlp [--hidden=256,512,1024] [--tokens=512] [--threads=1]
//
// For parallel efficiency run every rank count with --threads=1 (scripts/bench-sweep
// does): the 1-rank baseline and each tp rank then use one core, core for core. The
// default (--threads=auto) gives each rank its share of the node's cores instead.

#include <memory>

#include "bench_support.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/tp/linear.hpp"

using namespace tessera;

namespace {

struct State {
  std::unique_ptr<Mesh> mesh;
  std::int64_t tokens = 512;
};
State g;

void BM_tp_mlp(benchmark::State& state) {
  const std::int64_t h = state.range(0);
  Communicator& tp = g.mesh->tp();
  nn::Sequential mlp;
  mlp.append(std::make_unique<tp::ColumnParallelLinear>(h, 4 * h, tp, /*gather_output=*/false));
  mlp.append(std::make_unique<nn::GELU>());
  mlp.append(std::make_unique<tp::RowParallelLinear>(4 * h, h, tp, /*input_is_parallel=*/true));
  nn::initialize_parameters(mlp, 1);
  std::vector<float> values(static_cast<std::size_t>(g.tokens * h));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
  const Tensor x = Tensor::from_vector(values, {g.tokens, h});
  const Tensor dy = x.clone();
  double total = 0;
  for (auto _ : state) {
    const double t = bench::timed(g.mesh->world(), [&] {
      benchmark::DoNotOptimize(mlp.forward(x).data());
      benchmark::DoNotOptimize(mlp.backward(dy).data());
    });
    state.SetIterationTime(t);
    total += t;
  }
  const double flops = 48.0 * static_cast<double>(g.tokens) * static_cast<double>(h) * static_cast<double>(h);
  state.counters["tp"] = tp.size();
  state.counters["hidden"] = static_cast<double>(h);
  state.counters["tokens"] = static_cast<double>(g.tokens);
  state.counters["GFLOPs"] = flops * static_cast<double>(state.iterations()) / total / 1e9;
}

void register_all(const bench::Flags& flags) {
  ParallelismConfig config;
  MPI_Comm_size(MPI_COMM_WORLD, &config.tensor);
  g.mesh = std::make_unique<Mesh>(MPI_COMM_WORLD, config);
  g.tokens = bench::int_list(flags.at("tokens"), "tokens").front();
  benchmark::AddCustomContext("mesh", "dp 1 x tp " + std::to_string(config.tensor) + " x domain 1");
  auto* b = benchmark::RegisterBenchmark("tp_mlp", BM_tp_mlp);
  for (long h : bench::int_list(flags.at("hidden"), "hidden")) b->Arg(h);
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run(argc, argv, "bench_tp_mlp", {{"hidden", "256,512,1024"}, {"tokens", "512"}}, register_all);
}
