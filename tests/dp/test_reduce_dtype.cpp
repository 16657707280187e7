// Gradient reduce dtype (DataParallelOptions::reduce_dtype, the reduce_dtype parameter of
// tp::sync_replicated_gradients and domain::sync_domain_gradients) for ddp (overlap on and
// off), fsdp2 (overlap on and off), tp sync and domain sync, over all ranks of the world
// (2 or 4):
//
// (a) the default reduces in f32 exactly as before: bit for bit the communicator's own f32
//     all-reduce of the same buffers (ddp, tp, domain); fsdp2's reduce-scatter, whose
//     buffer layout is internal, bit for bit fl(x0 + x1) / 2 at 2 ranks (a sum of two is
//     the same in any order) and within the f32 bound at 4, and bit for bit the explicit
//     f32 option.
// (b) bf16 gives the bf16 reduction: each rank's gradient rounded to bf16 (nearest even),
//     summed by the bf16 op (a float sum of two bf16 values rounded to bf16), averaged in
//     f32. At 2 ranks that is exactly bf16(bf16(x0) + bf16(x1)) (/ 2). At 4 ranks the
//     summation tree is MPI's choice, so the test asserts what every tree satisfies: the
//     sum is a bf16 value, and |sum - sum_r x_r| <= ((1 + u)^n - 1) * sum_r |x_r| with
//     u = 2^-8 + 2^-23 (one bf16 rounding after a float addition: relative 2^-8 (1 + 2^-24)
//     at most) — every x_r passes through at most n roundings: its own cast and n - 1
//     additions. The result also differs from the f32 one, so a bf16 that is silently
//     ignored fails.
// (c) the communicator's byte counter shows exactly half the reduction bytes with bf16.
// (d) a reduce dtype other than f32/bf16 and an f64 gradient with bf16 are
//     InvalidArgument naming the option or the parameter, with the same message on every
//     rank, before anything is sent.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "dp_test_util.hpp"
#include "mpi_test.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/tp/parallelize.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

constexpr std::uint64_t kNetSeed = 77;
constexpr std::int64_t kRows = 5;

// 6 -> 8 -> 4 -> 3: at dp 4 the last layer's 3 rows stay dp-Replicate under fsdp2 (a bucket).
std::unique_ptr<nn::Sequential> make_net(DType dtype = DType::f32) {
  auto net = std::make_unique<nn::Sequential>();
  net->append(std::make_unique<nn::Linear>(6, 8, true, dtype));
  net->append(std::make_unique<nn::Linear>(8, 4, true, dtype));
  net->append(std::make_unique<nn::Linear>(4, 3, true, dtype));
  nn::initialize_parameters(*net, kNetSeed);
  return net;
}

// Rank r's batch and output gradient: its local gradients differ from every other rank's.
Tensor input_of(int r) { return random_tensor({kRows, 6}, 300 + static_cast<std::uint64_t>(r)); }
Tensor dy_of(int r) { return random_tensor({kRows, 3}, 400 + static_cast<std::uint64_t>(r)); }

using Grads = std::map<std::string, Tensor>;

// Every rank's local gradients (before any reduction), computed on a serial twin.
std::vector<Grads> local_gradients(int ranks) {
  std::vector<Grads> out(ranks);
  for (int r = 0; r < ranks; ++r) {
    auto net = make_net();
    (void)net->forward(input_of(r));
    net->backward(dy_of(r));
    for (auto& [name, p] : net->named_parameters()) out[r][name] = p->grad.clone();
  }
  return out;
}

// The gradients of `name` over all ranks, cut like `p` (its dp shard under fsdp2).
std::vector<Tensor> cut(const std::vector<Grads>& locals, const std::string& name, const Parameter& p) {
  std::vector<Tensor> out;
  for (const Grads& g : locals) out.push_back(block_of(g.at(name), p.local_offset, p.grad.shape()));
  return out;
}

float bf16_round(float x) { return static_cast<float>(bfloat16(x)); }

// Element i of every rank's gradient.
std::vector<float> column(const std::vector<std::vector<float>>& x, std::size_t i) {
  std::vector<float> out;
  for (const auto& v : x) out.push_back(v[i]);
  return out;
}

// |sum - sum_r x_r| <= bound * sum_r |x_r|.
::testing::AssertionResult within(double sum, const std::vector<float>& x, double bound) {
  double exact = 0, magnitude = 0;
  for (float v : x) {
    exact += v;
    magnitude += std::abs(v);
  }
  if (std::abs(sum - exact) <= bound * magnitude) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << sum << " vs exact " << exact << " (bound " << bound * magnitude << ")";
}

