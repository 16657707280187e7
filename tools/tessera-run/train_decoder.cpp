#include "train_decoder.hpp"

#include <mpi.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "token_data.hpp"
#include "tessera/agree.hpp"
#include "tessera/clip.hpp"
#include "tessera/dp/data_parallel.hpp"
#include "tessera/dp/memory.hpp"
#include "tessera/dp/sampler.hpp"
#include "tessera/error.hpp"
#include "tessera/init.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/mesh.hpp"
#include "tessera/placement.hpp"
#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/parallelize.hpp"

namespace tessera::run {

std::string decoder_yaml(const models::DecoderConfig& a) {
  char eps[64];
  std::snprintf(eps, sizeof eps, "%.17g", a.eps);
  return "type: decoder\nvocab: " + std::to_string(a.vocab) + "\nd_model: " + std::to_string(a.d_model) +
         "\nn_heads: " + std::to_string(a.n_heads) + "\nhidden: " + std::to_string(a.hidden) +
         "\nn_layers: " + std::to_string(a.n_layers) + "\neps: " + eps +
         "\ntie_embeddings: " + (a.tie_embeddings ? "true" : "false") + "\n";
}

models::DecoderConfig decoder_from_metadata(const std::string& metadata, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(metadata);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source + ": the checkpoint metadata is not YAML: " + e.what());
  }
  const YAML::Node model = root.IsMap() ? root["model"] : YAML::Node();
  if (!model.IsDefined() || !model.IsMap()) {
    throw ConfigError(source + ": the checkpoint metadata has no `model:` mapping (was it written by tessera-run?)");
  }
  const std::string type = model["type"].IsScalar() ? model["type"].Scalar() : "(none)";
  if (type != "decoder") {
    throw ConfigError(source + ": the checkpoint holds a model of type '" + type +
                      "', this config trains model.type decoder");
  }
  models::DecoderConfig a;
  bool seen[6] = {};
  for (const auto& item : model) {
    const std::string key = item.first.Scalar();
    const YAML::Node& v = item.second;
    try {
      if (key == "type") continue;
      if (key == "vocab") { a.vocab = v.as<std::int64_t>(); seen[0] = true; }
      else if (key == "d_model") { a.d_model = v.as<std::int64_t>(); seen[1] = true; }
      else if (key == "n_heads") { a.n_heads = v.as<std::int64_t>(); seen[2] = true; }
      else if (key == "hidden") { a.hidden = v.as<std::int64_t>(); seen[3] = true; }
      else if (key == "n_layers") { a.n_layers = v.as<std::int64_t>(); seen[4] = true; }
      else if (key == "eps") a.eps = v.as<double>();
      else if (key == "tie_embeddings") { a.tie_embeddings = v.as<bool>(); seen[5] = true; }
      else throw ConfigError(source + " metadata: model." + key + ": unknown key '" + key + "'");
    } catch (const YAML::Exception& e) {
      throw ConfigError(source + " metadata: model." + key + ": bad value: " + e.what());
    }
  }
  const char* names[6] = {"vocab", "d_model", "n_heads", "hidden", "n_layers", "tie_embeddings"};
  for (int i = 0; i < 6; ++i) {
    if (!seen[i]) throw ConfigError(source + " metadata: model." + names[i] + " is missing");
  }
  return a;
}

namespace {

bool same_architecture(const models::DecoderConfig& a, const models::DecoderConfig& b) {
  return a.vocab == b.vocab && a.d_model == b.d_model && a.n_heads == b.n_heads && a.hidden == b.hidden &&
         a.n_layers == b.n_layers && a.eps == b.eps && a.tie_embeddings == b.tie_embeddings;
}

// Bytes of the activations one local sequence keeps between forward and backward (the
// layers' caches, sequence-parallel all-gathers, the attention probabilities, the logits
// and their gradient): an estimate for the memory plan, not a measurement.
std::int64_t activation_bytes_per_sequence(const models::DecoderConfig& a, std::int64_t seq_len, int tp, bool sp) {
  const std::int64_t S = seq_len, Sl = sp ? seq_len / tp : seq_len, d = a.d_model;
  const std::int64_t dl = d / tp, heads = a.n_heads / tp, hl = a.hidden / tp;
  const std::int64_t vl = a.tie_embeddings ? a.vocab : a.vocab / tp;
  std::int64_t per_layer = 8 * Sl * d             // norms (input, output), residual streams, row outputs
                           + 4 * S * dl           // q, k, v, attention output
                           + heads * S * S        // attention probabilities
                           + 3 * S * hl;          // gate, up, their product
  if (sp) per_layer += 2 * S * d;                 // the all-gathered inputs of the column layers
  std::int64_t floats = a.n_layers * per_layer + 3 * Sl * d + (sp ? S * d : 0) + 2 * S * vl;
  return floats * static_cast<std::int64_t>(sizeof(float));
}

}  // namespace

