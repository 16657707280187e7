// Domain-parallel convolutions against the serial stack: a stack of DomainConv2d layers
// (odd and even kernels, dilation, periodic and zero longitude padding, zero and
// across-the-pole latitude padding) on an uneven latitude split (11 rows over 2, 3, 4
// ranks) and on a 2x2 grid must give the serial output, the serial latitude-weighted
// loss, and every serial gradient (input, and weights and biases after
// sync_domain_gradients), fp32, relative 1e-5. The serial stack is
// nn::functional::conv2d on the gathered field, padded explicitly. ConvHalo, the halo
// step DomainConv2d shares with the tensor-parallel convs, against the same padding and
// as an adjoint, and its stride rule.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <numbers>
#include <random>

#include "domain_test_support.hpp"
#include "expect_error.hpp"
#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/domain_conv2d.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/nn/functional.hpp"

using namespace tessera;
using namespace tessera::domain;
namespace F = tessera::nn::functional;
using tessera::testing::world;
using tessera::testing::world_rank;
using tessera::testing::world_size;

namespace {

Tensor random_tensor(const Shape& shape, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-scale, scale);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (float& x : v) x = uni(rng);
  return Tensor::from_vector(v, shape);
}

struct LayerSpec {
  std::int64_t in, out;
  int kh, kw;
  DomainConv2dOptions options;
};

// The serial padding of an H x W grid by `w`: latitude beyond the poles by the pole
// policy or the edge's own policy, longitude periodic or zero. Calls visit(padded,
// source, sign) with the flat index of every padded point, of the grid point it reads and
// the sign it reads it with (-1 across a mirror_odd edge); zero-padded points are skipped.
template <class Visit>
void for_each_padded_point(std::int64_t H, std::int64_t W, const HaloWidths& w, const DomainConv2dOptions& o,
                           Visit visit) {
  const std::int64_t PH = H + w.lat_before + w.lat_after, PW = W + w.lon_before + w.lon_after;
  for (std::int64_t a = 0; a < PH; ++a)
    for (std::int64_t b = 0; b < PW; ++b) {
      std::int64_t i = a - w.lat_before, j = b - w.lon_before;
      float sign = 1.0f;
      if (i < 0 || i >= H) {
        const EdgePolicy edge = i < 0 ? o.north : o.south;
        if (edge == EdgePolicy::periodic) {
          i = ((i % H) + H) % H;
        } else if (edge == EdgePolicy::mirror_even || edge == EdgePolicy::mirror_odd) {
          i = i < 0 ? -1 - i : 2 * H - 1 - i;
          if (edge == EdgePolicy::mirror_odd) sign = -1.0f;
        } else if (o.pole == PolePolicy::zero) {
          continue;
        } else if (o.pole == PolePolicy::replicate) {
          i = i < 0 ? 0 : H - 1;
        } else {
          i = i < 0 ? -1 - i : 2 * H - 1 - i;
          j += W / 2;
        }
      }
      if (o.lon_padding == LonPadding::periodic) {
        j = ((j % W) + W) % W;
      } else if (j < 0 || j >= W) {
        continue;
      }
      visit(a * PW + b, i * W + j, sign);
    }
}

// x [B, C, H, W] padded by `w`.
Tensor pad(const Tensor& x, const HaloWidths& w, const DomainConv2dOptions& o) {
  const std::int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const std::int64_t PH = H + w.lat_before + w.lat_after, PW = W + w.lon_before + w.lon_after;
  Tensor out = Tensor::zeros({B, C, PH, PW}, DType::f32);
  const float* src = x.data<float>();
  float* dst = out.data<float>();
  for (std::int64_t bc = 0; bc < B * C; ++bc) {
    for_each_padded_point(H, W, w, o, [&](std::int64_t p, std::int64_t g, float sign) {
      dst[bc * PH * PW + p] = sign * src[bc * H * W + g];
    });
  }
  return out;
}

