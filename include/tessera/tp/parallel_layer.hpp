#pragma once
// The one implementation of what the column and row twins of a serial layer share:
// ColumnParallelLinear / RowParallelLinear, ColumnParallelConv2d / RowParallelConv2d and
// ParallelEmbedding / VocabParallelEmbedding each derive from ParallelLayer<Serial> with
// Serial their serial layer (nn::Linear, nn::Conv2d, nn::Embedding). It holds the tp
// group, the label errors carry, the serial layer's parameters (weight, and bias where
// the serial layer has one), its extents and options under the serial layer's accessor
// names, the masters reassembled from the shards, and to_serial().
//
// The twins differ in their partition rule: the weight dim sharded over tp (0: column /
// vocabulary, 1: row / embedding dim) and, for an affine layer, whether the bias is
// sharded with the weight (column) or replicated (row). Each twin builds its parameters
// under its rule, which each Parameter's placement records; what is implemented here
// reads those placements (assemble_master) and so serves both rules without asking
// which one it has. A twin keeps only what differs: its constructors and from_serial,
// forward / backward, its flag (gather_output / input_is_parallel) and type_name.

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "tessera/comm.hpp"
#include "tessera/domain/conv_halo.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tp/sharding.hpp"

namespace tessera::tp {

// What the twins of a serial layer carry besides their parameters (whose shapes give the
// extents): the options that rebuild the serial layer, and those of the partition.
template <class Serial>
struct TwinConfig;

template <>
struct TwinConfig<nn::Linear> {
  std::optional<int> sequence_dim;  // ParallelLinearOptions::sequence_dim
  std::int64_t stride = 1;          // ParallelLinearOptions::stride
};

template <>
struct TwinConfig<nn::Conv2d> {
  nn::Conv2dOptions conv;
  std::unique_ptr<domain::ConvHalo> halo;  // null until use_domain_halo
};

template <>
struct TwinConfig<nn::Embedding> {
  nn::EmbeddingOptions embedding;  // padding_idx resolved into [0, num_embeddings)
};

namespace detail {

template <class Serial>
concept HasBias = requires(const Serial& serial) { serial.has_bias(); };

// The twins of a serial layer with a bias carry one (built empty without a bias); those
// of a serial layer without one (an embedding) carry none, so that their interface stays
// the serial layer's.
struct BiasParameter {
  Parameter bias;
};
struct NoBiasParameter {};

// ParallelLayer<nn::Conv2d>::use_domain_halo's body, in src/tp/conv2d.cpp beside the
// conv's other checks: the domain halo standing in for a "same" padding (collective over
// the decomposition's communicator).
std::unique_ptr<domain::ConvHalo> make_conv_domain_halo(const std::string& label,
                                                        const domain::Decomposition& decomposition, int kh, int kw,
                                                        const nn::Conv2dOptions& conv,
                                                        const domain::ConvHaloOptions& options);
template <class Serial>
using BiasOf = std::conditional_t<HasBias<Serial>, BiasParameter, NoBiasParameter>;

}  // namespace detail

template <class Serial>
class ParallelLayer : public nn::Module, public detail::BiasOf<Serial> {
  static constexpr bool affine = detail::HasBias<Serial>;
  static constexpr bool linear = std::same_as<Serial, nn::Linear>;
  static constexpr bool conv = std::same_as<Serial, nn::Conv2d>;
  static constexpr bool embedding = std::same_as<Serial, nn::Embedding>;

 public:
  // A serial layer holding the master weights, the init specs and the options
  // (collective over tp).
  std::unique_ptr<Serial> to_serial();
  // The serial layer's weight, in its shape (collective over tp).
  Tensor master_weight();
  // The serial layer's bias: reassembled from a column twin's shards (collective over
  // tp), a copy of a row twin's replicated one; undefined without a bias.
  // (The constrained members are defined here, in the class: clang 14 does not match an
  // out-of-line definition's trailing requires-clause to its declaration.)
  Tensor master_bias()
    requires affine
  {
    if (!has_bias_) return Tensor();
    return assemble_master(this->bias, this->bias.value, tp_).reshape({master_shape_[0]});
  }
  bool has_bias() const requires affine { return has_bias_; }

