// Mesh: coordinates against the CREDIT layout formula and group membership for every
// valid (tensor, domain) at this world size; sub-communicators; errors agreed on every
// rank; size-1 dimensions cost no communication; device choice.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <set>

#include "mpi_test.hpp"
#include "tessera/backend.hpp"
#include "tessera/mesh.hpp"
#include "tessera/node.hpp"

using namespace tessera;
using tessera::testing::all_gather_strings;
using tessera::testing::world_rank;
using tessera::testing::world_size;

namespace {

ParallelismConfig config_for(int world, int tensor, int domain) {
  const int dp = world / (tensor * domain);
  return {dp > 1 ? DataParallelMode::fsdp2 : DataParallelMode::none, tensor, domain};
}

// Ranks of `parent` that share every coordinate with `me` except `dim`, ordered by
// their coordinate in `dim`: exactly what the `dim` communicator must hold.
std::vector<int> expected_members(int parent_size, int tensor, int domain, const MeshCoords& me,
                                  MeshDim dim) {
  std::vector<std::pair<int, int>> members;  // (coordinate in dim, rank)
  for (int g = 0; g < parent_size; ++g) {
    const MeshCoords c = mesh_coords_of(g, tensor, domain);
    const bool same_dp = c.dp == me.dp, same_tp = c.tp == me.tp, same_dom = c.domain == me.domain;
    if (dim == MeshDim::dp && same_tp && same_dom) members.push_back({c.dp, g});
    if (dim == MeshDim::tp && same_dp && same_dom) members.push_back({c.tp, g});
    if (dim == MeshDim::domain && same_dp && same_tp) members.push_back({c.domain, g});
  }
  std::sort(members.begin(), members.end());
  std::vector<int> ranks;
  for (auto& m : members) ranks.push_back(m.second);
  return ranks;
}

// Parent ranks of the members of `comm`, in comm rank order.
std::vector<int> actual_members(const Communicator& comm, int parent_rank) {
  std::vector<int> ranks(comm.size());
  MPI_Allgather(&parent_rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, comm.mpi_comm());
  return ranks;
}

// Checks one mesh built on `parent` against the formula.
void check_mesh(const Mesh& mesh, MPI_Comm parent, int tensor, int domain) {
  int g = 0, n = 1;
  MPI_Comm_rank(parent, &g);
  MPI_Comm_size(parent, &n);
  const MeshCoords c = mesh.coords();
  EXPECT_EQ(c.domain, g % domain);
  EXPECT_EQ(c.tp, (g / domain) % tensor);
  EXPECT_EQ(c.dp, g / (tensor * domain));
  EXPECT_EQ(mesh_global_rank_of(c, tensor, domain), g);
  EXPECT_EQ(mesh.global_rank(), g);
  EXPECT_EQ(mesh.world_size(), n);
  EXPECT_EQ(mesh.tp_size(), tensor);
  EXPECT_EQ(mesh.domain_size(), domain);
  EXPECT_EQ(mesh.dp_size(), n / (tensor * domain));
  EXPECT_EQ(mesh.rank(MeshDim::dp), c.dp);
  EXPECT_EQ(mesh.rank(MeshDim::tp), c.tp);
  EXPECT_EQ(mesh.rank(MeshDim::domain), c.domain);
  EXPECT_EQ(mesh.data_parallel_coords().rank, c.dp);
  EXPECT_EQ(mesh.data_parallel_coords().size, mesh.dp_size());
  for (MeshDim dim : {MeshDim::dp, MeshDim::tp, MeshDim::domain}) {
    const Communicator& comm = mesh.comm(dim);
    EXPECT_EQ(comm.rank(), mesh.rank(dim)) << mesh_dim_name(dim);
    EXPECT_EQ(comm.size(), mesh.size(dim)) << mesh_dim_name(dim);
    EXPECT_EQ(actual_members(comm, g), expected_members(n, tensor, domain, c, dim))
        << "dim " << mesh_dim_name(dim) << " tensor " << tensor << " domain " << domain << " rank " << g;
  }
}

// Runs `build`, expecting the same ConfigError message on every rank.
template <class Build>
void expect_same_error_everywhere(Build build, const std::string& fragment) {
  std::string message;
  try {
    build();
    ADD_FAILURE() << "no error on rank " << world_rank();
  } catch (const ConfigError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(fragment), std::string::npos) << message;
  const auto all = all_gather_strings(message);
  for (const auto& m : all) EXPECT_EQ(m, all[0]);
}

}  // namespace

