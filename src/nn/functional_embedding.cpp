// Embedding lookup and its scatter-add backward, with the vocab-parallel mask: a shard
// holds global rows [row_offset, row_offset + rows) and answers zero for every other id
// (the all-reduce over the tp group then supplies the owner's row); PyTorch
// nn.Embedding's options: padding_idx, max_norm's in-place renormalisation and
// scale_grad_by_freq.

#include <algorithm>
#include <cmath>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "backend/embedding_norm.hpp"
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

// Every id inside [row_offset, row_offset + rows), checked on a host copy before
// anything is written, so a bad batch fails without side effects.
void require_ids_in_table(const Tensor& host_ids, const Tensor& ids, const Tensor& weight, std::int64_t row_offset,
                          const char* fn) {
  const std::int64_t rows = weight.size(0);
  const std::int64_t* id = host_ids.data<std::int64_t>();
  for (std::int64_t k = 0; k < host_ids.numel(); ++k) {
    const std::int64_t local = id[k] - row_offset;
    if (local < 0 || local >= rows) {
      const std::string where = row_offset == 0 ? "outside a table of " + std::to_string(rows) + " rows"
                                                : "outside the shard's rows [" + std::to_string(row_offset) + ", " +
                                                      std::to_string(row_offset + rows) + ")";
      throw InvalidArgument(fn_name(fn) + ": id " + std::to_string(id[k]) + " (at flat index " + std::to_string(k) +
                            " of ids " + ids.str() + ") is " + where + " (weight " + weight.str() + ")");
    }
  }
}

std::string number_str(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
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
  // Ids are validated on a host copy (ids are small next to the table; on the host the
  // copy is the tensor itself).
  if (!mask_out_of_range) require_ids_in_table(ids.to(Device::host()), ids, weight, row_offset, fn);
  Tensor y = Tensor::empty(with_dim(ids.shape(), dim), weight.dtype(), weight.device());
  detail::compute_for(weight, fn).embedding_gather(weight.dtype(), ids.data<std::int64_t>(), count, weight.data(),
                                                   rows, dim, row_offset, y.data(), weight.device().index);
  return y;
}

void embedding_backward(const Tensor& grad_y, const Tensor& ids, Tensor& grad_weight, std::int64_t row_offset,
                        const EmbeddingOptions& options) {
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
  if (options.sparse) throw UnsupportedError(fn_name(fn) + ": sparse gradients are not supported (options.sparse)");
  if (options.padding_idx && *options.padding_idx < 0) {
    throw InvalidArgument(fn_name(fn) + ": padding_idx " + std::to_string(*options.padding_idx) +
                          " is negative; resolve_embedding_options maps it into [0, num_embeddings) first");
  }
  // scale_grad_by_freq: 1 / (occurrences of the id) per position, counted over all ids.
  Tensor id_scale;
  if (options.scale_grad_by_freq && count > 0) {
    const Tensor host_ids = ids.to(Device::host());
    const std::int64_t* id = host_ids.data<std::int64_t>();
    std::unordered_map<std::int64_t, std::int64_t> occurrences;
    for (std::int64_t k = 0; k < count; ++k) ++occurrences[id[k]];
    std::vector<double> scale(static_cast<std::size_t>(count));
    for (std::int64_t k = 0; k < count; ++k) scale[k] = 1.0 / static_cast<double>(occurrences[id[k]]);
    id_scale = Tensor::from_vector(scale, {count}).to(grad_weight.device());
  }
  detail::compute_for(grad_weight, fn).embedding_scatter_add(
      grad_y.dtype(), grad_y.data(), ids.data<std::int64_t>(), count, grad_weight.data(), rows, dim, row_offset,
      id_scale.defined() ? id_scale.data<double>() : nullptr, options.padding_idx.value_or(-1),
      grad_weight.device().index);
}

NormReduction embedding_norm_reduction(double norm_type) {
  switch (tessera::detail::embedding_norm_reduction_kind(norm_type)) {
    case 1: return NormReduction::max;
    case -1: return NormReduction::min;
    default: return NormReduction::sum;
  }
}

