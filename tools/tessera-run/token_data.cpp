#include "token_data.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "driver_common.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"

namespace tessera::run {

namespace {

// splitmix64: a counter-based stream, identical on every platform.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n) (n small: the modulo bias is below 2^-40).
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n)); }
};

double entropy(const std::vector<double>& p) {
  double h = 0;
  for (double x : p) {
    if (x > 0) h -= x * std::log(x);
  }
  return h;
}

}  // namespace

TokenData::TokenData(const DataConfig& config, std::int64_t vocab, std::int64_t seq_len) : seq_len_(seq_len) {
  uniform_entropy_ = std::log(static_cast<double>(vocab));
  entropy_rate_ = std::numeric_limits<double>::quiet_NaN();
  if (config.source == "bytes") {
    const std::string bytes = tessera::detail::read_regular_file(config.path, "data file (data.path)");
    ids_.reserve(bytes.size());
    for (char b : bytes) ids_.push_back(static_cast<unsigned char>(b));
    description_ = "bytes of " + config.path + ": " + std::to_string(ids_.size()) + " tokens";
  } else {
    const std::int64_t k = config.branching;
    // The language: successors[a * k + j] is the j-th successor of token a.
    SplitMix64 rng{config.seed};
    std::vector<std::int32_t> successors(host_buffer_elements(
        static_cast<long double>(vocab) * static_cast<long double>(k), sizeof(std::int32_t),
        "the synthetic language's successor table (model.vocab x data.branching)",
        "lower data.branching or model.vocab"));
    std::vector<std::int32_t> pool(static_cast<std::size_t>(vocab));
    for (std::int64_t i = 0; i < vocab; ++i) pool[i] = static_cast<std::int32_t>(i);
    std::vector<std::int64_t> swapped(static_cast<std::size_t>(k));
    for (std::int64_t a = 0; a < vocab; ++a) {
      for (std::int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct successors
        swapped[j] = j + rng.below(vocab - j);
        std::swap(pool[j], pool[swapped[j]]);
        successors[a * k + j] = pool[j];
      }
      // Undone in reverse, the swaps leave the identity for the next token: k steps, not
      // a vocab-long refill per token (vocab² for a large vocab).
      for (std::int64_t j = k - 1; j >= 0; --j) std::swap(pool[j], pool[swapped[j]]);
    }
    std::vector<double> zipf(static_cast<std::size_t>(k)), cumulative(static_cast<std::size_t>(k));
    double total = 0;
    for (std::int64_t j = 0; j < k; ++j) total += zipf[j] = 1.0 / static_cast<double>(j + 1);
    double run = 0;
    for (std::int64_t j = 0; j < k; ++j) cumulative[j] = (run += zipf[j] / total);
    cumulative[k - 1] = 1.0;
    for (auto& z : zipf) z /= total;

    // Every rank generates the whole sequence: data.tokens must fit before it is allocated.
    ids_.resize(host_buffer_elements(static_cast<long double>(config.tokens), sizeof(std::int32_t),
                                     "data.tokens (" + std::to_string(config.tokens) + " synthetic tokens)",
                                     "lower data.tokens"));
    std::int32_t current = 0;
    for (std::int64_t t = 0; t < config.tokens; ++t) {
      ids_[t] = current;
      const double u = rng.uniform();
      std::int64_t j = 0;
      while (cumulative[j] <= u && j + 1 < k) ++j;
      current = successors[current * k + j];
    }
    // The entropy rate: every state emits with the same Zipf entropy, whatever the
    // stationary distribution, so the rate is the entropy of the Zipf weights.
    entropy_rate_ = entropy(zipf);
    description_ = "synthetic Markov language (vocab " + std::to_string(vocab) + ", branching " +
                   std::to_string(k) + ", data seed " + std::to_string(config.seed) + "): " +
                   std::to_string(ids_.size()) + " tokens";
  }
  for (std::int32_t id : ids_) {
    if (id >= vocab) {
      throw ConfigError("data: token id " + std::to_string(id) + " of " + description_ + " is outside model.vocab (" +
                        std::to_string(vocab) + ")");
    }
  }
  if (samples() < 1) {
    throw ConfigError("data: " + description_ + " holds no sample of model.seq_len + 1 = " +
                      std::to_string(seq_len + 1) + " tokens");
  }
  // The unigram baseline over the targets the samples use.
  std::vector<double> counts(static_cast<std::size_t>(vocab), 0.0);
  const std::int64_t used = samples() * seq_len_;
  for (std::int64_t t = 1; t <= used; ++t) counts[ids_[t]] += 1.0;
  for (auto& c : counts) c /= static_cast<double>(used);
  unigram_entropy_ = entropy(counts);
}

ValidationSplit split_token_samples(const DataConfig& c, const TokenData& data, const TokenData* validation_file) {
  ValidationSplit split;
  split.train = data.samples();
  if (validation_file != nullptr) {
    split.validation = validation_file->samples();
  } else if (c.validation_fraction > 0) {
    const std::int64_t held = std::max<std::int64_t>(
        1, std::llround(c.validation_fraction * static_cast<double>(data.samples())));
    split.train = data.samples() - held;
    split.validation_first = split.train;
    split.validation = held;
    if (split.train < 1) {
      char fraction[32];
      std::snprintf(fraction, sizeof fraction, "%g", c.validation_fraction);
      throw ConfigError("data.validation (" + std::string(fraction) + ") holds out " +
                        std::to_string(held) + " of the " + std::to_string(data.samples()) + " samples of " +
                        data.describe() + ", which leaves no training sample; hold out a smaller fraction");
    }
  }
  return split;
}

std::int64_t TokenData::samples() const {
  return tokens() < 2 ? 0 : (tokens() - 1) / seq_len_;
}

void TokenData::batch(const std::vector<std::int64_t>& indices, Tensor& ids, Tensor& targets) const {
  const std::int64_t b = static_cast<std::int64_t>(indices.size());
  std::vector<std::int64_t> in(static_cast<std::size_t>(b * seq_len_)), out(in.size());
  for (std::int64_t i = 0; i < b; ++i) {
    const std::int64_t start = indices[i] * seq_len_;
    if (indices[i] < 0 || indices[i] >= samples()) {
      throw InternalError("TokenData::batch: sample " + std::to_string(indices[i]) + " outside [0, " +
                          std::to_string(samples()) + ")");
    }
    for (std::int64_t s = 0; s < seq_len_; ++s) {
      in[i * seq_len_ + s] = ids_[start + s];
      out[i * seq_len_ + s] = ids_[start + s + 1];
    }
  }
  ids = Tensor::from_vector(in, {b, seq_len_});
  targets = Tensor::from_vector(out, {b * seq_len_});
}

}  // namespace tessera::run
