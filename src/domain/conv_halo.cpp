#include "tessera/domain/conv_halo.hpp"

#include <utility>

#include "tessera/agree.hpp"
#include "tessera/error.hpp"

namespace tessera::domain {

HaloWidths same_conv_halo(int kernel_h, int kernel_w, int dilation_h, int dilation_w) {
  const int total_h = dilation_h * (kernel_h - 1), total_w = dilation_w * (kernel_w - 1);
  return {total_h / 2, total_h - total_h / 2, total_w / 2, total_w - total_w / 2};
}

namespace {

// Every rank's extent along a strided axis must be a multiple of the stride (see the
// header). Computed from the decomposition alone, so every rank reaches the same verdict
// before the collective plan is built.
void check_strided_extents(const Decomposition& d, const std::string& layer, int stride_h, int stride_w) {
  if (stride_h < 1 || stride_w < 1) {
    throw InvalidArgument(layer + ": stride " + std::to_string(stride_h) + "x" + std::to_string(stride_w) +
                          " must be >= 1");
  }
  auto check = [&](const char* axis, int parts, int stride, auto range_of) {
    if (stride == 1) return;
    for (int i = 0; i < parts; ++i) {
      const ShardRange r = range_of(i);
      if (r.length % stride != 0) {
        throw InvalidArgument(layer + ": stride " + std::to_string(stride) + " along " + axis +
                              " needs every rank's " + axis + " extent to be a multiple of it, so the strided "
                              "output stays on the process grid; " + d.str() + " gives process-grid " + axis + " " +
                              std::to_string(i) + " the extent " + std::to_string(r.length) + " at [" +
                              std::to_string(r.start) + ", " + std::to_string(r.end()) + ")");
      }
    }
  };
  check("latitude", d.grid().lat, stride_h, [&](int i) { return d.lat_range(i); });
  check("longitude", d.grid().lon, stride_w, [&](int i) { return d.lon_range(i); });
}

HaloSpec checked_spec(const Decomposition& d, HaloWidths width, const ConvHaloOptions& o, const std::string& layer,
                      int stride_h, int stride_w) {
  check_strided_extents(d, layer, stride_h, stride_w);
  for (EdgePolicy e : {o.north, o.south}) {
    if (e == EdgePolicy::none) {
      throw InvalidArgument(layer + ": edge policy none pads nothing, and a convolution's halo is a fresh buffer "
                            "(it would convolve stale memory); use zero, replicate, mirror_even, mirror_odd or periodic");
    }
  }
  HaloSpec spec{width, o.lon_padding == LonPadding::periodic, o.pole};
  spec.north = o.north;
  spec.south = o.south;
  return spec;
}

}  // namespace

ConvHalo::ConvHalo(const Decomposition& decomposition, HaloWidths width, ConvHaloOptions options, std::string layer,
                   int stride_h, int stride_w)
    : options_(options),
      layer_(std::move(layer)),
      halo_(decomposition, checked_spec(decomposition, width, options, layer_, stride_h, stride_w)) {}

Tensor ConvHalo::pad(const Tensor& x, std::int64_t channels, DType dtype, Device device) {
  const Decomposition& d = halo_.decomposition();
  auto validate = [&] {
    const LocalBox box = d.box();
    if (!x.defined()) throw InvalidArgument(layer_ + ": forward input is undefined");
    if (x.dim() != 4 || x.size(1) != channels || x.size(2) != box.lat.length || x.size(3) != box.lon.length ||
        x.dtype() != dtype || !(x.device() == device)) {
      throw ShapeError(layer_ + ": input " + x.str() + " on domain rank " + std::to_string(d.rank()) + " must be " +
                       std::string(dtype_name(dtype)) + "[N, " + std::to_string(channels) + ", " +
                       std::to_string(box.lat.length) + ", " + std::to_string(box.lon.length) + "] on " +
                       device.str() + " (" + box.str() + ")");
    }
  };
  // A shape that is wrong on one rank only (uneven splits make that easy) must throw on
  // every rank, not strand the others in the exchange: agree whenever the shape changes.
  if (!x.defined() || x.shape() != agreed_input_shape_) {
    agree_on_success(d.comm().mpi_comm(), validate);
    agreed_input_shape_ = x.shape();
  }
  validate();
  Tensor padded = halo_.allocate(dtype, {x.size(0), x.size(1)}, device);
  halo_.interior(padded).copy_from(x);
  halo_.exchange(padded);
  return padded;
}

Tensor ConvHalo::backward(Tensor grad_padded) {
  halo_.exchange_adjoint(grad_padded);
  return halo_.interior(grad_padded).contiguous();
}

}  // namespace tessera::domain