// The adjoint (transpose) of pad: a padded gradient folded back onto the unpadded grid.
Tensor pad_adjoint(const Tensor& dpad, std::int64_t H, std::int64_t W, const HaloWidths& w,
                   const DomainConv2dOptions& o) {
  const std::int64_t B = dpad.size(0), C = dpad.size(1), PH = dpad.size(2), PW = dpad.size(3);
  Tensor out = Tensor::zeros({B, C, H, W}, DType::f32);
  const float* src = dpad.data<float>();
  float* dst = out.data<float>();
  for (std::int64_t bc = 0; bc < B * C; ++bc) {
    for_each_padded_point(H, W, w, o, [&](std::int64_t p, std::int64_t g, float sign) {
      dst[bc * H * W + g] += sign * src[bc * PH * PW + p];
    });
  }
  return out;
}

F::Conv2dOptions dilation_of(const DomainConv2dOptions& o) {
  F::Conv2dOptions c;
  c.dilation_h = o.dilation_h;
  c.dilation_w = o.dilation_w;
  return c;
}

// max |a - b| <= tol * max |b|
::testing::AssertionResult close(const Tensor& a, const Tensor& b, double tol = 1e-5) {
  if (a.shape() != b.shape()) return ::testing::AssertionFailure() << a.str() << " vs " << b.str();
  const auto va = a.contiguous().to_vector<float>(), vb = b.contiguous().to_vector<float>();
  double diff = 0, scale = 0;
  for (std::size_t k = 0; k < va.size(); ++k) {
    diff = std::max(diff, std::abs(double(va[k]) - double(vb[k])));
    scale = std::max(scale, std::abs(double(vb[k])));
  }
  if (diff <= tol * std::max(scale, 1e-30)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max diff " << diff << " vs scale " << scale;
}

// The layers under test as one module tree, plus a parameter sharded over the domain
// that sync_domain_gradients must leave alone.
class Stack : public nn::Module {
 public:
  Stack(const Decomposition& d, const std::vector<LayerSpec>& specs) {
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const LayerSpec& s = specs[k];
      layers.push_back(&register_child(std::to_string(k), std::make_unique<DomainConv2d>(d, s.in, s.out, s.kh, s.kw, s.options)));
    }
    MeshPlacement placement;
    placement.domain = Placement::shard(0);
    local_scale = Parameter(Tensor::zeros({1}, DType::f32), {d.size()}, placement, {d.rank()});
    register_parameter("local_scale", local_scale);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (DomainConv2d* l : layers) y = l->forward(y);
    return y;
  }
  Tensor backward(const Tensor& dy) override {
    Tensor g = dy;
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) g = (*it)->backward(g);
    return g;
  }
  std::string type_name() const override { return "Stack"; }
  std::vector<DomainConv2d*> layers;
  Parameter local_scale;
};

// Periodic longitude, and `north`, `south` at the latitude edges.
DomainConv2dOptions with_edges(EdgePolicy north, EdgePolicy south) {
  DomainConv2dOptions o;
  o.north = north;
  o.south = south;
  return o;
}

Tensor box_of(const Tensor& global, const LocalBox& b) {
  return global.narrow(2, b.lat.start, b.lat.length).narrow(3, b.lon.start, b.lon.length).contiguous();
}

