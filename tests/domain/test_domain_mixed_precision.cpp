// Domain-parallel layers in bf16-mixed precision (tessera/precision.hpp) against their
// serial twins in bf16-mixed: DomainConv2d on every process grid of this world size
// (latitude bands, longitude bands, 2x2) against the same layer on a decomposition of
// one rank, and the FieldEmulator (domain-split, and tp 2 x domain 2 at four ranks)
// against the serial model: forward output, input gradient and every weight gradient
// after sync_domain_gradients (and tp's sync).
//
// Tolerances. DomainConv2d: every rank runs the serial conv's GEMMs on its own pixels
// with the same bf16 operands (the halo brings the neighbours' values, the padding is
// the serial padding), so each output is the same sum of the same exact fp32 products
// (bf16 x bf16 fits in fp32) in a possibly different order; so are the input gradient
// (the halo's adjoint adds the neighbours' contributions) and the weight gradient (the
// domain sum of per-rank partial sums). Two orders of an fp32 sum of n terms differ by
// at most 2 gamma_n S (S = the sum of the terms' magnitudes, gamma_n = n u / (1 - n u),
// u = 2^-24), elementwise; S is the serial layer in f64 on the magnitudes of the
// rounded operands. That is ~1e-6 S, against the bf16 rounding effect of ~1e-3 S,
// which each case also checks is there.
//
// FieldEmulator chains convolutions through GELU and residual sums: a reordered sum may
// move an intermediate across a bf16 rounding boundary (a change of one bf16 ulp in
// one operand downstream), so no elementwise bound holds; such flips are rare (a
// reorder moves a value by ~2^-24 relative, boundaries are ~2^-8 apart) while bf16 and
// fp32 differ in every operand, so the parallel bf16 model must be ten times closer
// (relative L2) to the serial bf16 model than the serial fp32 model is.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../support/bf16_reorder_bound.hpp"
#include "../support/emulator_config.hpp"
#include "domain_test_support.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/domain_conv2d.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/ops.hpp"
#include "tessera/precision.hpp"
#include "tessera/tp/parallelize.hpp"
#include "tessera/tp/sharding.hpp"

using namespace tessera;
using namespace tessera::domain;
using namespace tessera::testing;  // world(), self(), grids(), the emulator, fills, comparisons, the reorder bound

namespace {

constexpr Precision kBf16 = Precision::bf16_mixed;

Tensor box_of(const Tensor& global, const LocalBox& b) {
  return global.narrow(2, b.lat.start, b.lat.length).narrow(3, b.lon.start, b.lon.length).contiguous();
}

struct ConvCase {
  const char* name;
  int kh, kw;
  DomainConv2dOptions options;
};

std::vector<ConvCase> conv_cases() {
  DomainConv2dOptions across;
  across.pole = PolePolicy::across_pole;
  DomainConv2dOptions dilated;
  dilated.dilation_w = 2;
  dilated.lon_padding = LonPadding::zero;
  return {{"3x3 across the pole, periodic", 3, 3, across}, {"2x3 even, dilated, zero padding", 2, 3, dilated}};
}

}  // namespace

TEST(DomainMixedPrecision, DomainConv2dMatchesSerialBf16) {
  const std::int64_t B = 2, c_in = 3, c_out = 5, H = 10, W = 12;
  const Shape global{B, c_in, H, W};
  const Tensor x = random_tensor(global, 1);
  const Tensor dy = random_tensor({B, c_out, H, W}, 2);
  int ran = 0;
  for (const ConvCase& c : conv_cases()) {
    Decomposition serial_d(self(), global);
    DomainConv2d serial(serial_d, c_in, c_out, c.kh, c.kw, c.options);
    fill_random(serial.weight, 3);
    fill_random(serial.bias, 4);
    serial.set_compute_precision(kBf16);
    const Tensor y_serial = serial.forward(x);
    const Tensor dx_serial = serial.backward(dy);

    // S: the serial layer in f64 on the magnitudes of the rounded operands.
    DomainConv2dOptions f64_options = c.options;
    f64_options.dtype = DType::f64;
    DomainConv2d magnitudes(serial_d, c_in, c_out, c.kh, c.kw, f64_options);
    magnitudes.weight.value.copy_from(bf16_magnitude(serial.weight.value));
    magnitudes.bias.value.copy_from(magnitude(serial.bias.value));
    const Tensor y_mag = magnitudes.forward(bf16_magnitude(x));
    const Tensor dx_mag = magnitudes.backward(bf16_magnitude(dy));

    for (const ProcessGrid& grid : grids()) {
      const std::string what = std::string(c.name) + " on grid " + grid.str();
      Decomposition d(world(), global, grid);
      DomainConv2d parallel(d, c_in, c_out, c.kh, c.kw, c.options);
      parallel.weight.value.copy_from(serial.weight.value);
      parallel.bias.value.copy_from(serial.bias.value);
      parallel.set_compute_precision(kBf16);
      const LocalBox box = d.box();
      const Tensor y = parallel.forward(box_of(x, box));
      const Tensor dx = parallel.backward(box_of(dy, box));
      sync_domain_gradients(parallel, world());
      const std::int64_t window = c_in * c.kh * c.kw;
      // dx: an input pixel collects at most c_out * kh * kw products, plus the halo's adds.
      EXPECT_TRUE(within_reorder_bound(y, box_of(y_serial, box), box_of(y_mag, box), window + 1)) << what;
      EXPECT_TRUE(within_reorder_bound(dx, box_of(dx_serial, box), box_of(dx_mag, box),
                                       c_out * c.kh * c.kw + world_size()))
          << what;
      EXPECT_TRUE(within_reorder_bound(parallel.weight.grad, serial.weight.grad, magnitudes.weight.grad,
                                       B * H * W + world_size()))
          << what;
      // The bias gradient sums dy (unrounded) in double per rank, then over the domain.
      EXPECT_TRUE(tensors_close(parallel.bias.grad, serial.bias.grad, 1e-6)) << what;
      // bf16 is in effect: the fp32 layer is far outside the bound.
      DomainConv2d fp32(d, c_in, c_out, c.kh, c.kw, c.options);
      fp32.weight.value.copy_from(serial.weight.value);
      fp32.bias.value.copy_from(serial.bias.value);
      EXPECT_GT(max_relative_difference(fp32.forward(box_of(x, box)), y), 1e-4) << what;
      ++ran;
    }
  }
  EXPECT_EQ(ran, 2 * static_cast<int>(grids().size()));
}

