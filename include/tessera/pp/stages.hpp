#pragma once
// Splitting a module tree into contiguous pipeline stages.
//
// The model's root must be an nn::Sequential: its forward is its children in order, so
// the order of the layers is known. Nested Sequentials are expanded (their forward is
// their children in order too); every other module is a *unit*, kept whole on one stage
// (a transformer block, a tensor-parallel Linear, a domain-parallel convolution). The
// units, in forward order, are named by their dotted paths ("0", "3.1", "blocks.2" in a
// Sequential child named "blocks").
//
// A split is either
//   - by layer count: the units spread as evenly as shard_range spreads rows (the first
//     stages take one more when the count does not divide), or a given count per stage;
//   - by cut points: the dotted paths where stages 1, 2, ... begin, in forward order. A
//     cut point names a unit or a nested Sequential (the stage begins at its first unit).
// Every stage gets at least one unit. Errors (InvalidArgument) name the path or count at
// fault.

#include <string>
#include <vector>

#include "tessera/nn/module.hpp"

namespace tessera::pp {

// The units of `root`, in forward order, by dotted path. InvalidArgument when the root
// is not a Sequential or holds no unit.
std::vector<std::string> pipeline_units(const nn::Module& root);

struct StageSplit {
  std::vector<std::vector<std::string>> stages;  // unit paths of each stage, in order
  std::string str() const;                       // "stage 0: 0 1 | stage 1: 2 3"
};

StageSplit split_by_layer_count(const nn::Module& root, int stages);
StageSplit split_by_layer_count(const nn::Module& root, const std::vector<int>& units_per_stage);
StageSplit split_at(const nn::Module& root, const std::vector<std::string>& cut_points);

// Keeps the units of `stage` in `root` and replaces every other unit by a placeholder
// without parameters (its forward and backward are InternalErrors naming the unit and
// its stage), so the rank holds only its own stage's parameters, under their serial
// FQNs: optimizers, initialisation, checkpoints, tp::parallelize and dp::DataParallel
// see the stage's parameters only. InvalidArgument for a stage outside the split.
void keep_stage(nn::Module& root, const StageSplit& split, int stage);

}  // namespace tessera::pp
