// HostCompute, attention family: the attention core fused per (batch, head, query row),
// accumulating scores, softmax and products in double and rounding once. The CUDA
// backend computes the same thing with GEMMs and row kernels. Grouped-query attention:
// query head h reads key/value head h / group from k and v of width kv_heads * head_dim.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/host/host_compute.hpp"

namespace tessera::detail {
namespace {

// Calls f(q, k, v) with the three inputs typed after dtype (f32 or f64): the dispatch
// both passes start from.
template <class F>
void for_typed_inputs(DType dtype, const void* q, const void* k, const void* v, F&& f) {
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    f(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v));
  });
}

}  // namespace

void HostCompute::attention(DType dtype, const void* q, const void* k, const void* v, void* out, void* probs,
                            const AttentionShape& shape, int) {
  const std::int64_t B = shape.batch, S = shape.seq, W = shape.width, heads = shape.heads, hd = shape.head_dim();
  const std::int64_t KW = shape.kv_width(), group = shape.group();
  const bool causal = shape.causal;
  const double scale = shape.scale;
  for_typed_inputs(dtype, q, k, v, [&]<class T>(const T* qs, const T* ks, const T* vs) {
    T* os = static_cast<T*>(out);
    T* ps = static_cast<T*>(probs);
    std::vector<double> p(static_cast<std::size_t>(S));
    std::vector<double> acc(static_cast<std::size_t>(hd));
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t col = h * hd, kv_col = (h / group) * hd;
        T* prow_base = ps + ((b * heads + h) * S) * S;
        for (std::int64_t i = 0; i < S; ++i) {
          const T* qi = qs + (b * S + i) * W + col;
          const std::int64_t keys = causal ? i + 1 : S;
          double max_score = -std::numeric_limits<double>::infinity();
          for (std::int64_t j = 0; j < keys; ++j) {
            const T* kj = ks + (b * S + j) * KW + kv_col;
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
            const T* vj = vs + (b * S + j) * KW + kv_col;
            for (std::int64_t d = 0; d < hd; ++d) acc[static_cast<std::size_t>(d)] += pij * static_cast<double>(vj[d]);
          }
          for (std::int64_t j = keys; j < S; ++j) prow[j] = T(0);
          T* oi = os + (b * S + i) * W + col;
          for (std::int64_t d = 0; d < hd; ++d) oi[d] = static_cast<T>(acc[static_cast<std::size_t>(d)]);
        }
      }
    }
  });
}

void HostCompute::attention_backward(DType dtype, const void* dout, const void* q, const void* k, const void* v,
                                     const void* probs, void* dq, void* dk, void* dv, const AttentionShape& shape,
                                     int) {
  const std::int64_t B = shape.batch, S = shape.seq, W = shape.width, heads = shape.heads, hd = shape.head_dim();
  const std::int64_t KW = shape.kv_width(), group = shape.group();
  const double scale = shape.scale;
  for_typed_inputs(dtype, q, k, v, [&]<class T>(const T* qs, const T* ks, const T* vs) {
    const T* gs = static_cast<const T*>(dout);
    const T* ps = static_cast<const T*>(probs);
    T* dqs = static_cast<T*>(dq);
    T* dks = static_cast<T*>(dk);
    T* dvs = static_cast<T*>(dv);
    // dK and dV gather contributions from every query row of every query head of their
    // group: accumulate them per key/value head in double and round once at the end.
    std::vector<double> dk_acc(static_cast<std::size_t>(S * hd)), dv_acc(static_cast<std::size_t>(S * hd));
    std::vector<double> dp(static_cast<std::size_t>(S)), dq_acc(static_cast<std::size_t>(hd));
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t kvh = 0; kvh < heads / group; ++kvh) {
        const std::int64_t kv_col = kvh * hd;
        std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
        std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
        for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          const std::int64_t col = h * hd;
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
              const T* vj = vs + (b * S + j) * KW + kv_col;
              double s = 0;
              for (std::int64_t d = 0; d < hd; ++d) s += static_cast<double>(gi[d]) * static_cast<double>(vj[d]);
              dp[static_cast<std::size_t>(j)] = s;
              row_dot += pij * s;
            }
            std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
            for (std::int64_t j = 0; j < S; ++j) {
              const double pij = static_cast<double>(prow[j]);
              if (pij == 0.0) continue;
              const double ds = pij * (dp[static_cast<std::size_t>(j)] - row_dot) * scale;
              const T* kj = ks + (b * S + j) * KW + kv_col;
              double* dkj = dk_acc.data() + j * hd;
              double* dvj = dv_acc.data() + j * hd;
              for (std::int64_t d = 0; d < hd; ++d) {
                dq_acc[static_cast<std::size_t>(d)] += ds * static_cast<double>(kj[d]);
                dkj[d] += ds * static_cast<double>(qi[d]);
                dvj[d] += pij * static_cast<double>(gi[d]);
              }
            }
            T* dqi = dqs + (b * S + i) * W + col;
            for (std::int64_t d = 0; d < hd; ++d) dqi[d] = static_cast<T>(dq_acc[static_cast<std::size_t>(d)]);
          }
        }
        for (std::int64_t j = 0; j < S; ++j) {
          T* dkj = dks + (b * S + j) * KW + kv_col;
          T* dvj = dvs + (b * S + j) * KW + kv_col;
          for (std::int64_t d = 0; d < hd; ++d) {
            dkj[d] = static_cast<T>(dk_acc[static_cast<std::size_t>(j * hd + d)]);
            dvj[d] = static_cast<T>(dv_acc[static_cast<std::size_t>(j * hd + d)]);
          }
        }
      }
    }
  });
}

}  // namespace tessera::detail
