#include "tessera/models/decoder_chain.hpp"

#include "tessera/error.hpp"
#include "tessera/nn/functional.hpp"

namespace tessera::models {

Tensor TiedHead::forward(const Tensor& x) {
  if (table_ == nullptr) throw InvalidArgument("TiedHead: no table to read (read_from was never called)");
  if (!x.defined()) throw InvalidArgument("TiedHead: forward input is undefined");
  input_ = x;
  return nn::functional::linear(x, table_->value, Tensor(), compute_precision());
}

Tensor TiedHead::backward(const Tensor& grad_logits) {
  if (!input_.defined()) throw InvalidArgument("TiedHead: backward called without a preceding forward");
  if (!grad_logits.defined()) throw InvalidArgument("TiedHead: backward grad_logits is undefined");
  Tensor no_bias;
  Tensor dx = nn::functional::linear_backward(grad_logits.contiguous(), input_, table_->value, table_->grad, no_bias,
                                              compute_precision());
  input_ = Tensor();
  return dx;
}

DecoderChain::DecoderChain(Decoder& decoder) : tied_(decoder.config().tie_embeddings) {
  for (const char* name : {"embed", "layers", "norm"}) {
    register_child(name, decoder.replace(name, std::make_unique<nn::Sequential>()));
  }
  if (tied_) {
    auto& head = register_child("head", std::make_unique<TiedHead>());
    // The decoder's own tied head ran at the decoder's precision; the moved children
    // keep theirs.
    head.set_compute_precision(decoder.compute_precision());
    // Without a pipeline (or on the stage holding both) the head reads the table itself;
    // a pipeline points it at a replica where the embedding is elsewhere.
    for (const auto& [name, p] : at("embed").named_parameters()) {
      if (name != "weight") continue;
      if (p->placement.tp.is_shard()) {  // as Decoder's own tied head requires
        throw InvalidArgument("DecoderChain: tied embeddings need 'embed' to stay a serial Embedding, found " +
                              at("embed").type_name() + " with its table " + p->placement.str());
      }
      head.read_from(*p);
    }
  } else {
    register_child("head", decoder.replace("head", std::make_unique<nn::Sequential>()));
  }
}

std::vector<pp::TiedParameter> DecoderChain::pipeline_ties() const {
  if (!tied_) return {};
  return {{"embed.weight", "head"}};
}

std::vector<std::string> DecoderChain::tied_parameter_paths() const {
  if (!tied_) return {};
  for (const auto& [name, p] : at("embed").named_parameters()) {
    if (name == "weight") return {"embed.weight"};
  }
  return {};  // another stage's embedding (pp::keep_stage left a placeholder)
}

}  // namespace tessera::models
