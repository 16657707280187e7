#include "tessera/tp/parallel_layer.hpp"

#include <utility>

#include "tessera/tp/sharding.hpp"
#include "tp/serial_twin.hpp"

namespace tessera::tp {

template <class Serial>
ParallelLayer<Serial>::ParallelLayer(Communicator& tp, Shape master_shape, bool has_bias, TwinConfig<Serial> config)
    : tp_(tp), master_shape_(std::move(master_shape)), has_bias_(has_bias), config_(std::move(config)) {}

template <class Serial>
void ParallelLayer<Serial>::name_layer(const std::string& name) {
  label_ = detail::layer_label(type_name(), name);
}

template <class Serial>
void ParallelLayer<Serial>::register_parameters() {
  register_parameter("weight", weight);
  if constexpr (affine) {
    if (has_bias_) register_parameter("bias", this->bias);
  }
}

// The placement says whether the weight is sharded and along which dim; the reshape turns
// a strided Linear's 3-dim form (linear.hpp) back into the serial [out, in].
template <class Serial>
Tensor ParallelLayer<Serial>::master_weight() {
  return assemble_master(weight, weight.value, tp_).reshape(master_shape_);
}

template <class Serial>
Tensor ParallelLayer<Serial>::master_bias()
  requires affine
{
  if (!has_bias_) return Tensor();
  return assemble_master(this->bias, this->bias.value, tp_).reshape({master_shape_[0]});
}

// The weight's local_offset[0] is this rank's first row: 0 when the embedding dim is
// sharded (every rank holds a slice of every row).
template <class Serial>
void ParallelLayer<Serial>::zero_padding_row()
  requires embedding
{
  const auto& padding_idx = config_.embedding.padding_idx;
  if (!padding_idx) return;
  const std::int64_t local = *padding_idx - weight.local_offset[0];
  if (local >= 0 && local < weight.value.size(0)) weight.value.narrow(0, local, 1).fill_zero();
}

template <class Serial>
std::unique_ptr<Serial> ParallelLayer<Serial>::to_serial() {
  // Weight before bias on every rank: both may be collectives over tp.
  const Tensor w = master_weight();
  std::unique_ptr<Serial> serial;
  if constexpr (linear) {
    serial = std::make_unique<nn::Linear>(in_features(), out_features(), has_bias_, w.dtype(), w.device());
  } else if constexpr (conv) {
    serial = std::make_unique<nn::Conv2d>(in_channels(), out_channels(), kernel_h(), kernel_w(), config_.conv,
                                          has_bias_, w.dtype(), w.device());
  } else {
    serial = std::make_unique<nn::Embedding>(num_embeddings(), embedding_dim(), config_.embedding, w.dtype(),
                                             w.device());
  }
  detail::copy_master(serial->weight, w, weight);
  if constexpr (affine) {
    if (has_bias_) detail::copy_master(serial->bias, master_bias(), this->bias);
  }
  return serial;
}

template class ParallelLayer<nn::Linear>;
template class ParallelLayer<nn::Conv2d>;
template class ParallelLayer<nn::Embedding>;

}  // namespace tessera::tp
