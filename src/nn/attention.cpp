#include "tessera/nn/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "functional_support.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/ops.hpp"

namespace tessera::nn {

namespace functional {

namespace {

// Checks q, k, v [B, S, heads * head_dim] and returns head_dim.
std::int64_t check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads, const char* fn) {
  detail::require_float(q, fn, "q");
  detail::require_float(k, fn, "k");
  detail::require_float(v, fn, "v");
  detail::require_same_dtype(q, "q", k, "k", fn);
  detail::require_same_dtype(q, "q", v, "v", fn);
  if (q.dim() != 3) throw ShapeError(detail::fn_name(fn) + ": q " + q.str() + " must be [B, S, heads * head_dim]");
  // Self-attention: one sequence for queries and keys (the causal mask needs it too).
  detail::require_same_shape(q, "q", k, "k", fn);
  detail::require_same_shape(q, "q", v, "v", fn);
  if (heads < 1 || q.size(2) % heads != 0) {
    throw ShapeError(detail::fn_name(fn) + ": width " + std::to_string(q.size(2)) + " of q " + q.str() +
                     " is not a positive multiple of heads = " + std::to_string(heads));
  }
  return q.size(2) / heads;
}

// ---- CUDA path: per (batch, head), GEMMs on the head's column block (row stride W)
// and row kernels for the softmax and its backward.

using tessera::detail::DeviceGemm;

// Byte address of element (row, col) of a row-major matrix starting at `base`.
const void* elem(const Tensor& t, std::int64_t element) {
  return static_cast<const unsigned char*>(t.data()) + element * static_cast<std::int64_t>(t.element_size());
}
void* elem_mut(const Tensor& t, std::int64_t element) { return const_cast<void*>(elem(t, element)); }

void device_gemm(const Tensor& like, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                 const void* a, std::int64_t lda, const void* b, std::int64_t ldb, void* c, std::int64_t ldc,
                 double alpha, double beta, const char* fn) {
  DeviceGemm g;
  g.ab = g.c = like.dtype();
  g.transpose_a = ta;
  g.transpose_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.out = c;
  g.ldc = ldc;
  g.alpha = alpha;
  g.beta = beta;
  detail::compute_for(like, fn).gemm(g, like.device().index);
}

void device_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads, bool causal,
                      Tensor& out, Tensor& probs, const char* fn) {
  const std::int64_t B = q.size(0), S = q.size(1), W = q.size(2), hd = W / heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t base = b * S * W + h * hd;
      // scores = Q K^T (scaled inside the softmax kernel)
      device_gemm(q, false, true, S, S, hd, elem(q, base), W, elem(k, base), W, elem_mut(probs, (b * heads + h) * S * S), S,
                  1.0, 0.0, fn);
    }
  detail::compute_for(q, fn).softmax_rows(q.dtype(), probs.data(), B * heads, S, scale, causal, q.device().index);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t base = b * S * W + h * hd;
      device_gemm(q, false, false, S, hd, S, elem(probs, (b * heads + h) * S * S), S, elem(v, base), W, elem_mut(out, base),
                  W, 1.0, 0.0, fn);
    }
}

