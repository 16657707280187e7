#include "tessera/tp/embedding.hpp"

#include "tessera/nn/functional.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp/serial_twin.hpp"

namespace tessera::tp {

namespace {

ParallelEmbeddingOptions options_of(const nn::Embedding& serial, const std::string& name) {
  ParallelEmbeddingOptions o;
  static_cast<nn::EmbeddingOptions&>(o) = serial.options();
  o.dtype = serial.weight.value.dtype();
  o.device = serial.weight.value.device();
  o.name = name;
  o.init = serial.weight.init;
  return o;
}

void check_sizes(const std::string& label, std::int64_t num, std::int64_t dim) {
  if (num < 1 || dim < 1) {
    throw InvalidArgument(label + ": num_embeddings " + std::to_string(num) + " and embedding_dim " +
                          std::to_string(dim) + " must be >= 1");
  }
}

// Every rank sees every id, so an id outside the whole vocabulary is rejected on every
// rank alike, before any communication, with the layer's name.
void check_ids(const Tensor& ids, std::int64_t num, const std::string& label) {
  const Tensor host_ids = ids.to(Device::host()).contiguous();
  host_ids.check_dtype(DType::i64, (label + " ids").c_str());
  const std::int64_t* id = host_ids.data<std::int64_t>();
  for (std::int64_t k = 0; k < host_ids.numel(); ++k) {
    if (id[k] < 0 || id[k] >= num) {
      throw InvalidArgument(label + ": id " + std::to_string(id[k]) + " at position " + std::to_string(k) +
                            " is outside the vocabulary [0, " + std::to_string(num) + ")");
    }
  }
}

ReduceOp reduce_op_of(nn::functional::NormReduction reduction) {
  switch (reduction) {
    case nn::functional::NormReduction::max: return ReduceOp::max;
    case nn::functional::NormReduction::min: return ReduceOp::min;
    default: return ReduceOp::sum;
  }
}

// The two embeddings check their sizes and resolve their options alike; they differ only
// in the weight's sharded dim (1: the embedding dim, 0: the vocabulary).
Parameter make_embedding_weight(const std::string& label, const Shape& shape, int sharded_dim, Communicator& tp,
                                const ParallelEmbeddingOptions& o, nn::EmbeddingOptions& resolved) {
  check_sizes(label, shape[0], shape[1]);
  resolved = nn::functional::resolve_embedding_options(o, shape[0], label);
  return make_tp_sharded(label, "weight", shape, sharded_dim, tp, o.dtype, o.device, o.init);
}

// Both shard a serial embedding alike; only the layer type differs.
template <class Layer>
std::unique_ptr<Layer> embedding_from_serial(const nn::Embedding& serial, Communicator& tp, const std::string& name) {
  return detail::with_serial_weights(
      std::make_unique<Layer>(serial.num_embeddings(), serial.embedding_dim(), tp, options_of(serial, name)), serial,
      name);
}

}  // namespace

// ---------------------------------------------------------------------------
// ParallelEmbedding: embedding dim sharded
// ---------------------------------------------------------------------------

ParallelEmbedding::ParallelEmbedding(std::int64_t num_embeddings, std::int64_t embedding_dim, Communicator& tp,
                                     ParallelEmbeddingOptions o)
    : ParallelLayer(tp, {num_embeddings, embedding_dim}, /*has_bias=*/false) {
  name_layer(o.name);
  weight = make_embedding_weight(label_, master_shape_, /*sharded_dim=*/1, tp, o, config_.embedding);
  register_parameters();
}

std::unique_ptr<ParallelEmbedding> ParallelEmbedding::from_serial(const nn::Embedding& serial, Communicator& tp,
                                                                  const std::string& name) {
  return embedding_from_serial<ParallelEmbedding>(serial, tp, name);
}

Tensor ParallelEmbedding::forward(const Tensor& ids) {
  check_ids(ids, num_embeddings(), label_);
  saved_input_ = ids;
  if (options().max_norm) {
    // This rank holds columns of each row: the row's norm combines every rank's partial
    // (the same ids on every rank, so every rank reduces the same rows in one call).
    nn::functional::embedding_renorm_(ids, weight.value, *options().max_norm, options().norm_type, 0, false,
                                      [&](Tensor& partials, nn::functional::NormReduction reduction) {
                                        tp_.all_reduce(partials, reduce_op_of(reduction));
                                      });
  }
  return gather_from_parallel(nn::functional::embedding(ids, weight.value), -1, tp_, embedding_dim());
}

Tensor ParallelEmbedding::backward(const Tensor& grad_y) {
  if (!saved_input_.defined()) throw InvalidArgument(label_ + ": backward without a preceding forward");
  nn::functional::embedding_backward(gather_from_parallel_backward(grad_y.contiguous(), -1, tp_), saved_input_,
                                     weight.grad, 0, options());
  saved_input_ = Tensor();
  return Tensor();
}

// ---------------------------------------------------------------------------
// VocabParallelEmbedding: vocabulary sharded, out-of-range ids masked
// ---------------------------------------------------------------------------

VocabParallelEmbedding::VocabParallelEmbedding(std::int64_t num_embeddings, std::int64_t embedding_dim,
                                               Communicator& tp, ParallelEmbeddingOptions o)
    : ParallelLayer(tp, {num_embeddings, embedding_dim}, /*has_bias=*/false) {
  name_layer(o.name);
  weight = make_embedding_weight(label_, master_shape_, /*sharded_dim=*/0, tp, o, config_.embedding);
  register_parameters();
}

std::unique_ptr<VocabParallelEmbedding> VocabParallelEmbedding::from_serial(const nn::Embedding& serial,
                                                                            Communicator& tp, const std::string& name) {
  return embedding_from_serial<VocabParallelEmbedding>(serial, tp, name);
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  check_ids(ids, num_embeddings(), label_);
  saved_input_ = ids;
  if (options().max_norm) {
    // Each row lives whole on its owner: it renormalises its own rows, no communication.
    nn::functional::embedding_renorm_(ids, weight.value, *options().max_norm, options().norm_type,
                                      first_row(), /*mask_out_of_range=*/true);
  }
  const Tensor partial = nn::functional::embedding(ids, weight.value, first_row(), /*mask_out_of_range=*/true);
  return reduce_from_parallel(partial, tp_);
}

Tensor VocabParallelEmbedding::backward(const Tensor& grad_y) {
  if (!saved_input_.defined()) throw InvalidArgument(label_ + ": backward without a preceding forward");
  // Ids owned by other ranks are skipped by the masked scatter-add.
  nn::functional::embedding_backward(reduce_from_parallel_backward(grad_y.contiguous(), tp_), saved_input_,
                                     weight.grad, first_row(), options());
  saved_input_ = Tensor();
  return Tensor();
}

}  // namespace tessera::tp
