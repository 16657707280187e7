// ops.hpp: the dense building blocks every layer uses. This file checks the arguments
// and dispatches to the tensors' backend through the compute interface
// (backend/compute.hpp): CBLAS and loops on the host (backend/host/host_blas.cpp),
// cuBLAS and kernels on CUDA. No device is special-cased here.

#include "tessera/ops.hpp"

#include "backend/compute.hpp"

namespace tessera::ops {

namespace {

std::string who(const char* op, const char* role) { return std::string("ops::") + op + ": " + role; }

// Defined, contiguous, usable on its device, and f32 or f64 (bf16 too where `allow_bf16`:
// the GEMM inputs and output).
void require_float(const Tensor& t, const char* op, const char* role, bool allow_bf16 = false) {
  if (!t.defined()) throw InvalidArgument(who(op, role) + " is undefined");
  require_usable(t, who(op, role));
  const bool bf16_ok = allow_bf16 && t.dtype() == DType::bf16;
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64 && !bf16_ok) {
    throw ShapeError(who(op, role) + " " + t.str() + " must be f32 or f64" + (allow_bf16 ? " (or bf16)" : ""));
  }
  if (!t.is_contiguous()) throw ShapeError(who(op, role) + " " + t.str() + " must be contiguous");
}

void require_same_device(const Tensor& a, const Tensor& b, const char* op) {
  if (!(a.device() == b.device())) {
    throw InvalidArgument(std::string("ops::") + op + ": " + a.str() + " and " + b.str() +
                          " are on different devices");
  }
}

tessera::detail::Compute& compute_for(const Tensor& t, const char* op, const char* role) {
  return tessera::detail::compute_for(t, who(op, role));
}

void require_same(const Tensor& a, const Tensor& b, const char* op) {
  require_same_device(a, b, op);
  if (a.dtype() != b.dtype()) {
    throw ShapeError(std::string("ops::") + op + ": dtypes differ: " + a.str() + " vs " + b.str());
  }
}

int resolve_channel_dim(const Tensor& y, int channel_dim, const char* op) {
  const int d = channel_dim < 0 ? y.dim() + channel_dim : channel_dim;
  if (d < 0 || d >= y.dim()) {
    throw InvalidArgument(std::string("ops::") + op + ": channel dim " + std::to_string(channel_dim) +
                          " out of range for " + y.str());
  }
  return d;
}

// y viewed as [outer, channels, inner] around its channel dim, in element counts.
struct ChannelSplit {
  std::int64_t outer = 1, channels = 1, inner = 1;
};

// What add_bias and accumulate_bias_grad check: y and `bias` (the bias or its gradient)
// float tensors of one device and dtype, and one bias element per channel of y's
// channel_dim. Returns y's split around that dim; errors name the two roles.
ChannelSplit split_for_bias(const Tensor& y, const char* y_role, const Tensor& bias, const char* bias_role,
                            int channel_dim, const char* op) {
  require_float(y, op, y_role);
  require_float(bias, op, bias_role);
  require_same(y, bias, op);
  const int d = resolve_channel_dim(y, channel_dim, op);
  ChannelSplit split;
  for (int i = 0; i < d; ++i) split.outer *= y.shape()[i];
  for (int i = d + 1; i < y.dim(); ++i) split.inner *= y.shape()[i];
  split.channels = y.shape()[d];
  if (bias.numel() != split.channels) {
    throw ShapeError(std::string("ops::") + op + ": " + bias_role + " " + bias.str() + " does not match dim " +
                     std::to_string(d) + " of " + y.str());
  }
  return split;
}

}  // namespace

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta,
          Precision precision) {
  if (precision == Precision::bf16_mixed) {
    require_float(a, "gemm", "A", /*allow_bf16=*/true);
    require_float(b, "gemm", "B", /*allow_bf16=*/true);
    require_float(c, "gemm", "C");
    for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(&c)}) {
      if (t->dtype() == DType::f64) {
        throw ShapeError("ops::gemm: bf16-mixed precision takes f32 or bf16 operands and an f32 C, not " + t->str());
      }
    }
    if (a.dtype() == DType::bf16 || b.dtype() == DType::bf16) {
      // One operand is already bf16 (a caller's rounded copy): round the other here.
      const Tensor a16 = a.dtype() == DType::bf16 ? a : cast(a, DType::bf16);
      const Tensor b16 = b.dtype() == DType::bf16 ? b : cast(b, DType::bf16);
      gemm(a16, ta, b16, tb, c, alpha, beta);
      return;
    }
    // Both f32: the backend rounds them on its side (GemmArgs::round_to_bf16).
  }
  require_float(a, "gemm", "A", /*allow_bf16=*/true);
  require_float(b, "gemm", "B", /*allow_bf16=*/true);
  require_float(c, "gemm", "C", /*allow_bf16=*/true);
  require_same(a, b, "gemm");
  // bf16 inputs may accumulate into an f32 C; otherwise one dtype.
  if (!(a.dtype() == DType::bf16 && c.dtype() == DType::f32)) require_same(a, c, "gemm");
  require_same_device(a, c, "gemm");
  if (a.dim() != 2 || b.dim() != 2 || c.dim() != 2) {
    throw ShapeError("ops::gemm: A " + a.str() + ", B " + b.str() + " and C " + c.str() + " must be 2-D");
  }
  const std::int64_t m = ta ? a.size(1) : a.size(0);
  const std::int64_t k = ta ? a.size(0) : a.size(1);
  const std::int64_t kb = tb ? b.size(1) : b.size(0);
  const std::int64_t n = tb ? b.size(0) : b.size(1);
  if (k != kb || c.size(0) != m || c.size(1) != n) {
    throw ShapeError("ops::gemm: op(A) " + a.str() + (ta ? "^T" : "") + " times op(B) " + b.str() +
                     (tb ? "^T" : "") + " does not fit C " + c.str());
  }
  tessera::detail::GemmArgs args;
  args.ab = a.dtype();
  args.c = c.dtype();
  args.transpose_a = ta;
  args.transpose_b = tb;
  args.m = m;
  args.n = n;
  args.k = k;
  args.a = a.data();
  args.lda = a.size(1);
  args.b = b.data();
  args.ldb = b.size(1);
  args.out = c.data();
  args.ldc = n;
  args.alpha = alpha;
  args.beta = beta;
  args.round_to_bf16 = precision == Precision::bf16_mixed;
  compute_for(a, "gemm", "A").gemm(args, a.device().index);
}

