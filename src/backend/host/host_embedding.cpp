// HostCompute, embedding family: row gather (a memcpy per id, any dtype), the
// scatter-add of its backward, and max_norm's row norms and rescale. Ids outside this
// shard's rows [row_offset, row_offset + rows) give exact zero rows in forward and
// contribute nothing in backward.

#include <cstring>

#include "backend/embedding_norm.hpp"
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
                 std::int64_t dim, std::int64_t row_offset, const double* id_scale, std::int64_t skip_id) {
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t local = ids[k] - row_offset;
    // Ids another shard owns produced zero rows in forward: they contribute nothing here.
    if (local < 0 || local >= rows || ids[k] == skip_id) continue;
    T* dst = gw + local * dim;
    const T* src = dy + k * dim;
    if (id_scale == nullptr) {
      for (std::int64_t d = 0; d < dim; ++d) dst[d] += src[d];
    } else {
      const double s = id_scale[k];
      for (std::int64_t d = 0; d < dim; ++d) dst[d] = static_cast<T>(dst[d] + s * src[d]);
    }
  }
}

template <class T>
void norm_partials(const std::int64_t* rows, std::int64_t n, const T* table, std::int64_t dim, double p,
                   double* partials) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T* row = table + rows[i] * dim;
    double acc = embedding_norm_identity(p);
    for (std::int64_t d = 0; d < dim; ++d) acc = embedding_norm_combine(acc, embedding_norm_term(row[d], p), p);
    partials[i] = acc;
  }
}

template <class T>
void renorm_rows(const std::int64_t* rows, std::int64_t n, T* table, std::int64_t dim, const double* partials,
                 double p, double max_norm) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double scale = embedding_renorm_scale(embedding_norm_finish(partials[i], p), max_norm);
    if (scale == 1.0) continue;
    T* row = table + rows[i] * dim;
    for (std::int64_t d = 0; d < dim; ++d) row[d] = static_cast<T>(row[d] * scale);
  }
}

}  // namespace

void HostCompute::embedding_scatter_add(DType dtype, const void* dy, const std::int64_t* ids, std::int64_t count,
                                        void* grad, std::int64_t rows, std::int64_t dim, std::int64_t row_offset,
                                        const double* id_scale, std::int64_t skip_id, int) {
  if (dtype == DType::f32) {
    scatter_add(static_cast<const float*>(dy), ids, count, static_cast<float*>(grad), rows, dim, row_offset, id_scale,
                skip_id);
  } else {
    scatter_add(static_cast<const double*>(dy), ids, count, static_cast<double*>(grad), rows, dim, row_offset,
                id_scale, skip_id);
  }
}

void HostCompute::embedding_norm_partials(DType dtype, const std::int64_t* rows, std::int64_t n, const void* table,
                                          std::int64_t dim, double norm_type, double* partials, int) {
  if (dtype == DType::f32) norm_partials(rows, n, static_cast<const float*>(table), dim, norm_type, partials);
  else norm_partials(rows, n, static_cast<const double*>(table), dim, norm_type, partials);
}

void HostCompute::embedding_renorm_rows(DType dtype, const std::int64_t* rows, std::int64_t n, void* table,
                                        std::int64_t dim, const double* partials, double norm_type,
                                        double max_norm, int) {
  if (dtype == DType::f32) renorm_rows(rows, n, static_cast<float*>(table), dim, partials, norm_type, max_norm);
  else renorm_rows(rows, n, static_cast<double*>(table), dim, partials, norm_type, max_norm);
}

}  // namespace tessera::detail
