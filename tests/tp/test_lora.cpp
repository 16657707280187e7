// LoRA on serial, column- and row-parallel linears (tp/lora.hpp) at tp = world size
// (1, 2, 4): the serial LoraLinear against the formula written out with matmuls, every
// parallel layout against the serial LoraLinear (forward, input gradient, reassembled A
// and B gradients, frozen base without gradient), optimizer steps that move only the
// adapters, merged weights, parallelize_with_lora, and checkpoints saved at tp 2 and
// loaded at tp 1 and 4 (adapters as their own datasets).

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "mpi_test.hpp"
#include "tessera/clip.hpp"
#include "tessera/init.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/ops.hpp"
#include "tessera/optim.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/lora.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/sharding.hpp"
#include "tp_test_util.hpp"

using namespace tessera;
using tessera::testing::fill_random;
using tessera::testing::random_tensor;
using tessera::testing::tensors_close;
using tessera::testing::scratch_dir;
using tessera::testing::world_rank;
using tessera::testing::world_size;

namespace {

constexpr std::int64_t kRank = 3;
constexpr double kAlpha = 6.0;  // scale alpha / rank = 2

tp::LoraOptions lora_options() {
  tp::LoraOptions o;
  o.rank = kRank;
  o.alpha = kAlpha;
  return o;
}

std::unique_ptr<nn::Linear> random_linear(std::int64_t in, std::int64_t out, std::uint64_t salt) {
  auto l = std::make_unique<nn::Linear>(in, out);
  fill_random(l->weight, salt);
  fill_random(l->bias, salt + 1);
  return l;
}

// A serial LoRA layer with random A and B (B non-zero, so the adapter path shows).
std::unique_ptr<tp::LoraLinear> serial_lora(std::int64_t in, std::int64_t out, std::uint64_t salt) {
  auto l = std::make_unique<tp::LoraLinear>(random_linear(in, out, salt), nullptr, lora_options(), "ref");
  fill_random(l->lora_a, salt + 2);
  fill_random(l->lora_b, salt + 3);
  return l;
}

Tensor master_grad(const Parameter& p, Communicator& tp) { return tp::assemble_master(p, p.grad, tp); }

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.dtype() == cb.dtype() && ca.shape() == cb.shape() && std::memcmp(ca.data(), cb.data(), ca.nbytes()) == 0;
}

Tensor block_of(const Tensor& master, const Parameter& p) {
  Tensor block = master;
  for (int d = 0; d < master.dim(); ++d) block = block.narrow(d, p.local_offset[d], p.value.size(d));
  return block.contiguous();
}

// W + scale · B A on masters.
Tensor merged_master(const Tensor& w, const Tensor& a, const Tensor& b) {
  Tensor m = w.clone();
  ops::gemm(b, false, a, false, m, kAlpha / kRank, 1.0);
  return m;
}

class Lora : public ::testing::Test {
 protected:
  Communicator tp{MPI_COMM_WORLD};
};

}  // namespace

