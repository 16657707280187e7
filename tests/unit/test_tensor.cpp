// Tensor: dtypes, shapes, owning storage and views, narrow/reshape/contiguous, copies.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "tessera/backend.hpp"
#include "tessera/detail/strided_index.hpp"
#include "tessera/ops.hpp"
#include "tessera/tensor.hpp"

using namespace tessera;

namespace {
std::vector<float> iota_f32(std::size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}
}  // namespace

TEST(DType, SizesNamesAndParsing) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::i64}) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  try {
    parse_dtype("f16", "layers.0.weight");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.weight"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'f16'"), std::string::npos);
  }
  EXPECT_TRUE(is_floating(DType::bf16));
  EXPECT_FALSE(is_floating(DType::i64));
}

TEST(BFloat16, RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f)), 1.0f);
  EXPECT_EQ(static_cast<float>(bfloat16(-2.5f)), -2.5f);
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3 * 2^-8 lies between 1 + 2^-7 and 1 + 2^-6: ties go to even (1 + 2^-6).
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(static_cast<float>(bfloat16(std::numeric_limits<float>::infinity()))));
  EXPECT_EQ(bfloat16(1.0f).bits, 0x3f80);
}

TEST(Tensor, EmptyZerosAndMetadata) {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::f64);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 24u * 8);
  EXPECT_EQ(t.size(1), 3);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(t.owns_storage());
  EXPECT_TRUE(t.device().is_host());
  for (double v : t.to_vector<double>()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(t.str(), "f64[2, 3, 4] on host");
  EXPECT_FALSE(Tensor().defined());

  Tensor scalar = Tensor::zeros({}, DType::i64);
  EXPECT_EQ(scalar.numel(), 1);
  Tensor none = Tensor::empty({0, 5}, DType::f32);
  EXPECT_EQ(none.numel(), 0);
  EXPECT_NO_THROW(none.fill_zero());
}

TEST(Tensor, EveryDtypeRoundTripsThroughFromVector) {
  EXPECT_EQ(Tensor::from_vector<float>({1.5f, -2}, {2}).to_vector<float>(), (std::vector<float>{1.5f, -2}));
  EXPECT_EQ(Tensor::from_vector<double>({1e300, -2}, {2, 1}).to_vector<double>(), (std::vector<double>{1e300, -2}));
  EXPECT_EQ(Tensor::from_vector<std::int64_t>({1LL << 40, -3}, {2}).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{1LL << 40, -3}));
  auto b = Tensor::from_vector<bfloat16>({bfloat16(0.5f), bfloat16(4.0f)}, {2}).to_vector<bfloat16>();
  EXPECT_EQ(static_cast<float>(b[1]), 4.0f);
}

