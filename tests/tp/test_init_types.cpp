// The seed's remaining init types (orthogonal, biased_normal, dirac) and the stride of the
// column / row parallel linears, at tp = 1, 2, 4:
// - orthogonal is the Q of the QR of the Gaussian matrix InitSpec::normal(0, 1) draws for
//   the same name, with R's diagonal positive (nn.init.orthogonal_'s definition, which
//   makes Q unique): W W^T = gain^2 I, and (W / gain)^T G upper triangular with a
//   positive diagonal;
// - dirac equals nn.init.dirac_'s rule element by element (groups 1 and 2, 3- to 5-dim
//   weights), eye for 2-dim weights;
// - biased_normal is normal for the weight and the layer's bias;
// - every block of every new type equals the whole tensor bit for bit, and the tp layers'
//   reassembled masters equal the serial masters bit for bit at every tp size;
// - a strided layer holds the interleaved pieces, its master is the serial one, and it
//   computes the serial layer's forward and backward (alone, and a column -> row pair).

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mpi_test.hpp"
#include "tessera/init.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp_test_util.hpp"

using namespace tessera;
using tessera::testing::as_doubles;
using tessera::testing::random_tensor;
using tessera::testing::tensors_close;

namespace {

constexpr std::uint64_t kSeed = 20240611;

std::vector<double> init_f64(const Shape& shape, const InitSpec& spec, const std::string& name,
                             std::uint64_t seed = kSeed) {
  Tensor t = Tensor::empty(shape, DType::f64);
  initialize(t, shape, Shape(shape.size(), 0), spec, seed, name);
  return t.to_vector<double>();
}

// max |A B^T - c I| for row-major A, B of [rows, cols].
double gram_error(const std::vector<double>& a, std::int64_t rows, std::int64_t cols, double c) {
  double worst = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < rows; ++j) {
      double dot = 0;
      for (std::int64_t k = 0; k < cols; ++k) dot += a[i * cols + k] * a[j * cols + k];
      worst = std::max(worst, std::abs(dot - (i == j ? c : 0.0)));
    }
  }
  return worst;
}

std::vector<double> transposed(const std::vector<double>& a, std::int64_t rows, std::int64_t cols) {
  std::vector<double> t(a.size());
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
  }
  return t;
}

// Every block of `shape` along dims 0 and 1 cut into `parts` (uneven included) equals the
// whole tensor's elements, bit for bit.
void expect_blocks_match_whole(const Shape& shape, const InitSpec& spec, const std::string& name) {
  const std::vector<double> whole = init_f64(shape, spec, name);
  const Tensor whole_t = Tensor::from_vector(whole, shape);
  for (int dim : {0, 1}) {
    for (int parts : {2, 3, 4}) {
      for (int part = 0; part < parts; ++part) {
        const ShardRange range = shard_range(shape[dim], parts, part);
        Shape local_shape = shape, offset(shape.size(), 0);
        local_shape[dim] = range.length;
        offset[dim] = range.start;
        Tensor local = Tensor::empty(local_shape, DType::f64);
        initialize(local, shape, offset, spec, kSeed, name);
        EXPECT_EQ(local.to_vector<double>(), whole_t.narrow(dim, range.start, range.length).contiguous().to_vector<double>())
            << name << " dim " << dim << " part " << part << "/" << parts;
      }
    }
  }
}

class InitTypes : public ::testing::Test {
 protected:
  Communicator tp{MPI_COMM_WORLD};
  int p() const { return tp.size(); }
  int r() const { return tp.rank(); }
};

}  // namespace

// ---------------------------------------------------------------------------- names

TEST_F(InitTypes, SeedNamesParseAndRoundTrip) {
  for (InitType t : {InitType::orthogonal, InitType::biased_normal, InitType::dirac}) {
    EXPECT_EQ(parse_init_type(init_type_name(t)), t);
  }
  EXPECT_EQ(parse_init_type("orthogonal"), InitType::orthogonal);
  EXPECT_EQ(parse_init_type("biased_normal"), InitType::biased_normal);
  EXPECT_EQ(parse_init_type("dirac"), InitType::dirac);
  try {
    parse_init_type("orthonormal", "model.init_type");
    FAIL();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.init_type"), std::string::npos) << what;
    EXPECT_NE(what.find("'orthonormal' is unknown"), std::string::npos) << what;
    EXPECT_NE(what.find("dirac"), std::string::npos) << what;  // the list names the new types
  }
}