TEST_F(Lora, SerialMatchesFormulaAndFreezesTheBase) {
  auto lora = serial_lora(6, 5, 1);
  const Tensor w = lora->base_weight().value.clone();
  const Tensor b = dynamic_cast<nn::Linear&>(lora->base()).bias.value.clone();
  const Tensor a = lora->lora_a.value.clone(), bb = lora->lora_b.value.clone();
  const double s = kAlpha / kRank;

  const Tensor x = random_tensor({2, 3, 6}, 5), dy = random_tensor({2, 3, 5}, 6);
  const Tensor x2 = x.reshape({6, 6}), dy2 = dy.reshape({6, 5});
  // y = x Wᵀ + b + s (x Aᵀ) Bᵀ
  Tensor want_y = ops::matmul(x2, w, false, true);
  ops::add_bias(want_y, b);
  const Tensor xa = ops::matmul(x2, a, false, true);
  ops::gemm(xa, false, bb, true, want_y, s, 1.0);
  // dx = dy W + s (dy B) A;  dA = s (dy B)ᵀ x;  dB = s dyᵀ (x Aᵀ)
  const Tensor dyb = ops::matmul(dy2, bb);
  Tensor want_dx = ops::matmul(dy2, w);
  ops::gemm(dyb, false, a, false, want_dx, s, 1.0);
  Tensor want_da = Tensor::zeros({kRank, 6}, DType::f32), want_db = Tensor::zeros({5, kRank}, DType::f32);
  ops::gemm(dyb, true, x2, false, want_da, s, 0.0);
  ops::gemm(dy2, true, xa, false, want_db, s, 0.0);

  EXPECT_TRUE(tensors_close(lora->forward(x).reshape({6, 5}), want_y));
  EXPECT_TRUE(tensors_close(lora->backward(dy).reshape({6, 6}), want_dx));
  EXPECT_TRUE(tensors_close(lora->lora_a.grad, want_da));
  EXPECT_TRUE(tensors_close(lora->lora_b.grad, want_db));

  // FQNs: the base's unchanged, the adapters as peft names them.
  std::vector<std::string> names;
  for (auto& [name, p] : lora->named_parameters("q")) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"q.weight", "q.bias", "q.lora_A.weight", "q.lora_B.weight"}));
  // The base is frozen and computes no gradient.
  for (auto& [name, p] : lora->named_parameters()) {
    const bool adapter = name.rfind("lora_", 0) == 0;
    EXPECT_EQ(p->trainable, adapter) << name;
    EXPECT_EQ(p->grad.defined(), adapter) << name;
  }
  // Clipping and optimizers skip the frozen parameters (whose gradients are undefined).
  const double norm = global_grad_norm(lora->named_parameters());
  EXPECT_NEAR(norm, std::sqrt(ops::dot(want_da, want_da) + ops::dot(want_db, want_db)), 1e-5 * norm);
  Sgd sgd(lora->named_parameters(), {.lr = 0.1});
  EXPECT_EQ(sgd.parameters().size(), 2u);
  sgd.step();
  EXPECT_TRUE(same_bytes(lora->base_weight().value, w));
  EXPECT_FALSE(same_bytes(lora->lora_a.value, a));

  // Nothing to optimize, and the options that are not supported.
  std::vector<std::pair<std::string, Parameter*>> frozen{{"weight", &lora->base_weight()}};
  EXPECT_THROW({ Sgd sgd_frozen(frozen, SgdOptions{}); }, InvalidArgument);
  tp::LoraOptions bad = lora_options();
  bad.dropout = 0.1;
  EXPECT_THROW({ tp::LoraLinear l(random_linear(4, 4, 9), nullptr, bad); }, UnsupportedError);
  bad = lora_options();
  bad.rank = 0;
  EXPECT_THROW({ tp::LoraLinear l(random_linear(4, 4, 9), nullptr, bad); }, InvalidArgument);
}

// Output features 8, and 7: uneven blocks at tp 2 and 4 (the partition rule, shard_range).
TEST_F(Lora, ColumnParallelMatchesSerial) {
  for (const std::int64_t out : {8, 7})
  for (bool gather_output : {true, false}) {
    auto ref = serial_lora(6, out, 11);
    tp::LoraLinear par(tp::ColumnParallelLinear::from_serial(*random_linear(6, out, 11), tp, gather_output, "up"), &tp,
                       lora_options(), "up");
    tp::load_shard_from_master(par.lora_a, ref->lora_a.value, "A");
    tp::load_shard_from_master(par.lora_b, ref->lora_b.value, "B");
    EXPECT_TRUE(par.lora_a.placement.tp.is_replicate());
    EXPECT_EQ(par.lora_b.placement.tp, Placement::shard(0));
    EXPECT_EQ(par.lora_b.value.size(0), shard_range(out, tp.size(), tp.rank()).length);

    const Tensor x = random_tensor({2, 3, 6}, 13), dy = random_tensor({2, 3, out}, 14);
    const Tensor y_ref = ref->forward(x), dx_ref = ref->backward(dy);
    const Tensor y = par.forward(x);
    const Tensor dx = par.backward(gather_output ? dy : tp::split_along(dy, -1, tp));
    EXPECT_TRUE(tensors_close(y, gather_output ? y_ref : tp::split_along(y_ref, -1, tp))) << gather_output;
    EXPECT_TRUE(tensors_close(dx, dx_ref)) << gather_output;
    EXPECT_TRUE(tensors_close(master_grad(par.lora_a, tp), ref->lora_a.grad)) << gather_output;
    EXPECT_TRUE(tensors_close(master_grad(par.lora_b, tp), ref->lora_b.grad)) << gather_output;
    EXPECT_TRUE(same_bytes(par.master_a(), ref->lora_a.value));
    EXPECT_TRUE(same_bytes(par.master_b(), ref->lora_b.value));
    EXPECT_FALSE(par.base_weight().grad.defined());
    EXPECT_FALSE(par.base_weight().trainable);
  }
}

