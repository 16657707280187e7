// HostCompute, initialisation family: constants and uniforms of a block of a master
// tensor, element g of the master taking uniform_in(a, b, uniform53) of Philox block g.
// The same formula as the CUDA kernel (src/backend/kernel_math.hpp), walked row by row
// with an odometer over the leading dims instead of one division chain per element.

#include "backend/host/host_compute.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/detail/philox.hpp"

namespace tessera::detail {

namespace {

template <class T>
void init_typed(T* data, const StridedLayout& local, const std::int64_t* offset, const std::int64_t* global_strides,
                std::uint64_t key, double a, double b, bool constant) {
  auto value = [&](std::int64_t g) {
    if (constant) return round_from_double<T>(a);
    const Philox4x32 r = philox_element_block(key, static_cast<std::uint64_t>(g));
    return round_from_double<T>(uniform_in(a, b, uniform53(r.v[0], r.v[1])));
  };
  const int nd = local.ndim;
  if (nd == 0) {
    data[0] = value(0);
    return;
  }
  for (int d = 0; d < nd; ++d) {
    if (local.shape[d] == 0) return;
  }
  std::int64_t index[kMaxDims] = {};  // over all dims but the last
  const std::int64_t inner = local.shape[nd - 1], inner_stride = local.strides[nd - 1];
  while (true) {
    std::int64_t g = offset[nd - 1] * global_strides[nd - 1];
    std::int64_t at = 0;
    for (int d = 0; d < nd - 1; ++d) {
      g += (offset[d] + index[d]) * global_strides[d];
      at += index[d] * local.strides[d];
    }
    for (std::int64_t i = 0; i < inner; ++i) data[at + i * inner_stride] = value(g + i * global_strides[nd - 1]);
    int d = nd - 2;
    while (d >= 0 && ++index[d] == local.shape[d]) index[d--] = 0;
    if (d < 0) return;
  }
}

}  // namespace

void HostCompute::init_uniform(DType dtype, void* data, const StridedLayout& local, const std::int64_t* offset,
                               const std::int64_t* global_strides, std::uint64_t key, double a, double b,
                               bool constant, int) {
  switch (dtype) {
    case DType::f32:
      init_typed(static_cast<float*>(data), local, offset, global_strides, key, a, b, constant);
      break;
    case DType::f64:
      init_typed(static_cast<double*>(data), local, offset, global_strides, key, a, b, constant);
      break;
    default:
      init_typed(static_cast<bfloat16*>(data), local, offset, global_strides, key, a, b, constant);
      break;
  }
}

}  // namespace tessera::detail
