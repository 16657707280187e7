// How long a training loop stands still per checkpoint, synchronous against
// asynchronous saves (io/async_checkpoint.hpp), and how fast its steps run while a
// background write is in flight, measured in one run (docs/performance.md,
// "Asynchronous checkpoints").
//
//   mpiexec -n 2 bench_async_checkpoint [--mb_per_rank=256] [--rows=4] [--rounds=3]
//                                       [--layout=per_rank] [--dir=DIR]
//
// The model: column(H -> H) -> row(H -> H) over tp = the world size, H chosen so each
// rank holds about mb_per_rank MiB of f32 weights. A step: forward and backward of
// `rows` rows, then an SGD update of every weight (so the step changes all the bytes a
// save copies). Every round, in an order reversed every other round:
//   steps   the step time without any save (the median of 6 steps)
//   sync    save_checkpoint between two steps: the time the loop stands still
//   async   AsyncCheckpointer::save between two steps: the time the loop stands still
//           (snapshot and cross-rank checks), then steps until the background write has
//           committed on every rank: their mean time against the `steps` median.
// Every time is the maximum over ranks (MPI_Allreduce MAX after the timed part), so
// the ratios are the slowest rank's. Rank 0 prints a table and a JSON line.

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tessera/io/async_checkpoint.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/linear.hpp"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

struct Flags {
  long mb_per_rank = 256;
  long rows = 4;
  int rounds = 3;
  io::CheckpointLayout layout = io::CheckpointLayout::per_rank;
  std::string dir = "bench_async_checkpoint_data";
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("--") + name + "=";
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("mb_per_rank")) f.mb_per_rank = std::stol(v);
    else if (const char* v = value("rows")) f.rows = std::stol(v);
    else if (const char* v = value("rounds")) f.rounds = std::stoi(v);
    else if (const char* v = value("layout")) f.layout = io::parse_checkpoint_layout(v);
    else if (const char* v = value("dir")) f.dir = v;
    else throw InvalidArgument("bench_async_checkpoint: unknown argument '" + a + "'");
  }
  return f;
}

