#include "train_decoder.hpp"

#include <mpi.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "token_data.hpp"
#include "training_loop.hpp"
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

namespace {

// The attention options, only where they differ from the defaults: the metadata of a
// plain decoder stays what it always was.
std::string attention_yaml(const models::DecoderConfig& a) {
  std::string s;
  if (a.n_kv_heads != 0 && a.n_kv_heads != a.n_heads) s += "n_kv_heads: " + std::to_string(a.n_kv_heads) + "\n";
  if (a.rope) {
    char theta[64];
    std::snprintf(theta, sizeof theta, "%.17g", a.rope_theta);
    s += std::string("rope: true\nrope_theta: ") + theta + "\n";
  }
  return s;
}

}  // namespace

std::string decoder_yaml(const models::DecoderConfig& a) {
  char eps[64];
  std::snprintf(eps, sizeof eps, "%.17g", a.eps);
  return "type: decoder\nvocab: " + std::to_string(a.vocab) + "\nd_model: " + std::to_string(a.d_model) +
         "\nn_heads: " + std::to_string(a.n_heads) + "\nhidden: " + std::to_string(a.hidden) +
         "\nn_layers: " + std::to_string(a.n_layers) + "\neps: " + eps +
         "\ntie_embeddings: " + (a.tie_embeddings ? "true" : "false") + "\n" + attention_yaml(a);
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
      else if (key == "n_kv_heads") a.n_kv_heads = v.as<std::int64_t>();  // absent: n_heads
      else if (key == "rope") a.rope = v.as<bool>();                      // absent: off
      else if (key == "rope_theta") a.rope_theta = v.as<double>();
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
         a.n_layers == b.n_layers && a.eps == b.eps && a.tie_embeddings == b.tie_embeddings &&
         a.kv_heads() == b.kv_heads() && a.rope == b.rope && (!a.rope || a.rope_theta == b.rope_theta);
}

class DecoderTask final : public TrainingTask {
 public:
  // `validation_data`: the validation file's tokens (null: none, or a held-out part of `data`).
  DecoderTask(const RunConfig& cfg, const Mesh& mesh, std::unique_ptr<models::Decoder> model,
              std::unique_ptr<TokenData> data, std::unique_ptr<TokenData> validation_data,
              const ValidationSplit& split, bool vocab_sharded_logits)
      : cfg_(cfg), mesh_(mesh), model_(std::move(model)), data_(std::move(data)),
        validation_data_(std::move(validation_data)), split_(split) {
    // Vocab-sharded logits: the loss is a tp collective. Replicated logits (tied
    // embeddings): every tp rank computes the whole loss itself.
    if (!vocab_sharded_logits || mesh.tp_size() == 1) self_.emplace(MPI_COMM_SELF);
  }

  nn::Module& model() override { return *model_; }
  std::int64_t samples() const override { return split_.train; }
  std::int64_t validation_samples() const override { return split_.validation; }

  void check_saved_model(const io::CheckpointMetadata& header) const override {
    const models::DecoderConfig saved = decoder_from_metadata(header.metadata, header.file);
    const models::DecoderConfig& arch = cfg_.decoder.arch;
    if (!same_architecture(saved, arch)) {
      throw ConfigError("resume: the model in '" + header.file + "' differs from this config's: " +
                        first_difference(decoder_yaml(saved), decoder_yaml(arch)));
    }
  }
  std::string checkpoint_metadata(const std::string& run_section) const override {
    std::string model_text = "model:\n";
    const std::string yaml = decoder_yaml(cfg_.decoder.arch);
    for (std::size_t i = 0, j; i < yaml.size(); i = j + 1) {
      j = yaml.find('\n', i);
      model_text += "  " + yaml.substr(i, j - i) + "\n";
    }
    return model_text + run_section;
  }
  std::string extra_run_keys() const override {
    return "  seq_len: " + std::to_string(cfg_.decoder.seq_len) + "\n  data: \"" + data_->describe() + "\"\n";
  }

  void load_batch(const std::vector<std::int64_t>& samples) override {
    data_->batch(samples, ids_, targets_);
    ids_ = ids_.to(mesh_.device());  // read on the host, trained on the mesh's device
    targets_ = targets_.to(mesh_.device());
  }
  double forward_backward() override {
    const Tensor logits = model_->forward(ids_);
    const tp::CrossEntropyResult ce = loss_of(logits, targets_);
    model_->backward(ce.grad_logits.reshape(logits.shape()));
    return ce.loss;
  }
  // The unigram entropy: the best a model without context can do.
  double baseline() override { return data_->unigram_entropy(); }
  Evaluation evaluate(const std::vector<std::int64_t>& samples) override {
    std::vector<std::int64_t> indices(samples);
    for (auto& i : indices) i += split_.validation_first;
    Tensor ids, targets;
    (validation_data_ ? *validation_data_ : *data_).batch(indices, ids, targets);
    const Tensor logits = model_->forward(ids.to(mesh_.device()));
    return {loss_of(logits, targets.to(mesh_.device())).loss, data_->unigram_entropy()};
  }

  std::string baseline_name() const override { return "unigram"; }
  std::string throughput_unit() const override { return "tokens"; }
  double units_per_sample() const override { return static_cast<double>(cfg_.decoder.seq_len); }
  std::string first_loss_context(double first_baseline) const override {
    return "uniform " + fmt("%.6e", data_->uniform_entropy()) + ", unigram " + fmt("%.6e", first_baseline);
  }

