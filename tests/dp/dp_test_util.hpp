#pragma once
// Shared pieces of the dp tests: a field model that exercises every mesh dimension
// (a domain-parallel 3x3 conv, a tp channel-MLP block, a replicated 1x1 head), its
// serial twin and the serial reference run, the synthetic dataset, and comparisons of a
// rank's blocks with the serial master tensors (cut at local_offset: no communication).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/domain_conv2d.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/channel_mlp.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/ops.hpp"
#include "tessera/optim.hpp"
#include "../tp/tp_test_util.hpp"

namespace tessera::testing {

// Channels 2 -> 5 -> (mlp hidden 6) -> 3. Dim-0 extents 5, 6/tp, 3 split unevenly over
// dp 2 and dp 4, and the head's 3 rows are fewer than dp 4 (it stays dp-Replicate).
inline constexpr std::int64_t kInC = 2, kC = 5, kHidden = 6, kOutC = 3, kLat = 7, kLon = 8, kBatch = 2;
inline constexpr std::uint64_t kSeed = 9001;

// y = head(mlp(conv(x))); children reached through at(), so they can be wrapped.
class FieldNet : public nn::Module {
 public:
  // Serial twin (mesh == nullptr) or domain-parallel conv + tp channel MLP.
  explicit FieldNet(const Mesh* mesh) {
    if (mesh == nullptr) {
      nn::Conv2dOptions o;
      o.padding_h = 1;
      o.padding_w = 1;
      register_child("conv", std::make_unique<nn::Conv2d>(kInC, kC, 3, 3, o));
    } else {
      decomposition_ = std::make_unique<domain::Decomposition>(*mesh, Shape{kLat, kLon});
      domain::DomainConv2dOptions o;
      o.lon_padding = domain::LonPadding::zero;
      o.pole = domain::PolePolicy::zero;
      register_child("conv", std::make_unique<domain::DomainConv2d>(*decomposition_, kInC, kC, 3, 3, o));
    }
    register_child("mlp", std::make_unique<models::ChannelMlpBlock>(kC, kHidden));
    register_child("head", std::make_unique<nn::Conv2d>(kC, kOutC, 1, 1));
  }
  Tensor forward(const Tensor& x) override {
    return at("head").forward(at("mlp").forward(at("conv").forward(x)));
  }
  Tensor backward(const Tensor& dy) override {
    return at("conv").backward(at("mlp").backward(at("head").backward(dy)));
  }
  std::string type_name() const override { return "FieldNet"; }
  const domain::Decomposition* decomposition() const { return decomposition_.get(); }