void run_stack(const ProcessGrid& grid, LatitudeGrid lat_grid) {
  const std::int64_t B = 2, C = 3, H = 11, W = 12;
  Decomposition d(world(), {B, C, H, W}, grid);
  const std::vector<LayerSpec> specs = {
      // odd kernel, periodic lon, across-the-pole lat padding
      {3, 4, 3, 3, {1, 1, LonPadding::periodic, PolePolicy::across_pole, true}},
      // even kernels (extra padding after), periodic lon
      {4, 4, 2, 4, {1, 1, LonPadding::periodic, PolePolicy::zero, true}},
      // walls: mirrored north, mirrored and negated south (edge policies)
      {4, 4, 3, 3, with_edges(EdgePolicy::mirror_even, EdgePolicy::mirror_odd)},
      // a channel periodic in latitude too
      {4, 4, 3, 3, with_edges(EdgePolicy::periodic, EdgePolicy::periodic)},
      // dilation 2, zero lon padding, no bias
      {4, 2, 3, 3, {2, 2, LonPadding::zero, PolePolicy::zero, false}},
  };
  Stack stack(d, specs);
  std::vector<Tensor> weights, biases;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    DomainConv2d& l = *stack.layers[k];
    l.weight.value.copy_from(random_tensor(l.weight.value.shape(), 100 + k, 0.4f));
    weights.push_back(l.weight.value);
    if (l.bias.value.defined()) {
      l.bias.value.copy_from(random_tensor(l.bias.value.shape(), 200 + k, 0.2f));
    }
    biases.push_back(l.bias.value);
  }
  const Tensor x = random_tensor({B, C, H, W}, 7);
  const Tensor target = random_tensor({B, 2, H, W}, 8);
  const LocalBox box = d.box();

  // Domain-parallel: forward, loss, backward, gradient sync.
  stack.zero_grad();
  stack.local_scale.grad.copy_from(Tensor::from_vector<float>({float(d.rank() + 1)}, {1}));
  const Tensor y_local = stack.forward(box_of(x, box));
  const LossResult loss = lat_weighted_mse(y_local, box_of(target, box), d, lat_grid);
  const Tensor dx_local = stack.backward(loss.grad);
  EXPECT_EQ(sync_domain_gradients(stack, world()), 9);  // 5 weights + 4 biases
  EXPECT_EQ(stack.local_scale.grad.to_vector<float>()[0], float(d.rank() + 1)) << "sharded grad touched";
  const Tensor y_gathered = d.gather(y_local, 0);
  const Tensor dx_gathered = d.gather(dx_local, 0);

  // Serial on the whole field, computed by every rank (it is small).
  std::vector<Tensor> padded_inputs;
  Tensor y = x;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const LayerSpec& s = specs[k];
    const HaloWidths w = same_conv_halo(s.kh, s.kw, s.options.dilation_h, s.options.dilation_w);
    padded_inputs.push_back(pad(y, w, s.options));
    y = F::conv2d(padded_inputs.back(), weights[k], biases[k], dilation_of(s.options));
  }
  // Serial loss and its gradient.
  double mean_cos = 0;
  for (std::int64_t i = 0; i < H; ++i) mean_cos += std::cos(latitude_degrees(i, H, lat_grid) * std::numbers::pi / 180.0);
  mean_cos /= H;
  const auto vy = y.to_vector<float>(), vt = target.to_vector<float>();
  std::vector<float> dy(vy.size());
  double serial_loss = 0;
  const double n = double(vy.size());
  for (std::size_t k = 0; k < vy.size(); ++k) {
    const std::int64_t i = (std::int64_t(k) / W) % H;
    const double wi = std::cos(latitude_degrees(i, H, lat_grid) * std::numbers::pi / 180.0) / mean_cos;
    const double diff = double(vy[k]) - double(vt[k]);
    serial_loss += wi * diff * diff / n;
    dy[k] = float(2.0 * wi * diff / n);
  }
  Tensor g = Tensor::from_vector(dy, y.shape());
  std::vector<Tensor> grad_w(specs.size()), grad_b(specs.size());
  for (std::size_t k = specs.size(); k-- > 0;) {
    const LayerSpec& s = specs[k];
    const HaloWidths w = same_conv_halo(s.kh, s.kw, s.options.dilation_h, s.options.dilation_w);
    grad_w[k] = Tensor::zeros(weights[k].shape(), DType::f32);
    if (biases[k].defined()) grad_b[k] = Tensor::zeros(biases[k].shape(), DType::f32);
    const Tensor dpad = F::conv2d_backward(g, padded_inputs[k], weights[k], grad_w[k], grad_b[k], dilation_of(s.options));
    g = pad_adjoint(dpad, H, W, w, s.options);
  }

  const std::string where = grid.str() + (lat_grid == LatitudeGrid::with_poles ? " with poles" : " cell centres");
  EXPECT_NEAR(loss.value, serial_loss, 1e-5 * std::abs(serial_loss)) << where;
  EXPECT_TRUE(close(y_local, box_of(y, box))) << where << " output (local block)";
  EXPECT_TRUE(close(dx_local, box_of(g, box))) << where << " input gradient (local block)";
  if (d.rank() == 0) {
    EXPECT_TRUE(close(y_gathered, y)) << where << " gathered output";
    EXPECT_TRUE(close(dx_gathered, g)) << where << " gathered input gradient";
  }
  for (std::size_t k = 0; k < specs.size(); ++k) {
    EXPECT_TRUE(close(stack.layers[k]->weight.grad, grad_w[k])) << where << " layer " << k << " weight grad";
    if (biases[k].defined()) {
      EXPECT_TRUE(close(stack.layers[k]->bias.grad, grad_b[k])) << where << " layer " << k << " bias grad";
    }
  }
}

