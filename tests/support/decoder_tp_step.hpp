#pragma once
// The decoder tensor-parallel tests' shared step (tests/parallelize/test_models_tp.cpp,
// tests/models/test_decoder_gqa_tp.cpp): a fixed batch of token ids and targets, one
// forward / vocab-parallel cross-entropy / backward, the same step on the tp model with
// its collectives counted on the tp communicator, and the reassembled parameters
// compared with the serial twin's.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../tp/tp_test_util.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/parallelize.hpp"
#include "tessera/tp/sharding.hpp"

namespace tessera::testing {

struct DecoderBatch {
  std::int64_t batch, seq, vocab;
  // Token ids [batch, seq]: (7 i + 3) mod vocab.
  Tensor ids() const {
    std::vector<std::int64_t> v;
    for (std::int64_t i = 0; i < batch * seq; ++i) v.push_back((7 * i + 3) % vocab);
    return Tensor::from_vector(v, {batch, seq});
  }
  // Targets [batch * seq]: (5 i + 1) mod vocab, position 5 ignored (-100).
  Tensor targets() const {
    std::vector<std::int64_t> t;
    for (std::int64_t i = 0; i < batch * seq; ++i) t.push_back(i == 5 ? -100 : (5 * i + 1) % vocab);
    return Tensor::from_vector(t, {batch * seq});
  }
};

struct DecoderStep {
  double loss = 0;
  Tensor logits;
  // The collectives on the tp communicator (counted_tp_step only).
  std::int64_t forward_calls = 0, loss_calls = 0, backward_calls = 0, sync_calls = 0;
};

// Forward, vocab-parallel (or serial, on a group of one) cross-entropy, backward.
inline DecoderStep decoder_step(models::Decoder& model, Communicator& loss_group, const DecoderBatch& b) {
  DecoderStep r;
  r.logits = model.forward(b.ids());
  const std::int64_t v_local = r.logits.size(2);
  const auto ce = tp::vocab_parallel_cross_entropy(r.logits.reshape({b.batch * b.seq, v_local}), b.targets(), loss_group);
  r.loss = ce.loss;
  model.backward(ce.grad_logits.reshape({b.batch, b.seq, v_local}));
  return r;
}

// decoder_step on the tp model with its loss over `tp`, then sync_replicated_gradients;
// the MPI calls of each phase counted on `tp`.
inline DecoderStep counted_tp_step(models::Decoder& parallel, Communicator& tp, const DecoderBatch& b) {
  DecoderStep r;
  const std::int64_t c0 = tp.stats().mpi_calls;
  r.logits = parallel.forward(b.ids());
  const std::int64_t c1 = tp.stats().mpi_calls;
  const auto ce = tp::vocab_parallel_cross_entropy(r.logits.reshape({b.batch * b.seq, r.logits.size(2)}), b.targets(), tp);
  r.loss = ce.loss;
  const std::int64_t c2 = tp.stats().mpi_calls;
  parallel.backward(ce.grad_logits.reshape(r.logits.shape()));
  const std::int64_t c3 = tp.stats().mpi_calls;
  tp::sync_replicated_gradients(parallel, tp);
  const std::int64_t c4 = tp.stats().mpi_calls;
  r.forward_calls = c1 - c0;
  r.loss_calls = c2 - c1;
  r.backward_calls = c3 - c2;
  r.sync_calls = c4 - c3;
  return r;
}

// Every parameter of `parallel` (its value, or its gradient), reassembled over tp, against
// the serial twin's: the same names in the same order, the serial shapes as global shapes.
inline void expect_same_parameters(nn::Module& serial, nn::Module& parallel, Communicator& tp, bool grads,
                                   const std::string& what) {
  const auto want = serial.named_parameters();
  const auto got = parallel.named_parameters();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first) << what;
    ASSERT_EQ(got[i].second->global_shape, want[i].second->value.shape()) << what << ": " << got[i].first;
    const Tensor& local = grads ? got[i].second->grad : got[i].second->value;
    const Tensor& serial_t = grads ? want[i].second->grad : want[i].second->value;
    EXPECT_TRUE(tensors_close(tp::assemble_master(*got[i].second, local, tp), serial_t))
        << what << ": " << (grads ? "grad" : "value") << " of " << got[i].first;
  }
}

}  // namespace tessera::testing
