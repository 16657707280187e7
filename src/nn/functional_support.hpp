#pragma once
// Argument checks and dtype dispatch shared by the functional_*.cpp files (private to
// src/nn). Every message names the function and the offending tensor, so a failure deep
// inside a tensor-parallel layer still says which argument was wrong.

#include <string>
#include <utility>

#include "tessera/tensor.hpp"

namespace tessera::nn::functional::detail {

inline std::string fn_name(const char* fn) { return std::string("nn::functional::") + fn; }

// Defined, on the host (device tensors: UnsupportedError until the CUDA compute backend
// brings kernels), contiguous, and (for floating roles) f32 or f64.
inline void require_host(const Tensor& t, const char* fn, const char* role) {
  if (!t.defined()) throw InvalidArgument(fn_name(fn) + ": " + role + " is undefined");
  if (!t.device().is_host()) {
    throw UnsupportedError(fn_name(fn) + ": " + role + " " + t.str() +
                           " is a device tensor; CUDA kernels for " + fn +
                           " come with the CUDA compute backend");
  }
  if (!t.is_contiguous()) throw ShapeError(fn_name(fn) + ": " + role + " " + t.str() + " must be contiguous");
}

inline void require_host_float(const Tensor& t, const char* fn, const char* role) {
  require_host(t, fn, role);
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64) {
    throw ShapeError(fn_name(fn) + ": " + role + " " + t.str() + " must be f32 or f64");
  }
}

// `b` must share `a`'s dtype (one dtype per call: no silent mixed precision).
inline void require_same_dtype(const Tensor& a, const char* role_a, const Tensor& b, const char* role_b,
                               const char* fn) {
  if (a.dtype() != b.dtype()) {
    throw ShapeError(fn_name(fn) + ": " + role_b + " " + b.str() + " and " + role_a + " " + a.str() +
                     " differ in dtype");
  }
}

inline void require_same_shape(const Tensor& a, const char* role_a, const Tensor& b, const char* role_b,
                               const char* fn) {
  if (a.shape() != b.shape()) {
    throw ShapeError(fn_name(fn) + ": " + role_b + " " + b.str() + " must have the shape of " + role_a + " " +
                     a.str());
  }
}

// Calls f(T{}) with T = float or double after the dtype (already checked to be floating).
template <class F>
decltype(auto) dispatch_float(DType dtype, F&& f) {
  if (dtype == DType::f32) return std::forward<F>(f)(float{});
  return std::forward<F>(f)(double{});
}

}  // namespace tessera::nn::functional::detail
