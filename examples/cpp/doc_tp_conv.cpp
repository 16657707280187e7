// The k x k convolution fragment of docs/tensor-parallel.md ("k×k convolutions on a
// domain-decomposed field"): a strided 3x3 column conv and a 3x3 row conv, split over
// channels (tp) and over latitude bands (domain), checked against the serial pair on the
// gathered field. Runs at 1, 2 and 4 ranks (tp 1 x domain 1, tp 2 x domain 1, tp 2 x
// domain 2).
#include <tessera/tessera.hpp>

#include "doc_sample_checks.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

using namespace tessera;

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("doc_tp_conv: " + what);
}

using doc_sample::filled;
using doc_sample::max_diff;

void kxk_on_domain(const Mesh& mesh, std::uint64_t seed) {
  const std::int64_t B = 2, C = 4, H = 16, W = 32;
  nn::Conv2d down(C, 4 * C, 3, 3, {.stride_h = 2, .stride_w = 2, .padding_h = 1, .padding_w = 1});
  nn::Conv2d mix(4 * C, C, 3, 3, {.padding_h = 1, .padding_w = 1});
  nn::initialize_parameters(down, seed, "down");
  nn::initialize_parameters(mix, seed, "mix");

  // Latitude bands over the domain ranks; the stride-2 output lives on the coarse grid.
  domain::Decomposition fine(mesh, {B, C, H, W}), coarse(mesh, {B, C, H / 2, W / 2});
  auto col = tp::ColumnParallelConv2d::from_serial(down, mesh.tp(), /*gather_output=*/false, "down");
  auto row = tp::RowParallelConv2d::from_serial(mix, mesh.tp(), /*input_is_parallel=*/true, "mix");
  col->use_domain_halo(fine, {domain::LonPadding::zero});    // the padding comes from the neighbours
  row->use_domain_halo(coarse, {domain::LonPadding::zero});

  const Tensor field = filled({B, C, H, W}, 0.3);        // the whole field, on every rank here
  const Tensor x = fine.scatter(field, DType::f32);      // (B, C, lat band, W)
  Tensor h = col->forward(x);                            // (B, 4C/tp, lat band / 2, W / 2)
  Tensor y = row->forward(h);                            // (B, C, lat band / 2, W / 2)
  Tensor dx = col->backward(row->backward(y));           // (B, C, lat band, W)
  domain::sync_domain_gradients(*col, mesh.domain());    // sum the bands' partial weight gradients
  domain::sync_domain_gradients(*row, mesh.domain());

  const Tensor y_serial = mix.forward(down.forward(field));
  const Tensor y_gathered = coarse.gather(y, 0);
  if (coarse.rank() == 0) require(max_diff(y_gathered, y_serial) < 1e-5, "the output differs from the serial pair");
  require(dx.shape() == x.shape(), "dx has the wrong shape");
}

}  // namespace

int main(int argc, char** argv) {
  return doc_sample::run_on_world(argc, argv, [](int world) {
    const int tensor = world >= 2 ? 2 : 1;
    Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, tensor, world / tensor});
    kxk_on_domain(mesh, 2024);
    if (mesh.global_rank() == 0) {
      std::printf("doc_tp_conv: k x k pair at tp %d x domain %d equals the serial pair\n", mesh.tp_size(),
                  mesh.domain_size());
    }
  });
}