// The flat concatenation of `parts` (f32), as a bucket holds them.
Tensor concat(const std::vector<Tensor>& parts) {
  std::int64_t total = 0;
  for (const Tensor& t : parts) total += t.numel();
  Tensor flat = Tensor::empty({total}, DType::f32);
  std::int64_t offset = 0;
  for (const Tensor& t : parts) {
    flat.narrow(0, offset, t.numel()).copy_from(t.contiguous().reshape({t.numel()}));
    offset += t.numel();
  }
  return flat;
}

// Each of `got` bit for bit its consecutive piece of `flat`.
void expect_pieces(const Tensor& flat, const std::vector<std::pair<std::string, Tensor>>& got, const std::string& what) {
  std::int64_t offset = 0;
  for (const auto& [name, g] : got) {
    EXPECT_TRUE(bitwise_equal(g, flat.narrow(0, offset, g.numel()).reshape(g.shape()))) << what << " " << name;
    offset += g.numel();
  }
}

// (b) `got` against the bf16 reduction of `locals` (see the header); counts the elements
// that differ from `f32` (the f32 reduction) into `differs`.
void expect_bf16_reduction(const Tensor& got, const std::vector<Tensor>& locals, ReduceOp op, const Tensor& f32,
                           const std::string& what, std::int64_t& differs) {
  const int n = static_cast<int>(locals.size());
  const double u = std::ldexp(1.0, -8) + std::ldexp(1.0, -23);
  const double bound = std::pow(1.0 + u, n) - 1.0;
  const auto g = got.contiguous().to_vector<float>(), ref = f32.contiguous().to_vector<float>();
  std::vector<std::vector<float>> x;
  for (const Tensor& t : locals) x.push_back(t.contiguous().to_vector<float>());
  const float scale = op == ReduceOp::avg ? static_cast<float>(n) : 1.0f;  // exact: n is a power of 2
  for (std::size_t i = 0; i < g.size(); ++i) {
    const float sum = g[i] * scale;
    ASSERT_EQ(sum, bf16_round(sum)) << what << " element " << i << ": the sum " << sum << " is not a bf16 value";
    if (n == 2) {
      float want = bf16_round(bf16_round(x[0][i]) + bf16_round(x[1][i]));
      if (op == ReduceOp::avg) want *= 0.5f;
      ASSERT_EQ(g[i], want) << what << " element " << i;
    } else {
      ASSERT_TRUE(within(sum, column(x, i), bound)) << what << " element " << i;
    }
    if (g[i] != ref[i]) ++differs;
  }
}

// (a) for fsdp2: the f32 reduction of `locals`, bit for bit at 2 ranks, within the f32
// bound (n - 1 roundings of relative 2^-24) at 4.
void expect_f32_reduction(const Tensor& got, const std::vector<Tensor>& locals, ReduceOp op, const std::string& what) {
  const int n = static_cast<int>(locals.size());
  const double bound = std::pow(1.0 + std::ldexp(1.0, -24), n - 1) - 1.0;
  const auto g = got.contiguous().to_vector<float>();
  std::vector<std::vector<float>> x;
  for (const Tensor& t : locals) x.push_back(t.contiguous().to_vector<float>());
  const float scale = op == ReduceOp::avg ? static_cast<float>(n) : 1.0f;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (n == 2) {
      float want = x[0][i] + x[1][i];
      if (op == ReduceOp::avg) want *= 0.5f;
      ASSERT_EQ(g[i], want) << what << " element " << i;
    } else {
      ASSERT_TRUE(within(g[i] * scale, column(x, i), bound)) << what << " element " << i;
    }
  }
}

// (d) `action` throws InvalidArgument on every rank, with one message that contains every
// one of `needles`.
void expect_same_invalid_argument(const std::function<void()>& action, const std::vector<std::string>& needles,
                                  const std::string& what) {
  std::string message;
  bool thrown = false;
  try {
    action();
  } catch (const InvalidArgument& e) {
    thrown = true;
    message = e.what();
  }
  EXPECT_TRUE(all_ranks(thrown)) << what << ": no InvalidArgument on some rank";
  for (const std::string& needle : needles) {
    EXPECT_NE(message.find(needle), std::string::npos) << what << ": '" << needle << "' missing in: " << message;
  }
  for (const std::string& other : all_gather_strings(message)) EXPECT_EQ(other, message) << what;
}