// Input features 8, and 7 (uneven at tp 2 and 4).
TEST_F(Lora, RowParallelMatchesSerial) {
  for (const std::int64_t in : {8, 7})
  for (bool input_is_parallel : {false, true}) {
    auto ref = serial_lora(in, 5, 21);
    tp::LoraLinear par(tp::RowParallelLinear::from_serial(*random_linear(in, 5, 21), tp, input_is_parallel, "down"),
                       &tp, lora_options(), "down");
    tp::load_shard_from_master(par.lora_a, ref->lora_a.value, "A");
    tp::load_shard_from_master(par.lora_b, ref->lora_b.value, "B");
    EXPECT_EQ(par.lora_a.placement.tp, Placement::shard(1));
    EXPECT_EQ(par.lora_a.value.size(1), shard_range(in, tp.size(), tp.rank()).length);
    EXPECT_TRUE(par.lora_b.placement.tp.is_replicate());

    const Tensor x = random_tensor({4, in}, 23), dy = random_tensor({4, 5}, 24);
    const Tensor y_ref = ref->forward(x), dx_ref = ref->backward(dy);
    const Tensor y = par.forward(input_is_parallel ? tp::split_along(x, -1, tp) : x);
    const Tensor dx = par.backward(dy);
    EXPECT_TRUE(tensors_close(y, y_ref)) << input_is_parallel;
    EXPECT_TRUE(tensors_close(dx, input_is_parallel ? tp::split_along(dx_ref, -1, tp) : dx_ref)) << input_is_parallel;
    EXPECT_TRUE(tensors_close(master_grad(par.lora_a, tp), ref->lora_a.grad)) << input_is_parallel;
    EXPECT_TRUE(tensors_close(par.lora_b.grad, ref->lora_b.grad)) << input_is_parallel;  // replicated, whole
    EXPECT_FALSE(par.base_weight().grad.defined());
  }
}

namespace {

// Column (6 -> 8, local output) then row (8 -> 6, parallel input), or the serial twin;
// base masters from `seed`, LoRA added by pattern with `seed` (B = 0, as peft).
std::unique_ptr<nn::Sequential> lora_pair(Communicator* tp, std::uint64_t seed) {
  auto model = std::make_unique<nn::Sequential>();
  if (tp == nullptr) {
    model->append(std::make_unique<nn::Linear>(6, 8));
    model->append(std::make_unique<nn::Linear>(8, 6));
  } else {
    model->append(std::make_unique<tp::ColumnParallelLinear>(6, 8, *tp, false));
    model->append(std::make_unique<tp::RowParallelLinear>(8, 6, *tp, true));
  }
  nn::initialize_parameters(*model, seed);
  const auto wrapped = tp::add_lora(*model, {"*"}, lora_options(), tp, seed);
  EXPECT_EQ(wrapped, (std::vector<std::string>{"0", "1"}));
  return model;
}

// Every parameter's master (collective over tp).
std::vector<Tensor> masters(nn::Module& model, Communicator& tp) {
  std::vector<Tensor> out;
  for (auto& [name, p] : model.named_parameters()) out.push_back(tp::assemble_master(*p, p->value, tp));
  return out;
}

// Half the squared error against a fixed target: its gradient is y - target.
Tensor loss_grad(const Tensor& y, const Tensor& target) {
  Tensor g = y.contiguous().clone();
  ops::axpy(-1.0, target, g);
  return g;
}

}  // namespace

