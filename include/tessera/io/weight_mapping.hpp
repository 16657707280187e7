#pragma once
// WeightMapping: how the keys of a PyTorch state dict become tessera parameter names
// and back (tessera-ckpt import / export, docs/pytorch.md). One YAML file states both
// directions, so an export with the mapping an import used gives back the original
// keys, shapes and layout:
//
//   tensors:                                    # tessera name: PyTorch key
//     encoder.weight: enc.weight                # a rename
//     blocks.*.mlp.0.weight: blocks.*.fc1.weight
//     head.weight: {from: lm_head, transpose: true}           # stored [in, out]
//     layers.*.attn.q.weight: {from: blocks.*.attn.qkv.weight, split: {dim: 0, parts: 3, index: 0}}
//     layers.*.attn.k.weight: {from: blocks.*.attn.qkv.weight, split: {dim: 0, parts: 3, index: 1}}
//     layers.*.attn.v.weight: {from: blocks.*.attn.qkv.weight, split: {dim: 0, parts: 3, index: 2}}
//     layers.*.attn.q.weight: {from: model.layers.*.self_attn.q_proj.weight,
//                              rope_permute: half_to_interleaved, heads: 8}
//   ignore: [rope.inv_freq]                     # PyTorch keys import leaves out
//   passthrough: false                          # true: keys no rule names keep their name
//
// `*` matches one or more characters other than '.', and both sides of a rule hold the
// same number of them (the i-th `*` of one side is the i-th of the other). A split cuts
// the PyTorch tensor along `dim` into `parts` equal parts (or `sizes: [..]`) and takes
// part `index`; the parts of one key must all be mapped, so that export can put the
// tensor back together. A transpose swaps the two dims of a 2-D tensor, after the split.
//
// A rope_permute reorders dim 0 (the output features of a [out, in] weight, or a bias)
// of the PyTorch tensor, after the split and before the transpose, head by head:
// `heads` heads of head_dim = extent / heads features each. half_to_interleaved turns
// Hugging Face's rotary pairing (i, i + head_dim/2) into tessera's (2i, 2i+1): tessera
// feature 2i of a head is PyTorch feature i, 2i+1 is i + head_dim/2.
// interleaved_to_half is the inverse. Export applies the inverse of the rule's
// permutation, so an import then export gives back the same bytes.
//
// Planning looks at names and shapes only, so every error (a key no rule maps, a rule
// that maps nothing, two rules making one name, a split that does not divide the shape,
// a transpose of a tensor that is not 2-D) is raised before any tensor is read or file
// written, naming the key, its shape, the rule (file:line) and the file at fault.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/tensor.hpp"

namespace tessera::io {

struct TensorSplit {
  int dim = 0;
  std::int64_t index = 0;
  std::int64_t parts = 0;           // equal parts, or
  std::vector<std::int64_t> sizes;  // these extents along dim (then parts = sizes.size())
};

// The feature order of rotary embeddings a rope_permute converts from and to.
enum class RopePermute { none, half_to_interleaved, interleaved_to_half };
// "half_to_interleaved", "interleaved_to_half", "none".
const char* rope_permute_name(RopePermute p) noexcept;
// The inverse permutation (none stays none).
RopePermute inverse(RopePermute p) noexcept;
// `t` (any dims >= 1, host) with its dim 0 reordered by `p` in `heads` groups (a new
// contiguous tensor). ShapeError naming `who` when heads does not divide dim 0 into
// groups of an even size.
Tensor rope_permute_rows(const Tensor& t, RopePermute p, std::int64_t heads, const std::string& who);

struct MappingRule {
  std::string tessera;  // tessera name pattern
  std::string source;   // PyTorch key pattern
  bool transpose = false;
  std::optional<TensorSplit> split;
  RopePermute rope_permute = RopePermute::none;
  std::int64_t heads = 0;  // the rope_permute's head count
  std::string where;    // "mapping.yaml:12", for messages
};

using NamedShapes = std::vector<std::pair<std::string, Shape>>;

// One tessera tensor of an import: the PyTorch tensor, narrowed to [offset, offset +
// length) along dim (dim -1: whole), then transposed when asked.
struct ImportStep {
  std::string tessera_name, source_name;
  Shape source_shape, shape;  // the PyTorch tensor's and the resulting tessera tensor's
  int dim = -1;
  std::int64_t offset = 0, length = 0;
  bool transpose = false;
  RopePermute rope_permute = RopePermute::none;  // on dim 0 of the narrowed tensor, before the transpose
  std::int64_t heads = 0;
  std::string rule;  // the rule's file:line, empty for a passthrough
};

// One PyTorch tensor of an export, put together from tessera tensors: each part is
// transposed back when its rule transposes, its dim 0 reordered by `rope_permute` (the
// inverse of the rule's), and copied to [offset, offset + length) along dim (dim -1: the
// part is the whole tensor).
struct ExportStep {
  struct Part {
    std::string tessera_name;
    bool transpose = false;
    RopePermute rope_permute = RopePermute::none;  // what export applies: the rule's inverse
    std::int64_t heads = 0;
    std::int64_t offset = 0, length = 0;
  };
  std::string source_name;
  Shape shape;
  int dim = -1;
  std::vector<Part> parts;
};

class WeightMapping {
 public:
  // The identity: every name kept, nothing cut or transposed.
  WeightMapping();
  // ConfigError naming `source` (and line) for invalid YAML, a duplicate or unknown key,
  // a pattern with unequal `*` counts, a bad split or transpose.
  static WeightMapping from_yaml(std::string_view text, std::string_view source);
  static WeightMapping from_file(const std::string& path);  // IoError when unreadable

  const std::string& source() const { return source_; }  // the file, "<identity>"
  const std::vector<MappingRule>& rules() const { return rules_; }
  const std::vector<std::string>& ignored() const { return ignore_; }
  bool passthrough() const { return passthrough_; }

  // What import makes of the PyTorch tensors `keys` (in this order) of `file`: one step
  // per tessera tensor, in the order of the keys (the parts of a split by index).
  std::vector<ImportStep> plan_import(const NamedShapes& keys, const std::string& file) const;
  // What export makes of the tessera tensors `names` of `checkpoint`: one step per
  // PyTorch key, in the order of each key's first part.
  std::vector<ExportStep> plan_export(const NamedShapes& names, const std::string& checkpoint) const;

  // Executes a step on host tensors (copies; the result owns its storage).
  static Tensor apply(const ImportStep& step, const Tensor& source);
  // `parts` in the order of step.parts; they must share one dtype.
  static Tensor assemble(const ExportStep& step, const std::vector<Tensor>& parts);

 private:
  std::string source_;
  std::vector<MappingRule> rules_;
  std::vector<std::string> ignore_;
  bool passthrough_ = true;
};

}  // namespace tessera::io