// ---------------------------------------------------------------------------- orthogonal

TEST_F(InitTypes, OrthogonalIsTheQOfTheGaussianMatrixWithPositiveR) {
  const double gain = 1.7;
  // [rows, cols] views: tall, wide, square, and a conv weight [4, 3, 2, 2] -> [4, 12].
  for (const Shape& shape : std::vector<Shape>{{10, 6}, {6, 10}, {8, 8}, {4, 3, 2, 2}, {1, 5}, {5, 1}}) {
    const std::int64_t rows = shape[0], cols = shape_numel(shape) / rows;
    const std::string label = shape_str(shape);
    const std::vector<double> w = init_f64(shape, InitSpec::orthogonal(gain), "layer.weight");
    const std::vector<double> g = init_f64(shape, InitSpec::normal(0.0, 1.0), "layer.weight");
    // Orthonormal rows (wide) or columns (tall), scaled by gain.
    const double err = rows <= cols ? gram_error(w, rows, cols, gain * gain)
                                    : gram_error(transposed(w, rows, cols), cols, rows, gain * gain);
    EXPECT_LT(err, 1e-12) << label;
    // The QR: tall G = Q R, R = Q^T G; wide G^T = Q R, R = Q^T G^T with Q = W^T / gain.
    const bool wide = rows < cols;
    const std::int64_t m = wide ? cols : rows, n = wide ? rows : cols;
    // q[i][j] (m x n) and a[i][j] (m x n, the matrix that was factorised).
    auto q = [&](std::int64_t i, std::int64_t j) { return (wide ? w[j * cols + i] : w[i * cols + j]) / gain; };
    auto a = [&](std::int64_t i, std::int64_t j) { return wide ? g[j * cols + i] : g[i * cols + j]; };
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double rij = 0;
        for (std::int64_t k = 0; k < m; ++k) rij += q(k, i) * a(k, j);
        if (i > j) EXPECT_NEAR(rij, 0.0, 1e-12) << label << " R[" << i << "][" << j << "]";
        if (i == j) EXPECT_GT(rij, 0.0) << label << " R[" << i << "][" << i << "]";
      }
    }
    // And Q R reproduces the Gaussian matrix: nothing else was factorised.
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double qr = 0;
        for (std::int64_t k = 0; k <= j; ++k) {
          double rkj = 0;
          for (std::int64_t l = 0; l < m; ++l) rkj += q(l, k) * a(l, j);
          qr += q(i, k) * rkj;
        }
        EXPECT_NEAR(qr, a(i, j), 1e-11) << label;
      }
    }
  }
}

TEST_F(InitTypes, OrthogonalBlocksDependOnNameAndSeedAndRoundFromF64) {
  const Shape shape{12, 7};
  expect_blocks_match_whole(shape, InitSpec::orthogonal(0.5), "a.weight");
  expect_blocks_match_whole({5, 3, 3}, InitSpec::orthogonal(), "conv.weight");
  EXPECT_NE(init_f64(shape, InitSpec::orthogonal(), "a.weight"), init_f64(shape, InitSpec::orthogonal(), "b.weight"));
  EXPECT_NE(init_f64(shape, InitSpec::orthogonal(), "a.weight", 1),
            init_f64(shape, InitSpec::orthogonal(), "a.weight", 2));
  const std::vector<double> f64 = init_f64(shape, InitSpec::orthogonal(), "a.weight");
  Tensor f32 = Tensor::empty(shape, DType::f32);
  initialize(f32, shape, {0, 0}, InitSpec::orthogonal(), kSeed, "a.weight");
  const auto got = f32.to_vector<float>();
  for (std::size_t i = 0; i < f64.size(); ++i) EXPECT_EQ(got[i], static_cast<float>(f64[i])) << i;
}

