#pragma once
// Placement: how a parameter (or activation) is laid out over one mesh dimension, and
// the one partition rule used wherever an extent is split.
//
// Every parameter knows, for each mesh dimension, whether it is Replicate or
// Shard(dim), and its global (master) shape. Tensor-parallel layers create parameters
// with tp: Shard(0) (column) or tp: Shard(1) (row); fsdp2 adds dp: Shard(0); everything
// else is Replicate. Checkpoints, gradient sync, clipping and data parallelism read the
// placement; none of them special-cases a layer type.

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

enum class MeshDim { dp, tp, domain };
std::string_view mesh_dim_name(MeshDim dim) noexcept;  // "dp" "tp" "domain"

struct Placement {
  enum class Kind : std::uint8_t { replicate, shard };
  Kind kind = Kind::replicate;
  int dim = -1;  // the tensor dim split over the mesh dimension, for shard

  static Placement replicate() { return {}; }
  static Placement shard(int dim) { return {Kind::shard, dim}; }
  bool is_replicate() const { return kind == Kind::replicate; }
  bool is_shard() const { return kind == Kind::shard; }
  bool operator==(const Placement&) const = default;
  std::string str() const;  // "Replicate", "Shard(1)"
  // Parses str()'s output; throws InvalidArgument naming `what`.
  static Placement parse(std::string_view text, std::string_view what = "placement");
};

// A placement for each mesh dimension.
struct MeshPlacement {
  Placement dp, tp, domain;

  Placement& operator[](MeshDim d) { return d == MeshDim::dp ? dp : d == MeshDim::tp ? tp : domain; }
  const Placement& operator[](MeshDim d) const {
    return d == MeshDim::dp ? dp : d == MeshDim::tp ? tp : domain;
  }
  bool is_replicated() const { return dp.is_replicate() && tp.is_replicate() && domain.is_replicate(); }
  bool operator==(const MeshPlacement&) const = default;
  std::string str() const;  // "dp: Replicate, tp: Shard(0), domain: Replicate"
};

struct ShardRange {
  std::int64_t start = 0;
  std::int64_t length = 0;
  std::int64_t end() const { return start + length; }
  bool operator==(const ShardRange&) const = default;
};

// The partition rule: `global` elements over `parts` parts; the first global % parts
// parts get one extra element. Throws InvalidArgument on parts < 1, index outside
// [0, parts) or global < 0.
ShardRange shard_range(std::int64_t global, int parts, int index);

}  // namespace tessera