TEST(Tensor, BadShapesAndDtypesAreNamed) {
  EXPECT_THROW(Tensor::empty({2, -1}, DType::f32), ShapeError);
  EXPECT_THROW(Tensor::empty({1, 1, 1, 1, 1, 1, 1, 1, 1}, DType::f32), ShapeError);
  EXPECT_THROW(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), ShapeError);
  Tensor t = Tensor::zeros({2}, DType::f32);
  try {
    (void)t.data<double>();
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("expected dtype f64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.size(1), InvalidArgument);
  EXPECT_THROW(Tensor::empty({2}, DType::f32, Device::cuda()), InvalidArgument);  // cuda:auto
}

TEST(Tensor, ViewWrapsCallerMemoryWithoutCopy) {
  std::vector<double> field(6, 1.0);
  Tensor v = Tensor::view(field.data(), {2, 3}, DType::f64);
  EXPECT_FALSE(v.owns_storage());
  EXPECT_EQ(v.data(), field.data());
  v.fill_zero();
  for (double x : field) EXPECT_EQ(x, 0.0);
  field[4] = 7.0;
  EXPECT_EQ(v.to_vector<double>()[4], 7.0);

  // A Fortran-ordered 2x3 array: element (i, j) at i + 2*j.
  std::vector<float> fortran = {0, 10, 1, 11, 2, 12};  // rows (0,1,2), (10,11,12)
  Tensor f = Tensor::view(fortran.data(), {2, 3}, DType::f32, Device::host(), {1, 2});
  EXPECT_FALSE(f.is_contiguous());
  EXPECT_EQ(f.contiguous().to_vector<float>(), (std::vector<float>{0, 1, 2, 10, 11, 12}));

  EXPECT_THROW(Tensor::view(nullptr, {2}, DType::f32), InvalidArgument);
  EXPECT_NO_THROW(Tensor::view(nullptr, {0}, DType::f32));
  EXPECT_THROW(Tensor::view(fortran.data(), {2, 3}, DType::f32, Device::host(), {1}), ShapeError);
}

TEST(Tensor, NarrowSharesStorageAlongAnyDim) {
  Tensor t = Tensor::from_vector(iota_f32(24), {2, 3, 4});
  Tensor rows = t.narrow(0, 1, 1);  // second block: contiguous
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(rows.to_vector<float>()[0], 12.0f);

  Tensor mid = t.narrow(1, 1, 2);  // shape [2, 2, 4], strided
  EXPECT_EQ(mid.shape(), (Shape{2, 2, 4}));
  EXPECT_FALSE(mid.is_contiguous());
  EXPECT_EQ(mid.contiguous().to_vector<float>(),
            (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23}));

  Tensor last = t.narrow(2, 3, 1);  // shape [2, 3, 1]
  EXPECT_EQ(last.contiguous().to_vector<float>(), (std::vector<float>{3, 7, 11, 15, 19, 23}));

  // Writing through a view writes the parent.
  Tensor col = t.narrow(2, 0, 1);
  col.fill_zero();
  EXPECT_EQ(t.to_vector<float>()[4], 0.0f);
  EXPECT_EQ(t.to_vector<float>()[5], 5.0f);

  EXPECT_THROW(t.narrow(3, 0, 1), InvalidArgument);
  EXPECT_THROW(t.narrow(1, 2, 2), InvalidArgument);
  EXPECT_THROW(t.narrow(1, -1, 1), InvalidArgument);
}

TEST(Tensor, ReshapeCloneContiguousTo) {
  Tensor t = Tensor::from_vector(iota_f32(6), {2, 3});
  Tensor r = t.reshape({3, 2});
  EXPECT_EQ(r.data(), t.data());
  EXPECT_THROW(t.reshape({4}), ShapeError);
  EXPECT_THROW(t.narrow(1, 0, 2).reshape({4}), ShapeError);

  Tensor c = t.clone();
  EXPECT_NE(c.data(), t.data());
  EXPECT_EQ(c.to_vector<float>(), t.to_vector<float>());
  EXPECT_EQ(t.contiguous().data(), t.data());  // already contiguous: alias
  EXPECT_EQ(t.to(Device::host()).data(), t.data());
}

// Sizes whose products wrap used to be accepted: an element or byte count that wrapped to
// a small number allocated (or described) too little memory, and the next write ran past
// it. Each must be a ShapeError (InvalidArgument for narrow's indices) naming the caller.
TEST(Tensor, SizesThatOverflowAreErrorsNamingTheCaller) {
  constexpr std::int64_t big = std::int64_t{1} << 62;
  auto expect_shape_error = [](auto&& make, const std::string& who) {
    try {
      make();
      ADD_FAILURE() << "no error; expected one naming " << who;
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find(who), std::string::npos) << e.what();
    }
  };
  // numel wraps (2^62 * 4 = 2^64 -> 0), bytes wrap (2^61 * 8 = 2^64 -> 0).
  expect_shape_error([&] { (void)Tensor::empty({big, 4}, DType::f32); }, "Tensor::empty");
  expect_shape_error([&] { (void)Tensor::empty({big / 2}, DType::f64); }, "Tensor::empty");
  // No elements, but the stride of dim 0 (2^62 * 2^62) does not fit.
  expect_shape_error([&] { (void)Tensor::zeros({0, big, big}, DType::f32); }, "Tensor::empty");
  std::vector<float> buffer(16);
  expect_shape_error([&] { (void)Tensor::view(buffer.data(), {big, 4}, DType::f32); }, "Tensor::view");
  expect_shape_error([&] { (void)Tensor::view(buffer.data(), {big / 2}, DType::f64); }, "Tensor::view");
  // Strides that address past int64: (4 - 1) * 2^62 overflows even though numel is 8.
  expect_shape_error([&] { (void)Tensor::view(buffer.data(), {4, 2}, DType::f32, Device::host(), {big, 1}); },
                     "Tensor::view");
  // (2^62 + 1) * 4 wraps to 4: reshape used to accept it as a view of 4 elements.
  const Tensor four = Tensor::zeros({4}, DType::f32);
  expect_shape_error([&] { (void)four.reshape({big + 1, 4}); }, "Tensor::reshape");
  expect_shape_error([&] { (void)contiguous_strides({2, big, big}); }, "contiguous_strides");
  expect_shape_error([&] { (void)shape_numel({big, big}); }, "shape_numel");
  // start + length wraps negative: narrow used to accept it and offset the data pointer.
  EXPECT_THROW(four.narrow(0, std::numeric_limits<std::int64_t>::max(), 2), InvalidArgument);
  EXPECT_THROW(four.narrow(0, 2, std::numeric_limits<std::int64_t>::max()), InvalidArgument);

  // Empty shapes stay valid whatever the other extents, as long as the strides fit.
  EXPECT_EQ(Tensor::zeros({0, big}, DType::f32).numel(), 0);
  EXPECT_EQ(Tensor::view(nullptr, {big, 0}, DType::f64).numel(), 0);
  // A strided view's span, not its element count, is what must fit.
  const Tensor sparse = Tensor::view(buffer.data(), {2, 2}, DType::f32, Device::host(), {8, 1});
  EXPECT_EQ(sparse.numel(), 4);
}

