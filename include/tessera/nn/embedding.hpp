#pragma once
// Embedding: a lookup table of num_embeddings rows, the serial reference for the
// parallel (dim-sharded) and vocab-parallel (row-sharded) embeddings.

#include <cstdint>
#include <string>

#include "tessera/nn/module.hpp"

namespace tessera::nn {

class Embedding : public Module {
 public:
  // weight [num_embeddings, embedding_dim]: normal(0, 1), as PyTorch nn.Embedding.
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, DType dtype = DType::f32,
            Device device = Device::host());

  // ids i64 [...] -> [..., embedding_dim]; an id outside [0, num_embeddings) is an
  // InvalidArgument naming the id and the table size. Caches the ids for backward.
  Tensor forward(const Tensor& ids) override;
  // Scatter-adds grad_output's rows into weight.grad. Ids have no gradient: returns an
  // undefined Tensor.
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "Embedding"; }

  std::int64_t num_embeddings() const { return num_embeddings_; }
  std::int64_t embedding_dim() const { return embedding_dim_; }
  std::string describe() const;  // "Embedding(10, 4)"

  Parameter weight;

 private:
  std::int64_t num_embeddings_, embedding_dim_;
  Tensor ids_;
};

}  // namespace tessera::nn
