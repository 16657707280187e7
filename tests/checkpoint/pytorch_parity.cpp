// The tessera half of the PyTorch parity test (tests/python/check_pytorch.py): loads a
// checkpoint that `tessera-ckpt import` made from a PyTorch state dict, at the layout of
// this launch, runs the model on the inputs PyTorch ran, and compares with PyTorch's
// outputs (computed in float64 from the same float32 weights).
//
//   mpiexec -n TP*DOMAIN pytorch_parity emulator CHECKPOINT IO.safetensors TP DOMAIN
//   mpiexec -n TP        pytorch_parity decoder  CHECKPOINT IO.safetensors TP 1
//
// IO.safetensors holds "input" and "output" (emulator: f32 [B, C, nlat, nlon]) or "ids"
// (i64 [B, S]) and "logits" (f32 [B, S, vocab]). Each rank compares its own block (its
// latitude band; the decoder's whole logits, which load_decoder gathers); the largest difference over the ranks must stay
// within fp32 rounding: TOLERANCE x max(1, max |output|). Exit status 0 when it does, 1
// when not, 2 on an error.

#include <mpi.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/io/safetensors.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/tp/parallelize.hpp"
#include "../support/pytorch_parity.hpp"

using namespace tessera;
using tessera::testing::difference_and_scale;
using tessera::testing::read_named;

namespace {

// fp32 rounding through a few layers, relative to the outputs' magnitude. A wrong key,
// transpose or split moves the outputs by O(1).
constexpr double kTolerance = 1e-5;

std::pair<double, double> run_emulator(const std::string& checkpoint, const io::SafetensorsFile& io_file,
                                       const Mesh& mesh) {
  auto model = load_model(checkpoint, mesh);
  const auto box = model->decomposition().box();
  auto block = [&](const Tensor& t) {
    return t.narrow(2, box.lat.start, box.lat.length).narrow(3, box.lon.start, box.lon.length).contiguous();
  };
  const Tensor y = model->forward(block(read_named(io_file, "input")));
  return difference_and_scale(y, block(read_named(io_file, "output")), "output");
}

// Through load_decoder: the whole architecture the metadata describes (eps, n_kv_heads,
// rope, rope_theta, tied or not), and logits whole on every rank (the vocabulary
// shards of a tp head gathered).
std::pair<double, double> run_decoder(const std::string& checkpoint, const io::SafetensorsFile& io_file,
                                      const Mesh& mesh) {
  auto model = load_decoder(checkpoint, mesh);
  const Tensor logits = model->logits(read_named(io_file, "ids"));
  return difference_and_scale(logits, read_named(io_file, "logits"), "logits");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 2;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    if (argc != 6) throw InvalidArgument("usage: pytorch_parity emulator|decoder CHECKPOINT IO.safetensors TP DOMAIN");
    const std::string kind = argv[1], checkpoint = argv[2];
    const io::SafetensorsFile io_file(argv[3]);
    const ParallelismConfig layout{DataParallelMode::none, std::stoi(argv[4]), std::stoi(argv[5])};
    const Mesh mesh(MPI_COMM_WORLD, layout);
    std::pair<double, double> local;
    if (kind == "emulator") {
      local = run_emulator(checkpoint, io_file, mesh);
    } else if (kind == "decoder") {
      local = run_decoder(checkpoint, io_file, mesh);
    } else {
      throw InvalidArgument("unknown model kind '" + kind + "' (emulator or decoder)");
    }
    double worst[2] = {local.first, local.second};
    MPI_Allreduce(MPI_IN_PLACE, worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double bound = kTolerance * std::max(1.0, worst[1]);
    status = worst[0] <= bound ? 0 : 1;
    if (rank == 0) {
      std::printf("%s tp=%d domain=%d: max |tessera - pytorch| = %.3g (outputs up to %.3g, bound %.3g): %s\n",
                  kind.c_str(), layout.tensor, layout.domain, worst[0], worst[1], bound, status == 0 ? "ok" : "FAIL");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pytorch_parity: error on rank %d: %s\n", rank, e.what());
    status = 2;
  }
  MPI_Finalize();
  return status;
}