 private:
  std::unique_ptr<domain::Decomposition> decomposition_;
};

inline Tensor sample_input(std::int64_t i) { return random_tensor({kInC, kLat, kLon}, 100 + static_cast<std::uint64_t>(i)); }
inline Tensor sample_target(std::int64_t i) { return random_tensor({kOutC, kLat, kLon}, 5000 + static_cast<std::uint64_t>(i)); }

// Stacks samples into a batch [n, C, lat, lon].
inline Tensor stack(const std::vector<std::int64_t>& ids, bool target) {
  const std::int64_t c = target ? kOutC : kInC;
  Tensor out = Tensor::empty({static_cast<std::int64_t>(ids.size()), c, kLat, kLon}, DType::f32);
  for (std::size_t k = 0; k < ids.size(); ++k) {
    out.narrow(0, static_cast<std::int64_t>(k), 1).copy_from((target ? sample_target(ids[k]) : sample_input(ids[k])).reshape({1, c, kLat, kLon}));
  }
  return out;
}

// This rank's latitude rows of a [n, C, lat, lon] batch (the whole batch without a
// domain decomposition).
inline Tensor local_rows(const Tensor& field, const FieldNet& model) {
  if (model.decomposition() == nullptr) return field;
  const auto box = model.decomposition()->box();
  return field.narrow(2, box.lat.start, box.lat.length).contiguous();
}

// d/dy of 0.5 * sum((y - t)^2) / n.
inline Tensor mse_grad(const Tensor& y, const Tensor& t, double n) {
  Tensor dy = y.contiguous().clone();
  ops::axpy(-1.0, t.contiguous(), dy);
  ops::scale(dy, 1.0 / n);
  return dy;
}

// "dp 2 x tp 1 x domain 2": the layout in failure messages.
inline std::string layout_name(const Mesh& mesh) {
  return "dp " + std::to_string(mesh.dp_size()) + " x tp " + std::to_string(mesh.tp_size()) + " x domain " +
         std::to_string(mesh.domain_size());
}

// The serial reference of the dp tests: `steps` AdamW steps (lr 1e-2) of the serial
// FieldNet from kSeed, step s on the union of the dp ranks' batches ids_of(r, s) for
// r = 0 .. dp - 1 in rank order, the MSE loss normalised over that whole union.
struct SerialRun {
  std::vector<std::vector<Tensor>> values;  // [step][parameter]: after the step
  std::vector<Tensor> outputs;              // [step]: the forward on the step's union
};
template <class BatchIds>
SerialRun train_serial(int dp, int steps, BatchIds&& ids_of) {
  FieldNet serial(nullptr);
  nn::initialize_parameters(serial, kSeed);
  AdamW optimizer(serial.named_parameters(), {.lr = 1e-2});
  SerialRun run{std::vector<std::vector<Tensor>>(static_cast<std::size_t>(steps)),
                std::vector<Tensor>(static_cast<std::size_t>(steps))};
  for (int step = 0; step < steps; ++step) {
    std::vector<std::int64_t> ids;
    for (int r = 0; r < dp; ++r) {
      for (std::int64_t id : ids_of(r, step)) ids.push_back(id);
    }
    optimizer.zero_grad();
    const Tensor y = serial.forward(stack(ids, false));
    run.outputs[static_cast<std::size_t>(step)] = y;
    serial.backward(mse_grad(y, stack(ids, true), static_cast<double>(ids.size() * kOutC * kLat * kLon)));
    optimizer.step();
    for (Parameter* p : serial.parameters()) run.values[static_cast<std::size_t>(step)].push_back(p->value.clone());
  }
  return run;
}

// The fsdp2 units of `data_parallel` that hold a sharded parameter: each all-gathers in
// every forward and every backward and reduce-scatters once per step.
inline std::int64_t sharded_units(const dp::DataParallel& data_parallel) {
  const std::vector<std::string> sharded = data_parallel.sharded_parameters();
  std::int64_t units = 0;
  for (const std::string& unit : data_parallel.unit_paths()) {
    if (std::any_of(sharded.begin(), sharded.end(), [&](const std::string& n) { return n.rfind(unit + ".", 0) == 0; })) {
      ++units;
    }
  }
  return units;
}

// The block of `master` at `offset` with `shape`.
inline Tensor block_of(const Tensor& master, const Shape& offset, const Shape& shape) {
  Tensor t = master;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) t = t.narrow(d, offset.empty() ? 0 : offset[d], shape[d]);
  return t.contiguous();
}

inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : as_doubles(t)) m = std::max(m, std::abs(x));
  return m;
}

// Every local parameter block against the serial master (relative to the master's scale).
inline void expect_tracks_serial(nn::Module& serial, nn::Module& parallel, const std::string& what, double rel = 1e-5) {
  const auto want = serial.named_parameters();
  const auto got = parallel.named_parameters();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first) << what;
    const Parameter& p = *got[i].second;
    const Tensor& master = want[i].second->value;
    ASSERT_EQ(p.global_shape, master.shape()) << what << ": " << got[i].first;
    const Tensor expected = block_of(master, p.local_offset, p.value.shape());
    EXPECT_TRUE(tensors_close(p.value, expected, rel * std::max(max_abs(master), 1e-30) / std::max(max_abs(expected), 1e-30)))
        << what << ": " << got[i].first << " (" << p.placement.str() << ")";
  }
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data(), cb.data(), ca.nbytes()) == 0;
}

}  // namespace tessera::testing