TEST(Mesh, EveryValidTensorDomainCombination) {
  const int n = world_size();
  int combinations = 0;
  for (int tensor = 1; tensor <= n; ++tensor) {
    for (int domain = 1; tensor * domain <= n; ++domain) {
      if (n % (tensor * domain) != 0) continue;
      Mesh mesh(MPI_COMM_WORLD, config_for(n, tensor, domain));
      check_mesh(mesh, MPI_COMM_WORLD, tensor, domain);
      ++combinations;
    }
  }
  // 1 rank: 1; 2: 3; 4: 6; 8: 10 combinations.
  const int expected = n == 1 ? 1 : n == 2 ? 3 : n == 4 ? 6 : n == 8 ? 10 : combinations;
  EXPECT_EQ(combinations, expected);
}

TEST(Mesh, CreditExampleEightRanks) {
  if (world_size() != 8) GTEST_SKIP() << "needs 8 ranks";
  Mesh mesh(MPI_COMM_WORLD, ParallelismConfig::from_yaml_string(
                                "trainer: {parallelism: {data: fsdp2, tensor: 2, domain: 2}}"));
  const int g = world_rank();
  const MeshCoords expected[8] = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1},
                                  {1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {1, 1, 1}};
  EXPECT_EQ(mesh.coords(), expected[g]);
  EXPECT_EQ(mesh.config().data, DataParallelMode::fsdp2);
}

TEST(Mesh, WorksOnASubCommunicator) {
  const int n = world_size();
  if (n < 2) GTEST_SKIP() << "needs 2 or more ranks";
  // Two halves, as a coupled climate code might give tessera only its ML ranks.
  const int half = world_rank() < n / 2 ? 0 : 1;
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, half, world_rank(), &sub);
  int sub_size = 0;
  MPI_Comm_size(sub, &sub_size);
  {
    Mesh mesh(sub, config_for(sub_size, sub_size, 1));
    check_mesh(mesh, sub, sub_size, 1);
    // The tp group is the whole half and never crosses into the other one.
    for (int member : actual_members(mesh.tp(), world_rank())) {
      EXPECT_EQ(member < n / 2 ? 0 : 1, half) << "rank " << member << " leaked across halves";
    }
    Tensor t = Tensor::from_vector<double>({1.0}, {1});
    mesh.tp().all_reduce(t);
    EXPECT_EQ(t.to_vector<double>()[0], sub_size);
  }
  MPI_Comm_free(&sub);
}

TEST(Mesh, IndivisibleWorldFailsOnEveryRankWithTheSameMessage) {
  const int n = world_size();
  expect_same_error_everywhere(
      [&] { Mesh mesh(MPI_COMM_WORLD, {DataParallelMode::ddp, 3, 1}); },
      "world size " + std::to_string(n) + " is not divisible by tensor (3) * domain (1) = 3");
}

TEST(Mesh, DataNoneWithSeveralReplicasFailsEverywhere) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  expect_same_error_everywhere([&] { Mesh mesh(MPI_COMM_WORLD, {DataParallelMode::none, 1, 1}); },
                               "parallelism.data is none");
}

TEST(Mesh, RanksWithDifferentConfigsFailEverywhere) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  const int n = world_size();
  // Both configs are valid on their own; they disagree with each other.
  const ParallelismConfig mine = world_rank() == 0 ? ParallelismConfig{DataParallelMode::ddp, 1, 1}
                                                   : ParallelismConfig{DataParallelMode::ddp, 1, n};
  expect_same_error_everywhere([&] { Mesh mesh(MPI_COMM_WORLD, mine); },
                               "ranks were given different parallelism configs (domain differs");
}

