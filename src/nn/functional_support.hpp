#pragma once
// Argument checks and dtype dispatch shared by the functional_*.cpp files (private to
// src/nn). Every message names the function and the offending tensor, so a failure deep
// inside a tensor-parallel layer still says which argument was wrong.

#include <string>
#include <utility>

#include "backend/compute.hpp"
#include "tessera/tensor.hpp"

namespace tessera::nn::functional::detail {

inline std::string fn_name(const char* fn) { return std::string("nn::functional::") + fn; }

// Defined, contiguous, and on a device whose backend can run it (a CUDA tensor without
// a visible device, or a view of non-device memory, is an UnsupportedError); for
// floating roles also f32 or f64. The kernels run on the tensor's device through the
// compute interface (backend/compute.hpp).
inline void require_tensor(const Tensor& t, const char* fn, const char* role) {
  if (!t.defined()) throw InvalidArgument(fn_name(fn) + ": " + role + " is undefined");
  require_usable(t, fn_name(fn) + ": " + role);
  if (!t.is_contiguous()) throw ShapeError(fn_name(fn) + ": " + role + " " + t.str() + " must be contiguous");
}

inline void require_float(const Tensor& t, const char* fn, const char* role) {
  require_tensor(t, fn, role);
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64) {
    throw ShapeError(fn_name(fn) + ": " + role + " " + t.str() + " must be f32 or f64");
  }
}

// Every tensor of one call lives on one device.
inline void require_same_device(const Tensor& a, const char* role_a, const Tensor& b, const char* role_b,
                                const char* fn) {
  if (!(a.device() == b.device())) {
    throw InvalidArgument(fn_name(fn) + ": " + role_b + " " + b.str() + " and " + role_a + " " + a.str() +
                          " are on different devices; move them to one device first");
  }
}

// The compute entries for a call on t's device (its first tensor decides; the checks
// above hold every other tensor to the same device).
inline tessera::detail::Compute& compute_for(const Tensor& t, const char* fn) {
  return tessera::detail::compute_for(t, fn_name(fn));
}

// `b` must share `a`'s dtype (one dtype per call: no silent mixed precision) and device.
inline void require_same_dtype(const Tensor& a, const char* role_a, const Tensor& b, const char* role_b,
                               const char* fn) {
  require_same_device(a, role_a, b, role_b, fn);
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
