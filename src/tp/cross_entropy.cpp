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

// Three steps and two all-reduces (over NCCL for CUDA tensors), with the per-row pieces
// computed by the logits' backend. Accumulation is in double whatever the logits' dtype.
// Targets are checked on a host copy; the loss itself (n scalars) is summed on the host
// from the reduced rows.
CrossEntropyResult cross_entropy_rows(const Tensor& logits, const Tensor& targets, Communicator& tp,
                                        std::int64_t ignore_index) {
  const char* fn = "vocab_parallel_cross_entropy";
  const std::int64_t n = logits.size(0);
  const std::int64_t v_local = logits.size(1);
  const std::int64_t v_global = v_local * tp.size();
  const std::int64_t first = v_local * tp.rank();
  const Device device = logits.device();
  auto& compute = detail::compute_for(logits, std::string(fn) + ": logits");
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