TEST(Mesh, SizeOneDimensionsCostNoCommunication) {
  const int n = world_size();
  Mesh mesh(MPI_COMM_WORLD, config_for(n, 1, 1));
  for (MeshDim dim : {MeshDim::tp, MeshDim::domain}) {
    Communicator& comm = mesh.comm(dim);
    ASSERT_EQ(comm.size(), 1);
    Tensor t = Tensor::from_vector<float>({3.0f, -1.0f}, {2});
    Tensor gathered = Tensor::empty({2}, DType::f32);
    Tensor scattered = Tensor::empty({2}, DType::f32);
    comm.all_reduce(t, ReduceOp::avg);
    comm.all_gather(t, gathered);
    comm.reduce_scatter(t, scattered);
    comm.broadcast(t, 0);
    comm.barrier();
    comm.all_reduce_async(t).wait();
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{3.0f, -1.0f}));
    EXPECT_EQ(gathered.to_vector<float>(), t.to_vector<float>());
    EXPECT_EQ(scattered.to_vector<float>(), t.to_vector<float>());
    EXPECT_EQ(comm.stats().collectives, 6);
    EXPECT_EQ(comm.stats().mpi_calls, 0) << mesh_dim_name(dim);
    EXPECT_EQ(comm.stats().bytes, 0);
  }
}

TEST(Mesh, LocalRanksAndWaitPolicy) {
  Mesh mesh(MPI_COMM_WORLD, config_for(world_size(), 1, 1));
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(host, &length);
  const auto hosts = all_gather_strings(host);
  const auto locals = all_gather_strings(std::to_string(mesh.local_rank()));
  // Per host, the local ranks are 0..k-1 and local_size is k.
  std::set<std::string> mine_locals;
  int on_my_host = 0;
  for (int r = 0; r < world_size(); ++r) {
    if (hosts[r] == host) {
      ++on_my_host;
      mine_locals.insert(locals[r]);
    }
  }
  EXPECT_EQ(mesh.local_size(), on_my_host);
  EXPECT_EQ(static_cast<int>(mine_locals.size()), on_my_host);
  EXPECT_GE(mesh.usable_cores(), 1);
  EXPECT_NE(mesh.wait_policy(), WaitPolicy::automatic);
  if (std::getenv("TESSERA_WAIT_POLICY") == nullptr) {
    EXPECT_EQ(mesh.wait_policy(), auto_wait_policy(mesh.local_size(), mesh.usable_cores()));
  }
  Mesh spinning(MPI_COMM_WORLD, config_for(world_size(), 1, 1), Device::host(),
                MeshOptions{WaitOptions{WaitPolicy::spin}});
  EXPECT_EQ(spinning.wait_policy(), WaitPolicy::spin);
  EXPECT_EQ(spinning.tp().wait_policy(), WaitPolicy::spin);
}

TEST(Mesh, CudaDeviceChoiceFromLocalRank) {
  EXPECT_EQ(select_cuda_device(0, 4), 0);
  EXPECT_EQ(select_cuda_device(5, 4), 1);
  EXPECT_EQ(select_cuda_device(3, 1), 0);  // srun --gpus-per-task=1: every rank sees device 0
  EXPECT_THROW(select_cuda_device(0, 0), CudaError);
  EXPECT_THROW(select_cuda_device(-1, 2), InvalidArgument);

  const ParallelismConfig config = config_for(world_size(), 1, 1);
  if (cuda_device_count() == 0) {
    // No GPU: every rank gets the same CudaError instead of some ranks hanging.
    std::string message;
    try {
      Mesh mesh(MPI_COMM_WORLD, config, Device::cuda());
      ADD_FAILURE() << "a CUDA mesh was built without a GPU";
    } catch (const CudaError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("no CUDA device is visible"), std::string::npos) << message;
    const auto all = all_gather_strings(message);
    for (const auto& m : all) EXPECT_EQ(m, all[0]);
  } else {
    Mesh mesh(MPI_COMM_WORLD, config, Device::cuda());
    EXPECT_TRUE(mesh.device().is_cuda());
    EXPECT_EQ(mesh.device().index, mesh.local_rank() % cuda_device_count());
  }
}
