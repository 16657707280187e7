#include "tessera/nn/attention.hpp"

#include <cmath>
#include <cstdio>

#include "functional_support.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/ops.hpp"

namespace tessera::nn {

namespace functional {

namespace {

// Checks q [B, S, heads * head_dim], k and v [B, S, kv_heads * head_dim] (kv_heads
// dividing heads) and returns head_dim.
std::int64_t check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads, const char* fn) {
  detail::require_float(q, fn, "q");
  detail::require_float(k, fn, "k");
  detail::require_float(v, fn, "v");
  detail::require_same_dtype(q, "q", k, "k", fn);
  detail::require_same_dtype(q, "q", v, "v", fn);
  if (q.dim() != 3) throw ShapeError(detail::fn_name(fn) + ": q " + q.str() + " must be [B, S, heads * head_dim]");
  detail::require_same_shape(k, "k", v, "v", fn);
  if (heads < 1 || q.size(2) % heads != 0) {
    throw ShapeError(detail::fn_name(fn) + ": width " + std::to_string(q.size(2)) + " of q " + q.str() +
                     " is not a positive multiple of heads = " + std::to_string(heads));
  }
  const std::int64_t hd = q.size(2) / heads;
  // Self-attention: one sequence for queries and keys (the causal mask needs it too).
  const bool kv_fits = k.dim() == 3 && k.size(0) == q.size(0) && k.size(1) == q.size(1) && hd > 0 &&
                       k.size(2) % hd == 0 && k.size(2) > 0 && heads % (k.size(2) / hd) == 0;
  if (!kv_fits) {
    throw ShapeError(detail::fn_name(fn) + ": k and v " + k.str() + " must be [B, S, kv_heads * head_dim] for q " +
                     q.str() + " with heads = " + std::to_string(heads) + " (head_dim " + std::to_string(hd) +
                     ", kv_heads dividing heads)");
  }
  return hd;
}

// The geometry the compute entries take.
tessera::detail::AttentionShape attention_shape(const Tensor& q, std::int64_t heads, std::int64_t head_dim,
                                                bool causal) {
  tessera::detail::AttentionShape shape;
  shape.batch = q.size(0);
  shape.seq = q.size(1);
  shape.width = q.size(2);
  shape.heads = heads;
  shape.causal = causal;
  shape.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  return shape;
}

tessera::detail::AttentionShape attention_shape(const Tensor& q, const Tensor& k, std::int64_t heads,
                                                std::int64_t head_dim, bool causal) {
  tessera::detail::AttentionShape shape = attention_shape(q, heads, head_dim, causal);
  shape.kv_heads = k.size(2) / head_dim;
  return shape;
}

Tensor rope_apply(const Tensor& x, std::int64_t head_dim, double theta, bool inverse, const char* fn) {
  detail::require_float(x, fn, "x");
  if (x.dim() != 3 || head_dim < 2 || head_dim % 2 != 0 || x.size(2) % head_dim != 0) {
    throw ShapeError(detail::fn_name(fn) + ": x " + x.str() + " must be [B, S, heads * head_dim] with head_dim " +
                     std::to_string(head_dim) + " even and >= 2");
  }
  if (!(theta > 0) || !std::isfinite(theta)) {
    throw InvalidArgument(detail::fn_name(fn) + ": theta must be a finite number > 0, got " + std::to_string(theta));
  }
  const Tensor in = x.contiguous();
  Tensor out = Tensor::empty(in.shape(), in.dtype(), in.device());
  tessera::detail::RopeShape shape;
  shape.batch = in.size(0);
  shape.seq = in.size(1);
  shape.width = in.size(2);
  shape.head_dim = head_dim;
  shape.theta = theta;
  detail::compute_for(in, fn).rope(in.dtype(), in.data(), out.data(), shape, inverse, in.device().index);
  return out;
}

}  // namespace

Tensor attention_core(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads, bool causal,
                      Tensor& probs) {
  const char* fn = "attention_core";
  const std::int64_t hd = check_qkv(q, k, v, heads, fn);
  const std::int64_t B = q.size(0), S = q.size(1);
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  probs = Tensor::empty({B, heads, S, S}, q.dtype(), q.device());
  detail::compute_for(q, fn).attention(q.dtype(), q.data(), k.data(), v.data(), out.data(), probs.data(),
                                       attention_shape(q, k, heads, hd, causal), q.device().index);
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
  const std::int64_t B = q.size(0), S = q.size(1);
  if (probs.shape() != Shape{B, heads, S, S}) {
    throw ShapeError(detail::fn_name(fn) + ": probs " + probs.str() + " must be " +
                     shape_str({B, heads, S, S}) + " for q " + q.str() + " and heads = " + std::to_string(heads) +
                     " (run attention_core first)");
  }
  AttentionGrads grads{Tensor::empty(q.shape(), q.dtype(), q.device()),
                       Tensor::empty(k.shape(), k.dtype(), k.device()),
                       Tensor::empty(v.shape(), v.dtype(), v.device())};
  detail::compute_for(q, fn).attention_backward(q.dtype(), grad_context.data(), q.data(), k.data(), v.data(),
                                                probs.data(), grads.q.data(), grads.k.data(), grads.v.data(),
                                                attention_shape(q, k, heads, hd, false), q.device().index);
  return grads;
}

Tensor rope(const Tensor& x, std::int64_t head_dim, double theta) {
  return rope_apply(x, head_dim, theta, /*inverse=*/false, "rope");
}

Tensor rope_backward(const Tensor& grad_output, std::int64_t head_dim, double theta) {
  return rope_apply(grad_output, head_dim, theta, /*inverse=*/true, "rope_backward");
}

}  // namespace functional