// ---- ddp and fsdp2

struct DpRun {
  Grads grads;                    // every parameter's gradient after finish_gradient_sync()
  std::int64_t reduction_bytes = 0;  // dp bytes of the step, less the fsdp2 parameter gathers
  std::vector<std::vector<std::string>> buckets;
};

DpRun run_dp(const Mesh& mesh, DataParallelMode mode, bool overlap, dp::DataParallelOptions options) {
  options.overlap = overlap;
  options.bucket_bytes = 96;  // several ddp buckets
  auto net = make_net();
  dp::DataParallel data_parallel(*net, mesh, mode, options);
  const Communicator& dp_comm = mesh.dp();
  const int rank = mesh.dp().rank();
  const std::int64_t b0 = dp_comm.stats().bytes;
  (void)net->forward(input_of(rank));
  const std::int64_t forward_bytes = dp_comm.stats().bytes - b0;  // fsdp2: one gather of each unit
  net->backward(dy_of(rank));
  data_parallel.finish_gradient_sync();
  DpRun run;
  // The backward gathers every unit once more, as its forward did.
  run.reduction_bytes = dp_comm.stats().bytes - b0 - 2 * forward_bytes;
  for (auto& [name, p] : net->named_parameters()) run.grads[name] = p->grad.clone();
  run.buckets = data_parallel.buckets();
  return run;
}

// The parameters of a fresh net placed as `mode` places them (fsdp2: dp shards).
std::map<std::string, Parameter> placed_parameters(const Mesh& mesh, DataParallelMode mode) {
  auto net = make_net();
  dp::DataParallel data_parallel(*net, mesh, mode, {.bucket_bytes = 96, .overlap = false});
  std::map<std::string, Parameter> out;
  for (auto& [name, p] : net->named_parameters()) out.emplace(name, *p);
  return out;
}

TEST(ReduceDtype, DataParallelBf16AgainstItsDefinitionAndHalfTheBytes) {
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::ddp, 1, 1});
  const int n = mesh.dp_size();
  ASSERT_GE(n, 2);
  const std::vector<Grads> locals = local_gradients(n);
  for (DataParallelMode mode : {DataParallelMode::ddp, DataParallelMode::fsdp2}) {
    const auto placed = placed_parameters(mesh, mode);
    for (bool overlap : {true, false}) {
      const std::string what = std::string(data_parallel_mode_name(mode)) + (overlap ? " overlap" : " no overlap") +
                               " dp " + std::to_string(n);
      const DpRun def = run_dp(mesh, mode, overlap, {});
      const DpRun f32 = run_dp(mesh, mode, overlap, {.reduce_dtype = DType::f32});
      const DpRun bf16 = run_dp(mesh, mode, overlap, {.reduce_dtype = DType::bf16});

      // (a) The default is the explicit f32 option, and that is the f32 reduction.
      for (const auto& [name, g] : def.grads) EXPECT_TRUE(bitwise_equal(g, f32.grads.at(name))) << what << " " << name;
      if (mode == DataParallelMode::ddp) {
        // The communicator's own f32 average of each bucket's gradients, in bucket order.
        Communicator& dp_comm = mesh.dp();
        for (const auto& bucket : def.buckets) {
          std::vector<Tensor> mine;
          std::vector<std::pair<std::string, Tensor>> got;
          for (const std::string& name : bucket) {
            mine.push_back(locals[dp_comm.rank()].at(name));
            got.emplace_back(name, def.grads.at(name));
          }
          Tensor flat = concat(mine);
          dp_comm.all_reduce(flat, ReduceOp::avg);
          expect_pieces(flat, got, what + " explicit f32");
        }
      } else {
        for (const auto& [name, g] : def.grads) {
          expect_f32_reduction(g, cut(locals, name, placed.at(name)), ReduceOp::avg, what + " f32 " + name);
        }
      }

      // (b) bf16: the bf16 reduction, and not the f32 one.
      std::int64_t differs = 0;
      for (const auto& [name, g] : bf16.grads) {
        expect_bf16_reduction(g, cut(locals, name, placed.at(name)), ReduceOp::avg, f32.grads.at(name),
                              what + " bf16 " + name, differs);
      }
      EXPECT_GT(differs, 0) << what << ": bf16 gave the f32 result everywhere";

      // (c) Half the bytes.
      EXPECT_GT(f32.reduction_bytes, 0) << what;
      EXPECT_EQ(2 * bf16.reduction_bytes, f32.reduction_bytes) << what;
    }
  }
}