void device_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& probs, std::int64_t heads, AttentionGrads& grads, const char* fn) {
  const std::int64_t B = q.size(0), S = q.size(1), W = q.size(2), hd = W / heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  Tensor dp = Tensor::empty(probs.shape(), q.dtype(), q.device());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t base = b * S * W + h * hd;
      // dP = dO V^T
      device_gemm(q, false, true, S, S, hd, elem(dout, base), W, elem(v, base), W, elem_mut(dp, (b * heads + h) * S * S), S,
                  1.0, 0.0, fn);
    }
  // dS = P (dP - rowsum(P dP)) scale, in place
  detail::compute_for(q, fn).softmax_backward_rows(q.dtype(), probs.data(), dp.data(), B * heads, S, scale,
                                                   q.device().index);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t base = b * S * W + h * hd;
      const void* ds = elem(dp, (b * heads + h) * S * S);
      const void* p = elem(probs, (b * heads + h) * S * S);
      device_gemm(q, false, false, S, hd, S, ds, S, elem(k, base), W, elem_mut(grads.q, base), W, 1.0, 0.0, fn);  // dQ = dS K
      device_gemm(q, true, false, S, hd, S, ds, S, elem(q, base), W, elem_mut(grads.k, base), W, 1.0, 0.0, fn);   // dK = dS^T Q
      device_gemm(q, true, false, S, hd, S, p, S, elem(dout, base), W, elem_mut(grads.v, base), W, 1.0, 0.0, fn); // dV = P^T dO
    }
}

}  // namespace

Tensor attention_core(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads, bool causal,
                      Tensor& probs) {
  const char* fn = "attention_core";
  const std::int64_t hd = check_qkv(q, k, v, heads, fn);
  const std::int64_t B = q.size(0), S = q.size(1), W = q.size(2);
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  probs = Tensor::empty({B, heads, S, S}, q.dtype(), q.device());
  if (detail::on_cuda(q)) {
    device_attention(q, k, v, heads, causal, out, probs, fn);
    return out;
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  detail::dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* qs = q.data<T>();
    const T* ks = k.data<T>();
    const T* vs = v.data<T>();
    T* os = out.data<T>();
    T* ps = probs.data<T>();
    std::vector<double> p(static_cast<std::size_t>(S));
    std::vector<double> acc(static_cast<std::size_t>(hd));
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t col = h * hd;
        T* prow_base = ps + ((b * heads + h) * S) * S;
        for (std::int64_t i = 0; i < S; ++i) {
          const T* qi = qs + (b * S + i) * W + col;
          const std::int64_t keys = causal ? i + 1 : S;
          double max_score = -std::numeric_limits<double>::infinity();
          for (std::int64_t j = 0; j < keys; ++j) {
            const T* kj = ks + (b * S + j) * W + col;
            double s = 0;
            for (std::int64_t d = 0; d < hd; ++d) s += static_cast<double>(qi[d]) * static_cast<double>(kj[d]);
            s *= scale;
            p[static_cast<std::size_t>(j)] = s;
            max_score = std::max(max_score, s);
          }
          // Subtracting the row maximum keeps every exp() <= 1: no overflow whatever
          // the scores' magnitude.
          double total = 0;
          for (std::int64_t j = 0; j < keys; ++j) {
            const double e = std::exp(p[static_cast<std::size_t>(j)] - max_score);
            p[static_cast<std::size_t>(j)] = e;
            total += e;
          }
          std::fill(acc.begin(), acc.end(), 0.0);
          T* prow = prow_base + i * S;
          for (std::int64_t j = 0; j < keys; ++j) {
            const double pij = p[static_cast<std::size_t>(j)] / total;
            prow[j] = static_cast<T>(pij);
            const T* vj = vs + (b * S + j) * W + col;
            for (std::int64_t d = 0; d < hd; ++d) acc[static_cast<std::size_t>(d)] += pij * static_cast<double>(vj[d]);
          }
          for (std::int64_t j = keys; j < S; ++j) prow[j] = T(0);
          T* oi = os + (b * S + i) * W + col;
          for (std::int64_t d = 0; d < hd; ++d) oi[d] = static_cast<T>(acc[static_cast<std::size_t>(d)]);
        }
      }
    }
  });
  return out;
}

