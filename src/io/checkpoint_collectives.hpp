#pragma once
// Private: what the checkpoint save and load share across ranks: the main-replica rule
// (which rank's block is written and counted in checksums) and two small collectives.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/mesh.hpp"
#include "tessera/placement.hpp"

namespace tessera::io::detail {

// True when this rank holds the copy of a block that gets written (and counted in
// checksums): coordinate 0 along every mesh dimension the tensor is replicated over.
bool is_main_replica(const Mesh& mesh, const MeshPlacement& placement);

// With a pipeline every tensor belongs to one stage (a save would write it twice, a load
// count its checksum once per stage). `paths_of_stage`: each stage's dataset paths, as
// gathered from its ranks. InvalidArgument naming the first path two stages hold; the
// same verdict on every rank that gathered the same lists.
void require_one_stage_per_tensor(const std::map<int, std::vector<std::string>>& paths_of_stage);

// Small collectives over the tessera Communicator (sleep-polled where the node is
// oversubscribed), so checkpointing adds no busy-waiting ranks.

// Sums 64-bit checksums modulo 2^64 over `comm`.
void all_reduce_checksums(Communicator& comm, std::vector<std::uint64_t>& sums);
// Gathers every rank's vector onto every rank (rank order).
std::vector<std::vector<std::int64_t>> all_gather_vectors(Communicator& comm, const std::vector<std::int64_t>& mine);
// Gathers every rank's list of strings onto every rank (rank order).
std::vector<std::vector<std::string>> all_gather_strings(Communicator& comm, const std::vector<std::string>& mine);

}  // namespace tessera::io::detail