int train_decoder(const RunConfig& cfg, const Options& opts) {
  Mesh mesh(MPI_COMM_WORLD, cfg.parallelism, run_device(cfg));
  const MPI_Comm world = mesh.world().mpi_comm();
  const Log log(mesh.global_rank() == 0, cfg.log_level);
  start_run(log, cfg, mesh);

  const models::DecoderConfig& arch = cfg.decoder.arch;
  const std::int64_t seq_len = cfg.decoder.seq_len;
  const int dp_size = mesh.dp_size(), tp_size = mesh.tp_size();
  if (cfg.data.batch_size % dp_size != 0) {
    throw ConfigError(cfg.source + ": data.batch_size (" + std::to_string(cfg.data.batch_size) +
                      ") must be divisible by the number of data-parallel replicas (" + std::to_string(dp_size) + ")");
  }
  const std::int64_t local_batch = cfg.data.batch_size / dp_size;

  std::unique_ptr<TokenData> data;
  agree_on_success(world, [&] { data = std::make_unique<TokenData>(cfg.data, arch.vocab, seq_len); });
  if (data->samples() < cfg.data.batch_size) {
    throw ConfigError(cfg.source + ": data.batch_size (" + std::to_string(cfg.data.batch_size) + ") exceeds the " +
                      std::to_string(data->samples()) + " samples of " + data->describe());
  }

  // The plan decides what sequence parallelism really does (tied embeddings switch it off).
  const models::DecoderTpPlan plan = models::decoder_tp_plan(arch, cfg.decoder.sequence_parallel);
  if (!plan.reason.empty()) log.info("note: " + plan.reason);
  const bool sp = plan.sequence_parallel && tp_size > 1;

  auto model = std::make_unique<models::Decoder>(arch, DType::f32, mesh.device());
  std::int64_t global_parameters = 0;
  for (const auto& [name, p] : model->named_parameters()) global_parameters += shape_numel(p->global_shape);
  log.info("model: " + model->describe() + (arch.tie_embeddings ? ", tied embeddings" : "") + ", " +
           std::to_string(global_parameters) + " parameters, seq_len " + std::to_string(seq_len) +
           ", sequence parallel " + (sp ? "on" : "off") +
           (tp_size > 1 ? std::string(", logits ") + (plan.vocab_sharded_logits ? "vocab-sharded" : "replicated")
                        : std::string()));
  log.info("data: " + data->describe() + ", " + std::to_string(data->samples()) + " samples of " +
           std::to_string(seq_len) + " tokens, batch " + std::to_string(cfg.data.batch_size) + " (" +
           std::to_string(local_batch) + " per dp replica)");
  char line[512];
  std::snprintf(line, sizeof line,
                "baselines (nats/token): uniform %.4f (log vocab), unigram %.4f (no context)%s", data->uniform_entropy(),
                data->unigram_entropy(),
                std::isnan(data->entropy_rate())
                    ? ""
                    : (", entropy rate " + fmt("%.4f", data->entropy_rate()) + " (the best possible)").c_str());
  log.info(line);

  // Same master weights at every layout: counter-based init of the serial model, which
  // parallelize then slices (converted layers keep their FQNs and values).
  if (!opts.dry_run) nn::initialize_parameters(*model, cfg.schedule.seed);
  if (tp_size > 1) tp::parallelize(*model, mesh, plan.plan);

  const ShardRange rows = sp ? shard_range(seq_len, tp_size, mesh.coords().tp) : ShardRange{0, seq_len};
  if (opts.dry_run) {
    const dp::MemoryReport report =
        dp::plan_memory(*model, dp::MemoryPlanLayout::of(mesh), optimizer_kind(cfg.optimizer));
    print_memory_plan(log, mesh, "seq rows", rows.start, rows.end(), report,
                      local_batch * activation_bytes_per_sequence(arch, seq_len, tp_size, sp), data->bytes());
    log.info("dry run: the config is valid; nothing was trained");
    return 0;
  }

  std::unique_ptr<dp::DataParallel> data_parallel;
  if (cfg.parallelism.data != DataParallelMode::none) {
    dp::DataParallelOptions dpo;
    // A tied head reads the embedding table outside the embedding's forward: the
    // embedding must stay the plain Embedding, which overlap's wrappers would hide.
    if (arch.tie_embeddings) dpo.overlap = false;
    data_parallel = std::make_unique<dp::DataParallel>(*model, mesh, dpo);
  }
  const NamedParameters params = model->named_parameters();
  std::unique_ptr<Optimizer> optimizer = make_optimizer(cfg.optimizer, params);

  // ---- resume
  std::int64_t start_step = 0;
  if (const std::optional<std::string> path = resume_path(cfg, log)) {
    // The architecture must match before any weight is read: the same FQNs could hold
    // other shapes, and a missing layer would otherwise be reported as a dataset.
    // The architecture is checked before any weight is read.
    const io::CheckpointMetadata header = io::read_checkpoint_metadata(*path, mesh.world());
    const models::DecoderConfig saved = decoder_from_metadata(header.metadata, header.file);
    if (!same_architecture(saved, arch)) {
      throw ConfigError("resume: the model in '" + header.file + "' differs from this config's: " +
                        first_difference(decoder_yaml(saved), decoder_yaml(arch)));
    }
    const io::LoadResult loaded = io::load_checkpoint(header.file, mesh, *model, optimizer.get());
    start_step = loaded.step;
    log.info("resumed from " + loaded.file + " at step " + std::to_string(loaded.step) + " (saved at " +
             loaded.saved_mesh.str() + " on " + std::to_string(loaded.saved_world_size) + " ranks; now " +
             mesh.config().str() + " on " + std::to_string(mesh.world_size()) + ")");
  }
  if (start_step >= cfg.schedule.steps) {
    log.info("nothing to do: the run is at step " + std::to_string(start_step) + " of " +
             std::to_string(cfg.schedule.steps));
    return 0;
  }

  dp::DistributedSampler sampler(data->samples(), mesh,
                                 {.shuffle = cfg.data.shuffle, .seed = cfg.schedule.seed, .drop_last = true});
  const std::int64_t batches_per_epoch = sampler.num_batches(local_batch, /*drop_last_batch=*/true);
  if (batches_per_epoch < 1) {
    throw ConfigError(cfg.source + ": data.batch_size " + std::to_string(cfg.data.batch_size) +
                      " leaves no full batch per epoch");
  }

  const auto save = [&](std::int64_t step) {
    io::SaveOptions so;
    so.layout = cfg.checkpoint.layout;
    so.step = step;
    so.keep_last = cfg.checkpoint.keep_last;
    std::string model_text = "model:\n";
    const std::string yaml = decoder_yaml(arch);
    for (std::size_t i = 0, j; i < yaml.size(); i = j + 1) {
      j = yaml.find('\n', i);
      model_text += "  " + yaml.substr(i, j - i) + "\n";
    }
    so.metadata = model_text + "run:\n  config: \"" + cfg.source + "\"\n  seed: " +
                  std::to_string(cfg.schedule.seed) + "\n  batch_size: " + std::to_string(cfg.data.batch_size) +
                  "\n  seq_len: " + std::to_string(seq_len) + "\n  data: \"" + data->describe() + "\"\n";
    const std::string dir = io::save_checkpoint(cfg.checkpoint.dir, mesh, *model, optimizer.get(), so);
    log.info("checkpoint: " + dir + " (" + std::string(io::checkpoint_layout_name(cfg.checkpoint.layout)) + ")");
    return dir;
  };

  log.info("training: steps " + std::to_string(start_step + 1) + ".." + std::to_string(cfg.schedule.steps) + ", " +
           cfg.optimizer.type + " lr " + fmt("%g", cfg.optimizer.lr) + ", seed " +
           std::to_string(cfg.schedule.seed));

  // Vocab-sharded logits: the loss is a tp collective. Replicated logits (tied
  // embeddings): every tp rank computes the whole loss itself.
  std::optional<Communicator> self;
  if (!plan.vocab_sharded_logits || tp_size == 1) self.emplace(MPI_COMM_SELF);
  Communicator& loss_group = self ? *self : mesh.tp();

  Tensor ids, targets;
  Communicator& dp_comm = mesh.dp();
  const double unigram = data->unigram_entropy();
  const std::int64_t tokens_per_step = cfg.data.batch_size * seq_len;
  double window_loss = 0, window_time = 0, run_time = 0;
  std::int64_t window_steps = 0;
  double last_loss = NAN, first_loss = NAN;
  std::string last_checkpoint;

  for (std::int64_t step = start_step + 1; step <= cfg.schedule.steps; ++step) {
    const std::int64_t position = step - 1;
    sampler.set_epoch(position / batches_per_epoch);
    data->batch(sampler.batch(position % batches_per_epoch, local_batch), ids, targets);
    ids = ids.to(mesh.device());  // read on the host, trained on the mesh's device
    targets = targets.to(mesh.device());

    mesh.world().barrier();  // so the step time is the slowest rank's, not rank 0's share
    const auto t0 = std::chrono::steady_clock::now();
    optimizer->zero_grad();
    const Tensor logits = model->forward(ids);
    const Shape logits_shape = logits.shape();
    const tp::CrossEntropyResult ce = tp::vocab_parallel_cross_entropy(
        logits.reshape({local_batch * seq_len, logits_shape[2]}), targets, loss_group);
    model->backward(ce.grad_logits.reshape(logits_shape));
    if (data_parallel) data_parallel->finish_gradient_sync();
    if (tp_size > 1) tp::sync_replicated_gradients(*model, mesh.tp());
    const bool log_step = step % cfg.schedule.log_every == 0 || step == cfg.schedule.steps;
    const double lr = learning_rate_at(cfg.optimizer, step, cfg.schedule.steps);
    const double grad_norm = clip_and_step(cfg, params, *optimizer, mesh, step, log_step);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    window_loss += ce.loss;
    window_time += seconds;
    run_time += seconds;
    ++window_steps;

    if (log_step) {
      // Each dp replica saw its own part of the global batch: average over dp.
      Tensor sums = Tensor::from_vector(std::vector<double>{window_loss}, {1});
      dp_comm.all_reduce(sums, ReduceOp::avg);
      last_loss = sums.to_vector<double>()[0] / static_cast<double>(window_steps);
      if (std::isnan(first_loss)) first_loss = last_loss;
      const double step_time = window_time / static_cast<double>(window_steps);
      std::snprintf(line, sizeof line,
                    "step %6lld/%lld  loss %.6e  unigram %.6e  lr %.3e  grad_norm %.3e  step %.1f ms  "
                    "%.1f samples/s  %.3e tokens/s",
                    static_cast<long long>(step), static_cast<long long>(cfg.schedule.steps), last_loss, unigram, lr,
                    grad_norm, 1e3 * step_time, static_cast<double>(cfg.data.batch_size) / step_time,
                    static_cast<double>(tokens_per_step) / step_time);
      log.info(line);
      window_loss = window_time = 0;
      window_steps = 0;
    }
    after_step(cfg, opts, log, step, save, last_checkpoint);
  }

  const std::int64_t steps_run = cfg.schedule.steps - start_step;
  const double step_time = run_time / static_cast<double>(steps_run);
  std::snprintf(line, sizeof line,
                "summary: %lld steps (%lld..%lld) in %.2f s: %.1f ms/step, %.1f samples/s, %.3e tokens/s",
                static_cast<long long>(steps_run), static_cast<long long>(start_step + 1),
                static_cast<long long>(cfg.schedule.steps), run_time, 1e3 * step_time,
                static_cast<double>(cfg.data.batch_size) / step_time, static_cast<double>(tokens_per_step) / step_time);
  log.info(line);
  std::snprintf(line, sizeof line, "summary: first logged loss %.6e (uniform %.6e, unigram %.6e)", first_loss,
                data->uniform_entropy(), unigram);
  log.info(line);
  const bool below = last_loss < unigram;
  std::snprintf(line, sizeof line,
                "summary: final loss %.6e unigram %.6e ratio %.4f (%s the unigram baseline; mean of the last logged "
                "window)",
                last_loss, unigram, last_loss / unigram, below ? "below" : "NOT below");
  log.info(line);
  if (!last_checkpoint.empty()) log.info("summary: last checkpoint " + last_checkpoint);
  return 0;
}

}  // namespace tessera::run
