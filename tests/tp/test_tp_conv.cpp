// Tensor-parallel k x k convolutions against their serial twin: a ColumnParallelConv2d ->
// RowParallelConv2d pair must give the serial nn::Conv2d pair's output, input gradient
// and the reassembled weight and bias gradients, for 3x3 (padding 1), 5x3, stride 2 and
// dilation 2 kernels,
//   - at tp = world size (1, 2, 4) on whole fields, with the column output sharded or
//     gathered (and the row input given sharded or split by the layer);
//   - on domain-decomposed fields (use_domain_halo) at every tp x domain layout of the
//     world (2 x 2, 1 x 4 on a 4 x 1 and a 2 x 2 process grid, 4 x 1, 1 x 2, 2 x 1, ...),
//     the weight and bias gradients completed by sync_domain_gradients; zero longitude
//     padding gives nn::Conv2d itself, periodic longitude the conv of a periodically
//     padded field.
// fp32, relative 1e-5 (tp_test_util's tensors_close). Also: parallelize converts k x k
// convs, to_serial keeps the geometry, and use_domain_halo rejects a padding that is not
// "same" and a stride the split cannot keep, naming the layer.

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "tessera/domain/conv_halo.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/ops.hpp"
#include "tessera/tp/conv2d.hpp"
#include "tessera/tp/parallelize.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp_test_util.hpp"

using namespace tessera;
using tessera::testing::fill_random;
using tessera::testing::random_tensor;
using tessera::testing::tensors_close;

