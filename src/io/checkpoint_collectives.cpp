// The main-replica rule and the small collectives the checkpoint save and load share
// (io/checkpoint_collectives.hpp).
#include "io/checkpoint_collectives.hpp"

#include <algorithm>

#include "tessera/error.hpp"

namespace tessera::io::detail {

bool is_main_replica(const Mesh& mesh, const MeshPlacement& placement) {
  for (MeshDim d : {MeshDim::dp, MeshDim::tp, MeshDim::domain}) {
    if (placement[d].is_replicate() && mesh.rank(d) != 0) return false;
  }
  return true;
}

void require_one_stage_per_tensor(const std::map<int, std::vector<std::string>>& paths_of_stage) {
  std::map<std::string, int> stage_of;
  for (const auto& [stage, paths] : paths_of_stage) {
    for (const std::string& path : paths) {
      const auto [it, added] = stage_of.emplace(path, stage);
      if (!added) {
        throw InvalidArgument("checkpoint: " + path + " is held by pipeline stages " + std::to_string(it->second) +
                              " and " + std::to_string(stage) +
                              "; a tensor must belong to one stage (a pp::Pipeline keeps each rank's own stage; a "
                              "model that is whole on every rank needs a mesh of pipeline 1)");
      }
    }
  }
}

// Sums 64-bit checksums modulo 2^64 over `comm`: each is split into 32-bit halves so
// the signed 64-bit reduction never overflows.
void all_reduce_checksums(Communicator& comm, std::vector<std::uint64_t>& sums) {
  if (comm.size() == 1 || sums.empty()) return;
  std::vector<std::int64_t> halves;
  halves.reserve(2 * sums.size());
  for (std::uint64_t s : sums) {
    halves.push_back(static_cast<std::int64_t>(s >> 32));
    halves.push_back(static_cast<std::int64_t>(s & 0xffffffffULL));
  }
  Tensor t = Tensor::from_vector<std::int64_t>(halves, {static_cast<std::int64_t>(halves.size())});
  comm.all_reduce(t, ReduceOp::sum);
  const auto reduced = t.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < sums.size(); ++i) {
    sums[i] = (static_cast<std::uint64_t>(reduced[2 * i]) << 32) + static_cast<std::uint64_t>(reduced[2 * i + 1]);
  }
}

std::vector<std::vector<std::int64_t>> all_gather_vectors(Communicator& comm, const std::vector<std::int64_t>& mine) {
  if (comm.size() == 1) return {mine};
  Tensor length = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(mine.size())}, {1});
  Tensor lengths = Tensor::zeros({comm.size()}, DType::i64);
  comm.all_gather(length, lengths);
  const auto all_lengths = lengths.to_vector<std::int64_t>();
  const std::int64_t longest = std::max<std::int64_t>(1, *std::max_element(all_lengths.begin(), all_lengths.end()));
  std::vector<std::int64_t> padded(mine);
  padded.resize(static_cast<std::size_t>(longest), 0);
  Tensor local = Tensor::from_vector<std::int64_t>(padded, {longest});
  Tensor all = Tensor::zeros({comm.size() * longest}, DType::i64);
  comm.all_gather(local, all);
  const auto flat = all.to_vector<std::int64_t>();
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    const auto begin = flat.begin() + r * longest;
    out[static_cast<std::size_t>(r)].assign(begin, begin + all_lengths[static_cast<std::size_t>(r)]);
  }
  return out;
}

// Each string as its length, then its bytes packed eight to an int64.
std::vector<std::vector<std::string>> all_gather_strings(Communicator& comm, const std::vector<std::string>& mine) {
  std::vector<std::int64_t> packed;
  for (const std::string& s : mine) {
    packed.push_back(static_cast<std::int64_t>(s.size()));
    for (std::size_t i = 0; i < s.size(); i += 8) {
      std::uint64_t word = 0;
      for (std::size_t k = 0; k < 8 && i + k < s.size(); ++k) {
        word |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i + k])) << (8 * k);
      }
      packed.push_back(static_cast<std::int64_t>(word));
    }
  }
  std::vector<std::vector<std::string>> out;
  for (const auto& words : all_gather_vectors(comm, packed)) {
    std::vector<std::string>& list = out.emplace_back();
    for (std::size_t k = 0; k < words.size();) {
      const auto length = static_cast<std::size_t>(words[k++]);
      std::string& s = list.emplace_back(length, '\0');
      for (std::size_t i = 0; i < length; ++i) {
        s[i] = static_cast<char>((static_cast<std::uint64_t>(words[k + i / 8]) >> (8 * (i % 8))) & 0xff);
      }
      k += (length + 7) / 8;
    }
  }
  return out;
}

}  // namespace tessera::io::detail