namespace {

AttentionOptions causal_only(bool causal) {
  AttentionOptions o;
  o.causal = causal;
  return o;
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(std::int64_t d_model, std::int64_t n_heads, bool causal, DType dtype,
                                       Device device)
    : MultiHeadAttention(d_model, n_heads, causal_only(causal), dtype, device) {}

MultiHeadAttention::MultiHeadAttention(std::int64_t d_model, std::int64_t n_heads, const AttentionOptions& options,
                                       DType dtype, Device device)
    : d_model_(d_model),
      n_heads_(n_heads),
      head_dim_(n_heads > 0 ? d_model / n_heads : 0),
      causal_(options.causal),
      options_(options),
      n_kv_heads_(options.n_kv_heads == 0 ? n_heads : options.n_kv_heads),
      local_kv_group_(n_kv_heads_ > 0 && n_heads % n_kv_heads_ == 0 ? n_heads / n_kv_heads_ : 1) {
  if (d_model < 1 || n_heads < 1 || d_model % n_heads != 0) {
    throw InvalidArgument(describe() + ": d_model must be a positive multiple of n_heads");
  }
  if (n_kv_heads_ < 1 || n_heads % n_kv_heads_ != 0) {
    throw InvalidArgument(describe() + ": n_kv_heads (" + std::to_string(options.n_kv_heads) +
                          ") must divide n_heads (" + std::to_string(n_heads) + "); 0 means n_heads");
  }
  if (options.rope && (head_dim_ % 2 != 0 || !(options.rope_theta > 0) || !std::isfinite(options.rope_theta))) {
    throw InvalidArgument(describe() + ": rope needs an even head_dim (d_model / n_heads = " +
                          std::to_string(head_dim_) + ") and a finite rope_theta > 0");
  }
  const std::int64_t kv_width = n_kv_heads_ * head_dim_;
  register_child("q", std::make_unique<Linear>(d_model, d_model, /*bias=*/false, dtype, device));
  register_child("k", std::make_unique<Linear>(d_model, kv_width, /*bias=*/false, dtype, device));
  register_child("v", std::make_unique<Linear>(d_model, kv_width, /*bias=*/false, dtype, device));
  register_child("o", std::make_unique<Linear>(d_model, d_model, /*bias=*/false, dtype, device));
}

void MultiHeadAttention::set_local_kv_group(std::int64_t group) {
  if (group < 1) throw InvalidArgument(describe() + ": local_kv_group must be >= 1, got " + std::to_string(group));
  local_kv_group_ = group;
}

std::string MultiHeadAttention::describe() const {
  std::string s = "MultiHeadAttention(d_model=" + std::to_string(d_model_) + ", n_heads=" + std::to_string(n_heads_);
  if (options_.n_kv_heads != 0 && options_.n_kv_heads != n_heads_) {
    s += ", n_kv_heads=" + std::to_string(options_.n_kv_heads);
  }
  if (options_.rope) {
    char theta[32];
    std::snprintf(theta, sizeof theta, "%g", options_.rope_theta);
    s += std::string(", rope_theta=") + theta;
  }
  return s + ", causal=" + (causal_ ? "true" : "false") + ")";
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
  // The heads this process holds: all of them serially, n_heads / tp under tensor
  // parallelism; one key/value head per local_kv_group of them.
  const std::int64_t heads = q.size(2) / head_dim_;
  const Shape kv_shape{q.size(0), q.size(1), heads / local_kv_group_ * head_dim_};
  if (heads % local_kv_group_ != 0 || k.shape() != kv_shape || v.shape() != kv_shape) {
    throw ShapeError(describe() + ": k and v outputs " + k.str() + ", " + v.str() + " must be " +
                     shape_str(kv_shape) + " for q output " + q.str() + " (one key/value head per " +
                     std::to_string(local_kv_group_) +
                     " query heads; under tensor parallelism with n_kv_heads not divisible by tp, convert the "
                     "model with models::parallelize_decoder)");
  }
  if (options_.rope) {
    q = functional::rope(q, head_dim_, options_.rope_theta);
    k = functional::rope(k, head_dim_, options_.rope_theta);
  }
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
  if (options_.rope) {
    // q and k were rotated after their projections: their gradients rotate back.
    g.q = functional::rope_backward(g.q, head_dim_, options_.rope_theta);
    g.k = functional::rope_backward(g.k, head_dim_, options_.rope_theta);
  }
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
