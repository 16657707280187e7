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

namespace tessera::tp {

struct ParallelEmbeddingOptions : nn::EmbeddingOptions {
  DType dtype = DType::f32;
  Device device = Device::host();
  std::string name;             // used in error messages (e.g. the FQN)
  InitSpec init = InitSpec::normal(0.0, 1.0);  // nn::Embedding's default
};

class ParallelEmbedding : public nn::Module {
 public:
  ParallelEmbedding(std::int64_t num_embeddings, std::int64_t embedding_dim, Communicator& tp,
                    ParallelEmbeddingOptions options = {});
  static std::unique_ptr<ParallelEmbedding> from_serial(const nn::Embedding& serial, Communicator& tp,
                                                        const std::string& name = "");
  std::unique_ptr<nn::Embedding> to_serial();  // collective over tp

  Tensor forward(const Tensor& ids) override;
  Tensor backward(const Tensor& grad_y) override;  // returns an undefined tensor (ids)
  std::string type_name() const override { return "ParallelEmbedding"; }
  void visit_activations(nn::ActivationVisitor& v) override { v.tensor(ids_); }
  Tensor master_weight();
  std::int64_t num_embeddings() const { return num_; }
  std::int64_t embedding_dim() const { return dim_; }
  // The options with padding_idx resolved into [0, num_embeddings).
  const nn::EmbeddingOptions& options() const { return options_; }
  // Zeroes this rank's part of the padding row (no communication); initialize_parameters
  // calls it through after_initialize().
  void zero_padding_row();
  void after_initialize() override { zero_padding_row(); }

  Parameter weight;

 private:
  std::int64_t num_, dim_;
  Communicator& tp_;
  std::string label_;
  nn::EmbeddingOptions options_;
  Tensor ids_;
};

class VocabParallelEmbedding : public nn::Module {
 public:
  VocabParallelEmbedding(std::int64_t num_embeddings, std::int64_t embedding_dim, Communicator& tp,
                         ParallelEmbeddingOptions options = {});
  static std::unique_ptr<VocabParallelEmbedding> from_serial(const nn::Embedding& serial, Communicator& tp,
                                                             const std::string& name = "");
  std::unique_ptr<nn::Embedding> to_serial();

  Tensor forward(const Tensor& ids) override;
  Tensor backward(const Tensor& grad_y) override;
  std::string type_name() const override { return "VocabParallelEmbedding"; }
  void visit_activations(nn::ActivationVisitor& v) override { v.tensor(ids_); }
  Tensor master_weight();
  std::int64_t num_embeddings() const { return num_; }
  std::int64_t embedding_dim() const { return dim_; }
  // Global vocabulary ids [first_row(), first_row() + rows) live on this rank.
  std::int64_t first_row() const { return weight.local_offset[0]; }
  const nn::EmbeddingOptions& options() const { return options_; }
  // Zeroes the padding row on the rank that holds it (no communication);
  // initialize_parameters calls it through after_initialize().
  void zero_padding_row();
  void after_initialize() override { zero_padding_row(); }

  Parameter weight;

 private:
  std::int64_t num_, dim_;
  Communicator& tp_;
  std::string label_;
  nn::EmbeddingOptions options_;
  Tensor ids_;
};

}  // namespace tessera::tp
