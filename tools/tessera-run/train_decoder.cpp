#include "train_decoder.hpp"

#include <mpi.h>

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
#include "tessera/models/decoder_chain.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/ops.hpp"
#include "tessera/placement.hpp"
#include "tessera/pp/pipeline.hpp"
#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/lora.hpp"
#include "tessera/tp/parallelize.hpp"

namespace tessera::run {

namespace {

// The decoder units of one pipeline stage (its unit paths: embed, layers.<i>, norm,
// head; a checkpointed block keeps its path), for the stage's activation estimate.
models::DecoderUnits units_of_stage(const std::vector<std::string>& stage) {
  models::DecoderUnits u{false, 0, 0, false, false};
  bool any_block = false;
  for (const std::string& path : stage) {
    if (path == "embed") {
      u.embed = true;
    } else if (path == "norm") {
      u.norm = true;
    } else if (path == "head") {
      u.head = true;
    } else if (path.rfind("layers.", 0) == 0) {
      const std::int64_t i = std::stoll(path.substr(7));
      if (!any_block) u.first_layer = i;
      any_block = true;
      u.layers = i - u.first_layer + 1;
    }
  }
  return u;
}

bool same_architecture(const models::DecoderConfig& a, const models::DecoderConfig& b) {
  return a.vocab == b.vocab && a.d_model == b.d_model && a.n_heads == b.n_heads && a.hidden == b.hidden &&
         a.n_layers == b.n_layers && a.eps == b.eps && a.tie_embeddings == b.tie_embeddings &&
         a.kv_heads() == b.kv_heads() && a.rope == b.rope && (!a.rope || a.rope_theta == b.rope_theta);
}

class DecoderTask final : public TrainingTask {
 public:
  // `validation_data`: the validation file's tokens (null: none, or a held-out part of `data`).
  // `pipeline`: null, or the pipeline over `model` (a DecoderChain) that trains it.
  DecoderTask(const RunConfig& cfg, const Mesh& mesh, std::unique_ptr<nn::Module> model,
              std::unique_ptr<pp::Pipeline> pipeline, std::unique_ptr<TokenData> data,
              std::unique_ptr<TokenData> validation_data, const ValidationSplit& split, bool vocab_sharded_logits)
      : cfg_(cfg), mesh_(mesh), model_(std::move(model)), pipeline_(std::move(pipeline)), data_(std::move(data)),
        validation_data_(std::move(validation_data)), split_(split) {
    // Vocab-sharded logits: the loss is a tp collective. Replicated logits (tied
    // embeddings): every tp rank computes the whole loss itself.
    if (!vocab_sharded_logits || mesh.tp_size() == 1) self_.emplace(MPI_COMM_SELF);
  }

  nn::Module& model() override { return *model_; }
  std::int64_t samples() const override { return split_.train; }
  std::int64_t validation_samples() const override { return split_.validation; }

