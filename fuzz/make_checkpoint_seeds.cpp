// Writes the seed corpus of fuzz_checkpoint_reader: tiny real checkpoints written by the
// library itself, one rank (MPI_COMM_SELF), both layouts.
//
//   <build>/bin/fuzz_make_checkpoint_seeds fuzz/corpus/fuzz_checkpoint_reader
//
// gives
//   shared_adamw.h5     layout shared: f32 and f64 Linear layers and their AdamW state
//                       (the /optimizer group with type and step_count), metadata text
//   per_rank_index.h5   layout per_rank: the index file (virtual datasets, writer_ranks)
//   per_rank_slice.h5   the rank-0 slice file of the same checkpoint
//   shared_bf16_i64.h5  layout shared: a bf16 and an i64 tensor, no optimizer
// Each is a few KB (the fuzz seeds are kept under 64 KB). Rerun it when the checkpoint
// format changes, and commit the files.

#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/optim.hpp"
#include "tessera/parameter.hpp"
#include "tessera/tensor.hpp"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

// A constant gradient, so the AdamW step gives non-trivial state.
void fill_grad(Parameter& p, double value) {
  Tensor& g = p.grad;
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    if (g.dtype() == DType::f32) static_cast<float*>(g.data())[i] = static_cast<float>(value);
    if (g.dtype() == DType::f64) static_cast<double*>(g.data())[i] = value;
  }
}

void copy_seed(const fs::path& from, const fs::path& to) {
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  std::printf("%s (%ju bytes)\n", to.c_str(), static_cast<std::uintmax_t>(fs::file_size(to)));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output dir>\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  int rc = 0;
  const fs::path work = fs::temp_directory_path() / ("tessera-ckpt-seeds-" + std::to_string(::getpid()));
  try {
    const fs::path out = argv[1];
    fs::create_directories(out);
    fs::remove_all(work);
    Mesh mesh(MPI_COMM_SELF, ParallelismConfig{});
    {
      nn::Linear a(3, 2, true, DType::f32), b(2, 2, false, DType::f64);
      nn::initialize_parameters(a, 1);
      nn::initialize_parameters(b, 2);
      const NamedParameters params = {{"fc1.weight", &a.weight}, {"fc1.bias", &a.bias}, {"fc2.weight", &b.weight}};
      AdamW adam(params, {});
      for (const auto& [name, p] : params) fill_grad(*p, 0.5);
      adam.step();

      io::SaveOptions options;
      options.layout = io::CheckpointLayout::shared;
      options.step = 3;
      options.metadata = "model: {layers: 2}\n";
      copy_seed(fs::path(io::save_checkpoint((work / "shared").string(), mesh, params, &adam, options)) /
                    io::checkpoint_file_name,
                out / "shared_adamw.h5");

      options.layout = io::CheckpointLayout::per_rank;
      options.step = 7;
      const fs::path dir = io::save_checkpoint((work / "per_rank").string(), mesh, params, &adam, options);
      copy_seed(dir / io::checkpoint_file_name, out / "per_rank_index.h5");
      copy_seed(dir / "checkpoint.rank00000.h5", out / "per_rank_slice.h5");
    }
    {
      // bf16 (stored as raw u16 bits) and i64 tensors; no optimizer.
      std::vector<std::uint16_t> bits = {0x3f80, 0xbf80, 0x4000, 0x0000, 0x7f80, 0x3e80};
      Parameter half(Tensor::view(bits.data(), {2, 3}, DType::bf16));
      Parameter counter(Tensor::from_vector<std::int64_t>({1, -2, 3}, {3}));
      const NamedParameters params = {{"emb.weight", &half}, {"counter", &counter}};
      io::SaveOptions options;
      options.step = 1;
      options.metadata = "free text: \xce\xbb\n";
      copy_seed(fs::path(io::save_checkpoint((work / "typed").string(), mesh, params, nullptr, options)) /
                    io::checkpoint_file_name,
                out / "shared_bf16_i64.h5");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_make_checkpoint_seeds: %s\n", e.what());
    rc = 1;
  }
  std::error_code ec;
  fs::remove_all(work, ec);
  MPI_Finalize();
  return rc;
}