namespace {

struct EmulatorRun {
  Tensor y, dx;
  std::vector<Tensor> grads;  // reassembled over tp, in named_parameters order
};

// Forward and backward of `model` on the global x and dy (its box of them), gradients
// completed over the domain and tp and reassembled; y and dx are this rank's boxes.
EmulatorRun run_emulator(models::FieldEmulator& model, const Mesh& mesh, const Tensor& x, const Tensor& dy) {
  EmulatorRun r;
  const LocalBox box = model.decomposition().box();
  model.zero_grad();
  r.y = model.forward(box_of(x, box));
  r.dx = model.backward(box_of(dy, box));
  sync_domain_gradients(model, mesh);
  tp::sync_replicated_gradients(model, mesh.tp());
  for (const auto& [name, p] : model.named_parameters()) r.grads.push_back(tp::assemble_master(*p, p->grad, mesh.tp()));
  return r;
}

}  // namespace

TEST(DomainMixedPrecision, FieldEmulatorMatchesSerialBf16) {
  const models::FieldEmulatorConfig config = domain_emulator_config();
  const Shape global{2, config.channels, config.nlat, config.nlon};
  const Tensor x = random_tensor(global, 11), dy = random_tensor(global, 12);

  Mesh serial_mesh(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::none, 1, 1});
  models::FieldEmulator serial32(config, serial_mesh), serial16(config, serial_mesh);
  nn::initialize_parameters(serial32, 5);
  nn::initialize_parameters(serial16, 5);
  serial16.set_compute_precision(kBf16);
  const EmulatorRun s32 = run_emulator(serial32, serial_mesh, x, dy);
  const EmulatorRun s16 = run_emulator(serial16, serial_mesh, x, dy);
  const double y_gap = relative_l2(s32.y, s16.y), dx_gap = relative_l2(s32.dx, s16.dx);
  EXPECT_GT(y_gap, 1e-5);
  EXPECT_GT(dx_gap, 1e-5);

  std::vector<ParallelismConfig> layouts{{DataParallelMode::none, 1, world_size()}};
  if (world_size() == 4) layouts.push_back({DataParallelMode::none, 2, 2});
  for (const ParallelismConfig& layout : layouts) {
    const std::string what = "layout " + layout.str();
    Mesh mesh(MPI_COMM_WORLD, layout);
    models::FieldEmulator model(config, mesh);
    nn::initialize_parameters(model, 5);
    model.set_compute_precision(kBf16);
    const EmulatorRun p = run_emulator(model, mesh, x, dy);
    const LocalBox box = model.decomposition().box();
    // y and dx are each rank's box: their L2 over the whole field, summed over the domain.
    auto global_l2 = [&](const Tensor& got, const Tensor& want) {
      const auto g = as_doubles(got), w = as_doubles(box_of(want, box));
      double sums[2] = {0, 0};
      for (std::size_t i = 0; i < g.size(); ++i) {
        sums[0] += (g[i] - w[i]) * (g[i] - w[i]);
        sums[1] += w[i] * w[i];
      }
      // Only one tp rank of each domain rank counts (every tp rank holds the same box).
      if (mesh.rank(MeshDim::tp) != 0) sums[0] = sums[1] = 0;
      MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      return std::sqrt(sums[0] / sums[1]);
    };
    const double y_diff = global_l2(p.y, s16.y), dx_diff = global_l2(p.dx, s16.dx);
    EXPECT_LE(y_diff, 0.1 * y_gap) << what;
    EXPECT_LE(dx_diff, 0.1 * dx_gap) << what;
    const auto names = serial16.named_parameters();
    ASSERT_EQ(p.grads.size(), names.size()) << what;
    double worst = 0;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const double gap = relative_l2(s32.grads[i], s16.grads[i]);
      if (gap == 0) {
        // No GEMM between the loss gradient and it (the decoder's bias sums dy): the
        // same in both precisions, and a double-accumulated sum over the domain here.
        EXPECT_TRUE(tensors_close(p.grads[i], s16.grads[i], 1e-6)) << what << ": grad of " << names[i].first;
        continue;
      }
      const double ratio = relative_l2(p.grads[i], s16.grads[i]) / gap;
      worst = std::max(worst, ratio);
      EXPECT_LE(ratio, 0.1) << what << ": grad of " << names[i].first << " (fp32 vs bf16 gap " << gap << ")";
    }
    if (world_rank() == 0) {
      std::printf("[ emulator ] %s: y %.3g (fp32 vs bf16 %.3g), dx %.3g (%.3g), worst gradient ratio %.3g\n",
                  what.c_str(), y_diff, y_gap, dx_diff, dx_gap, worst);
    }
  }
}