TEST_F(Lora, OptimizerStepsMoveOnlyTheAdaptersAsSerial) {
  ParallelismConfig cfg;
  cfg.data = DataParallelMode::none;
  cfg.tensor = world_size();
  Mesh mesh(MPI_COMM_WORLD, cfg);
  Communicator self(MPI_COMM_SELF);
  auto serial = lora_pair(nullptr, 5);
  auto par = lora_pair(&mesh.tp(), 5);
  // The adapters' masters do not depend on the layout.
  const auto serial_start = masters(*serial, self), par_start = masters(*par, mesh.tp());
  ASSERT_EQ(serial_start.size(), 8u);
  for (std::size_t i = 0; i < serial_start.size(); ++i) EXPECT_TRUE(same_bytes(par_start[i], serial_start[i])) << i;

  AdamW opt_serial(serial->named_parameters(), {.lr = 0.05});
  AdamW opt_par(par->named_parameters(), {.lr = 0.05});
  EXPECT_EQ(opt_par.parameters().size(), 4u);
  const Tensor x = random_tensor({4, 6}, 31), target = random_tensor({4, 6}, 32);
  for (int step = 0; step < 4; ++step) {
    opt_serial.zero_grad();
    opt_par.zero_grad();
    serial->backward(loss_grad(serial->forward(x), target));
    par->backward(loss_grad(par->forward(x), target));
    const double norm_serial = clip_grad_norm(serial->named_parameters(), 1e6);
    const double norm_par = clip_grad_norm(par->named_parameters(), 1e6, mesh);
    EXPECT_NEAR(norm_par, norm_serial, 1e-5 * norm_serial) << step;
    opt_serial.step();
    opt_par.step();
    const auto want = masters(*serial, self), got = masters(*par, mesh.tp());
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(tensors_close(got[i], want[i])) << step << " " << i;
  }
  // Bases unchanged to the bit, both adapters moved (B from zero, then A).
  const auto end = masters(*par, mesh.tp());
  auto names = par->named_parameters();
  for (std::size_t i = 0; i < end.size(); ++i) {
    const bool adapter = names[i].first.find("lora_") != std::string::npos;
    EXPECT_EQ(same_bytes(end[i], par_start[i]), !adapter) << names[i].first;
  }
}

