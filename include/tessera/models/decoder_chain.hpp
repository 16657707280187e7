#pragma once
// The decoder as a chain of pipeline units (pp/stages.hpp needs a Sequential root whose
// forward is its children in order): "embed", "layers" (the blocks, units layers.<i>),
// "norm" and "head", under the decoder's own FQNs, so a checkpoint of the chain is one of
// the decoder and loads into either at any pipeline size.
//
// With tie_embeddings the decoder has no head of its own: its forward multiplies by the
// embedding's table. The chain's "head" is then a TiedHead, which reads that table as a
// pp::ParameterReader: the embedding's own Parameter when both units are on one stage,
// the pipeline's replica otherwise. pipeline_ties() gives the pipeline the tie, and the
// chain declares "embed.weight" tied on the stage that holds it, so data parallelism
// reduces its gradient once the head's share has been added (pp/tied_parameters.hpp).
//
//     models::DecoderChain chain(decoder);          // takes the decoder's children
//     pp::PipelineOptions options;
//     options.tied = chain.pipeline_ties();
//     pp::Pipeline pipeline(chain, mesh, options);

#include <string>
#include <vector>

#include "tessera/models/decoder.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/pp/tied_parameters.hpp"

namespace tessera::models {

// The logits of a tied decoder: x [..., d_model] -> x table^T [..., vocab], the table
// read from wherever read_from pointed it; its gradient accumulates into the table's.
// The same products, in the same order, as Decoder's own tied head.
class TiedHead final : public nn::Module, public pp::ParameterReader {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_logits) override;
  std::string type_name() const override { return "TiedHead"; }
  void visit_activations(nn::ActivationVisitor& v) override { v.tensor(input_); }
  void read_from(Parameter& table) override { table_ = &table; }

 private:
  Parameter* table_ = nullptr;
  Tensor input_;
};

class DecoderChain final : public nn::Sequential {
 public:
  // Moves `decoder`'s children into the chain (the decoder is left with empty
  // Sequentials in their place and must not be used); they keep their compute
  // precision, and a TiedHead takes the decoder's, as the decoder's tied head had.
  explicit DecoderChain(Decoder& decoder);

  bool tied() const { return tied_; }
  // {"embed.weight" read by "head"} with tied embeddings; empty otherwise.
  std::vector<pp::TiedParameter> pipeline_ties() const;
  // "embed.weight" with tied embeddings, on a stage whose embed still holds it.
  std::vector<std::string> tied_parameter_paths() const override;

 private:
  bool tied_ = false;
};

}  // namespace tessera::models
