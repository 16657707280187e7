#pragma once
// The decoder's training data in tessera-run: one stream of token ids, cut into samples
// of seq_len + 1 tokens (ids = the first seq_len, targets = the last seq_len; sample i
// starts at token i * seq_len, so consecutive samples share one token).
//
// Sources (data.source):
//   synthetic  a seeded first-order Markov language: every token has `branching`
//              successors (distinct, drawn from the vocabulary), taken with Zipf
//              probabilities proportional to 1, 1/2, ..., 1/branching. The corpus is
//              `tokens` ids long, starting at id 0. Everything is a pure function of
//              data.seed (splitmix64), so every rank and platform builds the same
//              corpus with no communication and no file. A model that learns which
//              token follows which gets from the unigram entropy down to the chain's
//              entropy rate.
//   bytes      the bytes of data.path (any file, e.g. UTF-8 text) as ids 0..255.
//
// Every rank holds the whole stream (it is small); samples are chosen by the
// DistributedSampler by dp rank only, so tp peers see the same ids.

#include <cstdint>
#include <string>
#include <vector>

#include "run_config.hpp"
#include "tessera/tensor.hpp"

namespace tessera::run {

// data.validation for the tokens: a fraction holds out the last round(fraction x
// samples) samples (at least one), whose targets no training sample predicts; a file
// (data.source bytes) validates on all of `validation_file`'s samples. ConfigError naming
// data.validation when a part is empty.
class TokenData;
ValidationSplit split_token_samples(const DataConfig& config, const TokenData& data, const TokenData* validation_file);

class TokenData {
 public:
  // Builds (synthetic) or reads (bytes) the stream. Throws ConfigError / IoError
  // naming the key or file.
  TokenData(const DataConfig& config, std::int64_t vocab, std::int64_t seq_len);

  std::int64_t tokens() const { return static_cast<std::int64_t>(ids_.size()); }
  std::int64_t samples() const;
  std::int64_t seq_len() const { return seq_len_; }
  // ids i64 [indices.size(), seq_len], targets i64 [indices.size() * seq_len].
  void batch(const std::vector<std::int64_t>& indices, Tensor& ids, Tensor& targets) const;

  // Baselines in nats per token: the entropy of the stream's unigram distribution (the
  // loss of the best predictor that ignores the context), log(vocab) (a uniform guess)
  // and, for the synthetic language, the chain's entropy rate under its stationary
  // distribution (the best any model can do; NaN for bytes).
  double unigram_entropy() const { return unigram_entropy_; }
  double uniform_entropy() const { return uniform_entropy_; }
  double entropy_rate() const { return entropy_rate_; }

  // "synthetic Markov language (vocab 64, branching 4, seed 1234): 65536 tokens" or
  // "bytes of FILE: N tokens".
  const std::string& describe() const { return description_; }
  std::int64_t bytes() const { return static_cast<std::int64_t>(ids_.size() * sizeof(std::int32_t)); }

 private:
  std::int64_t seq_len_;
  std::vector<std::int32_t> ids_;
  double unigram_entropy_ = 0, uniform_entropy_ = 0, entropy_rate_ = 0;
  std::string description_;
};

}  // namespace tessera::run