TEST_F(InitTypes, OrthogonalRejectsOneDimAndNonFiniteGain) {
  Tensor v = Tensor::empty({4}, DType::f32);
  EXPECT_THROW(initialize(v, {4}, {0}, InitSpec::orthogonal(), kSeed, "b"), InvalidArgument);
  Tensor w = Tensor::empty({4, 4}, DType::f32);
  try {
    initialize(w, {4, 4}, {0, 0}, InitSpec::orthogonal(std::nan("")), kSeed, "proj.weight");
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'proj.weight' (orthogonal)"), std::string::npos) << what;
    EXPECT_NE(what.find("gain"), std::string::npos) << what;
  }
  Tensor empty = Tensor::empty({0, 4}, DType::f32);
  EXPECT_NO_THROW(initialize(empty, {0, 4}, {0, 0}, InitSpec::orthogonal(), kSeed, "e"));
}

// ---------------------------------------------------------------------------- dirac

TEST_F(InitTypes, DiracFollowsTheIdentityRuleAtEveryPosition) {
  struct Case {
    Shape shape;
    std::int64_t groups;
  };
  for (const Case& c : std::vector<Case>{{{6, 4, 3, 3}, 1}, {{4, 6, 3, 3}, 1}, {{6, 2, 3, 5}, 2}, {{8, 3, 4}, 2},
                                         {{3, 3, 3, 2, 3}, 1}, {{5, 3}, 1}, {{3, 5}, 1}}) {
    const std::vector<double> w = init_f64(c.shape, InitSpec::dirac(c.groups), "conv.weight");
    const std::int64_t out = c.shape[0], in = c.shape[1], per_group = out / c.groups;
    std::int64_t spatial = 1, centre = 0;
    for (std::size_t k = 2; k < c.shape.size(); ++k) {
      centre = centre * c.shape[k] + c.shape[k] / 2;
      spatial *= c.shape[k];
    }
    std::int64_t ones = 0;
    for (std::int64_t o = 0; o < out; ++o) {
      for (std::int64_t i = 0; i < in; ++i) {
        for (std::int64_t s = 0; s < spatial; ++s) {
          const std::int64_t d = o % per_group;
          const double want = (s == centre && i == d && d < std::min(per_group, in)) ? 1.0 : 0.0;
          ASSERT_EQ(w[(o * in + i) * spatial + s], want) << shape_str(c.shape) << " groups " << c.groups;
          ones += want == 1.0;
        }
      }
    }
    EXPECT_EQ(ones, c.groups * std::min(per_group, in)) << shape_str(c.shape);
    expect_blocks_match_whole(c.shape, InitSpec::dirac(c.groups), "conv.weight");
  }
  // A dirac conv is the identity on the first min(out, in) channels: an explicit check
  // on a 3x3 kernel, at the centre tap.
  const std::vector<double> k = init_f64({2, 2, 3, 3}, InitSpec::dirac(), "id");
  EXPECT_EQ(k[(0 * 2 + 0) * 9 + 4], 1.0);
  EXPECT_EQ(k[(1 * 2 + 1) * 9 + 4], 1.0);
  EXPECT_EQ(k[(0 * 2 + 1) * 9 + 4], 0.0);
}

TEST_F(InitTypes, DiracRejectsBadShapesAndGroupsByName) {
  auto expect_error = [](const Shape& shape, std::int64_t groups, const std::string& fragment) {
    Tensor t = Tensor::empty(shape, DType::f32);
    try {
      initialize(t, shape, Shape(shape.size(), 0), InitSpec::dirac(groups), kSeed, "stem.weight");
      ADD_FAILURE() << shape_str(shape) << " groups " << groups;
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'stem.weight' (dirac)"), std::string::npos) << what;
      EXPECT_NE(what.find(fragment), std::string::npos) << what;
    }
  };
  expect_error({4}, 1, "2 to 5 dims");
  expect_error({2, 2, 2, 2, 2, 2}, 1, "2 to 5 dims");
  expect_error({6, 2, 3}, 4, "groups = 4");
  expect_error({6, 2, 3}, 0, "groups = 0");
  expect_error({4, 4}, 2, "groups = 1");
}