AttentionGrads attention_core_backward(const Tensor& grad_context, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& probs, std::int64_t heads) {
  const char* fn = "attention_core_backward";
  const std::int64_t hd = check_qkv(q, k, v, heads, fn);
  detail::require_float(grad_context, fn, "grad_context");
  detail::require_same_dtype(q, "q", grad_context, "grad_context", fn);
  detail::require_same_shape(q, "q", grad_context, "grad_context", fn);
  detail::require_float(probs, fn, "probs");
  detail::require_same_dtype(q, "q", probs, "probs", fn);
  const std::int64_t B = q.size(0), S = q.size(1), W = q.size(2);
  if (probs.shape() != Shape{B, heads, S, S}) {
    throw ShapeError(detail::fn_name(fn) + ": probs " + probs.str() + " must be " +
                     shape_str({B, heads, S, S}) + " for q " + q.str() + " and heads = " + std::to_string(heads) +
                     " (run attention_core first)");
  }
  AttentionGrads grads{Tensor::empty(q.shape(), q.dtype(), q.device()),
                       Tensor::empty(q.shape(), q.dtype(), q.device()),
                       Tensor::empty(q.shape(), q.dtype(), q.device())};
  if (detail::on_cuda(q)) {
    device_attention_backward(grad_context, q, k, v, probs, heads, grads, fn);
    return grads;
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  detail::dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* qs = q.data<T>();
    const T* ks = k.data<T>();
    const T* vs = v.data<T>();
    const T* gs = grad_context.data<T>();
    const T* ps = probs.data<T>();
    T* dqs = grads.q.data<T>();
    T* dks = grads.k.data<T>();
    T* dvs = grads.v.data<T>();
    // dK and dV gather contributions from every query row: accumulate them per head
    // in double and round once at the end.
    std::vector<double> dk(static_cast<std::size_t>(S * hd)), dv(static_cast<std::size_t>(S * hd));
    std::vector<double> dp(static_cast<std::size_t>(S)), dq(static_cast<std::size_t>(hd));
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t col = h * hd;
        std::fill(dk.begin(), dk.end(), 0.0);
        std::fill(dv.begin(), dv.end(), 0.0);
        for (std::int64_t i = 0; i < S; ++i) {
          const T* prow = ps + ((b * heads + h) * S + i) * S;
          const T* gi = gs + (b * S + i) * W + col;
          const T* qi = qs + (b * S + i) * W + col;
          // dP_ij = <dO_i, V_j>; the softmax Jacobian needs sum_j P_ij dP_ij. A zero
          // probability (masked, or underflowed) contributes exactly nothing to any
          // gradient, so it is skipped.
          double row_dot = 0;
          for (std::int64_t j = 0; j < S; ++j) {
            const double pij = static_cast<double>(prow[j]);
            if (pij == 0.0) continue;
            const T* vj = vs + (b * S + j) * W + col;
            double s = 0;
            for (std::int64_t d = 0; d < hd; ++d) s += static_cast<double>(gi[d]) * static_cast<double>(vj[d]);
            dp[static_cast<std::size_t>(j)] = s;
            row_dot += pij * s;
          }
          std::fill(dq.begin(), dq.end(), 0.0);
          for (std::int64_t j = 0; j < S; ++j) {
            const double pij = static_cast<double>(prow[j]);
            if (pij == 0.0) continue;
            const double ds = pij * (dp[static_cast<std::size_t>(j)] - row_dot) * scale;
            const T* kj = ks + (b * S + j) * W + col;
            double* dkj = dk.data() + j * hd;
            double* dvj = dv.data() + j * hd;
            for (std::int64_t d = 0; d < hd; ++d) {
              dq[static_cast<std::size_t>(d)] += ds * static_cast<double>(kj[d]);
              dkj[d] += ds * static_cast<double>(qi[d]);
              dvj[d] += pij * static_cast<double>(gi[d]);
            }
          }
          T* dqi = dqs + (b * S + i) * W + col;
          for (std::int64_t d = 0; d < hd; ++d) dqi[d] = static_cast<T>(dq[static_cast<std::size_t>(d)]);
        }
        for (std::int64_t j = 0; j < S; ++j) {
          T* dkj = dks + (b * S + j) * W + col;
          T* dvj = dvs + (b * S + j) * W + col;
          for (std::int64_t d = 0; d < hd; ++d) {
            dkj[d] = static_cast<T>(dk[static_cast<std::size_t>(j * hd + d)]);
            dvj[d] = static_cast<T>(dv[static_cast<std::size_t>(j * hd + d)]);
          }
        }
      }
    }
  });
  return grads;
}

}  // namespace functional

