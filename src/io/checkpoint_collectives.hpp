#pragma once
// Private: what the checkpoint save and load share across ranks: the main-replica rule
// (which rank's block is written and counted in checksums) and two small collectives.

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/mesh.hpp"
#include "tessera/placement.hpp"

namespace tessera::io::detail {

// True when this rank holds the copy of a block that gets written (and counted in
// checksums): coordinate 0 along every mesh dimension the tensor is replicated over.
bool is_main_replica(const Mesh& mesh, const MeshPlacement& placement);

// Small collectives over the tessera Communicator (sleep-polled where the node is
// oversubscribed), so checkpointing adds no busy-waiting ranks.

// Sums 64-bit checksums modulo 2^64 over `comm`.
void all_reduce_checksums(Communicator& comm, std::vector<std::uint64_t>& sums);
// Gathers every rank's vector onto every rank (rank order).
std::vector<std::vector<std::int64_t>> all_gather_vectors(Communicator& comm, const std::vector<std::int64_t>& mine);
// Gathers every rank's list of strings onto every rank (rank order).
std::vector<std::vector<std::string>> all_gather_strings(Communicator& comm, const std::vector<std::string>& mine);

}  // namespace tessera::io::detail
