// The checkpoint samples of docs/checkpoint-format.md, run on 2 ranks: the decoder of
// examples/cpp/decoder_tp.cpp trained at tp 2, saved per rank and loaded by rank 0 into a
// serial decoder (resharding tp 2 -> 1), then the API overview: a save with rotation and
// a load with optimizer state, at the same layout.
#include <tessera/tessera.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <tessera/io/checkpoint.hpp>

// Collective over mesh.world(). Returns the step that was loaded back.
std::int64_t save_and_resume(const tessera::Mesh& mesh, tessera::nn::Module* model, tessera::Optimizer& optimizer,
                             const std::string& model_config_yaml) {
  tessera::io::SaveOptions options;
  options.layout = tessera::io::CheckpointLayout::per_rank;   // or shared (the default)
  options.step = 100;
  options.metadata = model_config_yaml;                       // free text, stored verbatim
  options.keep_last = 3;                                      // rotation (0: keep all)
  tessera::io::save_checkpoint("runs/exp1", mesh, *model, &optimizer, options);

  // Later, at any layout: the root directory follows `latest`.
  auto result = tessera::io::load_checkpoint("runs/exp1", mesh, *model, &optimizer);
  return result.step;
}

using namespace tessera;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, /*tensor=*/2, /*domain=*/1});
    const models::DecoderConfig config{.vocab = 64, .d_model = 32, .n_heads = 4, .hidden = 64, .n_layers = 2};
    models::Decoder model(config);
    nn::initialize_parameters(model, /*seed=*/1);
    const models::DecoderTpPlan plan = models::decoder_tp_plan(config, /*sequence_parallel=*/true);
    tp::parallelize(model, mesh.tp(), plan.plan);
    AdamW optimizer(model.named_parameters(), {.lr = 1e-2});

    const std::int64_t B = 2, S = 8;
    std::vector<std::int64_t> tokens, next;
    for (std::int64_t i = 0; i < B * S; ++i) tokens.push_back((7 * i + 3) % config.vocab);
    for (std::int64_t i = 0; i < B * S; ++i) next.push_back((7 * i + 10) % config.vocab);
    const Tensor ids = Tensor::from_vector(tokens, {B, S});
    const Tensor targets = Tensor::from_vector(next, {B * S});
    for (int step = 0; step < 5; ++step) {
      optimizer.zero_grad();
      const Tensor logits = model.forward(ids);
      const tp::CrossEntropyResult ce =
          tp::vocab_parallel_cross_entropy(logits.reshape({B * S, logits.size(2)}), targets, mesh.tp());
      model.backward(ce.grad_logits.reshape(logits.shape()));
      tp::sync_replicated_gradients(model, mesh.tp());
      clip_grad_norm(model.named_parameters(), 1.0, mesh);
      optimizer.step();
    }

    io::SaveOptions save;
    save.layout = io::CheckpointLayout::per_rank;  // or shared (one file)
    save.step = 5;
    save.metadata = model.describe();
    const std::string dir = io::save_checkpoint("runs/decoder", mesh, model, &optimizer, save);

    // Reshard on load: rank 0 reads the tp = 2 checkpoint into a serial model.
    if (mesh.global_rank() == 0) {
      Mesh serial_mesh(MPI_COMM_SELF, ParallelismConfig{});
      models::Decoder serial(config);
      const io::LoadResult loaded = io::load_checkpoint("runs/decoder", serial_mesh, serial);
      std::printf("loaded %zu tensors of step %lld from %s\n", loaded.loaded.size(),
                  static_cast<long long>(loaded.step), loaded.file.c_str());
    }

    const std::int64_t step = save_and_resume(mesh, &model, optimizer, model.describe());
    if (mesh.global_rank() == 0) std::printf("saved to %s; resumed runs/exp1 at step %lld\n", dir.c_str(), static_cast<long long>(step));
    if (step != 100) {
      std::fprintf(stderr, "checkpoint_decoder: expected step 100, got %lld\n", static_cast<long long>(step));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Finalize();
}
