// The CUDA twins of the domain suites: the halo exchange of device fields (several
// dtypes in one exchange, row-strided and Fortran-order views, latitude and longitude
// bands, every pole policy, staged and direct messages, start/finish, the adjoint)
// against the host exchange of the same data; DomainConv2d forward and backward against
// the serial host nn::Conv2d (zero padding) and the serial host DomainConv2d (periodic
// longitude, poles); the latitude-weighted loss and the field emulator's forward,
// backward and predict against their serial host twins on the gathered field. The
// serial twins run on MPI_COMM_SELF, so every rank computes the whole field itself.
//
// Runs at 1 and 2 ranks on ONE GPU (the communicator stages CUDA collectives through
// MPI when ranks share a device). Without a GPU every test skips (exit 77: CTest
// reports Skipped, never Passed).

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../domain/domain_test_support.hpp"
#include "../support/emulator_config.hpp"
#include "cuda_test_util.hpp"
#include "tessera/backend.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/domain_conv2d.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/init.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/tensor.hpp"

namespace {

using namespace tessera;
using namespace tessera::cuda_test;
using domain::PolePolicy;
using tessera::testing::self;
using tessera::testing::world;

class CudaDomain : public DeviceTest {};

// Latitude bands and longitude bands over every rank (one grid at 1 rank), and 2x2 at 4.
std::vector<domain::ProcessGrid> grids() {
  const int size = world_size();
  std::vector<domain::ProcessGrid> out{{size, 1}};
  if (size > 1) out.push_back({1, size});
  if (size == 4) out.push_back({2, 2});
  return out;
}

// Integers in [-100, 100] from `seed` in any dtype (exact in bf16 and i64); f32 and f64
// get arbitrary reals instead, so a bit-identical comparison sees every mantissa bit.
Tensor random_field(const Shape& shape, DType dtype, unsigned seed) {
  if (dtype == DType::f32 || dtype == DType::f64) return random_host(shape, dtype, seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-100, 100);
  const auto n = static_cast<std::size_t>(shape_numel(shape));
  if (dtype == DType::bf16) {
    std::vector<bfloat16> v(n);
    for (auto& x : v) x = bfloat16(static_cast<float>(dist(rng)));
    return Tensor::from_vector<bfloat16>(v, shape);
  }
  std::vector<std::int64_t> v(n);
  for (auto& x : v) x = dist(rng);
  return Tensor::from_vector<std::int64_t>(v, shape);
}

// `values` in a field of its shape laid out in Fortran order (first dim fastest) on
// `device`; `storage` owns the memory the returned view points into.
Tensor fortran_field(const Tensor& values, Device device, Tensor& storage) {
  const Shape& shape = values.shape();
  storage = Tensor::empty({values.numel()}, values.dtype(), device);
  Shape strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    strides[d] = stride;
    stride *= shape[d];
  }
  Tensor view = Tensor::view(storage.data(), shape, values.dtype(), device, strides);
  view.copy_from(values);
  return view;
}

// `values` in a view whose rows are 3 elements longer than the field (row-strided).
Tensor row_strided_field(const Tensor& values, Device device) {
  Shape wide = values.shape();
  wide.back() += 3;
  Tensor view = Tensor::zeros(wide, values.dtype(), device).narrow(values.dim() - 1, 1, values.shape().back());
  view.copy_from(values);
  return view;
}

// The same fields on the host and on the device, in one exchange's order.
struct FieldSet {
  std::vector<Tensor> host, device;
  Tensor host_storage, device_storage;  // behind the Fortran-order views

  void add(const Tensor& values, Device device_) {
    host.push_back(values.clone());
    device.push_back(values.to(device_));
  }
  void expect_identical(const std::string& what) const {
    for (std::size_t k = 0; k < host.size(); ++k) {
      EXPECT_TRUE(bit_identical(device[k], host[k])) << what << ", field " << k << " " << host[k].str();
    }
  }
};

// Floating fields of every layout: f32 and f64 with leading dims, a Fortran-order f64
// view and a row-strided f32 view, and (forward only: the adjoint adds) a bf16 field.
FieldSet float_fields(const domain::HaloExchange& ex, Device device, unsigned seed, bool with_bf16) {
  FieldSet set;
  set.add(random_field(ex.padded_shape({2}), DType::f32, seed), device);
  set.add(random_field(ex.padded_shape({3}), DType::f64, seed + 1), device);
  const Tensor ftn = random_field(ex.padded_shape({2}), DType::f64, seed + 2);
  set.host.push_back(fortran_field(ftn, Device::host(), set.host_storage));
  set.device.push_back(fortran_field(ftn, device, set.device_storage));
  const Tensor strided = random_field(ex.padded_shape({2}), DType::f32, seed + 3);
  set.host.push_back(row_strided_field(strided, Device::host()));
  set.device.push_back(row_strided_field(strided, device));
  if (with_bf16) set.add(random_field(ex.padded_shape({}), DType::bf16, seed + 4), device);
  return set;
}