namespace {

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

nn::Conv2dOptions conv_options(int stride_h, int stride_w, int padding_h, int padding_w, int dilation_h,
                               int dilation_w) {
  nn::Conv2dOptions o;
  o.stride_h = stride_h;
  o.stride_w = stride_w;
  o.padding_h = padding_h;
  o.padding_w = padding_w;
  o.dilation_h = dilation_h;
  o.dilation_w = dilation_w;
  return o;
}

struct ConvSpec {
  int kh, kw;
  nn::Conv2dOptions options;
};

// A column conv followed by a row conv, both "same" (padding = dilation * (k - 1) / 2),
// so the domain layouts can run every case; the stride sits on the column conv, the row
// conv then runs on the coarse grid.
struct PairCase {
  std::string name;
  ConvSpec col, row;
};

std::vector<PairCase> pair_cases() {
  return {
      {"3x3 padding 1", {3, 3, conv_options(1, 1, 1, 1, 1, 1)}, {3, 3, conv_options(1, 1, 1, 1, 1, 1)}},
      {"5x3 and 3x5", {5, 3, conv_options(1, 1, 2, 1, 1, 1)}, {3, 5, conv_options(1, 1, 1, 2, 1, 1)}},
      {"stride 2", {3, 3, conv_options(2, 2, 1, 1, 1, 1)}, {3, 3, conv_options(1, 1, 1, 1, 1, 1)}},
      {"dilation 2", {3, 3, conv_options(1, 1, 2, 2, 2, 2)}, {3, 3, conv_options(1, 1, 2, 1, 2, 1)}},
  };
}

constexpr std::int64_t kBatch = 2, kIn = 3, kHidden = 8, kOut = 5;

struct SerialPair {
  nn::Conv2d col, row;
  SerialPair(const PairCase& c)
      : col(kIn, kHidden, c.col.kh, c.col.kw, c.col.options), row(kHidden, kOut, c.row.kh, c.row.kw, c.row.options) {
    fill_random(col.weight, 11);
    fill_random(col.bias, 12);
    fill_random(row.weight, 13);
    fill_random(row.bias, 14);
  }
};

// The reassembled gradient of a (possibly sharded) parameter.
Tensor master_grad(const Parameter& p, Communicator& tp) { return tp::assemble_master(p, p.grad, tp); }

// ---------------------------------------------------------------------------
// Whole fields, tp = world size
// ---------------------------------------------------------------------------

class TpConv : public ::testing::Test {
 protected:
  Communicator tp{MPI_COMM_WORLD};
};

TEST_F(TpConv, KxKPairsMatchSerial) {
  for (const PairCase& c : pair_cases()) {
    for (bool sharded_hidden : {true, false}) {
      const std::string what = c.name + (sharded_hidden ? ", sharded hidden" : ", gathered hidden");
      SerialPair serial(c);
      auto col = tp::ColumnParallelConv2d::from_serial(serial.col, tp, !sharded_hidden, "enc.col");
      auto row = tp::RowParallelConv2d::from_serial(serial.row, tp, sharded_hidden, "enc.row");

      const Tensor x = random_tensor({kBatch, kIn, 9, 8}, 21);
      const Tensor y_serial = serial.row.forward(serial.col.forward(x));
      const Tensor dy = random_tensor(y_serial.shape(), 22);
      const Tensor dx_serial = serial.col.backward(serial.row.backward(dy));

      const Tensor hidden = col->forward(x);
      EXPECT_EQ(hidden.size(1), sharded_hidden ? kHidden / tp.size() : kHidden) << what;
      const Tensor y = row->forward(hidden);
      const Tensor dx = col->backward(row->backward(dy));
      EXPECT_TRUE(tensors_close(y, y_serial)) << what << ": output";
      EXPECT_TRUE(tensors_close(dx, dx_serial)) << what << ": input gradient";
      EXPECT_TRUE(tensors_close(master_grad(col->weight, tp), serial.col.weight.grad)) << what << ": col weight grad";
      EXPECT_TRUE(tensors_close(master_grad(col->bias, tp), serial.col.bias.grad)) << what << ": col bias grad";
      EXPECT_TRUE(tensors_close(master_grad(row->weight, tp), serial.row.weight.grad)) << what << ": row weight grad";
      EXPECT_TRUE(tensors_close(row->bias.grad, serial.row.bias.grad)) << what << ": row bias grad";
    }
  }
}

// Geometries the domain cannot take (no padding, asymmetric stride, even kernels) are
// fine on whole fields: any nn::Conv2d has a tensor-parallel twin.
TEST_F(TpConv, AnyConv2dGeometryMatchesSerial) {
  const std::vector<ConvSpec> specs = {
      {5, 3, conv_options(2, 1, 0, 0, 1, 1)},  // valid conv, stride along latitude only
      {2, 4, conv_options(1, 3, 1, 0, 1, 2)},  // even kernel, dilation and stride along longitude
      {1, 1, conv_options(2, 2, 1, 1, 1, 1)},  // 1x1 with stride and padding (im2col path)
  };
  for (const ConvSpec& s : specs) {
    for (bool column : {true, false}) {
      nn::Conv2d serial(kHidden, kOut * tp.size(), s.kh, s.kw, s.options);
      fill_random(serial.weight, 31);
      fill_random(serial.bias, 32);
      const Tensor x = random_tensor({kBatch, kHidden, 7, 9}, 33);
      const Tensor y_serial = serial.forward(x);
      const Tensor dy = random_tensor(y_serial.shape(), 34);
      const Tensor dx_serial = serial.backward(dy);
      const std::string what = serial.describe() + (column ? " column" : " row");
      Tensor y, dx, grad_w, grad_b;
      if (column) {
        auto layer = tp::ColumnParallelConv2d::from_serial(serial, tp, true);
        y = layer->forward(x);
        dx = layer->backward(dy);
        grad_w = master_grad(layer->weight, tp);
        grad_b = master_grad(layer->bias, tp);
      } else {
        auto layer = tp::RowParallelConv2d::from_serial(serial, tp, false);
        y = layer->forward(x);
        dx = layer->backward(dy);
        grad_w = master_grad(layer->weight, tp);
        grad_b = layer->bias.grad;
      }
      EXPECT_TRUE(tensors_close(y, y_serial)) << what;
      EXPECT_TRUE(tensors_close(dx, dx_serial)) << what;
      EXPECT_TRUE(tensors_close(grad_w, serial.weight.grad)) << what;
      EXPECT_TRUE(tensors_close(grad_b, serial.bias.grad)) << what;
    }
  }
}

TEST_F(TpConv, ConstructorsShardKxKWeightsAndToSerialKeepsTheGeometry) {
  const nn::Conv2dOptions o = conv_options(2, 1, 1, 2, 1, 2);
  tp::TpColConv2d col(kIn, kHidden, 3, 5, tp, o);
  tp::TpRowConv2d row(kHidden, kOut, 3, 5, tp, o);
  EXPECT_EQ(col.weight.value.shape(), (Shape{kHidden / tp.size(), kIn, 3, 5}));
  EXPECT_EQ(col.bias.value.shape(), (Shape{kHidden / tp.size()}));
  EXPECT_EQ(row.weight.value.shape(), (Shape{kOut, kHidden / tp.size(), 3, 5}));
  EXPECT_EQ(row.bias.value.shape(), (Shape{kOut}));
  EXPECT_EQ(col.weight.placement.tp, Placement::shard(0));
  EXPECT_EQ(row.weight.placement.tp, Placement::shard(1));
  // nn::Conv2d's default inits: the bias bound uses the fan-in C_in * kh * kw.
  nn::Conv2d reference(kIn, kHidden, 3, 5, o);
  EXPECT_EQ(col.weight.init.type, reference.weight.init.type);
  EXPECT_EQ(col.bias.init.type, reference.bias.init.type);
  EXPECT_EQ(col.bias.init.low, reference.bias.init.low);
  EXPECT_EQ(col.bias.init.high, reference.bias.init.high);

  fill_random(col.weight, 41 + tp.rank());
  auto serial = col.to_serial();
  EXPECT_EQ(serial->kernel_h(), 3);
  EXPECT_EQ(serial->kernel_w(), 5);
  EXPECT_EQ(serial->options().stride_h, 2);
  EXPECT_EQ(serial->options().padding_w, 2);
  EXPECT_EQ(serial->options().dilation_w, 2);
  EXPECT_TRUE(tensors_close(serial->weight.value, col.master_weight(), 0));
  EXPECT_EQ(row.to_serial()->describe(), nn::Conv2d(kHidden, kOut, 3, 5, o).describe());
}

// The 1x1 layers run the default-option conv on their shard: bit for bit what
// nn::functional::conv2d gives on the same shard (the 1x1 path is unchanged).
TEST_F(TpConv, OneByOneLayersRunTheDefaultConvOnTheirShard) {
  tp::ColumnParallelConv2d col(kIn, kHidden, tp);
  tp::RowParallelConv2d row(kHidden, kOut, tp);
  EXPECT_EQ(col.weight.value.shape(), (Shape{kHidden / tp.size(), kIn, 1, 1}));
  fill_random(col.weight, 71 + tp.rank());
  fill_random(col.bias, 72 + tp.rank());
  fill_random(row.weight, 73 + tp.rank());
  const Tensor x = random_tensor({kBatch, kIn, 4, 5}, 74);
  const Tensor hidden = col.forward(x);
  EXPECT_TRUE(tensors_close(hidden, nn::functional::conv2d(x, col.weight.value, col.bias.value, {}), 0));
  const Tensor dy = random_tensor({kBatch, kHidden / tp.size(), 4, 5}, 75);
  Tensor dw = Tensor::zeros(col.weight.value.shape(), DType::f32), db = Tensor::zeros({kHidden / tp.size()}, DType::f32);
  Tensor dx = nn::functional::conv2d_backward(dy, x, col.weight.value, dw, db, {});
  if (tp.size() > 1) tp.all_reduce(dx, ReduceOp::sum);
  EXPECT_TRUE(tensors_close(col.backward(dy), dx, 0));
  EXPECT_TRUE(tensors_close(col.weight.grad, dw, 0));
  EXPECT_TRUE(tensors_close(col.bias.grad, db, 0));
  Tensor partial = nn::functional::conv2d(hidden, row.weight.value, Tensor(), {});
  if (tp.size() > 1) tp.all_reduce(partial, ReduceOp::sum);
  EXPECT_TRUE(tensors_close(row.forward(hidden), partial, 0));  // the bias is zero here
}

// A parallelize plan converts k x k convs like 1x1 ones.
TEST_F(TpConv, ParallelizeConvertsKxKConvs) {
  const PairCase c = pair_cases()[1];
  SerialPair serial(c);
  nn::Sequential model;
  auto col_copy = std::make_unique<nn::Conv2d>(kIn, kHidden, c.col.kh, c.col.kw, c.col.options);
  auto row_copy = std::make_unique<nn::Conv2d>(kHidden, kOut, c.row.kh, c.row.kw, c.row.options);
  col_copy->weight.value.copy_from(serial.col.weight.value);
  col_copy->bias.value.copy_from(serial.col.bias.value);
  row_copy->weight.value.copy_from(serial.row.weight.value);
  row_copy->bias.value.copy_from(serial.row.bias.value);
  model.append(std::move(col_copy));
  model.append(std::move(row_copy));
  tp::parallelize(model, tp, {{"0", tp::ParallelStyle::colwise()}, {"1", tp::ParallelStyle::rowwise()}});
  EXPECT_EQ(model.at("0").type_name(), "ColumnParallelConv2d");
  EXPECT_EQ(model.at("1").type_name(), "RowParallelConv2d");
  const Tensor x = random_tensor({kBatch, kIn, 6, 7}, 51);
  const Tensor y_serial = serial.row.forward(serial.col.forward(x));
  EXPECT_TRUE(tensors_close(model.forward(x), y_serial));
}

// ---------------------------------------------------------------------------
// Domain-decomposed fields: tp x domain layouts
// ---------------------------------------------------------------------------

struct Layout {
  int tensor, domain;
  domain::ProcessGrid grid;
  std::string str() const {
    return "tp " + std::to_string(tensor) + " x domain " + std::to_string(domain) + " (grid " +
           std::to_string(grid.lat) + "x" + std::to_string(grid.lon) + ")";
  }
};

// Every tp x domain split of the world, with 1-D and 2-D process grids.
std::vector<Layout> layouts(int world) {
  std::vector<Layout> out;
  for (int t = 1; t <= world; ++t) {
    if (world % t != 0) continue;
    const int d = world / t;
    out.push_back({t, d, {d, 1}});
    if (d > 1) out.push_back({t, d, d == 4 ? domain::ProcessGrid{2, 2} : domain::ProcessGrid{1, d}});
  }
  return out;
}

Tensor box_of(const Tensor& global, const domain::LocalBox& b) {
  return global.narrow(2, b.lat.start, b.lat.length).narrow(3, b.lon.start, b.lon.length).contiguous();
}

// x [B, C, H, W] with its longitude wrapped `left` / `right` columns on either side.
Tensor wrap_longitude(const Tensor& x, int left, int right) {
  const std::int64_t W = x.size(3);
  Tensor out = Tensor::zeros({x.size(0), x.size(1), x.size(2), W + left + right}, x.dtype());
  out.narrow(3, left, W).copy_from(x);
  if (left > 0) out.narrow(3, 0, left).copy_from(x.narrow(3, W - left, left));
  if (right > 0) out.narrow(3, left + W, right).copy_from(x.narrow(3, 0, right));
  return out;
}

// Its adjoint: the wrapped columns' gradient added back onto the columns they copy.
Tensor wrap_longitude_adjoint(const Tensor& g, int left, int right) {
  const std::int64_t W = g.size(3) - left - right;
  Tensor out = g.narrow(3, left, W).contiguous();
  auto add = [&](std::int64_t dst, std::int64_t src, std::int64_t n) {
    Tensor d = out.narrow(3, dst, n);
    Tensor sum = d.contiguous();
    ops::axpy(1.0, g.narrow(3, src, n).contiguous(), sum);
    d.copy_from(sum);
  };
  if (left > 0) add(W - left, 0, left);
  if (right > 0) add(0, left + W, right);
  return out;
}

// The serial twin of a conv whose longitude is periodic: wrap the field, then convolve
// with the latitude padding only (accumulating into the serial conv's gradients).
struct PeriodicSerial {
  nn::Conv2d& conv;
  Tensor input;
  nn::Conv2dOptions lat_padding_only() const {
    nn::Conv2dOptions o = conv.options();
    o.padding_w = 0;
    return o;
  }
  Tensor forward(const Tensor& x) {
    input = wrap_longitude(x, conv.options().padding_w, conv.options().padding_w);
    return nn::functional::conv2d(input, conv.weight.value, conv.bias.value, lat_padding_only());
  }
  Tensor backward(const Tensor& dy) {
    const Tensor d_input = nn::functional::conv2d_backward(dy, input, conv.weight.value, conv.weight.grad,
                                                           conv.bias.grad, lat_padding_only());
    return wrap_longitude_adjoint(d_input, conv.options().padding_w, conv.options().padding_w);
  }
};

void run_domain_pair(const Layout& layout, const PairCase& c, bool sharded_hidden, domain::LonPadding lon) {
  ParallelismConfig config;
  config.tensor = layout.tensor;
  config.domain = layout.domain;
  Mesh mesh(MPI_COMM_WORLD, config);
  Communicator& tp = mesh.tp();
  const int stride_h = c.col.options.stride_h, stride_w = c.col.options.stride_w;
  // The stride needs block extents divisible by it; the others run on an uneven split.
  const std::int64_t H = stride_h > 1 ? 16 : 11, W = stride_w > 1 ? 12 : 10;
  const domain::Decomposition fine(mesh, {H, W}, layout.grid);
  const domain::Decomposition coarse(mesh, {H / stride_h, W / stride_w}, layout.grid);
  const std::string what = layout.str() + ", " + c.name + (sharded_hidden ? ", sharded hidden" : ", gathered hidden") +
                           (lon == domain::LonPadding::periodic ? ", periodic lon" : ", zero lon");

  SerialPair serial(c);
  auto col = tp::ColumnParallelConv2d::from_serial(serial.col, tp, !sharded_hidden, "enc.col");
  auto row = tp::RowParallelConv2d::from_serial(serial.row, tp, sharded_hidden, "enc.row");
  col->use_domain_halo(fine, {lon, domain::PolePolicy::zero});
  row->use_domain_halo(coarse, {lon, domain::PolePolicy::zero});
  ASSERT_NE(col->domain_halo(), nullptr);

  const Tensor x = random_tensor({kBatch, kIn, H, W}, 61);
  const Tensor dy = random_tensor({kBatch, kOut, H / stride_h, W / stride_w}, 62);
  Tensor y_serial, dx_serial;
  if (lon == domain::LonPadding::zero) {
    y_serial = serial.row.forward(serial.col.forward(x));
    dx_serial = serial.col.backward(serial.row.backward(dy));
  } else {
    PeriodicSerial col_twin{serial.col, {}}, row_twin{serial.row, {}};
    y_serial = row_twin.forward(col_twin.forward(x));
    dx_serial = col_twin.backward(row_twin.backward(dy));
  }
  ASSERT_EQ(y_serial.shape(), dy.shape());

  const Tensor hidden = col->forward(box_of(x, fine.box()));
  EXPECT_EQ(hidden.shape(), (Shape{kBatch, sharded_hidden ? kHidden / tp.size() : kHidden,
                                   coarse.box().lat.length, coarse.box().lon.length}))
      << what;
  const Tensor y = row->forward(hidden);
  const Tensor dx = col->backward(row->backward(box_of(dy, coarse.box())));
  EXPECT_EQ(domain::sync_domain_gradients(*col, mesh.domain()), 2) << what;
  EXPECT_EQ(domain::sync_domain_gradients(*row, mesh.domain()), 2) << what;

  EXPECT_TRUE(tensors_close(y, box_of(y_serial, coarse.box()))) << what << ": output";
  EXPECT_TRUE(tensors_close(dx, box_of(dx_serial, fine.box()))) << what << ": input gradient";
  EXPECT_TRUE(tensors_close(master_grad(col->weight, tp), serial.col.weight.grad)) << what << ": col weight grad";
  EXPECT_TRUE(tensors_close(master_grad(col->bias, tp), serial.col.bias.grad)) << what << ": col bias grad";
  EXPECT_TRUE(tensors_close(master_grad(row->weight, tp), serial.row.weight.grad)) << what << ": row weight grad";
  EXPECT_TRUE(tensors_close(row->bias.grad, serial.row.bias.grad)) << what << ": row bias grad";
}

TEST(TpConvOnDomain, KxKPairsMatchSerialAtEveryTpByDomainLayout) {
  for (const Layout& layout : layouts(world_size())) {
    for (const PairCase& c : pair_cases()) {
      run_domain_pair(layout, c, true, domain::LonPadding::zero);
    }
  }
}

TEST(TpConvOnDomain, GatheredHiddenAndPeriodicLongitude) {
  for (const Layout& layout : layouts(world_size())) {
    for (const PairCase& c : pair_cases()) {
      run_domain_pair(layout, c, false, domain::LonPadding::periodic);
    }
  }
}

TEST(TpConvOnDomain, HaloNeedsSamePaddingAndStrideAlignedBlocks) {
  Communicator world(MPI_COMM_WORLD);
  Communicator self(MPI_COMM_SELF);
  const domain::Decomposition d(world, {4 * world.size() + 1, 8});
  // Padding 0 on a 3x3 kernel: output blocks would not tile the output grid.
  nn::Conv2d valid(2, 4, 3, 3);
  auto col = tp::ColumnParallelConv2d::from_serial(valid, self, false, "enc.stem");
  try {
    col->use_domain_halo(d);
    ADD_FAILURE() << "accepted padding 0 on a 3x3 kernel";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("ColumnParallelConv2d 'enc.stem'"), std::string::npos) << message;
    EXPECT_NE(message.find("'same' padding"), std::string::npos) << message;
  }
  // An even kernel has no symmetric 'same' padding.
  nn::Conv2d even(2, 4, 2, 2, conv_options(1, 1, 1, 1, 1, 1));
  auto row = tp::RowParallelConv2d::from_serial(even, self, true, "enc.even");
  try {
    row->use_domain_halo(d);
    ADD_FAILURE() << "accepted an even kernel";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("DomainConv2d"), std::string::npos) << e.what();
  }
  // Stride 2 over latitude blocks of odd extent (4 * ranks + 1 rows): every rank throws.
  nn::Conv2d strided(2, 4, 3, 3, conv_options(2, 2, 1, 1, 1, 1));
  auto down = tp::ColumnParallelConv2d::from_serial(strided, self, false, "enc.down");
  try {
    down->use_domain_halo(d);
    ADD_FAILURE() << "accepted stride 2 over odd latitude extents";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("ColumnParallelConv2d 'enc.down'"), std::string::npos) << message;
    EXPECT_NE(message.find("multiple"), std::string::npos) << message;
  }
  EXPECT_EQ(down->domain_halo(), nullptr);
}

TEST(TpConvOnDomain, WrongInputOnOneRankThrowsEverywhere) {
  Communicator world(MPI_COMM_WORLD);
  Communicator self(MPI_COMM_SELF);
  const domain::Decomposition d(world, {4 * world.size() + 1, 8});
  tp::ColumnParallelConv2d col(2, 4, 3, 3, self, conv_options(1, 1, 1, 1, 1, 1), false, {.name = "enc.col"});
  col.use_domain_halo(d);
  const domain::LocalBox box = d.box();
  const std::int64_t rows = d.rank() == 0 ? box.lat.length + 1 : box.lat.length;
  std::string message;
  try {
    col.forward(Tensor::zeros({1, 2, rows, box.lon.length}, DType::f32));
  } catch (const ShapeError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("ColumnParallelConv2d 'enc.col': input"), std::string::npos) << message;
  EXPECT_NE(message.find("on domain rank 0"), std::string::npos) << message;
}

}  // namespace
