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

std::unique_ptr<nn::Embedding> serial_with(const Tensor& master, const Parameter& w,
                                           const nn::EmbeddingOptions& options) {
  auto serial =
      std::make_unique<nn::Embedding>(master.size(0), master.size(1), options, master.dtype(), master.device());
  detail::copy_master(serial->weight, master, w);
  return serial;
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

// Zeroes global row `row` of a weight holding rows [row_offset, row_offset + rows), if
// this shard holds it.
void zero_row(Tensor& weight, std::int64_t row, std::int64_t row_offset) {
  const std::int64_t local = row - row_offset;
  if (local >= 0 && local < weight.size(0)) weight.narrow(0, local, 1).fill_zero();
}

// The two embeddings check their sizes and resolve their options alike; they differ only
// in the weight's sharded dim (1: the embedding dim, 0: the vocabulary).
Parameter make_embedding_weight(const std::string& label, std::int64_t num, std::int64_t dim, int sharded_dim,
                                Communicator& tp, const ParallelEmbeddingOptions& o, nn::EmbeddingOptions& resolved) {
  check_sizes(label, num, dim);
  resolved = nn::functional::resolve_embedding_options(o, num, label);
  return make_tp_sharded(label, "weight", {num, dim}, sharded_dim, tp, o.dtype, o.device, o.init);
}

}  // namespace

// ---------------------------------------------------------------------------
// ParallelEmbedding: embedding dim sharded
// ---------------------------------------------------------------------------

ParallelEmbedding::ParallelEmbedding(std::int64_t num_embeddings, std::int64_t embedding_dim, Communicator& tp,
                                     ParallelEmbeddingOptions o)
    : num_(num_embeddings), dim_(embedding_dim), tp_(tp), label_(detail::layer_label(type_name(), o.name)) {
  weight = make_embedding_weight(label_, num_, dim_, /*sharded_dim=*/1, tp, o, options_);
  register_parameter("weight", weight);
}

std::unique_ptr<ParallelEmbedding> ParallelEmbedding::from_serial(const nn::Embedding& serial, Communicator& tp,
                                                                  const std::string& name) {
  return detail::with_serial_weights(
      std::make_unique<ParallelEmbedding>(serial.num_embeddings(), serial.embedding_dim(), tp, options_of(serial, name)),
      serial, name);
}

std::unique_ptr<nn::Embedding> ParallelEmbedding::to_serial() {
  return serial_with(master_weight(), weight, options_);
}
Tensor ParallelEmbedding::master_weight() { return assemble_master(weight, weight.value, tp_); }
void ParallelEmbedding::zero_padding_row() {
  if (options_.padding_idx) zero_row(weight.value, *options_.padding_idx, 0);
}

Tensor ParallelEmbedding::forward(const Tensor& ids) {
  check_ids(ids, num_, label_);
  ids_ = ids;
  if (options_.max_norm) {
    // This rank holds columns of each row: the row's norm combines every rank's partial
    // (the same ids on every rank, so every rank reduces the same rows in one call).
    nn::functional::embedding_renorm_(ids, weight.value, *options_.max_norm, options_.norm_type, 0, false,
                                      [&](Tensor& partials, nn::functional::NormReduction reduction) {
                                        tp_.all_reduce(partials, reduce_op_of(reduction));
                                      });
  }
  return gather_from_parallel(nn::functional::embedding(ids, weight.value), -1, tp_, dim_);
}

Tensor ParallelEmbedding::backward(const Tensor& grad_y) {
  if (!ids_.defined()) throw InvalidArgument(label_ + ": backward without a preceding forward");
  nn::functional::embedding_backward(gather_from_parallel_backward(grad_y.contiguous(), -1, tp_), ids_, weight.grad,
                                     0, options_);
  ids_ = Tensor();
  return Tensor();
}

// ---------------------------------------------------------------------------
// VocabParallelEmbedding: vocabulary sharded, out-of-range ids masked
// ---------------------------------------------------------------------------

VocabParallelEmbedding::VocabParallelEmbedding(std::int64_t num_embeddings, std::int64_t embedding_dim,
                                               Communicator& tp, ParallelEmbeddingOptions o)
    : num_(num_embeddings), dim_(embedding_dim), tp_(tp), label_(detail::layer_label(type_name(), o.name)) {
  weight = make_embedding_weight(label_, num_, dim_, /*sharded_dim=*/0, tp, o, options_);
  register_parameter("weight", weight);
}

std::unique_ptr<VocabParallelEmbedding> VocabParallelEmbedding::from_serial(const nn::Embedding& serial,
                                                                            Communicator& tp, const std::string& name) {
  return detail::with_serial_weights(std::make_unique<VocabParallelEmbedding>(serial.num_embeddings(),
                                                                            serial.embedding_dim(), tp,
                                                                            options_of(serial, name)),
                                     serial, name);
}

std::unique_ptr<nn::Embedding> VocabParallelEmbedding::to_serial() {
  return serial_with(master_weight(), weight, options_);
}
Tensor VocabParallelEmbedding::master_weight() { return assemble_master(weight, weight.value, tp_); }
void VocabParallelEmbedding::zero_padding_row() {
  if (options_.padding_idx) zero_row(weight.value, *options_.padding_idx, first_row());
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  check_ids(ids, num_, label_);
  ids_ = ids;
  if (options_.max_norm) {
    // Each row lives whole on its owner: it renormalises its own rows, no communication.
    nn::functional::embedding_renorm_(ids, weight.value, *options_.max_norm, options_.norm_type, first_row(),
                                      /*mask_out_of_range=*/true);
  }
  const Tensor partial = nn::functional::embedding(ids, weight.value, first_row(), /*mask_out_of_range=*/true);
  return reduce_from_parallel(partial, tp_);
}

Tensor VocabParallelEmbedding::backward(const Tensor& grad_y) {
  if (!ids_.defined()) throw InvalidArgument(label_ + ": backward without a preceding forward");
  // Ids owned by other ranks are skipped by the masked scatter-add.
  nn::functional::embedding_backward(reduce_from_parallel_backward(grad_y.contiguous(), tp_), ids_, weight.grad,
                                     first_row(), options_);
  ids_ = Tensor();
  return Tensor();
}

}  // namespace tessera::tp