std::vector<domain::HaloSpec> halo_specs() {
  return {{{1, 2, 2, 1}, false, PolePolicy::zero},
          {{2, 1, 1, 2}, true, PolePolicy::replicate},
          {{1, 2, 2, 1}, true, PolePolicy::across_pole}};
}

std::string spec_str(const domain::HaloSpec& spec) {
  return spec.width.str() + (spec.periodic_lon ? " periodic" : " bounded") + " pole " +
         std::string(domain::pole_policy_name(spec.pole));
}

// Forward exchanges are copies, bit-identical by construction. The adjoint adds each
// halo value into its source cell with one IEEE addition per value, rectangle by
// rectangle in the same order on both devices, so it is bit-identical too.
TEST_F(CudaDomain, HaloExchangeOfEveryLayoutAndPolicyEqualsTheHostBitForBit) {
  for (const bool staged : {false, true}) {
    // Staged: through pinned host buffers; otherwise as this MPI allows (direct when
    // it is CUDA-aware, which may also be staging).
    if (staged) setenv("TESSERA_MPI_CUDA_AWARE", "0", 1);
    for (const domain::ProcessGrid& grid : grids()) {
      domain::Decomposition d(world(), {9, 8}, grid);
      for (const domain::HaloSpec& spec : halo_specs()) {
        const std::string what = grid.str() + " " + spec_str(spec) + (staged ? " staged" : "");
        domain::HaloExchange ex(d, spec);
        const auto seed = 100 + 10 * static_cast<unsigned>(d.rank());
        FieldSet forward = float_fields(ex, device_, seed, /*with_bf16=*/true);
        ex.exchange(forward.host);
        ex.exchange(forward.device);
        forward.expect_identical(what + " forward");
        FieldSet adjoint = float_fields(ex, device_, seed + 5, /*with_bf16=*/false);
        ex.exchange_adjoint(adjoint.host);
        ex.exchange_adjoint(adjoint.device);
        adjoint.expect_identical(what + " adjoint");
      }
    }
    if (staged) unsetenv("TESSERA_MPI_CUDA_AWARE");
  }
}

// Packing and non-accumulating unpacking move any dtype (backend/compute.hpp): i64
// fields (an index or mask field) travel like the float ones.
TEST_F(CudaDomain, IntegerFieldsTravelBitExactlyOnTheDevice) {
  for (const domain::ProcessGrid& grid : grids()) {
    domain::Decomposition d(world(), {9, 8}, grid);
    domain::HaloExchange ex(d, {{1, 1, 2, 2}, true, PolePolicy::across_pole});
    FieldSet set;
    set.add(random_field(ex.padded_shape({2, 2}), DType::i64, 200 + static_cast<unsigned>(d.rank())), device_);
    ex.exchange(set.host);
    ex.exchange(set.device);
    set.expect_identical(grid.str() + " i64");
  }
}

// start() packs and posts, finish() waits and unpacks; in between the interior may be
// read (here: copied to the host, which waits for the device's stream).
TEST_F(CudaDomain, SplitExchangesOnTheDeviceLetTheInteriorBeReadInFlight) {
  for (const domain::ProcessGrid& grid : grids()) {
    domain::Decomposition d(world(), {2, 9, 8}, grid);
    domain::HaloExchange ex(d, {{2, 1, 1, 1}, true, PolePolicy::across_pole});
    const Tensor values = random_field(ex.padded_shape(), DType::f32, 300 + static_cast<unsigned>(d.rank()));
    Tensor h = values.clone(), dv = values.to(device_);
    ex.exchange(h);
    ex.start({dv});
    EXPECT_TRUE(ex.in_flight());
    const Tensor inside = ex.interior(dv).to(Device::host());
    ex.finish();
    EXPECT_FALSE(ex.in_flight());
    EXPECT_TRUE(bit_identical(inside, ex.interior(values))) << grid.str() << " interior read in flight";
    EXPECT_TRUE(bit_identical(dv, h)) << grid.str() << " split forward";
    ex.exchange_adjoint(h);
    ex.start_adjoint({dv});
    ex.finish_adjoint();
    EXPECT_TRUE(bit_identical(dv, h)) << grid.str() << " split adjoint";
  }
}