// ---------------------------------------------------------------------------- biased_normal

TEST_F(InitTypes, BiasedNormalDrawsTheNormalForWeightAndBias) {
  const Shape shape{16, 9};
  EXPECT_EQ(init_f64(shape, InitSpec::biased_normal(0.25, 0.5), "w"), init_f64(shape, InitSpec::normal(0.25, 0.5), "w"));
  expect_blocks_match_whole(shape, InitSpec::biased_normal(0.25, 0.5), "w");
  const InitSpec bias = bias_init_for(InitSpec::biased_normal(0.25, 0.5), InitSpec::zeros());
  EXPECT_EQ(bias.type, InitType::normal);
  EXPECT_EQ(bias.mean, 0.25);
  EXPECT_EQ(bias.std, 0.5);
  EXPECT_EQ(bias_init_for(InitSpec::normal(0.25, 0.5), InitSpec::zeros()).type, InitType::zeros);
  Tensor t = Tensor::empty(shape, DType::f32);
  EXPECT_THROW(initialize(t, shape, {0, 0}, InitSpec::biased_normal(0, -1), kSeed, "w"), InvalidArgument);
}

// ------------------------------------------------------------------- tp layers, stride 1

// A column and a row layer initialised with each new type: the reassembled masters equal
// a serial Linear initialised with the same FQNs and specs, bit for bit, at every tp.
TEST_F(InitTypes, TpLinearMastersEqualTheSerialMastersAtEveryLayout) {
  const std::int64_t in = 8, out = 12;
  for (const InitSpec& spec : {InitSpec::orthogonal(2.0), InitSpec::dirac(), InitSpec::biased_normal(0.1, 0.3)}) {
    const std::string label(init_type_name(spec.type));
    tp::ParallelLinearOptions o;
    o.dtype = DType::f64;
    o.weight_init = spec;
    tp::ColumnParallelLinear column(in, out, tp, true, o);
    tp::RowParallelLinear row(out, in, tp, false, o);
    nn::initialize_parameters(column, kSeed, "up");
    nn::initialize_parameters(row, kSeed, "down");

    nn::Linear serial_up(in, out, true, DType::f64), serial_down(out, in, true, DType::f64);
    serial_up.weight.init = serial_down.weight.init = spec;
    serial_up.bias.init = bias_init_for(spec, nn::Linear::default_bias_init(in));
    serial_down.bias.init = bias_init_for(spec, nn::Linear::default_bias_init(out));
    nn::initialize_parameters(serial_up, kSeed, "up");
    nn::initialize_parameters(serial_down, kSeed, "down");

    EXPECT_TRUE(tensors_close(column.master_weight(), serial_up.weight.value, 0)) << label;
    EXPECT_TRUE(tensors_close(column.master_bias(), serial_up.bias.value, 0)) << label;
    EXPECT_TRUE(tensors_close(row.master_weight(), serial_down.weight.value, 0)) << label;
    EXPECT_TRUE(tensors_close(row.master_bias(), serial_down.bias.value, 0)) << label;
    if (spec.type == InitType::biased_normal) {
      EXPECT_EQ(column.bias.init.type, InitType::normal);  // the seed's "biased": the bias is normal too
      EXPECT_EQ(row.bias.init.std, 0.3);
    } else {
      EXPECT_EQ(column.bias.init.type, InitType::uniform);  // nn::Linear's default bias
    }
  }
}

// ------------------------------------------------------------------------------ stride

namespace {

// The serial Linear a strided layer stands for: same FQN prefix, default specs.
std::unique_ptr<nn::Linear> serial_linear(std::int64_t in, std::int64_t out, const std::string& prefix,
                                          const InitSpec& weight_init) {
  auto serial = std::make_unique<nn::Linear>(in, out, true, DType::f64);
  serial->weight.init = weight_init;
  nn::initialize_parameters(*serial, kSeed, prefix);
  return serial;
}

}  // namespace