Tensor cast(const Tensor& x, DType dtype) {
  if (!x.defined()) throw InvalidArgument("ops::cast: x is undefined");
  if (!is_floating(x.dtype()) || !is_floating(dtype)) {
    throw ShapeError("ops::cast: " + x.str() + " to " + std::string(dtype_name(dtype)) +
                     ": only f32, f64 and bf16 convert");
  }
  const Tensor src = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  if (out.numel() > 0) {
    compute_for(src, "cast", "x").cast(src.dtype(), src.data(), dtype, out.data(), out.numel(), x.device().index);
  }
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  require_float(a, "matmul", "A", /*allow_bf16=*/true);
  if (a.dim() != 2 || b.dim() != 2) {
    throw ShapeError("ops::matmul: A " + a.str() + " and B " + b.str() + " must be 2-D");
  }
  Tensor c = Tensor::empty({ta ? a.size(1) : a.size(0), tb ? b.size(0) : b.size(1)}, a.dtype(), a.device());
  gemm(a, ta, b, tb, c, 1.0, 0.0);
  return c;
}

void axpy(double alpha, const Tensor& x, Tensor& y) {
  require_float(x, "axpy", "x");
  require_float(y, "axpy", "y");
  require_same(x, y, "axpy");
  if (x.shape() != y.shape()) throw ShapeError("ops::axpy: x " + x.str() + " and y " + y.str() + " differ in shape");
  compute_for(x, "axpy", "x").axpy(x.dtype(), x.numel(), alpha, x.data(), y.data(), x.device().index);
}

void scale(Tensor& y, double alpha) {
  require_float(y, "scale", "y");
  // An f32 tensor is multiplied by float(alpha), as ops::scale always has: the entry
  // multiplies in double and rounds once, which for a float alpha is the f32 product.
  const double a = y.dtype() == DType::f32 ? static_cast<double>(static_cast<float>(alpha)) : alpha;
  compute_for(y, "scale", "y").scale(y.dtype(), y.numel(), a, y.data(), y.device().index);
}

void add_bias(Tensor& y, const Tensor& bias, int channel_dim) {
  const ChannelSplit split = split_for_bias(y, "y", bias, "bias", channel_dim, "add_bias");
  compute_for(y, "add_bias", "y")
      .add_bias(y.dtype(), y.data(), bias.data(), split.outer, split.channels, split.inner, y.device().index);
}

void accumulate_bias_grad(const Tensor& dy, Tensor& grad_bias, int channel_dim) {
  const ChannelSplit split = split_for_bias(dy, "dy", grad_bias, "grad_bias", channel_dim, "accumulate_bias_grad");
  compute_for(dy, "accumulate_bias_grad", "dy")
      .accumulate_bias_grad(dy.dtype(), dy.data(), grad_bias.data(), split.outer, split.channels, split.inner,
                            dy.device().index);
}

double sum(const Tensor& x) {
  require_float(x, "sum", "x");
  return compute_for(x, "sum", "x").sum(x.dtype(), x.data(), x.numel(), x.device().index);
}

double dot(const Tensor& x, const Tensor& y) {
  require_float(x, "dot", "x");
  require_float(y, "dot", "y");
  require_same(x, y, "dot");
  if (x.numel() != y.numel()) throw ShapeError("ops::dot: " + x.str() + " and " + y.str() + " differ in size");
  return compute_for(x, "dot", "x").dot(x.dtype(), x.data(), y.data(), x.numel(), x.device().index);
}

int host_thread_share(int usable_cores, int ranks_on_node) noexcept {
  if (ranks_on_node < 1) return usable_cores > 0 ? usable_cores : 1;
  const int share = usable_cores / ranks_on_node;
  return share > 0 ? share : 1;
}

}  // namespace tessera::ops
