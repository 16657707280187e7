#include <tessera/tessera.hpp>

#include <cstdio>
#include <vector>

using namespace tessera;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, /*tensor=*/2, /*domain=*/1});
    const models::DecoderConfig config{.vocab = 64, .d_model = 32, .n_heads = 4, .hidden = 64, .n_layers = 2};
    models::Decoder model(config);                 // the serial model, on every rank
    nn::initialize_parameters(model, /*seed=*/1);  // same master weights at every tp size

    // Q/K/V, gate/up and the head Colwise; O and down Rowwise; norms on sequence shards.
    const models::DecoderTpPlan plan = models::decoder_tp_plan(config, /*sequence_parallel=*/true);
    tp::parallelize(model, mesh.tp(), plan.plan);  // converts in place; FQNs do not change
    AdamW optimizer(model.named_parameters(), {.lr = 1e-2});

    const std::int64_t B = 2, S = 8;  // S must divide by the tp size under sequence parallelism
    std::vector<std::int64_t> tokens, next;
    for (std::int64_t i = 0; i < B * S; ++i) tokens.push_back((7 * i + 3) % config.vocab);
    for (std::int64_t i = 0; i < B * S; ++i) next.push_back((7 * i + 10) % config.vocab);
    const Tensor ids = Tensor::from_vector(tokens, {B, S});    // replicated over tp
    const Tensor targets = Tensor::from_vector(next, {B * S});

    for (int step = 0; step < 5; ++step) {
      optimizer.zero_grad();
      const Tensor logits = model.forward(ids);  // [B, S, vocab / tp]: vocabulary-sharded
      const tp::CrossEntropyResult ce =
          tp::vocab_parallel_cross_entropy(logits.reshape({B * S, logits.size(2)}), targets, mesh.tp());
      model.backward(ce.grad_logits.reshape(logits.shape()));
      tp::sync_replicated_gradients(model, mesh.tp());  // sums the norms' partial gradients
      clip_grad_norm(model.named_parameters(), 1.0, mesh);
      optimizer.step();
      if (mesh.global_rank() == 0) std::printf("step %d loss %.6f\n", step, ce.loss);
    }
  }
  MPI_Finalize();
}