TEST_F(Lora, MergeGivesPlainLayersWithBasePlusScaledBA) {
  auto serial = lora_pair(nullptr, 7);
  auto par = lora_pair(&tp, 7);
  // Non-zero B at every layout: layout-free values by name and global index.
  for (auto* model : {serial.get(), par.get()}) {
    for (auto& [name, p] : model->named_parameters()) {
      if (name.find("lora_B") != std::string::npos) {
        initialize(p->value, p->global_shape, p->local_offset, InitSpec::normal(0.0, 0.5), 8, name);
      }
    }
  }
  Communicator self(MPI_COMM_SELF);
  const auto m = masters(*serial, self);  // 0.weight 0.bias 0.A 0.B 1.weight 1.bias 1.A 1.B
  const Tensor x = random_tensor({3, 6}, 41);
  const Tensor y_lora = par->forward(x);

  EXPECT_EQ(tp::merge_lora(*par), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(par->at("0").type_name(), "ColumnParallelLinear");
  EXPECT_EQ(par->at("1").type_name(), "RowParallelLinear");
  auto& col = dynamic_cast<tp::ColumnParallelLinear&>(par->at("0"));
  auto& row = dynamic_cast<tp::RowParallelLinear&>(par->at("1"));
  EXPECT_TRUE(tensors_close(col.master_weight(), merged_master(m[0], m[2], m[3]), 1e-6));
  EXPECT_TRUE(tensors_close(row.master_weight(), merged_master(m[4], m[6], m[7]), 1e-6));
  EXPECT_TRUE(tensors_close(par->forward(x), y_lora));
  std::vector<std::string> names;
  for (auto& [name, p] : par->named_parameters()) {
    names.push_back(name);
    EXPECT_TRUE(p->trainable && p->grad.defined()) << name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
}

TEST_F(Lora, AddLoraChecksItsPatterns) {
  auto model = lora_pair(&tp, 3);
  EXPECT_THROW(tp::add_lora(*model, {"0"}, lora_options(), &tp, 3), InvalidArgument);  // already LoRA
  auto plain = std::make_unique<nn::Sequential>();
  plain->append(std::make_unique<nn::Linear>(4, 4));
  EXPECT_THROW(tp::add_lora(*plain, {"7"}, lora_options(), nullptr, 3), InvalidArgument);  // matches nothing
  auto nested = std::make_unique<nn::Sequential>();
  nested->append(std::make_unique<nn::Sequential>());
  EXPECT_THROW(tp::add_lora(*nested, {"0"}, lora_options(), nullptr, 3), InvalidArgument);  // not a linear
  // A parallel base needs its communicator; a strided base is not supported.
  auto col = std::make_unique<nn::Sequential>();
  col->append(std::make_unique<tp::ColumnParallelLinear>(4, 4 * tp.size(), tp));
  EXPECT_THROW(tp::add_lora(*col, {"0"}, lora_options(), nullptr, 3), InvalidArgument);
  tp::ParallelLinearOptions strided;
  strided.stride = 2;
  EXPECT_THROW(
      { tp::LoraLinear l(std::make_unique<tp::ColumnParallelLinear>(4, 4 * tp.size(), tp, true, strided), &tp, lora_options()); },
      UnsupportedError);
}

TEST_F(Lora, ParallelizeWithLoraConvertsSerialLoraLayers) {
  auto ref = lora_pair(nullptr, 9);
  auto model = lora_pair(nullptr, 9);
  for (auto* m : {ref.get(), model.get()}) {
    for (auto& [name, p] : m->named_parameters()) {
      if (name.find("lora_B") != std::string::npos) fill_random(*p, 50);
    }
  }
  tp::parallelize_with_lora(*model, tp, {{"0", tp::ParallelStyle::colwise()}, {"1", tp::ParallelStyle::rowwise()}});
  auto& l0 = dynamic_cast<tp::LoraLinear&>(model->at("0"));
  auto& l1 = dynamic_cast<tp::LoraLinear&>(model->at("1"));
  EXPECT_EQ(l0.kind(), tp::LoraLinear::Kind::column);
  EXPECT_EQ(l1.kind(), tp::LoraLinear::Kind::row);
  EXPECT_FALSE(l0.base_weight().trainable);
  EXPECT_FALSE(l1.base_weight().grad.defined());
  Communicator self(MPI_COMM_SELF);
  const auto want = masters(*ref, self), got = masters(*model, tp);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_bytes(got[i], want[i])) << i;

  const Tensor x = random_tensor({2, 6}, 61), dy = random_tensor({2, 6}, 62);
  EXPECT_TRUE(tensors_close(model->forward(x), ref->forward(x)));
  EXPECT_TRUE(tensors_close(model->backward(dy), ref->backward(dy)));
  auto gp = model->named_parameters(), gr = ref->named_parameters();
  for (std::size_t i = 0; i < gp.size(); ++i) {
    if (!gp[i].second->trainable) continue;
    EXPECT_TRUE(tensors_close(master_grad(*gp[i].second, tp), gr[i].second->grad)) << gp[i].first;
  }
}

namespace {

std::unique_ptr<Mesh> sub_mesh(int ranks) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &comm);
  if (comm == MPI_COMM_NULL) return nullptr;
  ParallelismConfig cfg;
  cfg.data = DataParallelMode::none;
  cfg.tensor = ranks;
  auto mesh = std::make_unique<Mesh>(comm, cfg);
  MPI_Comm_free(&comm);
  return mesh;
}