// This rank's box of a global (leading..., lat, lon) field.
Tensor box_of(const Tensor& global, const domain::Decomposition& d) {
  const domain::LocalBox box = d.box();
  const int n = global.dim();
  return global.narrow(n - 2, box.lat.start, box.lat.length).narrow(n - 1, box.lon.start, box.lon.length);
}

double tolerance(DType dtype) { return dtype == DType::f32 ? 1e-5 : 1e-12; }

constexpr std::int64_t kBatch = 2, kIn = 3, kOut = 4, kLat = 11, kLon = 12;

// One domain-parallel layer on the device against its serial host twin: the same
// parameters, the gathered input and output gradient; compares y, dx, dW and db.
void check_conv(domain::DomainConv2d& conv, nn::Module& serial, Parameter& serial_weight, Parameter& serial_bias,
                const domain::Decomposition& d, DType dtype, Device device, const std::string& what) {
  conv.weight.value.copy_from(serial_weight.value);
  conv.bias.value.copy_from(serial_bias.value);
  const Tensor x = random_field({kBatch, kIn, kLat, kLon}, dtype, 11);  // the same on every rank
  const Tensor g = random_field({kBatch, kOut, kLat, kLon}, dtype, 12);
  const Tensor y = serial.forward(x);
  const Tensor yd = conv.forward(box_of(x, d).to(device));
  EXPECT_TRUE(yd.device() == device) << what;
  expect_close(yd, box_of(y, d).contiguous(), tolerance(dtype), what + " forward");
  const Tensor dx = serial.backward(g);
  const Tensor dxd = conv.backward(box_of(g, d).to(device));
  domain::sync_domain_gradients(conv, world());
  expect_close(dxd, box_of(dx, d).contiguous(), tolerance(dtype), what + " dx");
  expect_close(conv.weight.grad, serial_weight.grad, tolerance(dtype), what + " dW");
  expect_close(conv.bias.grad, serial_bias.grad, tolerance(dtype), what + " db");
}

struct Kernel {
  int kh, kw, dilation_h, dilation_w;
};

TEST_F(CudaDomain, DomainConv2dOnTheDeviceEqualsTheSerialHostConv2d) {
  // Zero padding in both directions is the serial convolution's own padding.
  for (const domain::ProcessGrid& grid : grids()) {
    domain::Decomposition d(world(), {kBatch, kIn, kLat, kLon}, grid);
    for (DType dtype : {DType::f32, DType::f64}) {
      for (const Kernel k : {Kernel{3, 3, 1, 1}, Kernel{3, 5, 2, 1}}) {
        domain::DomainConv2dOptions o{k.dilation_h, k.dilation_w, domain::LonPadding::zero, PolePolicy::zero, true,
                                      dtype, device_};
        domain::DomainConv2d conv(d, kIn, kOut, k.kh, k.kw, o);
        const domain::HaloWidths w = domain::same_conv_halo(k.kh, k.kw, k.dilation_h, k.dilation_w);
        nn::functional::Conv2dOptions c;
        c.padding_h = w.lat_before;  // odd kernels: the same on both sides
        c.padding_w = w.lon_before;
        c.dilation_h = k.dilation_h;
        c.dilation_w = k.dilation_w;
        nn::Conv2d serial(kIn, kOut, k.kh, k.kw, c, true, dtype);
        nn::initialize_parameters(serial, 7);
        check_conv(conv, serial, serial.weight, serial.bias, d, dtype, device_,
                   grid.str() + " " + conv.describe());
      }
    }
  }
}

// Periodic longitude and the pole policies: the serial twin is the same layer on one
// rank (MPI_COMM_SELF), whose halo wraps onto itself (the host suite checks that one
// against explicit padding). Even kernels split their halo unevenly.
TEST_F(CudaDomain, DomainConv2dWithPolesAndPeriodicLongitudeEqualsTheSerialDomainConv) {
  domain::Decomposition serial_d(self(), {kBatch, kIn, kLat, kLon});
  for (const domain::ProcessGrid& grid : grids()) {
    domain::Decomposition d(world(), {kBatch, kIn, kLat, kLon}, grid);
    for (PolePolicy pole : {PolePolicy::replicate, PolePolicy::across_pole}) {
      for (const Kernel k : {Kernel{3, 3, 1, 1}, Kernel{4, 2, 1, 2}}) {
        domain::DomainConv2dOptions o{k.dilation_h, k.dilation_w, domain::LonPadding::periodic, pole, true};
        domain::DomainConv2d serial(serial_d, kIn, kOut, k.kh, k.kw, o);
        nn::initialize_parameters(serial, 9);
        o.device = device_;
        domain::DomainConv2d conv(d, kIn, kOut, k.kh, k.kw, o);
        check_conv(conv, serial, serial.weight, serial.bias, d, DType::f32, device_,
                   grid.str() + " " + conv.describe());
      }
    }
  }
}

