#pragma once
// Shared pieces of the checkpoint tests: the test model (column → row → serial Linear,
// FQNs "0.*", "1.*", "2.*"), its serial twin, sub-meshes, scratch directories and
// byte-exact comparisons, of whole tensors and of a model's blocks with the serial masters.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <memory>
#include <string>

#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/init.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/linear.hpp"

namespace tessera::testing {

inline constexpr std::int64_t kIn = 8, kHidden = 16, kOut = 4;

// A module holding one replicated bf16 parameter "weight" [4, 4] (the layers have no bf16
// kernels; checkpoints store bf16 all the same).
class Bf16Table : public nn::Module {
 public:
  Bf16Table() : weight(Tensor::zeros({4, 4}, DType::bf16), InitSpec::normal(0.0, 1.0)) {
    register_parameter("weight", weight);
  }
  Tensor forward(const Tensor&) override { throw UnsupportedError("Bf16Table has no forward"); }
  Tensor backward(const Tensor&) override { throw UnsupportedError("Bf16Table has no backward"); }
  std::string type_name() const override { return "Bf16Table"; }
  Parameter weight;
};

// column(8 → 16, shards stay local) → row(16 → 8) → Linear(8 → 4), optionally a bf16
// table as "3". Master weights are a pure function of the seed.
inline std::unique_ptr<nn::Sequential> make_model(Communicator& tp, std::uint64_t seed, bool with_bf16 = false,
                                                  std::int64_t last_out = kOut, DType last_dtype = DType::f32) {
  auto model = std::make_unique<nn::Sequential>();
  model->append(std::make_unique<tp::ColumnParallelLinear>(kIn, kHidden, tp, false));
  model->append(std::make_unique<tp::RowParallelLinear>(kHidden, kIn, tp, true));
  model->append(std::make_unique<nn::Linear>(kIn, last_out, true, last_dtype));
  if (with_bf16) model->append(std::make_unique<Bf16Table>());
  nn::initialize_parameters(*model, seed);
  return model;
}

// The serial twin: same FQNs, same master values.
inline std::unique_ptr<nn::Sequential> make_serial_model(std::uint64_t seed, bool with_bf16 = false) {
  auto model = std::make_unique<nn::Sequential>();
  model->append(std::make_unique<nn::Linear>(kIn, kHidden));
  model->append(std::make_unique<nn::Linear>(kHidden, kIn));
  model->append(std::make_unique<nn::Linear>(kIn, kOut));
  if (with_bf16) model->append(std::make_unique<Bf16Table>());
  nn::initialize_parameters(*model, seed);
  return model;
}

// A mesh over the first `ranks` ranks of MPI_COMM_WORLD (nullptr on the others).
inline std::unique_ptr<Mesh> sub_mesh(int ranks, ParallelismConfig config) {
  MPI_Comm comm = MPI_COMM_NULL;
  const int rank = world_rank();
  MPI_Comm_split(MPI_COMM_WORLD, rank < ranks ? 0 : MPI_UNDEFINED, rank, &comm);
  if (comm == MPI_COMM_NULL) return nullptr;
  auto mesh = std::make_unique<Mesh>(comm, config);
  MPI_Comm_free(&comm);
  return mesh;
}

inline ParallelismConfig config(DataParallelMode data, int tensor, int domain = 1) {
  ParallelismConfig c;
  c.data = data;
  c.tensor = tensor;
  c.domain = domain;
  return c;
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::host()).contiguous(), hb = b.to(Device::host()).contiguous();
  return ha.dtype() == hb.dtype() && ha.shape() == hb.shape() && std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

// The block of `master` that `p` holds.
inline Tensor block_of(const Tensor& master, const Shape& offset, const Shape& shape) {
  Tensor block = master;
  for (int d = 0; d < master.dim(); ++d) block = block.narrow(d, offset[d], shape[d]);
  return block.contiguous();
}

// Every parameter of `model` holds, byte for byte, its block of the same-named master of
// `serial` (the FQNs in the same order).
inline void expect_blocks_of(nn::Module& model, nn::Module& serial, const std::string& where) {
  auto got = model.named_parameters(), want = serial.named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const Parameter& p = *got[i].second;
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_TRUE(same_bytes(p.value, block_of(want[i].second->value, p.local_offset, p.value.shape())))
        << where << ": " << got[i].first << " on rank " << world_rank();
  }
}

// Deterministic gradients that depend only on (step, FQN, global index), so training
// gives bit-identical masters at every layout.
inline void set_layout_free_grads(nn::Module& model, std::uint64_t step) {
  for (auto& [name, p] : model.named_parameters()) {
    initialize(p->grad, p->global_shape, p->local_offset, InitSpec::normal(0.0, 1.0), 1000 + step, name);
  }
}

inline void train(nn::Module& model, Optimizer& optimizer, int steps) {
  for (int s = 0; s < steps; ++s) {
    set_layout_free_grads(model, static_cast<std::uint64_t>(s));
    optimizer.step();
  }
}

}  // namespace tessera::testing