MultiHeadAttention::MultiHeadAttention(std::int64_t d_model, std::int64_t n_heads, bool causal, DType dtype,
                                       Device device)
    : d_model_(d_model), n_heads_(n_heads), head_dim_(n_heads > 0 ? d_model / n_heads : 0), causal_(causal) {
  if (d_model < 1 || n_heads < 1 || d_model % n_heads != 0) {
    throw InvalidArgument(describe() + ": d_model must be a positive multiple of n_heads");
  }
  for (const char* name : {"q", "k", "v", "o"}) {
    register_child(name, std::make_unique<Linear>(d_model, d_model, /*bias=*/false, dtype, device));
  }
}

std::string MultiHeadAttention::describe() const {
  return "MultiHeadAttention(d_model=" + std::to_string(d_model_) + ", n_heads=" + std::to_string(n_heads_) +
         ", causal=" + (causal_ ? "true" : "false") + ")";
}

Tensor MultiHeadAttention::forward(const Tensor& input) {
  if (!input.defined()) throw InvalidArgument(describe() + ": forward input is undefined");
  // Through at() every time: parallelize may have replaced any projection since the
  // last call.
  Tensor q = at("q").forward(input).contiguous();
  Tensor k = at("k").forward(input).contiguous();
  Tensor v = at("v").forward(input).contiguous();
  if (q.dim() != 3 || q.size(2) % head_dim_ != 0 || q.size(2) == 0) {
    throw ShapeError(describe() + ": q output " + q.str() + " must be [B, S, heads * head_dim] with head_dim " +
                     std::to_string(head_dim_));
  }
  if (k.shape() != q.shape() || v.shape() != q.shape()) {
    throw ShapeError(describe() + ": q, k and v outputs " + q.str() + ", " + k.str() + ", " + v.str() +
                     " must have one shape");
  }
  // The heads this process holds: all of them serially, n_heads / tp under tensor
  // parallelism.
  const std::int64_t heads = q.size(2) / head_dim_;
  Tensor probs;
  Tensor context = functional::attention_core(q, k, v, heads, causal_, probs);
  Tensor y = at("o").forward(context);
  q_ = std::move(q);
  k_ = std::move(k);
  v_ = std::move(v);
  probs_ = std::move(probs);
  local_heads_ = heads;
  return y;
}

Tensor MultiHeadAttention::backward(const Tensor& grad_output) {
  if (!probs_.defined()) throw InvalidArgument(describe() + ": backward called without a preceding forward");
  if (!grad_output.defined()) throw InvalidArgument(describe() + ": backward grad_output is undefined");
  Tensor grad_context = at("o").backward(grad_output).contiguous();
  functional::AttentionGrads g = functional::attention_core_backward(grad_context, q_, k_, v_, probs_, local_heads_);
  q_ = k_ = v_ = probs_ = Tensor();
  Tensor dq = at("q").backward(g.q);
  Tensor dk = at("k").backward(g.k);
  Tensor dv = at("v").backward(g.v);
  if (dk.shape() != dq.shape() || dv.shape() != dq.shape()) {
    throw ShapeError(describe() + ": input gradients of q, k and v " + dq.str() + ", " + dk.str() + ", " + dv.str() +
                     " must have one shape");
  }
  // A fresh tensor: a child's returned gradient may alias storage it still uses.
  Tensor dx = dq.clone();
  ops::axpy(1.0, dk.contiguous(), dx);
  ops::axpy(1.0, dv.contiguous(), dx);
  return dx;
}

}  // namespace tessera::nn