TEST(DomainConv2d, StackEqualsSerialOnLatitudeSplit) { run_stack({world_size(), 1}, LatitudeGrid::with_poles); }

TEST(DomainConv2d, StackEqualsSerialOnTwoByTwoGrid) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks for a 2x2 grid";
  run_stack({2, 2}, LatitudeGrid::cell_centres);
}

TEST(DomainConv2d, NamesAndHaloMatchNnConv2d) {
  Decomposition d(world(), {11, 12});
  DomainConv2d conv(d, 3, 5, 4, 3, {2, 1, LonPadding::periodic, PolePolicy::zero, true});
  const auto params = conv.named_parameters("enc");
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "enc.weight");
  EXPECT_EQ(params[1].first, "enc.bias");
  EXPECT_EQ(conv.weight.value.shape(), (Shape{5, 3, 4, 3}));
  EXPECT_EQ(conv.weight.init.type, InitType::kaiming_uniform);
  // kernel 4 dilation 2 spans 7 rows: 3 before, 3 after; kernel 3: 1 + 1.
  EXPECT_EQ(conv.halo().spec().width, (HaloWidths{3, 3, 1, 1}));
  EXPECT_EQ(same_conv_halo(2, 4, 1, 1), (HaloWidths{0, 1, 1, 2}));
}

TEST(DomainConv2d, AnEdgeLeftAloneIsRefused) {
  Decomposition d(world(), {1, 2, 8, 6});
  tessera::testing::expect_error<InvalidArgument>(
      [&] { DomainConv2d conv(d, 2, 2, 3, 3, with_edges(EdgePolicy::none, EdgePolicy::zero)); },
      {"edge policy none", "stale memory"});
}

TEST(DomainConv2d, WrongInputOnOneRankThrowsEverywhere) {
  Decomposition d(world(), {11, 12});
  DomainConv2d conv(d, 2, 2, 3, 3);
  const LocalBox box = d.box();
  const std::int64_t rows = d.rank() == 0 ? box.lat.length + 1 : box.lat.length;
  std::string message;
  try {
    conv.forward(Tensor::zeros({1, 2, rows, box.lon.length}, DType::f32));
  } catch (const ShapeError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("on domain rank 0"), std::string::npos) << message;
}

