#include "models/kv_heads_projection.hpp"

#include <numeric>

#include "tessera/error.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/ops.hpp"
#include "tessera/tp/mappings.hpp"

namespace tessera::models::detail {

KvHeadsOfRank kv_heads_of_rank(std::int64_t n_heads, std::int64_t n_kv_heads, int tp, int rank) {
  if (n_heads < 1 || n_kv_heads < 1 || n_heads % n_kv_heads != 0 || tp < 1 || n_heads % tp != 0 || rank < 0 ||
      rank >= tp) {
    throw InvalidArgument("kv_heads_of_rank: n_heads " + std::to_string(n_heads) + ", n_kv_heads " +
                          std::to_string(n_kv_heads) + ", tp " + std::to_string(tp) + ", rank " +
                          std::to_string(rank) + ": n_kv_heads and tp must divide n_heads");
  }
  const std::int64_t n = n_heads / tp, first = rank * n, group = n_heads / n_kv_heads;
  KvHeadsOfRank out;
  // Blocks of m consecutive local query heads starting at a multiple of m read one key/
  // value head when m divides the group; m also divides n so the blocks tile the rank.
  out.local_group = std::gcd(std::gcd(n, group), first);
  for (std::int64_t h = first; h < first + n; h += out.local_group) out.heads.push_back(h / group);
  return out;
}

KvHeadsProjection::KvHeadsProjection(std::unique_ptr<nn::Linear> serial, Communicator& tp,
                                     std::vector<std::int64_t> heads, std::int64_t head_dim,
                                     std::optional<int> sequence_dim, std::string name)
    : inner_(std::move(serial)),
      tp_(tp),
      heads_(std::move(heads)),
      head_dim_(head_dim),
      sequence_dim_(sequence_dim),
      name_(std::move(name)) {
  const std::string label = "KvHeadsProjection '" + name_ + "'";
  if (!inner_ || inner_->has_bias()) throw InvalidArgument(label + ": needs a Linear without bias");
  if (head_dim_ < 1 || inner_->out_features() % head_dim_ != 0 || heads_.empty()) {
    throw InvalidArgument(label + ": out_features " + std::to_string(inner_->out_features()) +
                          " must be a multiple of head_dim " + std::to_string(head_dim_) + " and heads non-empty");
  }
  for (std::int64_t h : heads_) {
    if (h < 0 || (h + 1) * head_dim_ > inner_->out_features()) {
      throw InvalidArgument(label + ": key/value head " + std::to_string(h) + " is outside the projection");
    }
  }
  // Replicated over tp, but each rank's gradient covers only the heads it reads.
  inner_->weight.partial_grad_over_tp = true;
  register_parameter("weight", inner_->weight);
}

Tensor KvHeadsProjection::forward(const Tensor& x) {
  input_ = sequence_dim_ ? tp::sequence_all_gather(x, *sequence_dim_, tp_) : x;
  const Tensor& w = inner_->weight.value;
  const std::int64_t rows = static_cast<std::int64_t>(heads_.size()) * head_dim_;
  selected_ = Tensor::empty({rows, w.size(1)}, w.dtype(), w.device());
  for (std::size_t j = 0; j < heads_.size(); ++j) {
    Tensor block = selected_.narrow(0, static_cast<std::int64_t>(j) * head_dim_, head_dim_);
    block.copy_from(w.narrow(0, heads_[j] * head_dim_, head_dim_));
  }
  return nn::functional::linear(input_, selected_, Tensor(), compute_precision());
}

Tensor KvHeadsProjection::backward(const Tensor& grad_y) {
  if (!selected_.defined()) {
    throw InvalidArgument("KvHeadsProjection '" + name_ + "': backward called without a preceding forward");
  }
  Parameter& w = inner_->weight;
  Tensor grad_selected = Tensor::zeros(selected_.shape(), selected_.dtype(), selected_.device());
  Tensor no_bias;
  const Tensor dx = nn::functional::linear_backward(grad_y.contiguous(), input_, selected_, grad_selected, no_bias,
                                                    compute_precision());
  // A key/value head read by several blocks collects each block's gradient.
  for (std::size_t j = 0; j < heads_.size(); ++j) {
    Tensor rows = w.grad.narrow(0, heads_[j] * head_dim_, head_dim_);
    ops::axpy(1.0, grad_selected.narrow(0, static_cast<std::int64_t>(j) * head_dim_, head_dim_), rows);
  }
  input_ = selected_ = Tensor();
  return sequence_dim_ ? tp::sequence_all_gather_backward(dx, *sequence_dim_, tp_)
                       : tp::copy_to_parallel_backward(dx, tp_);
}

}  // namespace tessera::models::detail