TEST_F(CudaDomain, LatitudeWeightedLossOnTheDeviceEqualsTheSerialLoss) {
  const Shape global{2, 3, kLat, kLon};
  domain::Decomposition serial_d(self(), global);
  for (const domain::ProcessGrid& grid : grids()) {
    domain::Decomposition d(world(), global, grid);
    for (DType dtype : {DType::f32, DType::f64}) {
      for (auto lat : {domain::LatitudeGrid::with_poles, domain::LatitudeGrid::cell_centres}) {
        const std::string what = grid.str() + " " + std::string(dtype_name(dtype)) + " " +
                                 (lat == domain::LatitudeGrid::with_poles ? "with_poles" : "cell_centres");
        const Tensor p = random_field(global, dtype, 21), t = random_field(global, dtype, 22);
        const auto serial = domain::lat_weighted_mse(p, t, serial_d, lat);
        const auto mine = domain::lat_weighted_mse(box_of(p, d).to(device_), box_of(t, d).to(device_), d, lat);
        // Both sum in double: only the order of the partial sums differs.
        EXPECT_NEAR(mine.value, serial.value, 1e-12 * serial.value) << what;
        EXPECT_TRUE(mine.grad.device() == device_) << what;
        expect_close(mine.grad, box_of(serial.grad, d).contiguous(), dtype == DType::f32 ? 1e-6 : 1e-14,
                     what + " gradient");
      }
    }
  }
}

// The host domain twins' emulator, with a normalisation so that predict() has work to do.
models::FieldEmulatorConfig emulator_config() {
  models::FieldEmulatorConfig c = tessera::testing::domain_emulator_config();
  c.mean = {0.5, -0.5};
  c.std = {2.0, 1.0};
  return c;
}

TEST_F(CudaDomain, FieldEmulatorOnTheDeviceEqualsTheSerialHostModel) {
  const models::FieldEmulatorConfig config = emulator_config();
  Mesh serial_mesh(MPI_COMM_SELF, ParallelismConfig{DataParallelMode::none, 1, 1});
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, 1, world_size()}, Device::cuda());
  models::FieldEmulator serial(config, serial_mesh), model(config, mesh);
  nn::initialize_parameters(serial, 3);
  nn::initialize_parameters(model, 3);
  const auto ps = serial.named_parameters(), pd = model.named_parameters();
  ASSERT_EQ(pd.size(), ps.size());
  for (std::size_t k = 0; k < ps.size(); ++k) {
    EXPECT_TRUE(pd[k].second->value.device() == mesh.device()) << pd[k].first;
    EXPECT_TRUE(bit_identical(pd[k].second->value, ps[k].second->value)) << "same init: " << ps[k].first;
  }
  const domain::Decomposition& d = model.decomposition();
  const Shape global{2, config.channels, config.nlat, config.nlon};
  const Tensor x = random_field(global, DType::f32, 31), g = random_field(global, DType::f32, 32);
  const double tol = 1e-4;  // fp32 through three layers of GEMMs in different orders
  const Tensor y = serial.forward(x), yd = model.forward(box_of(x, d).to(mesh.device()));
  expect_close(yd, box_of(y, d).contiguous(), tol, "field emulator forward");
  const Tensor dx = serial.backward(g), dxd = model.backward(box_of(g, d).to(mesh.device()));
  domain::sync_domain_gradients(model, mesh);
  expect_close(dxd, box_of(dx, d).contiguous(), tol, "field emulator dx");
  for (std::size_t k = 0; k < ps.size(); ++k) {
    expect_close(pd[k].second->grad, ps[k].second->grad, tol, "grad " + ps[k].first);
  }
  // predict: normalise, forward, denormalise (the per-channel affine on the device).
  const Tensor physical = random_field(global, DType::f32, 33);
  const Tensor predicted = serial.predict(physical);
  expect_close(model.predict(box_of(physical, d).to(mesh.device())), box_of(predicted, d).contiguous(), tol,
               "field emulator predict");
}

}  // namespace