TEST(ReduceDtype, DataParallelRejectsBadReduceDtypesOnEveryRank) {
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::ddp, 1, 1});
  for (DataParallelMode mode : {DataParallelMode::ddp, DataParallelMode::fsdp2}) {
    const std::string what = std::string(data_parallel_mode_name(mode));
    for (DType bad : {DType::f64, DType::i64}) {
      auto net = make_net();
      const std::int64_t sent = mesh.dp().stats().bytes;
      expect_same_invalid_argument([&] { dp::DataParallel d(*net, mesh, mode, {.reduce_dtype = bad}); },
                                   {"reduce_dtype", std::string(dtype_name(bad))}, what + " reduce dtype");
      EXPECT_EQ(mesh.dp().stats().bytes, sent) << what << ": sent before the check";
    }
    auto net = make_net(DType::f64);
    expect_same_invalid_argument([&] { dp::DataParallel d(*net, mesh, mode, {.reduce_dtype = DType::bf16}); },
                                 {"0.weight", "f64", "bf16"}, what + " f64 gradient");
    // f64 gradients in the default reduce dtype are reduced in f64, as before.
    EXPECT_NO_THROW((void)dp::DataParallel(*net, mesh, mode, {}));
  }
}

// ---- tp and domain sync

// A net whose gradients are rank r's random numbers (`salt` apart per parameter); the
// first layer's bias carries a partial gradient (summed over tp, not averaged).
std::unique_ptr<nn::Sequential> net_with_gradients(int rank) {
  auto net = make_net();
  std::uint64_t salt = 0;
  for (auto& [name, p] : net->named_parameters()) {
    p->grad.copy_from(random_tensor(p->grad.shape(), 1000 * ++salt + static_cast<std::uint64_t>(rank)));
  }
  net->at("0").named_parameters().back().second->partial_grad_over_tp = true;  // 0.bias
  return net;
}

std::vector<Grads> all_set_gradients(int ranks) {
  std::vector<Grads> out(ranks);
  for (int r = 0; r < ranks; ++r) {
    auto net = net_with_gradients(r);
    for (auto& [name, p] : net->named_parameters()) out[r][name] = p->grad.clone();
  }
  return out;
}

// One sync of the set gradients in `reduce`: the results and the bytes sent.
struct SyncRun {
  Grads grads;
  std::int64_t bytes = 0;
};
SyncRun run_sync(Communicator& comm, const std::function<void(nn::Module&, DType)>& sync, DType reduce) {
  auto net = net_with_gradients(comm.rank());
  const std::int64_t b0 = comm.stats().bytes;
  sync(*net, reduce);
  SyncRun run;
  run.bytes = comm.stats().bytes - b0;
  for (auto& [name, p] : net->named_parameters()) run.grads[name] = p->grad.clone();
  return run;
}

struct SyncCase {
  std::string what;
  Communicator* comm;
  std::function<void(nn::Module&)> sync_default;
  std::function<void(nn::Module&, DType)> sync;
  std::function<ReduceOp(const Parameter&)> op;
};

