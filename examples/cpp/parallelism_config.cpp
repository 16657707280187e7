#include <tessera/tessera.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    auto config = tessera::ParallelismConfig::from_yaml_file("data/configs/mesh_2x2x2.yaml");
    tessera::Mesh mesh(MPI_COMM_WORLD, config);   // any communicator, not only the world
    tessera::Tensor grad = tessera::Tensor::zeros({1024}, tessera::DType::f32);
    mesh.tp().all_reduce(grad, tessera::ReduceOp::sum);
    auto [dp_rank, dp_size] = mesh.data_parallel_coords();   // shard the data by dp only
    std::printf("rank %d: dp %d of %d\n", mesh.global_rank(), dp_rank, dp_size);
  }
  MPI_Finalize();
}
