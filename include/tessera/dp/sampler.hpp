#pragma once
// DistributedSampler: the seed's sampler contract (credit.parallel.mesh
// data_parallel_coords) as an index generator.
//
// Samples are sharded over the data-parallel dimension only — (rank, size) come from
// Mesh::data_parallel_coords(), never from the global rank — so ranks that differ only
// in their tp or domain coordinate receive identical batches (tp peers compute partial
// outputs of the same activation; domain peers hold spatial parts of the same sample).
//
// Per epoch, every rank computes the same order of [0, dataset_size): the identity, or
// with `shuffle` a permutation that is a pure function of (seed, epoch) (Fisher–Yates
// driven by a counter-based generator; identical on every rank and platform). Then, as
// PyTorch's DistributedSampler:
//   drop_last = false: the order is padded to a multiple of the dp size by repeating
//                      it from the start (several times when dataset_size < dp size);
//   drop_last = true:  its tail is dropped to a multiple of the dp size;
// and dp rank r takes positions r, r + size, r + 2 size, ... No communication.

#include <cstdint>
#include <vector>

#include "tessera/mesh.hpp"

namespace tessera::dp {

struct SamplerOptions {
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // dataset_size >= 0 (> 0 without drop_last, which must pad from something);
  // 0 <= coords.rank < coords.size. Errors name the argument and value.
  DistributedSampler(std::int64_t dataset_size, DataParallelCoords coords, SamplerOptions options = {});
  DistributedSampler(std::int64_t dataset_size, const Mesh& mesh, SamplerOptions options = {});

  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  std::int64_t epoch() const { return epoch_; }
  std::int64_t dataset_size() const { return dataset_size_; }
  const DataParallelCoords& coords() const { return coords_; }
  const SamplerOptions& options() const { return options_; }

  // Samples per dp rank per epoch, and over all dp ranks (num_samples() * dp size).
  std::int64_t num_samples() const;
  std::int64_t total_size() const;

  // This epoch's order of the whole dataset (identical on every rank).
  std::vector<std::int64_t> epoch_order() const;
  // This rank's sample indices for this epoch, num_samples() of them.
  std::vector<std::int64_t> indices() const;
  // Batches of this rank's indices: batch b holds indices()[b*batch_size, ...); the
  // last one may be short unless `drop_last_batch`.
  std::int64_t num_batches(std::int64_t batch_size, bool drop_last_batch = false) const;
  std::vector<std::int64_t> batch(std::int64_t index, std::int64_t batch_size) const;

 private:
  std::int64_t dataset_size_;
  DataParallelCoords coords_;
  SamplerOptions options_;
  std::int64_t epoch_ = 0;
};

}  // namespace tessera::dp
