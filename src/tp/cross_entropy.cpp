#include "tessera/tp/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <limits>
#include <vector>

#include "backend/compute.hpp"

namespace tessera::tp {

namespace {

// The MAX reduction of the row maxima also carries a tail, so what one rank alone knows
// is shared at no extra collective:
//   p slots, slot r = the vocabulary width of rank r (-1 elsewhere): the shards may be
//     uneven (the partition rule gives the first V % p ranks one column more), V is their
//     sum and each rank's first global column the sum of the widths before it;
//   the largest target and the negated smallest one (ignore_index left out): a target
//     outside [0, V) is then seen on every rank alike, though V is known only after the
//     reduction.
struct Vocabulary {
  std::int64_t global = 0;
  std::int64_t first = 0;  // this rank's first global column
};

std::vector<double> local_tail(std::int64_t v_local, int rank, int size, const std::int64_t* t, std::int64_t n,
                               std::int64_t ignore_index) {
  std::vector<double> tail(static_cast<std::size_t>(size) + 2, -1.0);
  tail[rank] = static_cast<double>(v_local);
  tail[size] = tail[size + 1] = -std::numeric_limits<double>::infinity();
  for (std::int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore_index) continue;
    tail[size] = std::max(tail[size], static_cast<double>(t[i]));
    tail[size + 1] = std::max(tail[size + 1], -static_cast<double>(t[i]));
  }
  return tail;
}

// After the reduction every rank holds the same tail, so every rank throws alike.
Vocabulary read_widths(const double* tail, int rank, int size) {
  Vocabulary v;
  for (int r = 0; r < size; ++r) {
    const auto width = static_cast<std::int64_t>(tail[r]);
    if (width < 1) {
      throw ShapeError("vocab_parallel_cross_entropy: tp rank " + std::to_string(r) + " of " + std::to_string(size) +
                       " holds no vocabulary column; every rank needs a shard of the vocabulary");
    }
    if (r < rank) v.first += width;
    v.global += width;
  }
  return v;
}

// A target outside [0, V) seen by the tail (so on every rank): the ranks agree on the
// first such row and its target in two small reductions — the failing path only, which
// is why they are not folded into the tail (V, and so which rows are bad, is known only
// after it) — and every rank throws the same error, whether or not its own targets are
// the bad ones.
void check_targets(const double* extremes, std::int64_t v_global, const std::int64_t* t, std::int64_t n,
                   std::int64_t ignore_index, Communicator& tp) {
  if (extremes[0] < static_cast<double>(v_global) && -extremes[1] >= 0) return;
  std::int64_t row = n;
  for (std::int64_t i = 0; i < n && row == n; ++i) {
    if (t[i] != ignore_index && (t[i] < 0 || t[i] >= v_global)) row = i;
  }
  Tensor first = Tensor::from_vector<double>({-static_cast<double>(row)}, {1});
  tp.all_reduce(first, ReduceOp::max);
  const auto bad_row = static_cast<std::int64_t>(-first.to_vector<double>()[0]);
  Tensor target = Tensor::from_vector<double>(
      {row == bad_row ? static_cast<double>(t[row]) : -std::numeric_limits<double>::infinity()}, {1});
  tp.all_reduce(target, ReduceOp::max);
  throw InvalidArgument("vocab_parallel_cross_entropy: target " +
                        std::to_string(static_cast<std::int64_t>(target.to_vector<double>()[0])) + " of row " +
                        std::to_string(bad_row) + " is outside the vocabulary [0, " + std::to_string(v_global) +
                        ") and is not ignore_index " + std::to_string(ignore_index));
}

// Three steps and two all-reduces (over NCCL for CUDA tensors), with the per-row pieces
// computed by the logits' backend. Accumulation is in double whatever the logits' dtype.
// Targets are checked on a host copy; the loss itself (n scalars) is summed on the host
// from the reduced rows.
CrossEntropyResult cross_entropy_rows(const Tensor& logits, const Tensor& targets, Communicator& tp,
                                        std::int64_t ignore_index) {
  const char* fn = "vocab_parallel_cross_entropy";
  const std::int64_t n = logits.size(0);
  const std::int64_t v_local = logits.size(1);
  const int p = tp.size();
  const Device device = logits.device();
  auto& compute = detail::compute_for(logits, std::string(fn) + ": logits");
  const Tensor ids_host = targets.to(Device::host());
  const std::int64_t* t = ids_host.data<std::int64_t>();
  const Tensor ids = targets.to(device);

  const std::int64_t k_tail = p + 2;
  Tensor row_max = Tensor::empty({n + k_tail}, DType::f64, device);
  compute.row_max(logits.dtype(), logits.data(), n, v_local, row_max.data<double>(), device.index);
  row_max.narrow(0, n, k_tail)
      .copy_from(Tensor::from_vector<double>(local_tail(v_local, tp.rank(), p, t, n, ignore_index), {k_tail}));
  tp.all_reduce(row_max, ReduceOp::max);
  const std::vector<double> mx = row_max.to_vector<double>();
  const Vocabulary vocab = read_widths(mx.data() + n, tp.rank(), p);
  check_targets(mx.data() + n + p, vocab.global, t, n, ignore_index, tp);
  const std::int64_t first = vocab.first;

  Tensor sums = Tensor::zeros({2, n}, DType::f64, device);
  compute.sum_exp_and_target(logits.dtype(), logits.data(), ids.data<std::int64_t>(), n, v_local, first,
                             ignore_index, row_max.data<double>(), sums.data<double>(), sums.data<double>() + n,
                             device.index);
  tp.all_reduce(sums, ReduceOp::sum);
  const std::vector<double> reduced = sums.to_vector<double>();
  const double* sum_exp = reduced.data();
  const double* target_logit = sum_exp + n;

  CrossEntropyResult result;
  for (std::int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore_index) continue;
    ++result.counted;
    result.loss += std::log(sum_exp[i]) + mx[i] - target_logit[i];
  }
  const double denom = result.counted > 0 ? static_cast<double>(result.counted) : 1.0;
  result.loss /= denom;
  result.grad_logits = Tensor::empty(logits.shape(), logits.dtype(), device);
  compute.cross_entropy_grad(logits.dtype(), logits.data(), ids.data<std::int64_t>(), n, v_local, first,
                             ignore_index, row_max.data<double>(), sums.data<double>(), denom,
                             result.grad_logits.data(), device.index);
  return result;
}

}  // namespace

CrossEntropyResult vocab_parallel_cross_entropy(const Tensor& logits_local, const Tensor& targets,
                                                Communicator& tp, std::int64_t ignore_index) {
  if (logits_local.dim() != 2 || targets.dim() != 1 || targets.size(0) != logits_local.size(0)) {
    throw ShapeError("vocab_parallel_cross_entropy: logits " + logits_local.str() + " must be [N, V_local] and targets " +
                     targets.str() + " [N]");
  }
  targets.check_dtype(DType::i64, "vocab_parallel_cross_entropy targets");
  if (logits_local.dtype() != DType::f32 && logits_local.dtype() != DType::f64) {
    throw ShapeError("vocab_parallel_cross_entropy: logits " + logits_local.str() + " must be f32 or f64");
  }
  require_usable(logits_local, "vocab_parallel_cross_entropy: logits");
  return cross_entropy_rows(logits_local.contiguous(), targets.contiguous(), tp, ignore_index);
}

}  // namespace tessera::tp
