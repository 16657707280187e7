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
//
// The floor: every iteration also times, right after the step, the step's six GEMMs
// alone (ops::gemm on preallocated tensors of the rank's shard shapes, the same
// transposes and betas as the layers). Counters gemm_ms (their time, slowest rank) and
// vs_gemms = step time / GEMM time: what the MLP costs beyond its GEMMs (activation,
// bias, copies, allocations and the all-reduces). scripts/bench-peers puts the step
// beside PyTorch's.
//
// tp_mlp_bf16_mixed runs the same MLP (and its GEMM floor) with
// set_compute_precision(bf16_mixed): bf16 GEMM operands, fp32 accumulation. Its time
// over tp_mlp's, in the same run, is what mixed precision costs or saves here.
//
// --device=cuda puts the parameters, activations and the GEMM floor's tensors on this
// rank's GPU (fp32 GEMMs without TF32; bf16_mixed through cuBLAS's bf16 GEMM), the
// Mesh on that device, and drains the device before each clock stop. Ranks that share a
// GPU (2 ranks on 1 GPU) all-reduce through the shared-GPU fallback, staged through host
// MPI; each rank of its own GPU uses NCCL. The tp group's path is settled and one step is
// run untimed before timing (cuBLAS handles, the caching allocator's first blocks).
// Without a GPU the program says so and exits 0.

#include <memory>

#include "bench_support.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/ops.hpp"
#include "tessera/tp/linear.hpp"

using namespace tessera;

namespace {

struct State {
  std::unique_ptr<Mesh> mesh;
  Device device;
  std::int64_t tokens = 512;
};
State g;

void run_tp_mlp(benchmark::State& state, Precision precision) {
  const std::int64_t h = state.range(0);
  Communicator& tp = g.mesh->tp();
  const Device device = g.device;
  tp::ParallelLinearOptions on_device;
  on_device.device = device;
  nn::Sequential mlp;
  mlp.append(std::make_unique<tp::ColumnParallelLinear>(h, 4 * h, tp, /*gather_output=*/false, on_device));
  mlp.append(std::make_unique<nn::GELU>());
  mlp.append(std::make_unique<tp::RowParallelLinear>(4 * h, h, tp, /*input_is_parallel=*/true, on_device));
  nn::initialize_parameters(mlp, 1);
  mlp.set_compute_precision(precision);
  std::vector<float> values(static_cast<std::size_t>(g.tokens * h));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
  const Tensor x = Tensor::from_vector(values, {g.tokens, h}).to(device);
  const Tensor dy = x.clone();

  // The six GEMMs of a step on this rank's shards: y1 = x W1^T, y2 = a W2^T, da = dy W2,
  // dW2 += dy^T a, dx = dh W1, dW1 += dh^T x.
  const std::int64_t f = 4 * h / tp.size();
  auto zeros = [&](const Shape& shape) { return Tensor::zeros(shape, DType::f32, device); };
  Tensor w1 = zeros({f, h}), w2 = zeros({h, f});
  Tensor act = zeros({g.tokens, f}), out = zeros({g.tokens, h}), dact = zeros({g.tokens, f});
  Tensor dx = zeros({g.tokens, h}), dw1 = zeros({f, h}), dw2 = zeros({h, f});
  auto gemms = [&] {
    ops::gemm(x, false, w1, true, act, 1.0, 0.0, precision);
    ops::gemm(act, false, w2, true, out, 1.0, 0.0, precision);
    ops::gemm(dy, false, w2, false, dact, 1.0, 0.0, precision);
    ops::gemm(dy, true, act, false, dw2, 1.0, 1.0, precision);
    ops::gemm(dact, false, w1, false, dx, 1.0, 0.0, precision);
    ops::gemm(dact, true, x, false, dw1, 1.0, 1.0, precision);
  };

  auto step = [&] {
    benchmark::DoNotOptimize(mlp.forward(x).data());
    benchmark::DoNotOptimize(mlp.backward(dy).data());
  };
  if (device.is_cuda()) {
    step();
    gemms();
    bench::synchronize(device);
  }
  double total = 0, gemm_total = 0;
  for (auto _ : state) {
    const double t = bench::timed(g.mesh->world(), step, device);
    state.SetIterationTime(t);
    total += t;
    gemm_total += bench::timed(g.mesh->world(), gemms, device);
  }
  const double flops = 48.0 * static_cast<double>(g.tokens) * static_cast<double>(h) * static_cast<double>(h);
  state.counters["gemm_ms"] = 1e3 * gemm_total / static_cast<double>(state.iterations());
  state.counters["vs_gemms"] = total / gemm_total;
  state.counters["tp"] = tp.size();
  state.counters["hidden"] = static_cast<double>(h);
  state.counters["tokens"] = static_cast<double>(g.tokens);
  state.counters["GFLOPs"] = flops * static_cast<double>(state.iterations()) / total / 1e9;
}

void BM_tp_mlp(benchmark::State& state) { run_tp_mlp(state, Precision::fp32); }
void BM_tp_mlp_bf16_mixed(benchmark::State& state) { run_tp_mlp(state, Precision::bf16_mixed); }

void register_all(const bench::Flags& flags) {
  ParallelismConfig config;
  MPI_Comm_size(MPI_COMM_WORLD, &config.tensor);
  g.device = bench::device();
  g.mesh = std::make_unique<Mesh>(MPI_COMM_WORLD, config, g.device);
  g.mesh->tp().prepare_device(g.mesh->device());  // NCCL or host staging, settled untimed
  g.tokens = bench::int_list(flags.at("tokens"), "tokens").front();
  benchmark::AddCustomContext("mesh", "dp 1 x tp " + std::to_string(config.tensor) + " x domain 1");
  for (auto* b : {benchmark::RegisterBenchmark("tp_mlp", BM_tp_mlp),
                  benchmark::RegisterBenchmark("tp_mlp_bf16_mixed", BM_tp_mlp_bf16_mixed)}) {
    for (long h : bench::int_list(flags.at("hidden"), "hidden")) b->Arg(h);
    b->UseManualTime()->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run(argc, argv, "bench_tp_mlp", {{"hidden", "256,512,1024"}, {"tokens", "512"}, {"device", "host"}}, register_all);
}