// The LoRA pair after two AdamW steps on gradients that depend only on (step, name,
// global index): the same masters at every layout.
struct Trained {
  std::unique_ptr<nn::Sequential> model;
  std::unique_ptr<AdamW> optimizer;
};
Trained trained_pair(Communicator* tp, std::uint64_t seed, int steps) {
  Trained t{lora_pair(tp, seed), nullptr};
  t.optimizer = std::make_unique<AdamW>(t.model->named_parameters(), AdamWOptions{.lr = 0.1});
  for (int s = 0; s < steps; ++s) {
    for (auto& [name, p] : t.model->named_parameters()) {
      if (p->trainable) initialize(p->grad, p->global_shape, p->local_offset, InitSpec::normal(0, 1), 100 + s, name);
    }
    t.optimizer->step();
  }
  return t;
}

}  // namespace

TEST_F(Lora, CheckpointSavedAtTp2LoadsAtTp1AndTp4) {
  const int saver = std::min(2, world_size());
  const std::string root = scratch_dir("model"), merged_root = scratch_dir("merged");
  const std::string adapter_root = scratch_dir("adapters");
  if (auto mesh = sub_mesh(saver)) {
    Trained t = trained_pair(&mesh->tp(), 13, 2);
    io::SaveOptions o;
    o.step = 2;
    io::save_checkpoint(root, *mesh, *t.model, t.optimizer.get(), o);
  }
  Communicator(MPI_COMM_WORLD).barrier();

  Communicator self(MPI_COMM_SELF);
  Trained twin = trained_pair(nullptr, 13, 2);  // the serial twin, on every rank
  const auto want = masters(*twin.model, self);
  const std::vector<int> layouts = world_size() == 1 ? std::vector<int>{1} : std::vector<int>{1, world_size()};
  for (int ranks : layouts) {
    if (auto mesh = sub_mesh(ranks)) {
      Trained t = trained_pair(&mesh->tp(), 99, 0);  // other values before the load
      const auto r = io::load_checkpoint(root, *mesh, *t.model, t.optimizer.get());
      for (const char* d : {"/model/0.lora_A.weight", "/model/0.lora_B.weight", "/model/1.lora_A.weight",
                            "/model/1.lora_B.weight", "/model/0.weight", "/model/1.weight"}) {
        EXPECT_NE(std::find(r.loaded.begin(), r.loaded.end(), d), r.loaded.end()) << d << " at tp " << ranks;
      }
      EXPECT_EQ(t.optimizer->step_count(), 2);
      auto params = t.model->named_parameters();
      for (std::size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(same_bytes(params[i].second->value, block_of(want[i], *params[i].second)))
            << params[i].first << " at tp " << ranks << " on rank " << world_rank();
      }
      // The adapters' optimizer state came back too: one more step matches the twin's.
      if (ranks == world_size()) {
        Trained twin3 = trained_pair(nullptr, 13, 3);
        for (auto& [name, p] : t.model->named_parameters()) {
          if (p->trainable) initialize(p->grad, p->global_shape, p->local_offset, InitSpec::normal(0, 1), 102, name);
        }
        t.optimizer->step();
        const auto want3 = masters(*twin3.model, self);
        for (std::size_t i = 0; i < params.size(); ++i) {
          EXPECT_TRUE(same_bytes(params[i].second->value, block_of(want3[i], *params[i].second)))
              << params[i].first << " step 3 at tp " << ranks;
        }
        // An adapter-only checkpoint: the trainable entries, loaded by name into a fresh model.
        NamedParameters adapters;
        for (auto& entry : t.model->named_parameters()) {
          if (entry.second->trainable) adapters.push_back(entry);
        }
        ASSERT_EQ(adapters.size(), 4u);
        io::save_checkpoint(adapter_root, *mesh, adapters, nullptr, io::SaveOptions{});
        Trained fresh = trained_pair(&mesh->tp(), 77, 0);
        NamedParameters fresh_adapters;
        for (auto& entry : fresh.model->named_parameters()) {
          if (entry.second->trainable) fresh_adapters.push_back(entry);
        }
        io::load_checkpoint(adapter_root, *mesh, fresh_adapters, nullptr, io::LoadOptions{});
        for (std::size_t i = 0; i < adapters.size(); ++i) {
          EXPECT_EQ(fresh_adapters[i].first, adapters[i].first);
          EXPECT_TRUE(same_bytes(fresh_adapters[i].second->value, adapters[i].second->value)) << adapters[i].first;
        }
        // Merged, it saves as a plain model...
        tp::merge_lora(*t.model);
        io::save_checkpoint(merged_root, *mesh, *t.model);
      }
    }
    Communicator(MPI_COMM_WORLD).barrier();
  }
  // ... that loads into plain serial Linears.
  if (auto mesh = sub_mesh(1)) {
    auto plain = std::make_unique<nn::Sequential>();
    plain->append(std::make_unique<nn::Linear>(6, 8));
    plain->append(std::make_unique<nn::Linear>(8, 6));
    io::load_checkpoint(merged_root, *mesh, *plain);
    Trained twin3 = trained_pair(nullptr, 13, 3);
    const auto m = masters(*twin3.model, self);
    EXPECT_TRUE(tensors_close(dynamic_cast<nn::Linear&>(plain->at("0")).weight.value, merged_master(m[0], m[2], m[3]),
                              1e-6));
    EXPECT_TRUE(tensors_close(dynamic_cast<nn::Linear&>(plain->at("1")).weight.value, merged_master(m[4], m[6], m[7]),
                              1e-6));
    EXPECT_TRUE(same_bytes(dynamic_cast<nn::Linear&>(plain->at("1")).bias.value, m[5]));
  }
  Communicator(MPI_COMM_WORLD).barrier();
}

