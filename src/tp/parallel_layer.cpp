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

// Member by member, not `template class` (see the header).
template <class Serial>
using Layer = ParallelLayer<Serial>;
#define TESSERA_INSTANTIATE_PARALLEL_LAYER(Serial)                                                       \
  template Layer<Serial>::ParallelLayer(Communicator&, Shape, bool, TwinConfig<Serial>);                 \
  template void Layer<Serial>::name_layer(const std::string&);                                           \
  template void Layer<Serial>::register_parameters();                                                    \
  template Tensor Layer<Serial>::master_weight();                                                        \
  template std::unique_ptr<Serial> Layer<Serial>::to_serial();
TESSERA_INSTANTIATE_PARALLEL_LAYER(nn::Linear)
TESSERA_INSTANTIATE_PARALLEL_LAYER(nn::Conv2d)
TESSERA_INSTANTIATE_PARALLEL_LAYER(nn::Embedding)
#undef TESSERA_INSTANTIATE_PARALLEL_LAYER

}  // namespace tessera::tp
