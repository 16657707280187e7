#include "tessera/tp/cross_entropy.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "backend/compute.hpp"

namespace tessera::tp {

namespace {

// The MAX reduction of the row maxima also carries a tail of four values, so the checks
// that could fail on one rank only are agreed at no extra collective:
//   (V_local, -V_local)            all shards must be equally wide (the offsets assume it);
//   (first bad row + 1, its target) a target outside [0, V) that is not ignore_index.
constexpr std::int64_t kTail = 4;

void fill_tail(double* tail, std::int64_t v_local, const std::int64_t* t, std::int64_t n, std::int64_t v_global,
               std::int64_t ignore_index) {
  tail[0] = static_cast<double>(v_local);
  tail[1] = -static_cast<double>(v_local);
  tail[2] = 0.0;
  tail[3] = -std::numeric_limits<double>::infinity();
  for (std::int64_t i = 0; i < n; ++i) {
    if (t[i] != ignore_index && (t[i] < 0 || t[i] >= v_global)) {
      tail[2] = static_cast<double>(i + 1);
      tail[3] = static_cast<double>(t[i]);
      break;
    }
  }
}

// After the reduction every rank holds the same tail, so every rank throws the same error.
void check_tail(const double* tail, std::int64_t v_global, std::int64_t ignore_index) {
  if (tail[0] != -tail[1]) {
    throw ShapeError("vocab_parallel_cross_entropy: the tp ranks hold vocabulary shards of different widths (" +
                     std::to_string(static_cast<std::int64_t>(-tail[1])) + " to " +
                     std::to_string(static_cast<std::int64_t>(tail[0])) + " columns); shard the vocabulary evenly");
  }
  if (tail[2] > 0) {
    throw InvalidArgument("vocab_parallel_cross_entropy: target " + std::to_string(static_cast<std::int64_t>(tail[3])) +
                          " of row " + std::to_string(static_cast<std::int64_t>(tail[2]) - 1) +
                          " is outside the vocabulary [0, " + std::to_string(v_global) +
                          ") and is not ignore_index " + std::to_string(ignore_index));
  }
}

// The CUDA path: the same three steps and two all-reduces (over NCCL for CUDA
// tensors), with the per-row pieces computed by device kernels. Targets are checked on
// a host copy; the loss itself (n scalars) is summed on the host from the reduced rows.
CrossEntropyResult cross_entropy_device(const Tensor& logits, const Tensor& targets, Communicator& tp,
                                        std::int64_t ignore_index) {
  const char* fn = "vocab_parallel_cross_entropy";
  const std::int64_t n = logits.size(0);
  const std::int64_t v_local = logits.size(1);
  const std::int64_t v_global = v_local * tp.size();
  const std::int64_t first = v_local * tp.rank();
  const Device device = logits.device();
  auto& compute = detail::device_compute(device, fn);
  const Tensor ids_host = targets.to(Device::host());
  const std::int64_t* t = ids_host.data<std::int64_t>();
  const Tensor ids = targets.to(device);

  Tensor row_max = Tensor::empty({n + kTail}, DType::f64, device);
  compute.row_max(logits.dtype(), logits.data(), n, v_local, row_max.data<double>(), device.index);
  std::vector<double> tail(kTail);
  fill_tail(tail.data(), v_local, t, n, v_global, ignore_index);
  row_max.narrow(0, n, kTail).copy_from(Tensor::from_vector<double>(tail, {kTail}));
  tp.all_reduce(row_max, ReduceOp::max);
  const std::vector<double> mx = row_max.to_vector<double>();
  check_tail(mx.data() + n, v_global, ignore_index);

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

template <class T>
CrossEntropyResult cross_entropy_typed(const Tensor& logits, const Tensor& targets, Communicator& tp,
                                       std::int64_t ignore_index) {
  const std::int64_t n = logits.size(0);
  const std::int64_t v_local = logits.size(1);
  const std::int64_t v_global = v_local * tp.size();
  const std::int64_t first = v_local * tp.rank();
  const T* x = logits.data<T>();
  const std::int64_t* t = targets.data<std::int64_t>();

  // Accumulate in double whatever the logits' dtype: f32 logits still get an fp32-or-
  // better loss, and f64 logits keep full precision.
  Tensor row_max = Tensor::empty({n + kTail}, DType::f64);
  double* mx = row_max.data<double>();
  for (std::int64_t i = 0; i < n; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < v_local; ++j) m = std::max(m, static_cast<double>(x[i * v_local + j]));
    mx[i] = m;
  }
  fill_tail(mx + n, v_local, t, n, v_global, ignore_index);
  tp.all_reduce(row_max, ReduceOp::max);
  check_tail(mx + n, v_global, ignore_index);

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
  if (logits_local.device().is_cuda()) {
    detail::require_usable_cuda_tensor(logits_local, "vocab_parallel_cross_entropy: logits");
    if (logits_local.dtype() != DType::f32 && logits_local.dtype() != DType::f64) {
      throw ShapeError("vocab_parallel_cross_entropy: logits " + logits_local.str() + " must be f32 or f64");
    }
    return cross_entropy_device(logits_local.contiguous(), targets.contiguous(), tp, ignore_index);
  }
  if (!targets.device().is_host()) {
    throw InvalidArgument("vocab_parallel_cross_entropy: targets " + targets.str() + " must be on the device of logits " +
                          logits_local.str());
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
