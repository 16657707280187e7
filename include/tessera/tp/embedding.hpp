#pragma once
// Tensor-parallel embeddings.
//
// ParallelEmbedding (ml.models.parallel): the table [V, D] is sharded along the
//   embedding dim (tp: Shard(1)); each rank looks up its D/tp columns and the outputs
//   are all-gathered along the last dim. The ids are replicated over tp.
// VocabParallelEmbedding (Megatron-LM): the table is sharded along the vocabulary
//   (tp: Shard(0)); each rank answers the ids in its row range with their rows and every
//   other id with zeros (masked), and the partial outputs are all-reduced.
//
// Parameters are named "weight" like nn::Embedding; from_serial / to_serial convert,
// carrying the options.
//
// Both take PyTorch nn.Embedding's options (nn::EmbeddingOptions) with the serial
// layer's meaning: padding_idx (zero row, no gradient), max_norm / norm_type (looked-up
// rows renormalised in place before the lookup; ParallelEmbedding holds a slice of each
// row, so its ranks all-reduce their partial norms first, and every rank scales its
// slice by the same factor; a VocabParallelEmbedding row lives whole on its owner),
// scale_grad_by_freq (counted over the replicated ids); sparse is refused.

#include <memory>
#include <string>

#include "tessera/comm.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tp/parallel_layer.hpp"

namespace tessera::tp {

struct ParallelEmbeddingOptions : nn::EmbeddingOptions {
  DType dtype = DType::f32;
  Device device = Device::host();
  std::string name;             // used in error messages (e.g. the FQN)
  InitSpec init = InitSpec::normal(0.0, 1.0);  // nn::Embedding's default
};

// The members both share (extents, options, zero_padding_row, master_weight,
// to_serial) are ParallelLayer<nn::Embedding>'s (parallel_layer.hpp).
class ParallelEmbedding : public ParallelLayer<nn::Embedding> {
 public:
  ParallelEmbedding(std::int64_t num_embeddings, std::int64_t embedding_dim, Communicator& tp,
                    ParallelEmbeddingOptions options = {});
  static std::unique_ptr<ParallelEmbedding> from_serial(const nn::Embedding& serial, Communicator& tp,
                                                        const std::string& name = "");

  Tensor forward(const Tensor& ids) override;
  Tensor backward(const Tensor& grad_y) override;  // returns an undefined tensor (ids)
  std::string type_name() const override { return "ParallelEmbedding"; }
  void after_initialize() override { zero_padding_row(); }
};

class VocabParallelEmbedding : public ParallelLayer<nn::Embedding> {
 public:
  VocabParallelEmbedding(std::int64_t num_embeddings, std::int64_t embedding_dim, Communicator& tp,
                         ParallelEmbeddingOptions options = {});
  static std::unique_ptr<VocabParallelEmbedding> from_serial(const nn::Embedding& serial, Communicator& tp,
                                                             const std::string& name = "");

  Tensor forward(const Tensor& ids) override;
  Tensor backward(const Tensor& grad_y) override;
  std::string type_name() const override { return "VocabParallelEmbedding"; }
  void after_initialize() override { zero_padding_row(); }
  // Global vocabulary ids [first_row(), first_row() + rows) live on this rank.
  std::int64_t first_row() const { return weight.local_offset[0]; }
};

}  // namespace tessera::tp
