#include "tessera/tp/cross_entropy.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace tessera::tp {

namespace {

template <class T>
CrossEntropyResult cross_entropy_typed(const Tensor& logits, const Tensor& targets, Communicator& tp,
                                       std::int64_t ignore_index) {
  const std::int64_t n = logits.size(0);
  const std::int64_t v_local = logits.size(1);
  const std::int64_t v_global = v_local * tp.size();
  const std::int64_t first = v_local * tp.rank();
  const T* x = logits.data<T>();
  const std::int64_t* t = targets.data<std::int64_t>();

  for (std::int64_t i = 0; i < n; ++i) {
    if (t[i] != ignore_index && (t[i] < 0 || t[i] >= v_global)) {
      throw InvalidArgument("vocab_parallel_cross_entropy: target " + std::to_string(t[i]) + " of row " +
                            std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(v_global) +
                            ") and is not ignore_index " + std::to_string(ignore_index));
    }
  }

  // Accumulate in double whatever the logits' dtype: f32 logits still get an fp32-or-
  // better loss, and f64 logits keep full precision.
  // The MAX reduction also carries (V_local, -V_local): every rank learns whether all
  // shards are equal — the vocabulary offsets assume it — at no extra collective.
  Tensor row_max = Tensor::empty({n + 2}, DType::f64);
  double* mx = row_max.data<double>();
  for (std::int64_t i = 0; i < n; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < v_local; ++j) m = std::max(m, static_cast<double>(x[i * v_local + j]));
    mx[i] = m;
  }
  mx[n] = static_cast<double>(v_local);
  mx[n + 1] = -static_cast<double>(v_local);
  tp.all_reduce(row_max, ReduceOp::max);
  if (mx[n] != -mx[n + 1]) {
    throw ShapeError("vocab_parallel_cross_entropy: the tp ranks hold vocabulary shards of different widths (" +
                     std::to_string(static_cast<std::int64_t>(-mx[n + 1])) + " to " +
                     std::to_string(static_cast<std::int64_t>(mx[n])) + " columns); shard the vocabulary evenly");
  }

  // One reduction for both per-row sums: [sum exp(x - max), target logit].
  Tensor sums = Tensor::zeros({2, n}, DType::f64);
  double* sum_exp = sums.data<double>();
  double* target_logit = sum_exp + n;
  for (std::int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (std::int64_t j = 0; j < v_local; ++j) s += std::exp(static_cast<double>(x[i * v_local + j]) - mx[i]);
    sum_exp[i] = s;
    if (t[i] != ignore_index && t[i] >= first && t[i] < first + v_local) {
      target_logit[i] = static_cast<double>(x[i * v_local + (t[i] - first)]);
    }
  }
  tp.all_reduce(sums, ReduceOp::sum);

  CrossEntropyResult result;
  for (std::int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore_index) continue;
    ++result.counted;
    result.loss += std::log(sum_exp[i]) + mx[i] - target_logit[i];
  }
  const double denom = result.counted > 0 ? static_cast<double>(result.counted) : 1.0;
  result.loss /= denom;

  // d loss / d x_ij = (softmax_ij - [j == target_i]) / counted, zero for ignored rows.
  result.grad_logits = Tensor::zeros(logits.shape(), logits.dtype(), logits.device());
  T* g = result.grad_logits.data<T>();
  for (std::int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore_index) continue;
    for (std::int64_t j = 0; j < v_local; ++j) {
      double p = std::exp(static_cast<double>(x[i * v_local + j]) - mx[i]) / sum_exp[i];
      if (first + j == t[i]) p -= 1.0;
      g[i * v_local + j] = static_cast<T>(p / denom);
    }
  }
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
  if (!logits_local.device().is_host() || !targets.device().is_host()) {
    throw UnsupportedError("vocab_parallel_cross_entropy: CUDA tensors need the CUDA compute kernels, not built yet");
  }
  const Tensor logits = logits_local.contiguous();
  const Tensor ids = targets.contiguous();
  switch (logits.dtype()) {
    case DType::f32: return cross_entropy_typed<float>(logits, ids, tp, ignore_index);
    case DType::f64: return cross_entropy_typed<double>(logits, ids, tp, ignore_index);
    default:
      throw ShapeError("vocab_parallel_cross_entropy: logits " + logits.str() + " must be f32 or f64");
  }
}

}  // namespace tessera::tp
