// The pipeline dimension of the mesh and the point-to-point messages stage boundaries
// use. Every layout that fits the rank count: each rank's coordinates follow the
// four-dimensional formula (pipeline outermost), each group (pp, dp, tp, domain) holds
// exactly the ranks that differ only in its coordinate, in coordinate order; with
// pipeline 1 the groups are those of the three-dimensional mesh. send/recv and
// isend/irecv deliver their values along a ring.

#include <gtest/gtest.h>

#include <mpi.h>

#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/error.hpp"
#include "tessera/mesh.hpp"

using namespace tessera;
using namespace tessera::testing;

namespace {

std::vector<ParallelismConfig> layouts() {
  const int n = world_size();
  std::vector<ParallelismConfig> out{{DataParallelMode::ddp, 1, 1, 1}, {DataParallelMode::ddp, 1, 1, n}};
  if (n == 4) {
    out.push_back({DataParallelMode::none, 2, 1, 2});
    out.push_back({DataParallelMode::ddp, 1, 1, 2});
    out.push_back({DataParallelMode::none, 1, 2, 2});
    out.push_back({DataParallelMode::ddp, 2, 1, 1});
  }
  return out;
}

// The global ranks of `comm`'s members, in its rank order.
std::vector<std::string> members(Communicator& comm) {
  return all_gather_strings(std::to_string(world_rank()), comm.mpi_comm());
}

std::string comm_name(Communicator& comm) {
  char name[MPI_MAX_OBJECT_NAME] = {};
  int length = 0;
  MPI_Comm_get_name(comm.mpi_comm(), name, &length);
  return std::string(name, static_cast<std::size_t>(length));
}

TEST(PipelineMesh, GroupsFollowTheFormula) {
  for (const ParallelismConfig& config : layouts()) {
    SCOPED_TRACE(config.str());
    Mesh mesh(MPI_COMM_WORLD, config);
    const int S = config.pipeline, T = config.tensor, D = config.domain;
    const int P = world_size() / (S * T * D);
    const MeshShape shape{S, P, T, D};
    const MeshCoords me = mesh_coords_of(world_rank(), shape);
    EXPECT_EQ(mesh.coords(), me);
    EXPECT_EQ(mesh.pp_size(), S);
    EXPECT_EQ(mesh.pp().rank(), me.pp);
    EXPECT_EQ(comm_name(mesh.pp()), "tessera mesh pipeline");
    if (S == 1) {
      // Pipeline 1: every rank and group as in the three-dimensional mesh.
      EXPECT_EQ(mesh.coords(), mesh_coords_of(world_rank(), T, D));
    }
    // Walk each dimension from this rank's coordinates.
    auto group_of = [&](auto set, int extent) {
      std::vector<std::string> ranks;
      for (int i = 0; i < extent; ++i) {
        MeshCoords c = me;
        set(c, i);
        ranks.push_back(std::to_string(mesh_global_rank_of(c, shape)));
      }
      return ranks;
    };
    EXPECT_EQ(members(mesh.pp()), group_of([](MeshCoords& c, int i) { c.pp = i; }, S));
    EXPECT_EQ(members(mesh.dp()), group_of([](MeshCoords& c, int i) { c.dp = i; }, P));
    EXPECT_EQ(members(mesh.tp()), group_of([](MeshCoords& c, int i) { c.tp = i; }, T));
    EXPECT_EQ(members(mesh.domain()), group_of([](MeshCoords& c, int i) { c.domain = i; }, D));
  }
}

TEST(PointToPoint, RingDeliversValues) {
  Communicator comm(MPI_COMM_WORLD);
  const int n = comm.size(), r = comm.rank();
  const int to = (r + 1) % n, from = (r + n - 1) % n;
  auto values = [](int rank) {
    std::vector<float> v(5);
    for (int i = 0; i < 5; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(rank * 10 + i);
    return v;
  };
  // Non-blocking both ways (a blocking ring of sends could wait for ever).
  Tensor in = Tensor::empty({5}, DType::f32);
  CommRequest receive = comm.irecv(in, from, 7);
  CommRequest send = comm.isend(Tensor::from_vector(values(r), {5}), to, 7);
  receive.wait();
  send.wait();
  EXPECT_EQ(in.to_vector<float>(), values(from));
  // Blocking pairs: even ranks send first.
  if (n > 1) {
    Tensor got = Tensor::zeros({2}, DType::f64);
    const int peer = r ^ 1;
    if (peer < n) {
      const Tensor mine = Tensor::from_vector<double>({r + 0.5, -r - 0.25}, {2});
      if (r % 2 == 0) {
        comm.send(mine, peer, 3);
        comm.recv(got, peer, 3);
      } else {
        comm.recv(got, peer, 3);
        comm.send(mine, peer, 3);
      }
      EXPECT_EQ(got.to_vector<double>(), (std::vector<double>{peer + 0.5, -peer - 0.25}));
    }
  }
  Tensor t = Tensor::zeros({1}, DType::f32);
  EXPECT_THROW(comm.send(t, n, 0), InvalidArgument);
  EXPECT_THROW(comm.recv(t, -1, 0), InvalidArgument);
  EXPECT_THROW(comm.isend(t, 0, -2), InvalidArgument);
  EXPECT_EQ(comm.stats().collectives, 0);  // point to point is not a collective
}

}  // namespace