TEST_F(InitTypes, StridedColumnHoldsInterleavedPiecesAndMatchesSerial) {
  const std::int64_t in = 5, stride = 3, block = 8, out = stride * block;  // a fused [q; k; v]
  for (const InitSpec& spec : {nn::Linear::default_weight_init(), InitSpec::orthogonal()}) {
    for (bool gather_output : {true, false}) {
      tp::ParallelLinearOptions o;
      o.dtype = DType::f64;
      o.stride = stride;
      o.weight_init = spec;
      tp::ColumnParallelLinear layer(in, out, tp, gather_output, o);
      EXPECT_EQ(layer.stride(), stride);
      EXPECT_EQ(layer.weight.global_shape, (Shape{stride, block, in}));
      EXPECT_EQ(layer.weight.placement.tp, Placement::shard(1));
      nn::initialize_parameters(layer, kSeed, "attn.qkv");
      auto serial = serial_linear(in, out, "attn.qkv", spec);

      // The master is the serial master (kaiming's fans are those of [out, in]).
      EXPECT_TRUE(tensors_close(layer.master_weight(), serial->weight.value, 0));
      EXPECT_TRUE(tensors_close(layer.master_bias(), serial->bias.value, 0));
      // Rank r holds piece r of each of the three blocks, in block order.
      const std::int64_t piece = block / p();
      const Tensor mine = layer.weight.value.reshape({out / p(), in});
      const Tensor mine_bias = layer.bias.value.reshape({out / p()});
      for (std::int64_t k = 0; k < stride; ++k) {
        const std::int64_t start = k * block + r() * piece;
        EXPECT_EQ(as_doubles(mine.narrow(0, k * piece, piece)), as_doubles(serial->weight.value.narrow(0, start, piece)))
            << "block " << k;
        EXPECT_EQ(as_doubles(mine_bias.narrow(0, k * piece, piece)), as_doubles(serial->bias.value.narrow(0, start, piece)));
      }
      if (spec.type == InitType::orthogonal) {
        EXPECT_LT(gram_error(transposed(as_doubles(layer.master_weight()), out, in), in, out, 1.0), 1e-12);
      }

      // Forward and backward equal the serial layer's.
      const Tensor x = random_tensor({2, 3, in}, 31, DType::f64);
      const Tensor dy = random_tensor({2, 3, out}, 32, DType::f64);
      const Tensor y_serial = serial->forward(x);
      const Tensor dx_serial = serial->backward(dy);
      // Without gather_output each rank's features are its pieces, in block order.
      auto local_features = [&](const Tensor& t) {
        return tp::split_along(t.reshape({2, 3, stride, block}), -1, tp).contiguous().reshape({2, 3, out / p()});
      };
      const Tensor y = layer.forward(x);
      const Tensor dx = layer.backward(gather_output ? dy : local_features(dy));
      EXPECT_TRUE(tensors_close(y, gather_output ? y_serial : local_features(y_serial), 1e-12)) << gather_output;
      EXPECT_TRUE(tensors_close(dx, dx_serial, 1e-12)) << gather_output;
      EXPECT_TRUE(tensors_close(tp::assemble_master(layer.weight, layer.weight.grad, tp).reshape({out, in}),
                                serial->weight.grad, 1e-12));
      EXPECT_TRUE(tensors_close(tp::assemble_master(layer.bias, layer.bias.grad, tp).reshape({out}),
                                serial->bias.grad, 1e-12));
    }
  }
}