// The decoder (the model tessera-run trains) with LoRA on q, v and mlp.down after its tp
// plan, against the serial decoder with the same LoRA: logits and the adapters' gradients.
TEST_F(Lora, DecoderWithLoraMatchesSerial) {
  models::DecoderConfig cfg;
  cfg.vocab = 16;
  cfg.d_model = 8;
  cfg.n_heads = 4;
  cfg.hidden = 16;
  cfg.n_layers = 2;
  const std::vector<std::string> targets{"layers.*.attn.q", "layers.*.attn.v", "layers.*.mlp.down"};
  auto build = [&](Communicator* group) {
    auto dec = std::make_unique<models::Decoder>(cfg);
    nn::initialize_parameters(*dec, 17);
    if (group != nullptr) (void)models::parallelize_decoder(*dec, *group, false);
    EXPECT_EQ(tp::add_lora(*dec, targets, lora_options(), group, 17).size(), 6u);
    for (auto& [name, p] : dec->named_parameters()) {
      if (name.find("lora_B") != std::string::npos) {
        initialize(p->value, p->global_shape, p->local_offset, InitSpec::normal(0.0, 0.5), 18, name);
      }
    }
    return dec;
  };
  auto serial = build(nullptr);
  auto par = build(&tp);
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{3, 0, 6, 2, 5, 1, 1, 4}, {2, 4});
  const Tensor dlogits = random_tensor({2, 4, 16}, 71);
  // The tp plan leaves the logits sharded over the vocabulary (for vocab-parallel
  // cross-entropy).
  EXPECT_TRUE(tensors_close(par->forward(ids), tp::split_along(serial->forward(ids), -1, tp)));
  par->backward(tp::split_along(dlogits, -1, tp));
  serial->backward(dlogits);
  auto gp = par->named_parameters(), gs = serial->named_parameters();
  ASSERT_EQ(gp.size(), gs.size());
  int adapters = 0;
  for (std::size_t i = 0; i < gp.size(); ++i) {
    ASSERT_EQ(gp[i].first, gs[i].first);
    if (gp[i].first.find("lora_") == std::string::npos) continue;
    ++adapters;
    EXPECT_TRUE(tensors_close(master_grad(*gp[i].second, tp), gs[i].second->grad)) << gp[i].first;
  }
  EXPECT_EQ(adapters, 12);
}