double max_over_ranks(double seconds) {
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

template <class F>
double timed(F&& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return max_over_ranks(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct Bench {
  Flags flags;
  Mesh mesh;
  std::unique_ptr<nn::Sequential> net;
  std::unique_ptr<Sgd> sgd;
  Tensor x, dy;
  std::int64_t h = 0;
  std::int64_t step_number = 0;

  explicit Bench(const Flags& f) : flags(f), mesh(MPI_COMM_WORLD, tp_config()) {
    const int tp = mesh.tp_size();
    // Two H x H layers split over tp ranks: 2 H^2 / tp f32 per rank.
    const double elements = static_cast<double>(f.mb_per_rank) * (1 << 20) / 4.0 * tp / 2.0;
    const std::int64_t unit = 16 * tp;
    h = std::max<std::int64_t>(unit, static_cast<std::int64_t>(std::sqrt(elements) / unit) * unit);
    net = std::make_unique<nn::Sequential>();
    net->append(std::make_unique<tp::ColumnParallelLinear>(h, h, mesh.tp(), false));
    net->append(std::make_unique<tp::RowParallelLinear>(h, h, mesh.tp(), true));
    nn::initialize_parameters(*net, 1);
    SgdOptions so;
    so.lr = 1e-6;
    sgd = std::make_unique<Sgd>(net->named_parameters(), so);
    x = Tensor::zeros({f.rows, h}, DType::f32);
    dy = Tensor::zeros({f.rows, h}, DType::f32);
  }

  static ParallelismConfig tp_config() {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    ParallelismConfig c;
    c.data = DataParallelMode::none;
    c.tensor = n;
    return c;
  }

  double step() {
    return timed([&] {
      net->forward(x);
      net->backward(dy);
      sgd->step();
      ++step_number;
    });
  }

  io::SaveOptions options() const {
    io::SaveOptions o;
    o.layout = flags.layout;
    o.step = step_number;
    o.keep_last = 2;  // the disk holds two steps at most
    return o;
  }
};

struct Round {
  double step = 0, sync = 0, async_still = 0, during = 0;
  int steps_during = 0;
  double write = 0;
};

// Steps are collective: before each step during a write the ranks agree whether any
// writer still runs (one small all-reduce); the steps without a write pay the same.
bool any_rank(bool mine) {
  int flag = mine ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return flag != 0;
}

double plain_steps(Bench& b) {
  std::vector<double> t;
  for (int i = 0; i < 6; ++i) {
    (void)any_rank(true);
    t.push_back(b.step());
  }
  return median(t);
}

double sync_save(Bench& b) {
  b.step();
  const double t = timed([&] { io::save_checkpoint(b.flags.dir, b.mesh, *b.net, b.sgd.get(), b.options()); });
  b.step();
  return t;
}

// The stand-still time of save(), then steps until every rank's writer has committed.
void async_save(Bench& b, io::AsyncCheckpointer& saver, std::atomic<bool>& done, Round& r) {
  b.step();
  done = false;
  r.async_still = timed([&] { saver.save(b.flags.dir, *b.net, b.sgd.get(), b.options()); });
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> during;
  while (any_rank(!done)) during.push_back(b.step());
  r.write = max_over_ranks(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  saver.wait();
  r.steps_during = static_cast<int>(during.size());
  double sum = 0;
  for (double d : during) sum += d;
  r.during = during.empty() ? NAN : sum / static_cast<double>(during.size());
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int status = 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    Bench b(parse_flags(argc, argv));
    if (rank == 0) fs::remove_all(b.flags.dir);
    MPI_Barrier(MPI_COMM_WORLD);
    std::atomic<bool> done{false};
    io::AsyncCheckpointer saver(b.mesh, [&](const io::AsyncSaveFinished&) { done = true; });
    const double mib = static_cast<double>(2 * b.h * b.h / b.mesh.tp_size() * 4) / (1 << 20);
    if (rank == 0) {
      std::printf("bench_async_checkpoint: %d ranks, H %lld, %.1f MiB of weights per rank, %s, %lld rows per step\n",
                  b.mesh.world_size(), static_cast<long long>(b.h), mib,
                  std::string(io::checkpoint_layout_name(b.flags.layout)).c_str(), static_cast<long long>(b.flags.rows));
      std::printf("%5s %10s %10s %12s %10s %10s %8s %12s %12s\n", "round", "step_ms", "sync_ms", "async_still_ms",
                  "write_ms", "during_ms", "steps", "still/sync", "speed_during");
    }
    b.step();  // warm-up: first-touch of the activations and gradients
    { Round warm; async_save(b, saver, done, warm); }  // warm-up: the snapshot buffers
    std::vector<Round> rounds;
    for (int i = 0; i < b.flags.rounds; ++i) {
      Round r;
      r.step = plain_steps(b);
      if (i % 2 == 0) {
        r.sync = sync_save(b);
        async_save(b, saver, done, r);
      } else {
        async_save(b, saver, done, r);
        r.sync = sync_save(b);
      }
      rounds.push_back(r);
      if (rank == 0) {
        std::printf("%5d %10.1f %10.1f %12.1f %10.1f %10.1f %8d %12.3f %12.3f\n", i + 1, 1e3 * r.step, 1e3 * r.sync,
                    1e3 * r.async_still, 1e3 * r.write, 1e3 * r.during, r.steps_during, r.async_still / r.sync,
                    r.step / r.during);
        std::fflush(stdout);
      }
    }
    std::vector<double> still, speed, sync, async_still, step;
    for (const Round& r : rounds) {
      still.push_back(r.async_still / r.sync);
      if (r.steps_during > 0) speed.push_back(r.step / r.during);
      sync.push_back(r.sync);
      async_still.push_back(r.async_still);
      step.push_back(r.step);
    }
    if (rank == 0) {
      std::printf("median: sync %.1f ms, async stand-still %.1f ms (%.3f x sync), steps during the write at %.3f x the "
                  "speed without one (step %.1f ms)\n",
                  1e3 * median(sync), 1e3 * median(async_still), median(still), median(speed), 1e3 * median(step));
      std::printf("{\"ranks\": %d, \"mib_per_rank\": %.1f, \"sync_ms\": %.2f, \"async_still_ms\": %.2f, "
                  "\"still_over_sync\": %.4f, \"speed_during_write\": %.4f, \"step_ms\": %.2f}\n",
                  b.mesh.world_size(), mib, 1e3 * median(sync), 1e3 * median(async_still), median(still),
                  median(speed), 1e3 * median(step));
    }
    if (rank == 0) fs::remove_all(b.flags.dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_async_checkpoint: rank %d: %s\n", rank, e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