TEST_F(InitTypes, StridedRowSplitsItsInputByPiecesAndMatchesSerial) {
  const std::int64_t stride = 2, in = stride * 8, out = 6;
  tp::ParallelLinearOptions o;
  o.dtype = DType::f64;
  o.stride = stride;
  tp::RowParallelLinear layer(in, out, tp, false, o);
  EXPECT_EQ(layer.weight.global_shape, (Shape{out, stride, in / stride}));
  EXPECT_EQ(layer.weight.placement.tp, Placement::shard(2));
  EXPECT_TRUE(layer.bias.placement.is_replicated());
  nn::initialize_parameters(layer, kSeed, "mlp.down");
  auto serial = serial_linear(in, out, "mlp.down", nn::Linear::default_weight_init());
  EXPECT_TRUE(tensors_close(layer.master_weight(), serial->weight.value, 0));
  EXPECT_TRUE(tensors_close(layer.master_bias(), serial->bias.value, 0));
  const std::int64_t piece = in / stride / p();
  const Tensor mine = layer.weight.value.reshape({out, in / p()});
  for (std::int64_t k = 0; k < stride; ++k) {
    EXPECT_EQ(as_doubles(mine.narrow(1, k * piece, piece)),
              as_doubles(serial->weight.value.narrow(1, k * (in / stride) + r() * piece, piece)));
  }
  const Tensor x = random_tensor({4, in}, 41, DType::f64);
  const Tensor dy = random_tensor({4, out}, 42, DType::f64);
  const Tensor y_serial = serial->forward(x);
  const Tensor dx_serial = serial->backward(dy);
  EXPECT_TRUE(tensors_close(layer.forward(x), y_serial, 1e-12));
  EXPECT_TRUE(tensors_close(layer.backward(dy), dx_serial, 1e-12));
  EXPECT_TRUE(tensors_close(tp::assemble_master(layer.weight, layer.weight.grad, tp).reshape({out, in}),
                            serial->weight.grad, 1e-12));
  EXPECT_TRUE(tensors_close(layer.bias.grad, serial->bias.grad, 1e-12));
}

// A strided column layer without gather_output feeding a row layer of the same stride:
// the local features line up, and the pair computes the serial pair.
TEST_F(InitTypes, StridedColumnFeedsStridedRow) {
  const std::int64_t in = 6, stride = 2, hidden = stride * 8, out = 5;
  tp::ParallelLinearOptions o;
  o.dtype = DType::f64;
  o.stride = stride;
  tp::ColumnParallelLinear up(in, hidden, tp, false, o);
  tp::RowParallelLinear down(hidden, out, tp, true, o);
  nn::initialize_parameters(up, kSeed, "mlp.up");
  nn::initialize_parameters(down, kSeed, "mlp.down");
  auto serial_up = serial_linear(in, hidden, "mlp.up", nn::Linear::default_weight_init());
  auto serial_down = serial_linear(hidden, out, "mlp.down", nn::Linear::default_weight_init());
  const Tensor x = random_tensor({3, in}, 51, DType::f64);
  const Tensor dy = random_tensor({3, out}, 52, DType::f64);
  const Tensor y_serial = serial_down->forward(serial_up->forward(x));
  const Tensor dx_serial = serial_up->backward(serial_down->backward(dy));
  EXPECT_TRUE(tensors_close(down.forward(up.forward(x)), y_serial, 1e-12));
  EXPECT_TRUE(tensors_close(up.backward(down.backward(dy)), dx_serial, 1e-12));
  EXPECT_TRUE(tensors_close(tp::assemble_master(up.weight, up.weight.grad, tp).reshape({hidden, in}),
                            serial_up->weight.grad, 1e-12));
  EXPECT_TRUE(tensors_close(tp::assemble_master(down.weight, down.weight.grad, tp).reshape({out, hidden}),
                            serial_down->weight.grad, 1e-12));
}

TEST_F(InitTypes, StrideThatDoesNotDivideIsNamed) {
  tp::ParallelLinearOptions o;
  o.stride = 3;
  o.name = "attn.qkv";
  try {
    tp::ColumnParallelLinear layer(4, 8, tp, true, o);  // 8 never divides by 3 * tp
    FAIL();
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'attn.qkv'"), std::string::npos) << what;
    EXPECT_NE(what.find("stride 3"), std::string::npos) << what;
    EXPECT_NE(what.find("out_features (8)"), std::string::npos) << what;
  }
  o.stride = 0;
  EXPECT_THROW(tp::RowParallelLinear(8, 4, tp, false, o), InvalidArgument);
}
