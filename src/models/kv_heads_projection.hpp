#pragma once
// Private to src/models: the key or value projection of a grouped-query attention under
// tensor parallelism when tp does not divide n_kv_heads ("repeated" key/value heads).
//
// Query heads are split over tp, [r * n, (r + 1) * n) on rank r with n = n_heads / tp,
// and query head h reads key/value head h / group (group = n_heads / n_kv_heads). When
// tp does not divide n_kv_heads, key/value heads cannot be split into whole heads per
// rank; instead every rank keeps the whole projection (tp-replicated, so checkpoints
// store it once and any layout loads it) and computes only the key/value heads its
// query heads read: one per `local_group` consecutive local query heads (the largest
// block size that divides n, group and the first local head, so that every block reads
// one head). Each rank's weight gradient then covers only the rows its query heads read
// (partial_grad_over_tp: sync_replicated_gradients sums it over tp), and its input
// gradient is a partial sum over tp, reduced like a column-parallel layer's (all-reduce,
// or reduce-scatter along the sequence under sequence parallelism, where the input
// arrives as a sequence shard and is all-gathered first).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/module.hpp"

namespace tessera::models::detail {

// The key/value heads rank `rank` of `tp` reads, one per local_group query heads.
struct KvHeadsOfRank {
  std::vector<std::int64_t> heads;
  std::int64_t local_group = 1;
};
KvHeadsOfRank kv_heads_of_rank(std::int64_t n_heads, std::int64_t n_kv_heads, int tp, int rank);

class KvHeadsProjection final : public nn::Module {
 public:
  // `serial`: a Linear d_model -> n_kv_heads * head_dim without bias (its weight stays
  // the parameter "weight", so the FQN does not change).
  KvHeadsProjection(std::unique_ptr<nn::Linear> serial, Communicator& tp, std::vector<std::int64_t> heads,
                    std::int64_t head_dim, std::optional<int> sequence_dim, std::string name);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_y) override;
  std::string type_name() const override { return "KvHeadsProjection"; }
  void visit_activations(nn::ActivationVisitor& v) override {
    v.tensor(input_);
    v.tensor(selected_);
    inner_->visit_activations(v);
  }
  void set_compute_precision(Precision precision) override {
    nn::Module::set_compute_precision(precision);
    inner_->set_compute_precision(precision);
  }
  const std::vector<std::int64_t>& heads() const { return heads_; }

 private:
  std::unique_ptr<nn::Linear> inner_;
  Communicator& tp_;
  std::vector<std::int64_t> heads_;
  std::int64_t head_dim_;
  std::optional<int> sequence_dim_;
  std::string name_;
  Tensor input_, selected_;  // the (gathered) input and the selected weight rows, for backward
};

}  // namespace tessera::models::detail
