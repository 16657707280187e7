#include "tessera/nn/attention.hpp"

#include <cmath>

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

}  // namespace

Tensor attention_core(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads, bool causal,
                      Tensor& probs) {
  const char* fn = "attention_core";
  const std::int64_t hd = check_qkv(q, k, v, heads, fn);
  const std::int64_t B = q.size(0), S = q.size(1);
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  probs = Tensor::empty({B, heads, S, S}, q.dtype(), q.device());
  detail::compute_for(q, fn).attention(q.dtype(), q.data(), k.data(), v.data(), out.data(), probs.data(),
                                       attention_shape(q, heads, hd, causal), q.device().index);
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
                       Tensor::empty(q.shape(), q.dtype(), q.device()),
                       Tensor::empty(q.shape(), q.dtype(), q.device())};
  detail::compute_for(q, fn).attention_backward(q.dtype(), grad_context.data(), q.data(), k.data(), v.data(),
                                                probs.data(), grads.q.data(), grads.k.data(), grads.v.data(),
                                                attention_shape(q, heads, hd, false), q.device().index);
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