// ConvHalo, the halo step DomainConv2d and the tensor-parallel convs share: pad() puts
// the block inside a frame filled from the neighbours (here: zero poles, periodic
// longitude, so the serial pad() above is its twin), and backward() is its adjoint,
// <pad(x), g> = <x, backward(g)> summed over the ranks.
TEST(ConvHalo, PadEqualsSerialPaddingAndBackwardIsItsAdjoint) {
  const std::int64_t H = 11, W = 12;
  Decomposition d(world(), {H, W});
  const HaloWidths width{2, 1, 1, 2};
  ConvHalo halo(d, width, {LonPadding::periodic, PolePolicy::zero}, "halo test");
  const Tensor x = random_tensor({2, 3, H, W}, 31);
  const LocalBox box = d.box();
  const Tensor padded = halo.pad(box_of(x, box), 3, DType::f32, Device::host());
  DomainConv2dOptions serial_options;  // periodic longitude, zero poles
  const Tensor want = pad(x, width, serial_options)
                          .narrow(2, box.lat.start, box.lat.length + width.lat_before + width.lat_after)
                          .narrow(3, box.lon.start, box.lon.length + width.lon_before + width.lon_after)
                          .contiguous();
  EXPECT_TRUE(close(padded, want));

  const Tensor g = random_tensor(padded.shape(), 32 + d.rank());
  const auto vp = padded.contiguous().to_vector<float>(), vg = g.to_vector<float>();
  double lhs = 0;
  for (std::size_t k = 0; k < vp.size(); ++k) lhs += double(vp[k]) * vg[k];
  const Tensor back = halo.backward(g.clone());
  EXPECT_EQ(back.shape(), (Shape{2, 3, box.lat.length, box.lon.length}));
  const auto vx = box_of(x, box).to_vector<float>(), vb = back.to_vector<float>();
  double rhs = 0;
  for (std::size_t k = 0; k < vx.size(); ++k) rhs += double(vx[k]) * vb[k];
  double sums[2] = {lhs, rhs};
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_NEAR(sums[0], sums[1], 1e-6 * std::abs(sums[0]));  // f32 sums in backward
}

// A stride the split cannot keep on the process grid throws on every rank, naming the
// layer and the offending extent; an even split takes it.
TEST(ConvHalo, StrideNeedsBlockExtentsThatDivideByIt) {
  Decomposition uneven(world(), {4 * world_size() + 1, 8});
  std::string message;
  try {
    ConvHalo halo(uneven, HaloWidths::uniform(1), {}, "Down 'enc'", 2, 1);
  } catch (const InvalidArgument& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("Down 'enc': stride 2 along latitude"), std::string::npos) << message;
  EXPECT_THROW(ConvHalo(Decomposition(world(), {4 * world_size(), 9}), HaloWidths::uniform(1), {}, "x", 1, 2),
               InvalidArgument);  // 9 longitudes on one process-grid column
  const Decomposition even_split(world(), {4 * world_size(), 8});
  ConvHalo even(even_split, HaloWidths::uniform(1), {}, "x", 2, 2);
  EXPECT_EQ(even.exchange().spec().width, HaloWidths::uniform(1));
}

TEST(LatWeightedMse, WeightsAndValue) {
  // Weights have mean 1 over the global rows whatever the split, and the pole rows of a
  // grid with poles weigh (almost) nothing.
  Decomposition d(world(), {7, 4});
  const Tensor w = latitude_weights(d, LatitudeGrid::with_poles);
  double local = 0;
  for (double v : w.to_vector<double>()) local += v;
  double total = 0;
  MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_NEAR(total / 7.0, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(latitude_degrees(0, 721, LatitudeGrid::with_poles), 90.0);
  EXPECT_DOUBLE_EQ(latitude_degrees(720, 721, LatitudeGrid::with_poles), -90.0);
  EXPECT_DOUBLE_EQ(latitude_degrees(0, 4, LatitudeGrid::cell_centres), 67.5);
  // prediction - target = 1 everywhere: loss = mean of the weights = 1.
  const Shape local_shape = d.local_shape({2});
  const LossResult r = lat_weighted_mse(Tensor::from_vector(std::vector<double>(shape_numel(local_shape), 1.0), local_shape),
                                        Tensor::zeros(local_shape, DType::f64), d);
  EXPECT_NEAR(r.value, 1.0, 1e-12);
}

}  // namespace