void check_sync(const SyncCase& c) {
  Communicator& comm = *c.comm;
  const int n = comm.size();
  ASSERT_GE(n, 2) << c.what;
  const std::vector<Grads> locals = all_set_gradients(n);

  // (a) Default: the communicator's own f32 all-reduce of the same buffer (per op, in
  // FQN order: one bucket each).
  auto def_net = net_with_gradients(comm.rank());
  c.sync_default(*def_net);
  const SyncRun f32 = run_sync(comm, c.sync, DType::f32);
  const SyncRun bf16 = run_sync(comm, c.sync, DType::bf16);
  auto ref_net = net_with_gradients(comm.rank());
  for (ReduceOp op : {ReduceOp::avg, ReduceOp::sum}) {
    std::vector<Tensor> mine;
    std::vector<std::pair<std::string, Tensor>> got;
    for (auto& [name, p] : ref_net->named_parameters()) {
      if (c.op(*p) != op) continue;
      mine.push_back(p->grad);
      got.emplace_back(name, f32.grads.at(name));
    }
    if (mine.empty()) continue;
    Tensor flat = concat(mine);
    comm.all_reduce(flat, op);
    expect_pieces(flat, got, c.what + " explicit f32");
  }
  for (auto& [name, p] : def_net->named_parameters()) {
    EXPECT_TRUE(bitwise_equal(p->grad, f32.grads.at(name))) << c.what << " default " << name;
  }

  // (b) bf16.
  std::int64_t differs = 0;
  for (auto& [name, p] : net_with_gradients(comm.rank())->named_parameters()) {
    std::vector<Tensor> xs;
    for (const Grads& g : locals) xs.push_back(g.at(name));
    expect_bf16_reduction(bf16.grads.at(name), xs, c.op(*p), f32.grads.at(name), c.what + " bf16 " + name, differs);
  }
  EXPECT_GT(differs, 0) << c.what << ": bf16 gave the f32 result everywhere";

  // (c) Half the bytes.
  EXPECT_GT(f32.bytes, 0) << c.what;
  EXPECT_EQ(2 * bf16.bytes, f32.bytes) << c.what;

  // (d) Errors, before anything is sent.
  const std::int64_t sent = comm.stats().bytes;
  for (DType bad : {DType::f64, DType::i64}) {
    auto net = net_with_gradients(comm.rank());
    expect_same_invalid_argument([&] { c.sync(*net, bad); }, {"reduce dtype", std::string(dtype_name(bad))},
                                 c.what + " reduce dtype");
  }
  auto f64_net = make_net(DType::f64);
  expect_same_invalid_argument([&] { c.sync(*f64_net, DType::bf16); }, {"0.weight", "f64", "bf16"},
                               c.what + " f64 gradient");
  EXPECT_EQ(comm.stats().bytes, sent) << c.what << ": sent before the check";
  EXPECT_NO_THROW(c.sync(*f64_net, DType::f32)) << c.what;  // f64 gradients reduce in f64, as before
}

TEST(ReduceDtype, TensorParallelSync) {
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, world_size(), 1});
  Communicator& tp = mesh.tp();
  check_sync({"tp::sync_replicated_gradients tp " + std::to_string(tp.size()), &tp,
              [&](nn::Module& m) { tp::sync_replicated_gradients(m, tp); },
              [&](nn::Module& m, DType d) { tp::sync_replicated_gradients(m, tp, d); },
              [](const Parameter& p) { return p.partial_grad_over_tp ? ReduceOp::sum : ReduceOp::avg; }});
}

TEST(ReduceDtype, DomainSync) {
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, 1, world_size()});
  check_sync({"domain::sync_domain_gradients domain " + std::to_string(mesh.domain_size()), &mesh.domain(),
              [&](nn::Module& m) { domain::sync_domain_gradients(m, mesh); },
              [&](nn::Module& m, DType d) { domain::sync_domain_gradients(m, mesh, d); },
              [](const Parameter&) { return ReduceOp::sum; }});
}

}  // namespace

// Mixed precision under data parallelism: DataParallel replaces each unit by its hook
// wrapper (whose inner layer is not a child), so set_compute_precision must reach the
// inner layers through the wrapper when set after wrapping, and through Module::replace
// when set before. Either way every rank's forward is bit for bit a plain net's in
// bf16-mixed (ddp keeps the weights; fsdp2 gathers them whole before the forward) and
// differs from the fp32 forward.
TEST(ReduceDtype, ComputePrecisionReachesLayersInsideDataParallelUnits) {
  for (DataParallelMode mode : {DataParallelMode::ddp, DataParallelMode::fsdp2}) {
    ParallelismConfig config;
    config.data = mode;
    Mesh mesh(MPI_COMM_WORLD, config);
    const Tensor x = input_of(mesh.dp().rank());
    auto plain = make_net();
    const Tensor fp32 = plain->forward(x).clone();
    plain->set_compute_precision(Precision::bf16_mixed);
    const Tensor bf16 = plain->forward(x).clone();
    ASSERT_NE(fp32.to_vector<float>(), bf16.to_vector<float>()) << "the bf16 forward must differ from fp32";
    for (const bool before : {true, false}) {
      auto net = make_net();
      if (before) net->set_compute_precision(Precision::bf16_mixed);
      dp::DataParallel data_parallel(*net, mesh, mode, {.overlap = true});
      if (!before) net->set_compute_precision(Precision::bf16_mixed);
      ASSERT_FALSE(data_parallel.unit_paths().empty()) << "overlap wraps the units";
      const Tensor y = net->forward(x);
      EXPECT_EQ(y.to_vector<float>(), bf16.to_vector<float>())
          << data_parallel_mode_name(mode) << ", precision set " << (before ? "before" : "after") << " wrapping";
      net->backward(dy_of(mesh.dp().rank()));
      data_parallel.finish_gradient_sync();
    }
  }
}
