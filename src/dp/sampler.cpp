#include "tessera/dp/sampler.hpp"

#include <numeric>
#include <string>

#include "tessera/error.hpp"

namespace tessera::dp {

namespace {

// splitmix64: a counter-based mixer, so the stream is a pure function of its state and
// the same on every platform (std:: distributions are not).
std::uint64_t mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A uniform integer in [0, bound): rejecting the lowest (2^64 mod bound) values leaves
// a range whose length is a multiple of bound, so the modulo is unbiased.
std::uint64_t bounded(std::uint64_t& state, std::uint64_t bound) {
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t r = mix(state++);
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

DistributedSampler::DistributedSampler(std::int64_t dataset_size, DataParallelCoords coords, SamplerOptions options)
    : dataset_size_(dataset_size), coords_(coords), options_(options) {
  if (dataset_size < 0) {
    throw InvalidArgument("DistributedSampler: dataset_size " + std::to_string(dataset_size) + " must be >= 0");
  }
  if (dataset_size == 0 && !options.drop_last) {
    throw InvalidArgument("DistributedSampler: dataset_size 0 cannot be padded (drop_last = false); "
                          "use drop_last = true for an empty dataset");
  }
  if (coords.size < 1 || coords.rank < 0 || coords.rank >= coords.size) {
    throw InvalidArgument("DistributedSampler: dp rank " + std::to_string(coords.rank) + " of size " +
                          std::to_string(coords.size) + " is not a valid data-parallel coordinate");
  }
}

DistributedSampler::DistributedSampler(std::int64_t dataset_size, const Mesh& mesh, SamplerOptions options)
    : DistributedSampler(dataset_size, mesh.data_parallel_coords(), options) {}

std::int64_t DistributedSampler::num_samples() const {
  const std::int64_t p = coords_.size;
  return options_.drop_last ? dataset_size_ / p : (dataset_size_ + p - 1) / p;
}

std::int64_t DistributedSampler::total_size() const { return num_samples() * coords_.size; }

std::vector<std::int64_t> DistributedSampler::epoch_order() const {
  std::vector<std::int64_t> order(static_cast<std::size_t>(dataset_size_));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (options_.shuffle && dataset_size_ > 1) {
    // The stream starts from (seed, epoch) only: every rank shuffles identically.
    std::uint64_t state = mix(mix(options_.seed) ^ (static_cast<std::uint64_t>(epoch_) * 0xD1B54A32D192ED03ull));
    for (std::size_t i = order.size() - 1; i > 0; --i) {
      std::swap(order[i], order[bounded(state, i + 1)]);
    }
  }
  return order;
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  const std::vector<std::int64_t> order = epoch_order();
  const std::int64_t total = total_size(), p = coords_.size;
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples()));
  // Position k of the padded order is order[k % n]: padding repeats from the start.
  for (std::int64_t k = coords_.rank; k < total; k += p) mine.push_back(order[static_cast<std::size_t>(k % dataset_size_)]);
  return mine;
}

std::int64_t DistributedSampler::num_batches(std::int64_t batch_size, bool drop_last_batch) const {
  if (batch_size < 1) throw InvalidArgument("DistributedSampler: batch_size " + std::to_string(batch_size) + " must be >= 1");
  return drop_last_batch ? num_samples() / batch_size : (num_samples() + batch_size - 1) / batch_size;
}

std::vector<std::int64_t> DistributedSampler::batch(std::int64_t index, std::int64_t batch_size) const {
  const std::int64_t count = num_batches(batch_size);
  if (index < 0 || index >= count) {
    throw InvalidArgument("DistributedSampler: batch index " + std::to_string(index) + " out of range [0, " +
                          std::to_string(count) + ") for batch_size " + std::to_string(batch_size));
  }
  const std::vector<std::int64_t> mine = indices();
  const std::int64_t start = index * batch_size, end = std::min<std::int64_t>(start + batch_size, num_samples());
  return {mine.begin() + start, mine.begin() + end};
}

}  // namespace tessera::dp
