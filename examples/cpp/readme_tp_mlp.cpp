#include <tessera/tessera.hpp>

#include <cstdio>
#include <memory>
#include <vector>

using namespace tessera;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, /*tensor=*/2, /*domain=*/1});
    nn::Sequential mlp;  // column -> GELU -> row: one all-reduce forward, one backward
    mlp.append(std::make_unique<tp::ColumnParallelLinear>(16, 64, mesh.tp(), /*gather_output=*/false));
    mlp.append(std::make_unique<nn::GELU>());
    mlp.append(std::make_unique<tp::RowParallelLinear>(64, 16, mesh.tp(), /*input_is_parallel=*/true));
    nn::initialize_parameters(mlp, /*seed=*/42, "mlp");  // same master weights at every tp size
    AdamW optimizer(mlp.named_parameters("mlp"), {.lr = 1e-2});

    const Tensor x = Tensor::from_vector(std::vector<float>(8 * 16, 0.5f), {8, 16});  // replicated over tp
    for (int step = 0; step < 5; ++step) {
      optimizer.zero_grad();
      Tensor y = mlp.forward(x);                  // [8, 16], full on every rank
      const double loss = 0.5 * ops::dot(y, y);   // L = |y|^2 / 2, so dL/dy = y
      mlp.backward(y);
      clip_grad_norm(mlp.named_parameters("mlp"), 1.0, mesh);  // shards and replicas counted once
      optimizer.step();
      if (mesh.global_rank() == 0) std::printf("step %d loss %.6f\n", step, loss);
    }
  }
  MPI_Finalize();
}
