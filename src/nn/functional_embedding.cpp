// Embedding lookup and its scatter-add backward, with the vocab-parallel mask: a shard
// holds global rows [row_offset, row_offset + rows) and answers zero for every other id
// (the all-reduce over the tp group then supplies the owner's row).

#include "functional_support.hpp"
#include "tessera/nn/functional.hpp"

namespace tessera::nn::functional {

using detail::fn_name;

namespace {

void check_ids(const Tensor& ids, const char* fn) {
  detail::require_tensor(ids, fn, "ids");
  if (ids.dtype() != DType::i64) throw ShapeError(fn_name(fn) + ": ids " + ids.str() + " must be i64");
}

void check_table(const Tensor& weight, const char* role, const char* fn) {
  detail::require_float(weight, fn, role);
  if (weight.dim() != 2) throw ShapeError(fn_name(fn) + ": " + role + " " + weight.str() + " must be 2-D [rows, dim]");
}

Shape with_dim(const Shape& ids_shape, std::int64_t dim) {
  Shape s = ids_shape;
  s.push_back(dim);
  return s;
}

}  // namespace

Tensor embedding(const Tensor& ids, const Tensor& weight, std::int64_t row_offset, bool mask_out_of_range) {
  const char* fn = "embedding";
  check_ids(ids, fn);
  check_table(weight, "weight", fn);
  if (row_offset < 0) {
    throw InvalidArgument(fn_name(fn) + ": row_offset " + std::to_string(row_offset) + " is negative (weight " +
                          weight.str() + ")");
  }
  detail::require_same_device(weight, "weight", ids, "ids", fn);
  const std::int64_t rows = weight.size(0), dim = weight.size(1), count = ids.numel();
  // Validate every id before writing anything, so a bad batch fails without side effects.
  // Ids are validated on a host copy (ids are small next to the table; on the host the
  // copy is the tensor itself).
  if (!mask_out_of_range) {
    const Tensor host_ids = ids.to(Device::host());
    const std::int64_t* id = host_ids.data<std::int64_t>();
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t local = id[k] - row_offset;
      if (local < 0 || local >= rows) {
        const std::string where =
            row_offset == 0 ? "outside a table of " + std::to_string(rows) + " rows"
                            : "outside the shard's rows [" + std::to_string(row_offset) + ", " +
                                  std::to_string(row_offset + rows) + ")";
        throw InvalidArgument(fn_name(fn) + ": id " + std::to_string(id[k]) + " (at flat index " + std::to_string(k) +
                              " of ids " + ids.str() + ") is " + where + " (weight " + weight.str() + ")");
      }
    }
  }
  Tensor y = Tensor::empty(with_dim(ids.shape(), dim), weight.dtype(), weight.device());
  detail::compute_for(weight, fn).embedding_gather(weight.dtype(), ids.data<std::int64_t>(), count, weight.data(),
                                                   rows, dim, row_offset, y.data(), weight.device().index);
  return y;
}

void embedding_backward(const Tensor& grad_y, const Tensor& ids, Tensor& grad_weight, std::int64_t row_offset) {
  const char* fn = "embedding_backward";
  check_ids(ids, fn);
  check_table(grad_weight, "grad_weight", fn);
  detail::require_float(grad_y, fn, "grad_y");
  detail::require_same_dtype(grad_weight, "grad_weight", grad_y, "grad_y", fn);
  const std::int64_t rows = grad_weight.size(0), dim = grad_weight.size(1), count = ids.numel();
  if (grad_y.shape() != with_dim(ids.shape(), dim)) {
    throw ShapeError(fn_name(fn) + ": grad_y " + grad_y.str() + " must be ids' shape plus the embedding dim, " +
                     shape_str(with_dim(ids.shape(), dim)) + " (ids " + ids.str() + ", grad_weight " +
                     grad_weight.str() + ")");
  }
  detail::require_same_device(grad_weight, "grad_weight", ids, "ids", fn);
  detail::compute_for(grad_weight, fn).embedding_scatter_add(grad_y.dtype(), grad_y.data(), ids.data<std::int64_t>(),
                                                             count, grad_weight.data(), rows, dim, row_offset,
                                                             grad_weight.device().index);
}

}  // namespace tessera::nn::functional
