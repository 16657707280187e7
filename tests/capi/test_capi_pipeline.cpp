// The pipeline mesh dimension through the C API (docs/c-api.md, "Mesh"): for every
// layout that fits the rank count, tessera_mesh_create_pipeline (the MPI_Comm and the
// MPI_Fint form) and tessera_mesh_create_from_file with a `pipeline` key give, along
// every dimension (pipeline, dp, tp, domain, world), the rank, size and group members
// of the C++ Mesh built from the same config; pipeline 1 gives communicators congruent
// with tessera_mesh_create's, rank for rank; argument and config errors.

#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tessera/mesh.hpp"
#include "tessera/tessera.h"
#include "capi_check.hpp"

using namespace tessera;
using capi_test::failures;
using capi_test::world_rank;

namespace {

int world_size = 1;

// The world ranks of `comm`'s members, in its rank order.
std::vector<int> members(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<int> out(static_cast<std::size_t>(size));
  MPI_Allgather(&world_rank, 1, MPI_INT, out.data(), 1, MPI_INT, comm);
  return out;
}

struct Dim {
  tessera_mesh_dim_t dim;
  const char* name;
};
constexpr Dim kDims[] = {{TESSERA_MESH_PIPELINE, "pipeline"},
                         {TESSERA_MESH_DP, "dp"},
                         {TESSERA_MESH_TP, "tp"},
                         {TESSERA_MESH_DOMAIN, "domain"},
                         {TESSERA_MESH_WORLD, "world"}};

Communicator& cpp_comm(const Mesh& mesh, tessera_mesh_dim_t dim) {
  switch (dim) {
    case TESSERA_MESH_PIPELINE: return mesh.pp();
    case TESSERA_MESH_DP: return mesh.dp();
    case TESSERA_MESH_TP: return mesh.tp();
    case TESSERA_MESH_DOMAIN: return mesh.domain();
    default: return mesh.world();
  }
}

// Every dimension of the C mesh against the C++ Mesh of `config`.
void expect_same_groups(const tessera_mesh_t* handle, const ParallelismConfig& config, const char* how) {
  Mesh reference(MPI_COMM_WORLD, config);
  for (const Dim& d : kDims) {
    int rank = -1, size = -1;
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Fint fcomm = 0;
    EXPECT_STATUS(tessera_mesh_rank(handle, d.dim, &rank), TESSERA_OK);
    EXPECT_STATUS(tessera_mesh_size(handle, d.dim, &size), TESSERA_OK);
    EXPECT_STATUS(tessera_mesh_comm(handle, d.dim, &comm), TESSERA_OK);
    EXPECT_STATUS(tessera_mesh_comm_f(handle, d.dim, &fcomm), TESSERA_OK);
    Communicator& expected = cpp_comm(reference, d.dim);
    if (comm == MPI_COMM_NULL) {  // the status check above failed on every rank (collective creation)
      CHECK(comm != MPI_COMM_NULL);
      continue;
    }
    // Both member lists before comparing: they are collectives over the group.
    const std::vector<int> got = members(comm);
    const std::vector<int> want = members(expected.mpi_comm());
    const bool ok = rank == expected.rank() && size == expected.size() && MPI_Comm_f2c(fcomm) == comm && got == want;
    if (!ok) {
      std::fprintf(stderr, "[rank %d] %s %s: dim %s: rank %d size %d, C++ Mesh rank %d size %d\n", world_rank,
                   how, config.str().c_str(), d.name, rank, size, expected.rank(), expected.size());
    }
    CHECK(ok);
  }
}

std::vector<ParallelismConfig> layouts() {
  std::vector<ParallelismConfig> out;
  for (int s = 1; s <= world_size; ++s) {
    for (int t = 1; s * t <= world_size; ++t) {
      for (int d = 1; s * t * d <= world_size; ++d) {
        if (world_size % (s * t * d) != 0) continue;
        const bool replicas = world_size / (s * t * d) > 1;
        out.push_back({replicas ? DataParallelMode::ddp : DataParallelMode::none, t, d, s});
      }
    }
  }
  return out;
}

tessera_data_mode_t c_mode(DataParallelMode mode) {
  return mode == DataParallelMode::ddp ? TESSERA_DATA_DDP : TESSERA_DATA_NONE;
}

void test_layout(const ParallelismConfig& config, const std::string& dir) {
  tessera_mesh_t* mesh = nullptr;
  EXPECT_STATUS(tessera_mesh_create_pipeline(MPI_COMM_WORLD, c_mode(config.data), config.tensor, config.domain,
                                             config.pipeline, &mesh),
                TESSERA_OK);
  if (mesh) expect_same_groups(mesh, config, "tessera_mesh_create_pipeline");
  tessera_mesh_destroy(&mesh);

  EXPECT_STATUS(tessera_mesh_create_pipeline_f(MPI_Comm_c2f(MPI_COMM_WORLD), c_mode(config.data), config.tensor,
                                               config.domain, config.pipeline, &mesh),
                TESSERA_OK);
  if (mesh) expect_same_groups(mesh, config, "tessera_mesh_create_pipeline_f");
  tessera_mesh_destroy(&mesh);

  const std::string path = dir + "/pipeline_" + std::to_string(world_size) + ".yaml";
  if (world_rank == 0) {
    std::ofstream(path) << "parallelism:\n  data: " << (config.data == DataParallelMode::ddp ? "ddp" : "none")
                        << "\n  tensor: " << config.tensor << "\n  domain: " << config.domain
                        << "\n  pipeline: " << config.pipeline << "\n";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_STATUS(tessera_mesh_create_from_file(MPI_COMM_WORLD, path.c_str(), &mesh), TESSERA_OK);
  if (mesh) expect_same_groups(mesh, config, "tessera_mesh_create_from_file");
  tessera_mesh_destroy(&mesh);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank == 0) std::remove(path.c_str());
}

// Pipeline 1 is the three-dimensional mesh: every communicator congruent with
// tessera_mesh_create's (same members in the same order), the pipeline group alone.
void test_pipeline_one_is_the_old_mesh() {
  for (int t = 1; t <= world_size; ++t) {
    if (world_size % t != 0) continue;
    tessera_mesh_t* old_mesh = nullptr;
    tessera_mesh_t* new_mesh = nullptr;
    const tessera_data_mode_t data = world_size / t > 1 ? TESSERA_DATA_DDP : TESSERA_DATA_NONE;
    EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, data, t, 1, &old_mesh), TESSERA_OK);
    EXPECT_STATUS(tessera_mesh_create_pipeline(MPI_COMM_WORLD, data, t, 1, 1, &new_mesh), TESSERA_OK);
    if (!old_mesh || !new_mesh) continue;
    for (const Dim& d : kDims) {
      MPI_Comm a = MPI_COMM_NULL, b = MPI_COMM_NULL;
      int ra = -1, rb = -2;
      EXPECT_STATUS(tessera_mesh_comm(old_mesh, d.dim, &a), TESSERA_OK);
      EXPECT_STATUS(tessera_mesh_comm(new_mesh, d.dim, &b), TESSERA_OK);
      EXPECT_STATUS(tessera_mesh_rank(old_mesh, d.dim, &ra), TESSERA_OK);
      EXPECT_STATUS(tessera_mesh_rank(new_mesh, d.dim, &rb), TESSERA_OK);
      int result = MPI_UNEQUAL;
      MPI_Comm_compare(a, b, &result);
      CHECK(result == MPI_CONGRUENT);
      CHECK(ra == rb);
    }
    int size = 0, rank = -1;
    EXPECT_STATUS(tessera_mesh_size(old_mesh, TESSERA_MESH_PIPELINE, &size), TESSERA_OK);
    EXPECT_STATUS(tessera_mesh_rank(old_mesh, TESSERA_MESH_PIPELINE, &rank), TESSERA_OK);
    CHECK(size == 1 && rank == 0);
    tessera_mesh_destroy(&old_mesh);
    tessera_mesh_destroy(&new_mesh);
  }
}

