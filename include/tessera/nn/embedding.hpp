#pragma once
// Embedding: a lookup table of num_embeddings rows, the serial reference for the
// parallel (dim-sharded) and vocab-parallel (row-sharded) embeddings. It takes PyTorch
// nn.Embedding's options (EmbeddingOptions, nn/functional.hpp): padding_idx, max_norm
// and norm_type, scale_grad_by_freq; sparse is refused.

#include <cstdint>
#include <string>

#include "tessera/nn/functional.hpp"
#include "tessera/nn/module.hpp"

namespace tessera::nn {

using functional::EmbeddingOptions;

class Embedding : public Module {
 public:
  // weight [num_embeddings, embedding_dim]: normal(0, 1), as PyTorch nn.Embedding.
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, DType dtype = DType::f32,
            Device device = Device::host());
  // With options: InvalidArgument / UnsupportedError naming the layer and the option at
  // fault (resolve_embedding_options). The padding row starts at zero.
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, const EmbeddingOptions& options,
            DType dtype = DType::f32, Device device = Device::host());

  // ids i64 [...] -> [..., embedding_dim]; an id outside [0, num_embeddings) is an
  // InvalidArgument naming the id and the table size. Caches the ids for backward. With
  // max_norm, the looked-up rows are first renormalised in place in weight.
  Tensor forward(const Tensor& ids) override;
  // Scatter-adds grad_output's rows into weight.grad (none into the padding row; scaled
  // by 1 / frequency with scale_grad_by_freq). Ids have no gradient: returns an
  // undefined Tensor.
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "Embedding"; }
  void visit_activations(ActivationVisitor& v) override { v.tensor(ids_); }

  std::int64_t num_embeddings() const { return num_embeddings_; }
  std::int64_t embedding_dim() const { return embedding_dim_; }
  // The options with padding_idx resolved into [0, num_embeddings).
  const EmbeddingOptions& options() const { return options_; }
  std::string describe() const;  // "Embedding(10, 4)", "Embedding(10, 4, padding_idx=0)"

  // Sets the padding row to zero, as PyTorch does after drawing the weight (a no-op
  // without padding_idx). initialize_parameters calls it through after_initialize().
  void zero_padding_row();
  void after_initialize() override { zero_padding_row(); }

  Parameter weight;

 private:
  std::int64_t num_embeddings_, embedding_dim_;
  EmbeddingOptions options_;
  Tensor ids_;
};

}  // namespace tessera::nn