  void check_saved_model(const io::CheckpointMetadata& header) const override {
    // The metadata format is the library's (models::decoder_yaml), which load_decoder reads.
    const models::DecoderConfig saved = models::decoder_config_from_metadata(header.metadata, header.file);
    const models::DecoderConfig& arch = cfg_.decoder.arch;
    if (!same_architecture(saved, arch)) {
      throw ConfigError("resume: the model in '" + header.file + "' differs from this config's: " +
                        first_difference(models::decoder_yaml(saved), models::decoder_yaml(arch)));
    }
  }
  std::string checkpoint_metadata(const std::string& run_section) const override {
    return models::decoder_metadata(cfg_.decoder.arch, run_section);
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
    if (pipeline_) {
      // Each microbatch's mean loss weighted by its share of the batch's rows: the
      // shares add up to the batch's mean, as without a pipeline.
      const std::int64_t seq_len = cfg_.decoder.seq_len;
      return pipeline_->train_step(
          pipeline_->is_first() ? ids_ : Tensor(), [&](const Tensor& logits, const pp::Microbatch& mb, Tensor& grad) {
            const double share = static_cast<double>(mb.end - mb.begin) / static_cast<double>(mb.batch_rows);
            const tp::CrossEntropyResult ce =
                loss_of(logits, targets_.narrow(0, mb.begin * seq_len, (mb.end - mb.begin) * seq_len));
            grad = ce.grad_logits.reshape(logits.shape());
            ops::scale(grad, share);
            return ce.loss * share;
          });
    }
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
    ids = ids.to(mesh_.device());
    targets = targets.to(mesh_.device());
    if (pipeline_) {
      // Forward through the stages, the microbatches' mean losses weighted by their rows
      // as in forward_backward.
      const std::int64_t seq_len = cfg_.decoder.seq_len;
      const double loss = pipeline_->evaluate(
          pipeline_->is_first() ? ids : Tensor(), [&](const Tensor& logits, const pp::Microbatch& mb) {
            const double share = static_cast<double>(mb.end - mb.begin) / static_cast<double>(mb.batch_rows);
            return loss_of(logits, targets.narrow(0, mb.begin * seq_len, (mb.end - mb.begin) * seq_len)).loss * share;
          });
      return {loss, data_->unigram_entropy()};
    }
    const Tensor logits = model_->forward(ids);
    return {loss_of(logits, targets).loss, data_->unigram_entropy()};
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
  std::unique_ptr<nn::Module> model_;
  std::unique_ptr<pp::Pipeline> pipeline_;  // declared after the model it holds
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

// The token data: the training corpus, the validation file when data.validation names
// one, and the split between training and validation samples. Agreed over the world.
struct DecoderData {
  std::unique_ptr<TokenData> train, validation;
  ValidationSplit split;
};

DecoderData load_decoder_data(const RunConfig& cfg, MPI_Comm world) {
  const models::DecoderConfig& arch = cfg.decoder.arch;
  const std::int64_t seq_len = cfg.decoder.seq_len;
  DecoderData d;
  agree_on_success(world, [&] { d.train = std::make_unique<TokenData>(cfg.data, arch.vocab, seq_len); });
  if (!cfg.data.validation_path.empty()) {
    agree_on_success(world, [&] {
      DataConfig v = cfg.data;
      v.path = cfg.data.validation_path;
      d.validation =
          naming_key("data.validation", [&] { return std::make_unique<TokenData>(v, arch.vocab, seq_len); });
    });
  }
  d.split = split_token_samples(cfg.data, *d.train, d.validation.get());
  if (d.split.train < cfg.data.batch_size) {
    throw ConfigError(cfg.source + ": data.batch_size (" + std::to_string(cfg.data.batch_size) + ") exceeds the " +
                      std::to_string(d.split.train) + " training samples of " + d.train->describe());
  }
  return d;
}

// The model line: its size and how tensor parallelism splits it.
void log_model(const Log& log, const RunConfig& cfg, const Mesh& mesh, models::Decoder& model,
               const models::DecoderTpPlan& plan, bool sp) {
  const models::DecoderConfig& arch = cfg.decoder.arch;
  const int tp_size = mesh.tp_size();
  std::int64_t global_parameters = 0;
  for (const auto& [name, p] : model.named_parameters()) global_parameters += shape_numel(p->global_shape);
  log.info("model: " + model.describe() + (arch.tie_embeddings ? ", tied embeddings" : "") + ", " +
           std::to_string(global_parameters) + " parameters, seq_len " + std::to_string(cfg.decoder.seq_len) +
           ", sequence parallel " + (sp ? "on" : "off") +
           (tp_size > 1 && arch.kv_heads() != arch.n_heads
                ? std::string(", key/value heads ") + (plan.kv_heads_split ? "split over tp" : "repeated over tp")
                : std::string()) +
           (tp_size > 1 ? std::string(", logits ") + (plan.vocab_sharded_logits ? "vocab-sharded" : "replicated")
                        : std::string()));
  if (const std::string p = precision_summary(cfg, mesh); !p.empty()) log.info(p);
}

// The data lines: the corpus, the validation samples and the baselines' entropies.
void log_data(const Log& log, const RunConfig& cfg, const DecoderData& d, std::int64_t local_batch) {
  const TokenData& data = *d.train;
  log.info("data: " + data.describe() + ", " + std::to_string(data.samples()) + " samples of " +
           std::to_string(cfg.decoder.seq_len) + " tokens, batch " + std::to_string(cfg.data.batch_size) + " (" +
           std::to_string(local_batch) + " per dp replica)");
  if (d.split.validation > 0) {
    log.info("validation: " + std::to_string(d.split.validation) + " samples " +
             (d.validation ? "of " + d.validation->describe()
                           : "held out (samples >= " + std::to_string(d.split.validation_first) + ", the last " +
                                 fmt("%g", cfg.data.validation_fraction) + ")") +
             ", " + evaluation_schedule(cfg.schedule));
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "baselines (nats/token): uniform %.4f (log vocab), unigram %.4f (no context)%s", data.uniform_entropy(),
                data.unigram_entropy(),
                std::isnan(data.entropy_rate())
                    ? ""
                    : (", entropy rate " + fmt("%.4f", data.entropy_rate()) + " (the best possible)").c_str());
  log.info(line);
}

// LoRA on the (converted) targets, everything else frozen: only the adapters train and
// are given to the optimizer (frozen parameters are skipped by it, clipping and dp).
void add_lora(nn::Module& model, const RunConfig& cfg, const Mesh& mesh, const Log& log) {
  const auto& lora = cfg.decoder.lora;
  std::int64_t frozen = 0;
  for (Parameter* p : model.parameters()) {
    p->trainable = false;
    frozen += shape_numel(p->global_shape);
  }
  tp::LoraOptions lo;
  lo.rank = lora.rank;
  lo.alpha = lora.alpha;
  const auto wrapped =
      tp::add_lora(model, lora.targets, lo, mesh.tp_size() > 1 ? &mesh.tp() : nullptr, cfg.schedule.seed);
  std::int64_t adapters = 0;
  for (auto& [name, p] : model.named_parameters()) {
    if (tp::is_lora_adapter(name)) adapters += shape_numel(p->global_shape);
  }
  log.info("LoRA: rank " + std::to_string(lora.rank) + ", alpha " + fmt("%g", lora.alpha) + " on " +
           std::to_string(wrapped.size()) + " layers; " + std::to_string(adapters) + " adapter parameters train, " +
           std::to_string(frozen) + " are frozen");
}

// Activation checkpointing of the blocks the policy picks (their forward recomputed in
// backward).
void checkpoint_blocks(models::Decoder& model, const RunConfig& cfg, const Log& log) {
  const nn::CheckpointPolicy& checkpointing = cfg.activation_checkpointing;
  const auto blocks = models::checkpoint_activations(model, checkpointing);
  log.info("activation checkpointing: " + checkpointing.str() + " (" + std::to_string(blocks.size()) + " of " +
           std::to_string(cfg.decoder.arch.n_layers) + " blocks recompute their forward in backward)");
}

// With parallelism.pipeline: the decoder's pieces move into a DecoderChain (which
// replaces `trained`) and this rank keeps its stage's units.
std::unique_ptr<pp::Pipeline> make_pipeline(std::unique_ptr<nn::Module>& trained, const RunConfig& cfg,
                                            const Mesh& mesh, const Log& log, std::int64_t local_batch) {
  const int pp_size = mesh.pp_size();
  const std::int64_t microbatches = cfg.pipeline.microbatches > 0 ? cfg.pipeline.microbatches : pp_size;
  if (microbatches > local_batch) {
    throw ConfigError(cfg.source + ": pipeline.microbatches (" + std::to_string(microbatches) +
                      ") exceeds the rows of a dp replica's batch (" + std::to_string(local_batch) + ")");
  }
  auto chain = std::make_unique<models::DecoderChain>(static_cast<models::Decoder&>(*trained));
  pp::PipelineOptions options;
  options.schedule = pp::parse_schedule(cfg.pipeline.schedule, "pipeline.schedule");
  options.microbatches = static_cast<int>(microbatches);
  options.cut_points = cfg.pipeline.cut_points;
  options.activations = pp::parse_stage_activations(cfg.pipeline.activations, "pipeline.activations");
  options.tied = chain->pipeline_ties();  // tie_embeddings: the head reads embed's table
  std::unique_ptr<pp::Pipeline> pipeline;
  try {
    pipeline = std::make_unique<pp::Pipeline>(*chain, mesh, options);
  } catch (const InvalidArgument& e) {
    throw ConfigError(cfg.source + ": pipeline.cut_points: " + e.what());
  }
  // The same split on every rank, so every rank raises this alike.
  if (chain->tied() && pipeline->split().stages.back() == std::vector<std::string>{"head"}) {
    throw ConfigError(cfg.source + ": pipeline.cut_points: with model.tie_embeddings the last stage would hold only "
                      "the head, which reads embed's table and has no parameter of its own; give cut points that "
                      "keep norm on the last stage (the split: " + pipeline->split().str() + ")");
  }
  trained = std::move(chain);
  std::string units;
  for (const auto& stage : pipeline->split().stages) {
    units += " | " + stage.front() + (stage.size() > 1 ? " .. " + stage.back() : std::string()) + " (" +
             std::to_string(stage.size()) + ")";
  }
  log.info("pipeline: " + std::to_string(pp_size) + " stages, " + cfg.pipeline.schedule + ", " +
           std::to_string(microbatches) + " microbatches of a dp replica's " + std::to_string(local_batch) +
           " rows; units per stage:" + units.substr(2) + "; activations: " + cfg.pipeline.activations);
  return pipeline;
}

// In long double: a hostile batch or seq_len multiplies past int64 (the memory check
// refuses it; the plan prints it saturated).
using Bytes = long double;

// Activations: the whole decoder's for one local batch, or with a pipeline the stage's
// units for its largest microbatch times the microbatches it holds at its peak (stash:
// every microbatch in flight keeps its caches; recompute: one microbatch's caches plus
// the inputs of the others in flight).
struct ActivationEstimate {
  const models::DecoderConfig& arch;
  std::int64_t seq_len, local_batch;
  int tp_size, pp_size;
  bool sp;
  const pp::Pipeline* pipeline;

  Bytes operator()(int stage, const nn::CheckpointPolicy& policy) const {
    if (!pipeline) {
      return static_cast<Bytes>(local_batch) *
             static_cast<Bytes>(models::decoder_activation_bytes(arch, seq_len, tp_size, sp, policy));
    }
    const auto& options = pipeline->options();
    const auto mb_rows = static_cast<Bytes>(shard_range(local_batch, options.microbatches, 0).length);
    const models::DecoderUnits units = units_of_stage(pipeline->split().stages[static_cast<std::size_t>(stage)]);
    const auto held = static_cast<Bytes>(
        pp::peak_in_flight(pp::stage_actions(options.schedule, stage, pp_size, options.microbatches)));
    const Bytes caches =
        mb_rows * static_cast<Bytes>(models::decoder_activation_bytes(arch, seq_len, tp_size, sp, policy, units));
    if (options.activations == pp::StageActivations::stash) return held * caches;
    const Bytes input = units.embed ? 0 : static_cast<Bytes>(seq_len) * static_cast<Bytes>(arch.d_model) * sizeof(float);
    return caches + (held - 1) * mb_rows * input;
  }
};

// This rank's memory plan. A tied head's replica of embed's table on a later stage is
// not a parameter of that stage, so the plan does not see it: its value and gradient
// count as the stage's.
dp::MemoryReport memory_report(nn::Module& trained, const Mesh& mesh, const RunConfig& cfg,
                               const pp::TiedReplicaBytes& replica) {
  dp::MemoryReport report = dp::plan_memory(trained, dp::MemoryPlanLayout::of(mesh), optimizer_kind(cfg.optimizer));
  report.parameter_bytes += replica.values;
  report.gradient_bytes += replica.gradients;
  return report;
}

// --dry-run with a pipeline: every stage's state (its rank with tp and dp coordinate 0),
// printed by rank 0. Collective over mesh.pp().
void log_stage_plans(const Log& log, const Mesh& mesh, const pp::Pipeline& pipeline, const dp::MemoryReport& report,
                     const pp::TiedReplicaBytes& replica, const ActivationEstimate& activations,
                     const nn::CheckpointPolicy& checkpointing) {
  const int pp_size = mesh.pp_size();
  Tensor mine = Tensor::from_vector<std::int64_t>({report.parameter_elements, report.parameter_bytes,
                                                   report.gradient_bytes, report.optimizer_bytes,
                                                   replica.values, replica.gradients},
                                                  {6});
  Tensor all = Tensor::zeros({6 * pp_size}, DType::i64);
  mesh.pp().all_gather(mine, all);
  const auto v = all.to_vector<std::int64_t>();
  const auto& options = pipeline.options();
  const std::int64_t mb_rows = shard_range(activations.local_batch, options.microbatches, 0).length;
  auto mib = [](std::int64_t bytes) { return fmt("%.2f", static_cast<double>(bytes) / 1048576.0) + " MiB"; };
  for (int s = 0; s < pp_size; ++s) {
    const auto* r = &v[static_cast<std::size_t>(6 * s)];
    const auto& stage = pipeline.split().stages[static_cast<std::size_t>(s)];
    const std::int64_t held =
        pp::peak_in_flight(pp::stage_actions(options.schedule, s, pp_size, options.microbatches));
    const std::int64_t act = saturated_bytes(activations(s, checkpointing));
    log.info("  stage " + std::to_string(s) + ": " + stage.front() + (stage.size() > 1 ? " .. " + stage.back() : std::string()) +
             ", " + std::to_string(r[0]) + " parameter elements per rank, parameters " + mib(r[1]) +
             " + gradients " + mib(r[2]) +
             (r[4] > 0 ? " (with embed.weight's tied replica, " + mib(r[4]) + " + " + mib(r[5]) + ")"
                       : std::string()) +
             " + optimizer " + mib(r[3]) + " + activations " + mib(act) + " (" +
             std::to_string(held) + (held == 1 ? " microbatch" : " microbatches") + " of " + std::to_string(mb_rows) +
             " rows in flight, " +
             std::string(pp::stage_activations_name(options.activations)) + ") = " +
             mib(r[1] + r[2] + r[3] + act));
  }
  log.info("  (in the per-rank plan below each rank counts its own stage's state and activations)");
}

// The tied head's table is declared tied (Decoder::tied_parameter_paths): both modes
// keep it whole over dp and reduce it after the whole backward, overlap or not. With a
// pipeline: without overlap (the recomputing schedules run a unit's forward more than
// once per backward, which the overlap hooks do not expect). Null without dp.
std::unique_ptr<dp::DataParallel> make_data_parallel(nn::Module& trained, const RunConfig& cfg, const Mesh& mesh,
                                                     bool pipeline) {
  if (cfg.parallelism.data == DataParallelMode::none) return nullptr;
  dp::DataParallelOptions dp_options;
  dp_options.reduce_dtype = cfg.optimizer.reduce_dtype;
  if (pipeline) dp_options.overlap = false;
  return std::make_unique<dp::DataParallel>(trained, mesh, dp_options);
}

}  // namespace

int train_decoder(const RunConfig& cfg, const Options& opts) {
  Mesh mesh(MPI_COMM_WORLD, cfg.parallelism, run_device(cfg));
  const Log log(mesh.global_rank() == 0, cfg.log_level);
  start_run(log, cfg, mesh);

  const models::DecoderConfig& arch = cfg.decoder.arch;
  // Before anything is allocated (the token data's tables, the tp plan's per-layer rules,
  // the model): a config whose model cannot fit fails here, on every rank.
  check_model_fits(mesh, cfg.source + ": the decoder", arch.parameter_count(), optimizer_kind(cfg.optimizer));
  const std::int64_t seq_len = cfg.decoder.seq_len;
  const int dp_size = mesh.dp_size(), tp_size = mesh.tp_size();
  if (cfg.data.batch_size % dp_size != 0) {
    throw ConfigError(cfg.source + ": data.batch_size (" + std::to_string(cfg.data.batch_size) +
                      ") must be divisible by the number of data-parallel replicas (" + std::to_string(dp_size) + ")");
  }
  const std::int64_t local_batch = cfg.data.batch_size / dp_size;
  DecoderData data = load_decoder_data(cfg, mesh.world().mpi_comm());

  // The plan decides what sequence parallelism really does (tied embeddings switch it off).
  // A pipeline sends whole (replicated) activations between stages: no sequence shards.
  const int pp_size = mesh.pp_size();
  const bool sequence_parallel = cfg.decoder.sequence_parallel && pp_size == 1;
  if (cfg.decoder.sequence_parallel && pp_size > 1 && tp_size > 1) {
    log.info("note: sequence parallelism is off: parallelism.pipeline sends replicated activations between stages");
  }
  const models::DecoderTpPlan plan = models::decoder_tp_plan(arch, sequence_parallel, tp_size);
  if (!plan.reason.empty()) log.info("note: " + plan.reason);
  const bool sp = plan.sequence_parallel && tp_size > 1;

  auto model = std::make_unique<models::Decoder>(arch, DType::f32, mesh.device());
  // Before tensor parallelism and the wrappers: a converted or wrapped layer keeps it.
  model->set_compute_precision(cfg.precision);
  log_model(log, cfg, mesh, *model, plan, sp);
  log_data(log, cfg, data, local_batch);

  // Same master weights at every layout: counter-based init of the serial model, which
  // parallelize then slices (converted layers keep their FQNs and values).
  if (!opts.dry_run) nn::initialize_parameters(*model, cfg.schedule.seed);
  // parallelize_decoder also repeats the key/value heads when tp does not divide them.
  if (tp_size > 1) (void)models::parallelize_decoder(*model, mesh.tp(), sequence_parallel);
  if (cfg.decoder.lora.rank > 0) add_lora(*model, cfg, mesh, log);
  // After tensor parallelism (which must see the blocks' layers) and before data
  // parallelism (a checkpointed block becomes one dp unit: nn/activation_checkpoint.hpp).
  const nn::CheckpointPolicy& checkpointing = cfg.activation_checkpointing;
  if (checkpointing.enabled()) checkpoint_blocks(*model, cfg, log);

  // After tensor parallelism (parallelize_decoder needs the Decoder).
  std::unique_ptr<nn::Module> trained = std::move(model);
  std::unique_ptr<pp::Pipeline> pipeline = pp_size > 1 ? make_pipeline(trained, cfg, mesh, log, local_batch) : nullptr;

  const ShardRange rows = sp ? shard_range(seq_len, tp_size, mesh.coords().tp) : ShardRange{0, seq_len};
  const pp::TiedReplicaBytes replica = pipeline ? pipeline->tied_replica_bytes() : pp::TiedReplicaBytes{};
  const dp::MemoryReport report = memory_report(*trained, mesh, cfg, replica);
  const ActivationEstimate activations{arch, seq_len, local_batch, tp_size, pp_size, sp, pipeline.get()};
  const int own_stage = pipeline ? mesh.coords().pp : 0;
  // The whole plan, activations included, against memory: the same refusal with
  // --dry-run as without, before a batch is allocated (a huge batch or seq_len only
  // grows the activations, which check_model_fits does not see).
  check_memory_plan_fits(mesh, cfg.source + ": the decoder",
                         static_cast<Bytes>(report.total_bytes()) + static_cast<Bytes>(report.transient_bytes),
                         activations(own_stage, checkpointing), static_cast<Bytes>(data.train->bytes()),
                         "lower data.batch_size, model.seq_len, model.d_model, model.hidden, model.n_heads or "
                         "model.vocab, use activation_checkpointing, or add ranks (parallelism.tensor, "
                         "parallelism.pipeline)");
  if (opts.dry_run) {
    if (pipeline) log_stage_plans(log, mesh, *pipeline, report, replica, activations, checkpointing);
    print_memory_plan(log, mesh, "seq rows", rows.start, rows.end(), report,
                      saturated_bytes(activations(own_stage, checkpointing)), data.train->bytes(), checkpointing,
                      saturated_bytes(activations(own_stage, {})));
    log.info("dry run: the config is valid; nothing was trained");
    return 0;
  }

  std::unique_ptr<dp::DataParallel> data_parallel = make_data_parallel(*trained, cfg, mesh, pipeline != nullptr);
  DecoderTask task(cfg, mesh, std::move(trained), std::move(pipeline), std::move(data.train),
                   std::move(data.validation), data.split, plan.vocab_sharded_logits);
  return run_training(cfg, opts, log, mesh, task, data_parallel.get());
}

}  // namespace tessera::run
