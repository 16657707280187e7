// tessera's all_reduce / all_gather / reduce_scatter against the raw MPI calls on the
// same buffers, with algorithm and bus bandwidth as nccl-tests defines them:
//   algbw = S / t, with S the per-rank buffer size (all_reduce), the gathered output
//           (all_gather) or the scattered input (reduce_scatter);
//   busbw = algbw * 2(n-1)/n (all_reduce), algbw * (n-1)/n (all_gather, reduce_scatter).
//
//   mpiexec -n 4 bench_collectives [--bytes=8,1024,...] [--wait=auto|spin|sleep]
//                                  [--recorder_bytes=32]
//
// The raw MPI side calls the blocking MPI function on a duplicate of MPI_COMM_WORLD
// (what an application would write); tessera's side goes through a Communicator with
// the chosen wait policy. On an oversubscribed node the difference between the two is
// the wait policy (see docs/performance.md).
//
// all_reduce/flight_recorder times the flight recorder's cost (tessera/flight_recorder.hpp):
// blocks of all-reduces on a communicator that keeps a ring, beside the same blocks on one
// that does not, alternating within every iteration so that both see the same machine.

#include <memory>

#include "bench_support.hpp"
#include "tessera/flight_recorder.hpp"
#include "tessera/wait_policy.hpp"

using namespace tessera;

namespace {

enum class Op { all_reduce, all_gather, reduce_scatter };

struct State {
  std::unique_ptr<Communicator> comm;
  MPI_Comm raw = MPI_COMM_NULL;
  std::unique_ptr<Communicator> recorder_on, recorder_off;
};
State g;

// S of nccl-tests for a per-rank count of `elements` floats.
double size_bytes(Op op, std::int64_t elements, int ranks) {
  const double per_rank = static_cast<double>(elements) * 4.0;
  return op == Op::all_reduce ? per_rank : per_rank * ranks;
}

double bus_factor(Op op, int n) {
  if (n == 1) return 1.0;
  return op == Op::all_reduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

void report(benchmark::State& state, Op op, std::int64_t elements, double total_seconds) {
  const int n = g.comm->size();
  const double s = size_bytes(op, elements, n);
  const double t = total_seconds / static_cast<double>(state.iterations());
  state.counters["bytes"] = s;
  state.counters["algbw_GBps"] = s / t / 1e9;
  state.counters["busbw_GBps"] = s / t / 1e9 * bus_factor(op, n);
  state.counters["ranks"] = n;
}

void BM_collective(benchmark::State& state, Op op, bool raw) {
  const int n = g.comm->size();
  // Per-rank element count: bytes / 4, a multiple of n so reduce_scatter splits evenly.
  const std::int64_t elements = std::max<std::int64_t>(n, state.range(0) / 4 / n * n);
  const std::int64_t out_elements = op == Op::all_gather ? elements * n
                                    : op == Op::reduce_scatter ? elements / n
                                                               : elements;
  Tensor in = Tensor::zeros({elements}, DType::f32);
  Tensor out = Tensor::zeros({out_elements}, DType::f32);
  double total = 0;
  for (auto _ : state) {
    const double t = bench::timed(*g.comm, [&] {
      if (raw) {
        const int count = static_cast<int>(op == Op::reduce_scatter ? out_elements : elements);
        switch (op) {
          case Op::all_reduce:
            MPI_Allreduce(MPI_IN_PLACE, in.data(), count, MPI_FLOAT, MPI_SUM, g.raw);
            break;
          case Op::all_gather:
            MPI_Allgather(in.data(), count, MPI_FLOAT, out.data(), count, MPI_FLOAT, g.raw);
            break;
          case Op::reduce_scatter:
            MPI_Reduce_scatter_block(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, g.raw);
            break;
        }
      } else {
        switch (op) {
          case Op::all_reduce: g.comm->all_reduce(in, ReduceOp::sum); break;
          case Op::all_gather: g.comm->all_gather(in, out); break;
          case Op::reduce_scatter: g.comm->reduce_scatter(in, out, ReduceOp::sum); break;
        }
      }
    });
    state.SetIterationTime(t);
    total += t;
  }
  report(state, op, elements, total);
}

// All-reduces per timed block: enough that the per-iteration barrier and the MAX
// all-reduce of the timing rule stay outside a block's time.
constexpr int kRecorderBlock = 1000;

void BM_flight_recorder(benchmark::State& state) {
  Tensor x = Tensor::zeros({std::max<std::int64_t>(1, state.range(0) / 4)}, DType::f32);
  auto block = [&](Communicator& comm) {
    return bench::timed(comm, [&] {
      for (int i = 0; i < kRecorderBlock; ++i) comm.all_reduce(x);
    });
  };
  double on_total = 0, off_total = 0;
  bool on_first = true;
  for (auto _ : state) {
    // Alternate which goes first, so neither always follows the barrier's wake-up.
    const double first = block(on_first ? *g.recorder_on : *g.recorder_off);
    const double second = block(on_first ? *g.recorder_off : *g.recorder_on);
    const double on = on_first ? first : second;
    off_total += on_first ? second : first;
    on_total += on;
    on_first = !on_first;
    state.SetIterationTime(on);  // a block: Google Benchmark sizes the run by what it really takes
  }
  const double calls = static_cast<double>(state.iterations()) * kRecorderBlock;
  state.counters["recorder_on_us"] = 1e6 * on_total / calls;
  state.counters["recorder_off_us"] = 1e6 * off_total / calls;
  state.counters["overhead_pct"] = 100.0 * (on_total / off_total - 1.0);
}

// The two communicators of BM_flight_recorder, with and without a ring.
void open_recorder_pair(const WaitOptions& wait) {
  const std::size_t configured = flight_recorder_capacity();
  set_flight_recorder_capacity(configured > 0 ? configured : 256);
  g.recorder_on = std::make_unique<Communicator>(MPI_COMM_WORLD, wait);
  set_flight_recorder_capacity(0);
  g.recorder_off = std::make_unique<Communicator>(MPI_COMM_WORLD, wait);
  set_flight_recorder_capacity(configured);
}

void register_all(const bench::Flags& flags) {
  WaitOptions wait;
  wait.policy = parse_wait_policy(flags.at("wait"), "--wait");
  g.comm = std::make_unique<Communicator>(MPI_COMM_WORLD, wait);
  MPI_Comm_dup(MPI_COMM_WORLD, &g.raw);
  benchmark::AddCustomContext("wait_policy", std::string(wait_policy_name(g.comm->wait_policy())));
  const auto sizes = bench::int_list(flags.at("bytes"), "bytes");
  const std::pair<const char*, Op> ops[] = {
      {"all_reduce", Op::all_reduce}, {"all_gather", Op::all_gather}, {"reduce_scatter", Op::reduce_scatter}};
  for (const auto& [name, op] : ops) {
    for (bool raw : {false, true}) {
      auto* b = benchmark::RegisterBenchmark((std::string(name) + (raw ? "/mpi" : "/tessera")).c_str(),
                                             BM_collective, op, raw);
      for (long bytes : sizes) b->Arg(bytes);
      b->UseManualTime()->Unit(benchmark::kMicrosecond);
    }
  }
  open_recorder_pair(wait);
  auto* b = benchmark::RegisterBenchmark("all_reduce/flight_recorder", BM_flight_recorder);
  for (long bytes : bench::int_list(flags.at("recorder_bytes"), "recorder_bytes")) b->Arg(bytes);
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run(argc, argv, "bench_collectives",
                    {{"bytes", "8,1024,65536,1048576,16777216"}, {"wait", "auto"}, {"recorder_bytes", "32"}}, register_all);
}