void test_errors() {
  tessera_mesh_t* mesh = nullptr;
  EXPECT_STATUS(tessera_mesh_create_pipeline(MPI_COMM_WORLD, TESSERA_DATA_DDP, 1, 1, 0, &mesh), TESSERA_ERR_CONFIG);
  CHECK(mesh == nullptr && std::string(tessera_last_error()).find("pipeline") != std::string::npos);
  // A pipeline that does not divide the world: 3 never divides 1, 2 or 4.
  EXPECT_STATUS(tessera_mesh_create_pipeline(MPI_COMM_WORLD, TESSERA_DATA_DDP, 1, 1, 3, &mesh), TESSERA_ERR_CONFIG);
  CHECK(mesh == nullptr);
  EXPECT_STATUS(tessera_mesh_create_pipeline(MPI_COMM_WORLD, TESSERA_DATA_DDP, 1, 1, 1, nullptr),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_create_pipeline(MPI_COMM_WORLD, TESSERA_DATA_DDP, 1, 1, 1, &mesh), TESSERA_OK);
  int size = 0;
  EXPECT_STATUS(tessera_mesh_size(mesh, static_cast<tessera_mesh_dim_t>(5), &size), TESSERA_ERR_INVALID_ARGUMENT);
  CHECK(std::string(tessera_last_error()).find("_PIPELINE (4)") != std::string::npos);
  tessera_mesh_destroy(&mesh);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const std::string dir = argc > 1 ? argv[1] : ".";
  for (const ParallelismConfig& config : layouts()) test_layout(config, dir);
  test_pipeline_one_is_the_old_mesh();
  test_errors();
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) std::printf("test_capi_pipeline: %zu layouts, %d failures\n", layouts().size(), total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
