// HostCompute, embedding family: row gather (a memcpy per id, any dtype) and the
// scatter-add of its backward. Ids outside this shard's rows [row_offset, row_offset +
// rows) give exact zero rows in forward and contribute nothing in backward.

#include <cstring>

#include "backend/host/host_compute.hpp"

namespace tessera::detail {

void HostCompute::embedding_gather(DType dtype, const std::int64_t* ids, std::int64_t count, const void* table_,
                                   std::int64_t rows, std::int64_t dim, std::int64_t row_offset, void* y, int) {
  const std::size_t row_bytes = static_cast<std::size_t>(dim) * dtype_size(dtype);
  const auto* table = static_cast<const unsigned char*>(table_);
  auto* out = static_cast<unsigned char*>(y);
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t local = ids[k] - row_offset;
    unsigned char* dst = out + static_cast<std::size_t>(k) * row_bytes;
    if (local >= 0 && local < rows) std::memcpy(dst, table + static_cast<std::size_t>(local) * row_bytes, row_bytes);
    else std::memset(dst, 0, row_bytes);  // the masked rows are exact zeros in f32 and f64
  }
}

namespace {

template <class T>
void scatter_add(const T* dy, const std::int64_t* ids, std::int64_t count, T* gw, std::int64_t rows,
                 std::int64_t dim, std::int64_t row_offset) {
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t local = ids[k] - row_offset;
    // Ids another shard owns produced zero rows in forward: they contribute nothing here.
    if (local < 0 || local >= rows) continue;
    T* dst = gw + local * dim;
    const T* src = dy + k * dim;
    for (std::int64_t d = 0; d < dim; ++d) dst[d] += src[d];
  }
}

}  // namespace

void HostCompute::embedding_scatter_add(DType dtype, const void* dy, const std::int64_t* ids, std::int64_t count,
                                        void* grad, std::int64_t rows, std::int64_t dim, std::int64_t row_offset,
                                        int) {
  if (dtype == DType::f32) {
    scatter_add(static_cast<const float*>(dy), ids, count, static_cast<float*>(grad), rows, dim, row_offset);
  } else {
    scatter_add(static_cast<const double*>(dy), ids, count, static_cast<double*>(grad), rows, dim, row_offset);
  }
}

}  // namespace tessera::detail