TEST(Tensor, CopyFromHandlesStridesOnBothSides) {
  Tensor src = Tensor::from_vector(iota_f32(12), {3, 4});
  Tensor dst = Tensor::zeros({4, 6}, DType::f32);
  // Copy columns 1..2 of src (strided) into a strided window of dst.
  dst.narrow(0, 1, 3).narrow(1, 2, 2).copy_from(src.narrow(1, 1, 2));
  const auto d = dst.to_vector<float>();
  EXPECT_EQ(d[1 * 6 + 2], 1.0f);
  EXPECT_EQ(d[1 * 6 + 3], 2.0f);
  EXPECT_EQ(d[3 * 6 + 2], 9.0f);
  EXPECT_EQ(d[3 * 6 + 3], 10.0f);
  EXPECT_EQ(d[0], 0.0f);
  EXPECT_EQ(std::accumulate(d.begin(), d.end(), 0.0f), 1 + 2 + 5 + 6 + 9 + 10);

  EXPECT_THROW(dst.copy_from(src), ShapeError);
  EXPECT_THROW(Tensor::zeros({3, 4}, DType::f64).copy_from(src), ShapeError);
}

TEST(StridedIndex, MatchesNestedLoops) {
  detail::StridedLayout layout;
  layout.ndim = 3;
  const std::int64_t shape[3] = {2, 3, 5};
  const std::int64_t strides[3] = {100, 7, 2};
  for (int d = 0; d < 3; ++d) {
    layout.shape[d] = shape[d];
    layout.strides[d] = strides[d];
  }
  std::int64_t linear = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 5; ++k)
        EXPECT_EQ(detail::strided_offset(linear++, layout), i * 100 + j * 7 + k * 2);
  detail::StridedLayout scalar;
  EXPECT_EQ(detail::strided_offset(0, scalar), 0);
}

TEST(Backend, HostAlwaysAvailableCudaReportsWhyNot) {
  EXPECT_EQ(backend_for(DeviceType::host).name(), "host");
  if (cuda_device_count() == 0) {
    EXPECT_FALSE(cuda_unavailable_reason().empty());
  } else {
    EXPECT_TRUE(cuda_unavailable_reason().empty());
  }
  EXPECT_FALSE(cuda_library_versions().empty());
}

TEST(HostThreads, ShareOfTheNodesCores) {
  EXPECT_EQ(ops::host_thread_share(16, 4), 4);
  EXPECT_EQ(ops::host_thread_share(2, 4), 1);   // oversubscribed: one thread each
  EXPECT_EQ(ops::host_thread_share(2, 1), 2);
  EXPECT_EQ(ops::host_thread_share(7, 2), 3);
  EXPECT_EQ(ops::host_thread_share(8, 0), 8);
  const int before = ops::host_threads();
  ops::set_host_threads(1);
  EXPECT_EQ(ops::host_threads(), 1);
  ops::set_host_threads(before);
  EXPECT_THROW(ops::set_host_threads(0), InvalidArgument);
}
