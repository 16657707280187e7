// C API: the process mesh.

#include <functional>

#include "capi/capi_internal.hpp"
#include "tessera/agree.hpp"
#include "tessera/parallelism.hpp"

using namespace tessera;
using tessera::capi::guarded;
using tessera::capi::require;

namespace {

DataParallelMode to_mode(int data) {
  switch (data) {
    case TESSERA_DATA_NONE: return DataParallelMode::none;
    case TESSERA_DATA_DDP: return DataParallelMode::ddp;
    case TESSERA_DATA_FSDP2: return DataParallelMode::fsdp2;
    default:
      throw InvalidArgument("data mode " + std::to_string(data) +
                            " is not TESSERA_DATA_NONE (0), TESSERA_DATA_DDP (1) or TESSERA_DATA_FSDP2 (2)");
  }
}

int from_mode(DataParallelMode mode) {
  switch (mode) {
    case DataParallelMode::none: return TESSERA_DATA_NONE;
    case DataParallelMode::ddp: return TESSERA_DATA_DDP;
    case DataParallelMode::fsdp2: return TESSERA_DATA_FSDP2;
  }
  return TESSERA_DATA_NONE;
}

MPI_Comm require_comm(MPI_Comm comm, const char* what) {
  capi::require_mpi();
  if (comm == MPI_COMM_NULL) throw InvalidArgument(std::string(what) + " is MPI_COMM_NULL");
  return comm;
}

// Every rank learns whether any rank failed before anyone enters the Mesh constructor.
void create_mesh(MPI_Comm parent, tessera_mesh_t** out, const std::function<ParallelismConfig()>& config_of) {
  require(out, "the output handle pointer");
  *out = nullptr;
  require_comm(parent, "the parent communicator");
  ParallelismConfig config;
  agree_on_success(parent, [&] {
    config = config_of();
    config.validate();
  });
  auto handle = std::make_unique<tessera_mesh>();
  handle->mesh = std::make_shared<Mesh>(parent, config);
  *out = handle.release();
}

ParallelismConfig config_of_arguments(int data, int tensor, int domain, int pipeline) {
  ParallelismConfig c;
  c.data = to_mode(data);
  c.tensor = tensor;
  c.domain = domain;
  c.pipeline = pipeline;
  return c;
}

const Mesh& mesh_of(const tessera_mesh_t* m) {
  require(m, "the mesh handle");
  if (!m->mesh) throw InvalidArgument("the mesh handle is not initialised");
  return *m->mesh;
}

// The pipeline is no MeshDim (parameters have no placement over it), so the whole mesh
// and the pipeline group are named here beside the three placement dimensions.
Communicator& comm_of(const tessera_mesh_t* m, int dim) {
  const Mesh& mesh = mesh_of(m);
  switch (dim) {
    case TESSERA_MESH_DP: return mesh.comm(MeshDim::dp);
    case TESSERA_MESH_TP: return mesh.comm(MeshDim::tp);
    case TESSERA_MESH_DOMAIN: return mesh.comm(MeshDim::domain);
    case TESSERA_MESH_WORLD: return mesh.world();
    case TESSERA_MESH_PIPELINE: return mesh.pp();
    default:
      throw InvalidArgument("mesh dim " + std::to_string(dim) +
                            " is not TESSERA_MESH_DP (0), _TP (1), _DOMAIN (2), _WORLD (3) or _PIPELINE (4)");
  }
}

}  // namespace

extern "C" {

int tessera_mesh_create(MPI_Comm parent, tessera_data_mode_t data, int tensor, int domain, tessera_mesh_t** mesh) {
  return guarded("tessera_mesh_create", [&] {
    create_mesh(parent, mesh, [&] { return config_of_arguments(data, tensor, domain, 1); });
  });
}

int tessera_mesh_create_f(MPI_Fint parent, tessera_data_mode_t data, int tensor, int domain, tessera_mesh_t** mesh) {
  return guarded("tessera_mesh_create_f", [&] {
    create_mesh(capi::comm_from_fortran(parent), mesh, [&] { return config_of_arguments(data, tensor, domain, 1); });
  });
}

int tessera_mesh_create_pipeline(MPI_Comm parent, tessera_data_mode_t data, int tensor, int domain, int pipeline,
                                 tessera_mesh_t** mesh) {
  return guarded("tessera_mesh_create_pipeline", [&] {
    create_mesh(parent, mesh, [&] { return config_of_arguments(data, tensor, domain, pipeline); });
  });
}

int tessera_mesh_create_pipeline_f(MPI_Fint parent, tessera_data_mode_t data, int tensor, int domain, int pipeline,
                                   tessera_mesh_t** mesh) {
  return guarded("tessera_mesh_create_pipeline_f", [&] {
    create_mesh(capi::comm_from_fortran(parent), mesh,
                [&] { return config_of_arguments(data, tensor, domain, pipeline); });
  });
}

int tessera_mesh_create_from_file(MPI_Comm parent, const char* path, tessera_mesh_t** mesh) {
  return guarded("tessera_mesh_create_from_file", [&] {
    create_mesh(parent, mesh, [&] {
      return ParallelismConfig::from_yaml_file(require(path, "the config path"));
    });
  });
}

int tessera_mesh_create_from_file_f(MPI_Fint parent, const char* path, tessera_mesh_t** mesh) {
  return guarded("tessera_mesh_create_from_file_f", [&] {
    create_mesh(capi::comm_from_fortran(parent), mesh, [&] {
      return ParallelismConfig::from_yaml_file(require(path, "the config path"));
    });
  });
}

int tessera_mesh_destroy(tessera_mesh_t** mesh) {
  return guarded("tessera_mesh_destroy", [&] {
    require(mesh, "the pointer to the mesh handle");
    std::unique_ptr<tessera_mesh> owned(*mesh);
    *mesh = nullptr;
  });
}

int tessera_mesh_config(const tessera_mesh_t* mesh, tessera_data_mode_t* data, int* tensor, int* domain) {
  return guarded("tessera_mesh_config", [&] {
    const Mesh& m = mesh_of(mesh);
    require(data, "data");
    require(tensor, "tensor");
    require(domain, "domain");
    *data = static_cast<tessera_data_mode_t>(from_mode(m.config().data));
    *tensor = m.config().tensor;
    *domain = m.config().domain;
  });
}

int tessera_mesh_rank(const tessera_mesh_t* mesh, tessera_mesh_dim_t dim, int* rank) {
  return guarded("tessera_mesh_rank", [&] {
    Communicator& c = comm_of(mesh, dim);
    *require(rank, "rank") = c.rank();
  });
}

int tessera_mesh_size(const tessera_mesh_t* mesh, tessera_mesh_dim_t dim, int* size) {
  return guarded("tessera_mesh_size", [&] {
    Communicator& c = comm_of(mesh, dim);
    *require(size, "size") = c.size();
  });
}

int tessera_mesh_comm(const tessera_mesh_t* mesh, tessera_mesh_dim_t dim, MPI_Comm* comm) {
  return guarded("tessera_mesh_comm", [&] {
    Communicator& c = comm_of(mesh, dim);
    *require(comm, "comm") = c.mpi_comm();
  });
}

int tessera_mesh_comm_f(const tessera_mesh_t* mesh, tessera_mesh_dim_t dim, MPI_Fint* comm) {
  return guarded("tessera_mesh_comm_f", [&] {
    Communicator& c = comm_of(mesh, dim);
    *require(comm, "comm") = MPI_Comm_c2f(c.mpi_comm());
  });
}

}  // extern "C"
