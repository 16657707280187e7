// Checkpoint write and read throughput of both layouts, beside a plain sequential
// write + fsync of the same bytes (each rank writes its own blocks to its own file:
// the ceiling the layouts are measured against).
//
//   mpiexec -n 4 bench_checkpoint [--size_mb=16,64] [--ckpt_dir=DIR] [benchmark flags]
//
// The model is column(H → H) → row(H → H) over tp = world size, H chosen so the master
// weights hold about size_mb MiB of f32. Each iteration: untimed cleanup, barrier, the
// timed operation, then the time is the maximum over ranks (MPI_Allreduce MAX), so every
// rank reports the same time and Google Benchmark makes the same iteration decisions
// everywhere. Only rank 0 reports; bytes_per_second counts master bytes.
//
// --device=cuda builds the model on this rank's GPU (the Mesh on it): save copies the
// parameters to the host, load copies them back, and the write + fsync baseline copies
// its blocks to the host inside its timed region too (what any writer of device data
// pays). Times end after the device's queue is drained. Without a GPU the program says
// so and exits 0.

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/tp/linear.hpp"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

struct Setup {
  std::unique_ptr<Mesh> mesh;
  std::string dir = "bench_checkpoint_data";
  std::vector<int> sizes_mb = {16, 64};
};
Setup setup;

struct Model {
  std::unique_ptr<nn::Sequential> net;
  std::int64_t master_bytes = 0;
  std::vector<Tensor> written_blocks;  // this rank's share of the bytes (main replicas), on the mesh's device
};

Model make_model(int size_mb) {
  const int tp = setup.mesh->tp_size();
  const double elements = static_cast<double>(size_mb) * (1 << 20) / 4.0 / 2.0;
  const std::int64_t unit = 16 * tp;
  const std::int64_t h = std::max<std::int64_t>(unit, static_cast<std::int64_t>(std::sqrt(elements) / unit) * unit);
  Model m;
  tp::ParallelLinearOptions on_device;
  on_device.device = setup.mesh->device();
  m.net = std::make_unique<nn::Sequential>();
  m.net->append(std::make_unique<tp::ColumnParallelLinear>(h, h, setup.mesh->tp(), false, on_device));
  m.net->append(std::make_unique<tp::RowParallelLinear>(h, h, setup.mesh->tp(), true, on_device));
  nn::initialize_parameters(*m.net, 1);
  for (auto& [name, p] : m.net->named_parameters()) {
    m.master_bytes += shape_numel(p->global_shape) * static_cast<std::int64_t>(p->value.element_size());
    const bool main_replica = !p->placement.tp.is_replicate() || setup.mesh->tp().rank() == 0;
    if (main_replica) m.written_blocks.push_back(p->value);
  }
  return m;
}

void remove_dir(const std::string& dir) {
  if (setup.mesh->global_rank() == 0) fs::remove_all(dir);
  setup.mesh->world().barrier();
}

std::string layout_dir(io::CheckpointLayout layout) {
  return setup.dir + "/" + std::string(io::checkpoint_layout_name(layout));
}

void BM_save(benchmark::State& state, io::CheckpointLayout layout) {
  Model m = make_model(static_cast<int>(state.range(0)));
  const std::string dir = layout_dir(layout);
  io::SaveOptions options;
  options.layout = layout;
  for (auto _ : state) {
    remove_dir(dir);
    state.SetIterationTime(bench::timed(
        setup.mesh->world(), [&] { io::save_checkpoint(dir, *setup.mesh, *m.net, nullptr, options); },
        setup.mesh->device()));
  }
  state.SetBytesProcessed(state.iterations() * m.master_bytes);
  state.counters["ranks"] = setup.mesh->world_size();
  remove_dir(dir);
}

void BM_load(benchmark::State& state, io::CheckpointLayout layout) {
  Model m = make_model(static_cast<int>(state.range(0)));
  const std::string dir = layout_dir(layout);
  io::SaveOptions options;
  options.layout = layout;
  remove_dir(dir);
  io::save_checkpoint(dir, *setup.mesh, *m.net, nullptr, options);
  for (auto _ : state) {
    state.SetIterationTime(bench::timed(
        setup.mesh->world(), [&] { io::load_checkpoint(dir, *setup.mesh, *m.net); }, setup.mesh->device()));
  }
  state.SetBytesProcessed(state.iterations() * m.master_bytes);
  state.counters["ranks"] = setup.mesh->world_size();
  remove_dir(dir);
}

// The baseline: each rank writes its blocks sequentially to its own file and fsyncs.
void BM_posix_write_fsync(benchmark::State& state) {
  Model m = make_model(static_cast<int>(state.range(0)));
  const std::string dir = setup.dir + "/posix";
  const std::string file = dir + "/rank" + std::to_string(setup.mesh->global_rank()) + ".bin";
  for (auto _ : state) {
    remove_dir(dir);
    if (setup.mesh->global_rank() == 0) fs::create_directories(dir);
    setup.mesh->world().barrier();
    state.SetIterationTime(bench::timed(setup.mesh->world(), [&] {
      const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) throw IoError("bench_checkpoint: cannot create " + file);
      for (const Tensor& block : m.written_blocks) {
        const Tensor bytes = block.to(Device::host());  // the block itself on the host
        const char* p = static_cast<const char*>(bytes.data());
        std::size_t left = bytes.nbytes();
        while (left > 0) {
          const ssize_t n = ::write(fd, p, left);
          if (n <= 0) throw IoError("bench_checkpoint: write to " + file + " failed");
          p += n;
          left -= static_cast<std::size_t>(n);
        }
      }
      ::fsync(fd);
      ::close(fd);
    }, setup.mesh->device()));
  }
  state.SetBytesProcessed(state.iterations() * m.master_bytes);
  state.counters["ranks"] = setup.mesh->world_size();
  remove_dir(dir);
}

void register_benchmarks(const bench::Flags& flags) {
  setup.dir = flags.at("ckpt_dir");
  setup.sizes_mb.clear();
  for (long mb : bench::int_list(flags.at("size_mb"), "size_mb")) setup.sizes_mb.push_back(static_cast<int>(mb));
  ParallelismConfig config;
  MPI_Comm_size(MPI_COMM_WORLD, &config.tensor);
  setup.mesh = std::make_unique<Mesh>(MPI_COMM_WORLD, config, bench::device());
  for (int size : setup.sizes_mb) {
    benchmark::RegisterBenchmark("save/per_rank", BM_save, io::CheckpointLayout::per_rank)
        ->Arg(size)->UseManualTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("save/shared", BM_save, io::CheckpointLayout::shared)
        ->Arg(size)->UseManualTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("posix_write_fsync", BM_posix_write_fsync)
        ->Arg(size)->UseManualTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("load/per_rank", BM_load, io::CheckpointLayout::per_rank)
        ->Arg(size)->UseManualTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("load/shared", BM_load, io::CheckpointLayout::shared)
        ->Arg(size)->UseManualTime()->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run(argc, argv, "bench_checkpoint", {{"size_mb", "16,64"}, {"ckpt_dir", "bench_checkpoint_data"}, {"device", "host"}},
                    register_benchmarks);
}
