#include "onnx/broadcast.hpp"

#include <algorithm>

#include "tessera/error.hpp"

namespace tessera::onnx {

Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& where) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank, 1);
  for (std::size_t k = 0; k < rank; ++k) {
    // Aligned on the right: dimension k of the result reads a's and b's k-th from the end.
    const std::int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1;
    const std::int64_t db = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (da != db && da != 1 && db != 1) {
      throw InvalidArgument(where + ": shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    }
    out[rank - 1 - k] = da == 1 ? db : da;
  }
  return out;
}

std::vector<std::int64_t> strided_source(const Shape& out, const std::vector<std::int64_t>& strides,
                                         std::int64_t base) {
  const std::int64_t n = shape_numel(out);
  std::vector<std::int64_t> source(static_cast<std::size_t>(n));
  std::vector<std::int64_t> coord(out.size(), 0);
  std::int64_t offset = base;
  for (std::int64_t i = 0; i < n; ++i) {
    source[static_cast<std::size_t>(i)] = offset;
    for (std::size_t d = out.size(); d-- > 0;) {  // odometer step, the offset kept in step
      if (++coord[d] < out[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (out[d] - 1);
      coord[d] = 0;
    }
  }
  return source;
}

std::vector<std::int64_t> broadcast_source_index(const Shape& in, const Shape& out) {
  // The input's strides seen from the output's dimensions: 0 where it is broadcast.
  std::vector<std::int64_t> in_strides(out.size(), 0);
  std::int64_t stride = 1;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const std::size_t in_dim = in.size() - 1 - k;
    in_strides[out.size() - 1 - k] = in[in_dim] == 1 ? 0 : stride;
    stride *= in[in_dim];
  }
  return strided_source(out, in_strides);
}

namespace {

template <class T>
void sum_into(const Tensor& grad, const std::vector<std::int64_t>& source, Tensor& result) {
  const T* g = grad.data<T>();
  T* r = result.data<T>();
  for (std::size_t i = 0; i < source.size(); ++i) r[source[i]] += g[i];
}

}  // namespace

Tensor reduce_to_shape(const Tensor& grad, const Shape& shape) {
  const Tensor g = grad.contiguous();
  if (g.shape() == shape) return g.clone();
  Tensor result = Tensor::zeros(shape, g.dtype());
  const std::vector<std::int64_t> source = broadcast_source_index(shape, g.shape());
  if (g.dtype() == DType::f32) {
    sum_into<float>(g, source, result);
  } else if (g.dtype() == DType::f64) {
    sum_into<double>(g, source, result);
  } else {
    throw InvalidArgument("onnx::reduce_to_shape: expected an f32 or f64 gradient, got " + g.str());
  }
  return result;
}

}  // namespace tessera::onnx
