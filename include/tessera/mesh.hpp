#pragma once
// Mesh: the pipeline × dp × tp × domain process mesh carved out of a parent communicator.
//
// Ranks are laid out row-major over (pipeline, dp, tp, domain), domain innermost, as in
// CREDIT's credit.parallel.mesh with the pipeline stage outermost (consecutive ranks,
// which launchers put on one node, share a stage, so the tp and domain traffic stays
// inside a node and only the stage-boundary activations cross nodes): for rank g of the
// parent,
//     domain = g % D,   tp = (g / D) % T,   dp = (g / (T * D)) % P,   pp = g / (P * T * D).
// With pipeline 1 this is the (dp, tp, domain) layout, rank for rank. Each dimension has
// its own Communicator holding exactly the ranks that differ only in that coordinate. A
// dimension of size 1 gets a private single-rank communicator and its collectives cost
// no communication.
//
// The parent is any communicator (a climate code may pass a sub-communicator, or a
// Fortran handle converted with MPI_Comm_f2c); MPI_COMM_WORLD is never assumed.

#include <mpi.h>

#include <memory>

#include "tessera/comm.hpp"
#include "tessera/device.hpp"
#include "tessera/parallelism.hpp"
#include "tessera/placement.hpp"
#include "tessera/wait_policy.hpp"

namespace tessera {

struct MeshCoords {
  int dp = 0;
  int tp = 0;
  int domain = 0;
  int pp = 0;  // the pipeline stage; last, so {dp, tp, domain} initialisers keep their meaning
  bool operator==(const MeshCoords&) const = default;
};

// The layout formula, exposed so tests and tools can check against it. InvalidArgument
// for tensor or domain < 1, a product of the two or a rank that overflows int, and a
// negative rank. This form has no pipeline dimension (pp = 0, dp = g / (T * D)).
MeshCoords mesh_coords_of(int global_rank, int tensor, int domain);
int mesh_global_rank_of(const MeshCoords& coords, int tensor, int domain);

// The extents of the four dimensions, for the layout formula with a pipeline.
struct MeshShape {
  int pipeline = 1;
  int data = 1;  // P, the dp replicas
  int tensor = 1;
  int domain = 1;
};
// The same formula with the pipeline outermost; InvalidArgument for an extent < 1, a
// product that overflows int, a negative rank or one beyond the shape (pp >= pipeline).
MeshCoords mesh_coords_of(int global_rank, const MeshShape& shape);
int mesh_global_rank_of(const MeshCoords& coords, const MeshShape& shape);

// The seed's sampler contract: shard data by dp only. Ranks that differ only in tp or
// domain coordinates get the same (rank, size) and therefore the same batches.
struct DataParallelCoords {
  int rank = 0;
  int size = 1;
};

struct MeshOptions {
  WaitOptions wait;  // applied to every communicator of the mesh
};

class Mesh {
 public:
  // Collective over `parent`. Validates `config` against the parent's size and checks
  // that every rank passed the same config; any failure (including choosing a CUDA
  // device) throws the same error on every rank.
  Mesh(MPI_Comm parent, const ParallelismConfig& config, Device device = Device::host(),
       MeshOptions options = {});
  ~Mesh();
  Mesh(Mesh&&) noexcept;
  Mesh& operator=(Mesh&&) noexcept;

  const ParallelismConfig& config() const { return config_; }
  Device device() const { return device_; }  // CUDA index resolved from the local rank

  int global_rank() const { return world_->rank(); }  // rank in the parent communicator
  int world_size() const { return world_->size(); }
  const MeshCoords& coords() const { return coords_; }
  int size(MeshDim dim) const;
  int rank(MeshDim dim) const;
  int dp_size() const { return dp_->size(); }
  int tp_size() const { return tp_->size(); }
  int domain_size() const { return domain_->size(); }
  int pp_size() const { return pp_->size(); }  // pipeline stages

  Communicator& world() const { return *world_; }  // a private duplicate of the parent
  Communicator& dp() const { return *dp_; }
  Communicator& tp() const { return *tp_; }
  Communicator& domain() const { return *domain_; }
  // The ranks that differ only in their pipeline stage (same dp, tp and domain
  // coordinates); its rank is the stage, coords().pp. Stage boundaries send along it.
  Communicator& pp() const { return *pp_; }
  // dp, tp or domain (parameters have no placement over the pipeline: a stage owns its
  // parameters whole, so MeshDim has no pipeline member).
  Communicator& comm(MeshDim dim) const;

  DataParallelCoords data_parallel_coords() const { return {coords_.dp, dp_->size()}; }

  int local_rank() const { return node_.local_rank; }  // among the parent's ranks on this node
  int local_size() const { return node_.local_size; }
  int usable_cores() const { return node_.usable_cores; }
  WaitPolicy wait_policy() const { return world_->wait_policy(); }

 private:
  ParallelismConfig config_;
  Device device_;
  MeshCoords coords_;
  struct NodeFacts {
    int local_rank = 0;
    int local_size = 1;
    int usable_cores = 1;
  } node_;
  std::unique_ptr<Communicator> world_, dp_, tp_, domain_, pp_;
};

}  // namespace tessera