 private:
  const RunConfig& cfg_;
  const Mesh& mesh_;
  std::unique_ptr<models::Decoder> model_;
  // The next-token cross-entropy of logits [B, S, vocab (shard)] against targets [B * S].
  tp::CrossEntropyResult loss_of(const Tensor& logits, const Tensor& targets) {
    const Shape shape = logits.shape();
    return tp::vocab_parallel_cross_entropy(logits.reshape({shape[0] * shape[1], shape[2]}), targets,
                                            self_ ? *self_ : mesh_.tp());
  }

  std::unique_ptr<TokenData> data_, validation_data_;
  ValidationSplit split_;
  std::optional<Communicator> self_;
  Tensor ids_, targets_;
};

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
  std::unique_ptr<TokenData> validation_data;
  if (!cfg.data.validation_path.empty()) {
    agree_on_success(world, [&] {
      DataConfig v = cfg.data;
      v.path = cfg.data.validation_path;
      validation_data =
          naming_key("data.validation", [&] { return std::make_unique<TokenData>(v, arch.vocab, seq_len); });
    });
  }
  const ValidationSplit split = split_token_samples(cfg.data, *data, validation_data.get());
  if (split.train < cfg.data.batch_size) {
    throw ConfigError(cfg.source + ": data.batch_size (" + std::to_string(cfg.data.batch_size) + ") exceeds the " +
                      std::to_string(split.train) + " training samples of " + data->describe());
  }

  // The plan decides what sequence parallelism really does (tied embeddings switch it off).
  const models::DecoderTpPlan plan = models::decoder_tp_plan(arch, cfg.decoder.sequence_parallel, tp_size);
  if (!plan.reason.empty()) log.info("note: " + plan.reason);
  const bool sp = plan.sequence_parallel && tp_size > 1;

  // Before anything is allocated: a config whose model cannot fit fails here, on every rank.
  check_model_fits(mesh, cfg.source + ": the decoder", arch.parameter_count(), optimizer_kind(cfg.optimizer));
  auto model = std::make_unique<models::Decoder>(arch, DType::f32, mesh.device());
  std::int64_t global_parameters = 0;
  for (const auto& [name, p] : model->named_parameters()) global_parameters += shape_numel(p->global_shape);
  log.info("model: " + model->describe() + (arch.tie_embeddings ? ", tied embeddings" : "") + ", " +
           std::to_string(global_parameters) + " parameters, seq_len " + std::to_string(seq_len) +
           ", sequence parallel " + (sp ? "on" : "off") +
           (tp_size > 1 && arch.kv_heads() != arch.n_heads
                ? std::string(", key/value heads ") + (plan.kv_heads_split ? "split over tp" : "repeated over tp")
                : std::string()) +
           (tp_size > 1 ? std::string(", logits ") + (plan.vocab_sharded_logits ? "vocab-sharded" : "replicated")
                        : std::string()));
  log.info("data: " + data->describe() + ", " + std::to_string(data->samples()) + " samples of " +
           std::to_string(seq_len) + " tokens, batch " + std::to_string(cfg.data.batch_size) + " (" +
           std::to_string(local_batch) + " per dp replica)");
  if (split.validation > 0) {
    log.info("validation: " + std::to_string(split.validation) + " samples " +
             (validation_data ? "of " + validation_data->describe()
                              : "held out (samples >= " + std::to_string(split.validation_first) + ", the last " +
                                    fmt("%g", cfg.data.validation_fraction) + ")") +
             ", " + evaluation_schedule(cfg.schedule));
  }
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
  // parallelize_decoder also repeats the key/value heads when tp does not divide them.
  if (tp_size > 1) (void)models::parallelize_decoder(*model, mesh.tp(), cfg.decoder.sequence_parallel);
  // After tensor parallelism (which must see the blocks' layers) and before data
  // parallelism (a checkpointed block becomes one dp unit: nn/activation_checkpoint.hpp).
  const nn::CheckpointPolicy& checkpointing = cfg.activation_checkpointing;
  if (checkpointing.enabled()) {
    const auto blocks = models::checkpoint_activations(*model, checkpointing);
    log.info("activation checkpointing: " + checkpointing.str() + " (" + std::to_string(blocks.size()) + " of " +
             std::to_string(arch.n_layers) + " blocks recompute their forward in backward)");
  }

  const ShardRange rows = sp ? shard_range(seq_len, tp_size, mesh.coords().tp) : ShardRange{0, seq_len};
  if (opts.dry_run) {
    const dp::MemoryReport report =
        dp::plan_memory(*model, dp::MemoryPlanLayout::of(mesh), optimizer_kind(cfg.optimizer));
    print_memory_plan(log, mesh, "seq rows", rows.start, rows.end(), report,
                      local_batch * models::decoder_activation_bytes(arch, seq_len, tp_size, sp, checkpointing),
                      data->bytes(), checkpointing,
                      local_batch * models::decoder_activation_bytes(arch, seq_len, tp_size, sp));
    log.info("dry run: the config is valid; nothing was trained");
    return 0;
  }

  std::unique_ptr<dp::DataParallel> data_parallel;
  if (cfg.parallelism.data != DataParallelMode::none) {
    // The tied head's table is declared tied (Decoder::tied_parameter_paths): both modes
    // keep it whole over dp and reduce it after the whole backward, overlap or not.
    data_parallel = std::make_unique<dp::DataParallel>(*model, mesh, dp::DataParallelOptions{});
  }
  DecoderTask task(cfg, mesh, std::move(model), std::move(data), std::move(validation_data), split,
                   plan.vocab_sharded_logits);
  return run_training(cfg, opts, log, mesh, task, data_parallel.get());
}

}  // namespace tessera::run