void embedding_renorm_(const Tensor& ids, Tensor& weight, double max_norm, double norm_type, std::int64_t row_offset,
                       bool mask_out_of_range, const CombineNormPartials& combine) {
  const char* fn = "embedding_renorm_";
  check_ids(ids, fn);
  check_table(weight, "weight", fn);
  detail::require_same_device(weight, "weight", ids, "ids", fn);
  if (std::isnan(max_norm) || max_norm < 0 || std::isnan(norm_type)) {
    throw InvalidArgument(fn_name(fn) + ": max_norm " + number_str(max_norm) + " must be >= 0 and norm_type " +
                          number_str(norm_type) + " a number");
  }
  const Tensor host_ids = ids.to(Device::host());
  if (!mask_out_of_range) require_ids_in_table(host_ids, ids, weight, row_offset, fn);
  // The distinct local rows the ids look up, sorted (as torch's embedding_renorm_ visits
  // them): each row is rescaled once however often it occurs.
  const std::int64_t table_rows = weight.size(0), dim = weight.size(1);
  std::vector<std::int64_t> local_rows;
  const std::int64_t* id = host_ids.data<std::int64_t>();
  for (std::int64_t k = 0; k < host_ids.numel(); ++k) {
    const std::int64_t local = id[k] - row_offset;
    if (local >= 0 && local < table_rows) local_rows.push_back(local);
  }
  std::sort(local_rows.begin(), local_rows.end());
  local_rows.erase(std::unique(local_rows.begin(), local_rows.end()), local_rows.end());
  const auto n = static_cast<std::int64_t>(local_rows.size());
  if (n == 0) return;
  const Tensor rows = Tensor::from_vector(local_rows, {n}).to(weight.device());
  Tensor partials = Tensor::empty({n}, DType::f64, weight.device());
  auto& compute = detail::compute_for(weight, fn);
  compute.embedding_norm_partials(weight.dtype(), rows.data<std::int64_t>(), n, weight.data(), dim, norm_type,
                                  partials.data<double>(), weight.device().index);
  if (combine) combine(partials, embedding_norm_reduction(norm_type));
  compute.embedding_renorm_rows(weight.dtype(), rows.data<std::int64_t>(), n, weight.data(), dim,
                                partials.data<double>(), norm_type, max_norm, weight.device().index);
}

EmbeddingOptions resolve_embedding_options(const EmbeddingOptions& options, std::int64_t num_embeddings,
                                           const std::string& who) {
  EmbeddingOptions resolved = options;
  if (options.sparse) {
    throw UnsupportedError(who + ": sparse=true is not supported: tessera has no sparse gradients (the table's "
                                 "gradient is always dense); leave sparse false");
  }
  if (options.padding_idx) {
    const std::int64_t p = *options.padding_idx;
    if (p < -num_embeddings || p >= num_embeddings) {
      throw InvalidArgument(who + ": padding_idx " + std::to_string(p) + " is outside [-" +
                            std::to_string(num_embeddings) + ", " + std::to_string(num_embeddings) +
                            ") for num_embeddings " + std::to_string(num_embeddings));
    }
    if (p < 0) resolved.padding_idx = p + num_embeddings;
  }
  if (options.max_norm && !(*options.max_norm >= 0)) {
    throw InvalidArgument(who + ": max_norm " + number_str(*options.max_norm) + " must be >= 0");
  }
  if (std::isnan(options.norm_type)) throw InvalidArgument(who + ": norm_type is NaN");
  return resolved;
}

std::string embedding_options_str(const EmbeddingOptions& options) {
  std::string out;
  if (options.padding_idx) out += ", padding_idx=" + std::to_string(*options.padding_idx);
  if (options.max_norm) out += ", max_norm=" + number_str(*options.max_norm);
  if (options.norm_type != 2.0) out += ", norm_type=" + number_str(options.norm_type);
  if (options.scale_grad_by_freq) out += ", scale_grad_by_freq=true";
  if (options.sparse) out += ", sparse=true";
  return out;
}

}  // namespace tessera::nn::functional