  // nn::Linear's weight [out_features, in_features], and the partition's options
  // (ParallelLinearOptions).
  std::int64_t in_features() const requires linear { return master_shape_[1]; }
  std::int64_t out_features() const requires linear { return master_shape_[0]; }
  const std::optional<int>& sequence_dim() const requires linear { return config_.sequence_dim; }
  std::int64_t stride() const requires linear { return config_.stride; }

  // nn::Conv2d's weight [out_channels, in_channels, kernel_h, kernel_w] and options.
  std::int64_t in_channels() const requires conv { return master_shape_[1]; }
  std::int64_t out_channels() const requires conv { return master_shape_[0]; }
  int kernel_h() const requires conv { return static_cast<int>(master_shape_[2]); }
  int kernel_w() const requires conv { return static_cast<int>(master_shape_[3]); }
  const nn::Conv2dOptions& conv_options() const requires conv { return config_.conv; }
  // The domain halo in place of the conv's zero padding (see conv2d.hpp). Collective over
  // the decomposition's communicator, which (with the decomposition) must outlive the
  // layer; call before the first forward.
  void use_domain_halo(const domain::Decomposition& decomposition, domain::ConvHaloOptions options = {})
    requires conv
  {
    config_.halo = detail::make_conv_domain_halo(label_, decomposition, kernel_h(), kernel_w(), config_.conv, options);
  }
  const domain::ConvHalo* domain_halo() const requires conv { return config_.halo.get(); }  // null without

  // nn::Embedding's weight [num_embeddings, embedding_dim] and options (padding_idx
  // resolved into [0, num_embeddings)).
  std::int64_t num_embeddings() const requires embedding { return master_shape_[0]; }
  std::int64_t embedding_dim() const requires embedding { return master_shape_[1]; }
  const nn::EmbeddingOptions& options() const requires embedding { return config_.embedding; }
  // Zeroes this rank's part of the padding row, if it holds any (no communication): a
  // column slice of it (embedding dim sharded) or the whole row on its owner (vocabulary
  // sharded). initialize_parameters calls it through the twins' after_initialize(). The
  // weight's local_offset[0] is this rank's first row: 0 when the embedding dim is sharded.
  void zero_padding_row()
    requires embedding
  {
    const auto& padding_idx = config_.embedding.padding_idx;
    if (!padding_idx) return;
    const std::int64_t local = *padding_idx - weight.local_offset[0];
    if (local >= 0 && local < weight.value.size(0)) weight.value.narrow(0, local, 1).fill_zero();
  }

  void visit_activations(nn::ActivationVisitor& v) override { v.tensor(saved_input_); }

  Parameter weight;

 protected:
  // `master_shape`: the serial layer's weight shape. A twin's constructor then names the
  // layer (name_layer), checks its arguments, builds weight (and bias) under its rule
  // and registers them (register_parameters).
  ParallelLayer(Communicator& tp, Shape master_shape, bool has_bias, TwinConfig<Serial> config = {});

  // label_ = "ColumnParallelLinear 'name'" (or the type alone when unnamed). Called from
  // the twin's constructor, where type_name() is already the twin's.
  void name_layer(const std::string& name);
  // Registers "weight", and "bias" where the layer has one, as the serial layer does.
  void register_parameters();

  Communicator& tp_;
  std::string label_;  // for error messages
  Shape master_shape_;  // the serial layer's weight shape
  bool has_bias_;
  TwinConfig<Serial> config_;
  // Saved by forward for backward: the input (column), this rank's shard of it (row),
  // or the ids (embeddings).
  Tensor saved_input_;
};

// The members defined out of the class are instantiated in src/tp/parallel_layer.cpp
// for the three serial types, member by member: an explicit instantiation of the whole
// class would also instantiate the members whose requires-clause excludes the type,
// which clang 14 does not skip.

}  // namespace tessera::tp
