#include "tessera/nn/embedding.hpp"

namespace tessera::nn {

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, DType dtype, Device device)
    : Embedding(num_embeddings, embedding_dim, EmbeddingOptions{}, dtype, device) {}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, const EmbeddingOptions& options,
                     DType dtype, Device device)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim), options_(options) {
  if (num_embeddings < 1 || embedding_dim < 1) {
    throw InvalidArgument(describe() + ": num_embeddings and embedding_dim must both be >= 1");
  }
  if (dtype != DType::f32 && dtype != DType::f64) {
    throw InvalidArgument(describe() + ": dtype " + std::string(dtype_name(dtype)) + " is not supported (f32, f64)");
  }
  options_ = functional::resolve_embedding_options(options, num_embeddings, describe());
  // The table starts as zeros (initialize_parameters draws it), so the padding row is zero.
  weight = Parameter(Tensor::zeros({num_embeddings, embedding_dim}, dtype, device), InitSpec::normal(0.0, 1.0));
  register_parameter("weight", weight);
}

std::string Embedding::describe() const {
  return "Embedding(" + std::to_string(num_embeddings_) + ", " + std::to_string(embedding_dim_) +
         functional::embedding_options_str(options_) + ")";
}

void Embedding::zero_padding_row() {
  if (options_.padding_idx) weight.value.narrow(0, *options_.padding_idx, 1).fill_zero();
}

Tensor Embedding::forward(const Tensor& ids) {
  if (!ids.defined()) throw InvalidArgument(describe() + ": forward ids are undefined");
  if (ids.dtype() != DType::i64) throw ShapeError(describe() + ": ids " + ids.str() + " must be i64");
  Tensor contiguous_ids = ids.contiguous();
  try {
    // The renorm checks every id before it writes, so a bad id leaves the table untouched.
    if (options_.max_norm) {
      functional::embedding_renorm_(contiguous_ids, weight.value, *options_.max_norm, options_.norm_type);
    }
    Tensor y = functional::embedding(contiguous_ids, weight.value);
    ids_ = std::move(contiguous_ids);
    return y;
  } catch (const InvalidArgument& e) {
    // Same error type, with the layer in front so the user knows which table rejected the id.
    throw InvalidArgument(describe() + ": " + e.what());
  }
}

Tensor Embedding::backward(const Tensor& grad_output) {
  if (!ids_.defined()) throw InvalidArgument(describe() + ": backward called without a preceding forward");
  if (!grad_output.defined()) throw InvalidArgument(describe() + ": backward grad_output is undefined");
  functional::embedding_backward(grad_output.contiguous(), ids_, weight.grad, 0, options_);
  ids_ = Tensor();
  return Tensor();
}

}  // namespace tessera::nn
