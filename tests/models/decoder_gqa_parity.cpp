// The tessera half of the PyTorch check of a current decoder (tests/python/check_pytorch.py
// --gqa): reads the PyTorch model's weights (under tessera's names), token ids, the
// logits, a logits gradient and every weight gradient PyTorch computed in float64 from
// the same float32 weights; builds models::Decoder with the architecture of the file's
// metadata, converts it with parallelize_decoder at this launch's tp, and compares its
// logits (this rank's vocabulary shard) and every reassembled weight gradient.
//
//   mpiexec -n TP decoder_gqa_parity IO.safetensors SEQUENCE_PARALLEL(0|1)
//
// Bounds: logits within 1e-5 x max(1, max |logits|); each gradient within 1e-4 x its own
// max |value| (fp32 through a few layers; a wrong rotation, head grouping or gradient
// moves them by O(1) relative). Exit 0 when every bound holds, 1 when one does not, 2 on
// an error.

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "tessera/error.hpp"
#include "tessera/io/safetensors.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/tp/parallelize.hpp"
#include "tessera/tp/sharding.hpp"
#include "../support/pytorch_parity.hpp"

using namespace tessera;
using tessera::testing::difference_and_scale;
using tessera::testing::read_named;

namespace {

// Floating tensors as f32, the token ids as they are.
Tensor read(const io::SafetensorsFile& file, const std::string& name) {
  return read_named(file, name, name == "ids" ? std::nullopt : std::optional<DType>(DType::f32));
}

std::string meta(const io::SafetensorsFile& file, const std::string& key) {
  const auto it = file.metadata().find(key);
  if (it == file.metadata().end()) throw IoError(file.path() + ": __metadata__ has no '" + key + "'");
  return it->second;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 2, rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    if (argc != 3) throw InvalidArgument("usage: decoder_gqa_parity IO.safetensors SEQUENCE_PARALLEL(0|1)");
    const io::SafetensorsFile file(argv[1]);
    const bool sp = std::string(argv[2]) == "1";
    models::DecoderConfig c;
    c.vocab = std::stoll(meta(file, "vocab"));
    c.d_model = std::stoll(meta(file, "d_model"));
    c.n_heads = std::stoll(meta(file, "n_heads"));
    c.n_kv_heads = std::stoll(meta(file, "n_kv_heads"));
    c.hidden = std::stoll(meta(file, "hidden"));
    c.n_layers = std::stoll(meta(file, "n_layers"));
    c.eps = std::stod(meta(file, "eps"));
    c.rope_theta = std::stod(meta(file, "rope_theta"));
    c.rope = c.rope_theta > 0;
    if (!c.rope) c.rope_theta = 10000.0;
    const Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, size, 1});

    models::Decoder model(c);
    for (auto& [name, p] : model.named_parameters()) p->value.copy_from(read(file, "weight/" + name));
    const models::DecoderTpPlan plan =
        size > 1 ? models::parallelize_decoder(model, mesh.tp(), sp) : models::decoder_tp_plan(c, false);

    const Tensor logits = model.forward(read(file, "ids"));
    std::int64_t offset = 0;  // this rank's vocabulary block (the head is column-parallel)
    for (const auto& [name, p] : model.named_parameters()) {
      if (name == "head.weight" && size > 1) offset = p->local_offset[0];
    }
    const std::int64_t v_local = logits.size(2);
    auto [diff, scale] = difference_and_scale(logits, read(file, "logits").narrow(2, offset, v_local), "logits");
    double worst[2] = {diff, scale};
    MPI_Allreduce(MPI_IN_PLACE, worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    bool ok = worst[0] <= 1e-5 * std::max(1.0, worst[1]);
    if (rank == 0) {
      std::printf("decoder n_heads=%lld n_kv_heads=%lld rope_theta=%g tp=%d sp=%d (key/value heads %s): "
                  "max |logits - pytorch| = %.3g (up to %.3g)\n",
                  static_cast<long long>(c.n_heads), static_cast<long long>(c.kv_heads()), c.rope ? c.rope_theta : 0.0,
                  size, sp ? 1 : 0, plan.kv_heads_split ? "split" : "repeated", worst[0], worst[1]);
    }

    model.zero_grad();
    model.backward(read(file, "dlogits").narrow(2, offset, v_local).contiguous());
    tp::sync_replicated_gradients(model, mesh.tp());
    double worst_grad = 0;
    for (auto& [name, p] : model.named_parameters()) {
      const Tensor grad = tp::assemble_master(*p, p->grad, mesh.tp());
      const auto [d, s] = difference_and_scale(grad, read(file, "grad/" + name), name);
      const double relative = d / std::max(s, 1e-30);
      worst_grad = std::max(worst_grad, relative);
      if (!(relative <= 1e-4)) {
        ok = false;
        if (rank == 0) {
          std::printf("  grad of %s: max diff %.3g of %.3g (relative %.3g): FAIL\n", name.c_str(), d, s, relative);
        }
      }
    }
    if (rank == 0) std::printf("  every weight gradient within %.3g relative: %s\n", worst_grad, ok ? "ok" : "FAIL");
    status = ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decoder_gqa_parity: error on rank %d: %s\n", rank, e.what());
    status = 2;
  }
  MPI_Finalize();
  return status;
}
