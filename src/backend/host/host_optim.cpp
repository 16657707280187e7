// HostCompute, optimizer family: the SGD and AdamW element updates (torch.optim's rules,
// optim.hpp). Each element is updated in double and stored back in the dtype; the CUDA
// kernels run the same double arithmetic per element.

#include <cmath>

#include "backend/host/host_compute.hpp"

namespace tessera::detail {

namespace {

template <class T>
void sgd_typed(std::int64_t n, T* value, const T* grad, T* buf, const SgdStep& s) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(value[i]);
    double d = static_cast<double>(grad[i]) + s.weight_decay * v;
    if (buf != nullptr) {
      // torch.optim.SGD starts the buffer as a copy of the first step's direction.
      const double b = s.first ? d : s.momentum * static_cast<double>(buf[i]) + (1.0 - s.dampening) * d;
      buf[i] = static_cast<T>(b);
      d = s.nesterov ? d + s.momentum * b : b;
    }
    value[i] = static_cast<T>(v - s.lr * d);
  }
}

template <class T>
void adamw_typed(std::int64_t n, T* value, const T* grad, T* m, T* v, const AdamWStep& s) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double w = static_cast<double>(value[i]), g = static_cast<double>(grad[i]);
    const double mi = s.beta1 * static_cast<double>(m[i]) + (1.0 - s.beta1) * g;
    const double vi = s.beta2 * static_cast<double>(v[i]) + (1.0 - s.beta2) * g * g;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    value[i] = static_cast<T>(w * s.decay - s.step_size * mi / (std::sqrt(vi) / s.bias_correction2_sqrt + s.eps));
  }
}

}  // namespace

void HostCompute::sgd_update(DType dtype, std::int64_t n, void* value, const void* grad, void* momentum_buffer,
                             const SgdStep& step, int) {
  if (dtype == DType::f32) {
    sgd_typed(n, static_cast<float*>(value), static_cast<const float*>(grad), static_cast<float*>(momentum_buffer),
              step);
  } else {
    sgd_typed(n, static_cast<double*>(value), static_cast<const double*>(grad), static_cast<double*>(momentum_buffer),
              step);
  }
}

void HostCompute::adamw_update(DType dtype, std::int64_t n, void* value, const void* grad, void* exp_avg,
                               void* exp_avg_sq, const AdamWStep& step, int) {
  if (dtype == DType::f32) {
    adamw_typed(n, static_cast<float*>(value), static_cast<const float*>(grad), static_cast<float*>(exp_avg),
                static_cast<float*>(exp_avg_sq), step);
  } else {
    adamw_typed(n, static_cast<double*>(value), static_cast<const double*>(grad), static_cast<double*>(exp_avg),
                static_cast<double*>(exp_avg_sq), step);
  }
}

}  // namespace tessera::detail
