#pragma once
// The training configuration: the YAML file of tessera-run (docs/driver.md), which the
// C and Fortran trainer (tessera_trainer_create, docs/online-training.md) reads too.
//
// Parsing is pure (no MPI): every rank parses the same file before MPI_Init, so a bad
// config fails every rank alike and no rank waits in a collective for one that gave up.
// Every section and key is checked; an unknown key is a ConfigError naming it, with the
// file and line.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/io/checkpoint.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/nn/activation_checkpoint.hpp"
#include "tessera/parallelism.hpp"
#include "tessera/precision.hpp"

namespace tessera::train {

enum class LogLevel { error, warn, info, debug };
std::string_view log_level_name(LogLevel level) noexcept;

// Which samples train and which validate (data.validation). Training samples are
// [0, train) of the training data; validation samples are [validation_first,
// validation_first + validation) of the training data (a held-out fraction) or of the
// validation file.
struct ValidationSplit {
  std::int64_t train = 0;
  std::int64_t validation_first = 0;
  std::int64_t validation = 0;
};

// The `data` section. Its keys depend on model.type: the field emulator reads gridded
// fields from HDF5 (path, dataset, variables, lead, normalize); the decoder reads a
// token stream (source, path, tokens, branching, seed). batch_size and shuffle are
// common to both.
struct DataConfig {
  std::string path = "data/rossby_haurwitz.h5";  // relative to the working directory
  std::string dataset = "fields";                // f32 [time, channel, lat, lon]
  std::vector<std::string> variables;            // channel names to use; empty: all
  std::int64_t batch_size = 8;                   // global (over all dp replicas)
  std::int64_t lead = 1;                         // predict time t + lead from time t
  bool normalize = true;                         // (x - mean) / std per channel (file attributes)
  bool shuffle = true;                           // per-epoch permutation from schedule.seed
  // data.validation: held-out samples, evaluated every schedule.eval_every steps. Either
  // a fraction in (0, 1) of this data (the last part: field frames, token samples) or a
  // second file of the same kind (validation_path). Neither: no validation.
  double validation_fraction = 0;
  std::string validation_path;
  bool has_validation() const { return validation_fraction > 0 || !validation_path.empty(); }

  // Decoder (token) data.
  std::string source = "synthetic";  // synthetic (a seeded Markov language) | bytes (path's bytes)
  std::int64_t tokens = 65536;       // synthetic: corpus length
  std::int64_t branching = 4;        // synthetic: successors per token
  std::uint64_t seed = 1234;         // synthetic: the language and its corpus

  // Field emulator, netCDF/CF input (docs/driver.md, "netCDF"): `path` may also be a glob,
  // or a YAML list (path_list, then `path` is its first file), of netCDF-4 files along time.
  std::vector<std::string> path_list;
  std::string format = "auto";  // auto (netcdf for several files or a .nc/.nc4/.cdf name) | tessera | netcdf
  std::string stats;            // per-channel mean and std (`tessera-run stats` writes it); empty: none
};

// model.type: decoder — the architecture (models::DecoderConfig) plus how it is trained.
struct DecoderRunConfig {
  models::DecoderConfig arch = default_arch();
  std::int64_t seq_len = 64;       // tokens per sample (the model predicts each next token)
  bool sequence_parallel = true;   // asked for; tied embeddings switch it off (decoder_tp_plan)
  // model.lora: LoRA adapters (tp::add_lora) on the layers `targets` match; every other
  // parameter is frozen, so only the adapters train. rank 0: off; alpha 0: = rank.
  struct Lora {
    std::int64_t rank = 0;
    double alpha = 0;
    std::vector<std::string> targets{"layers.*.attn.q", "layers.*.attn.v"};
  } lora;

  static models::DecoderConfig default_arch() {
    models::DecoderConfig c;
    c.vocab = 64;
    c.d_model = 64;
    c.n_heads = 4;
    c.hidden = 128;
    c.n_layers = 2;
    return c;
  }
};

// model.type: onnx -- an imported graph trained on the field data (docs/driver.md, "Your
// own model: ONNX"). The data section is the field emulator's.
struct OnnxRunConfig {
  std::string path;         // the ONNX file (relative to the working directory); required
  std::string export_path;  // model.export: the graph with the trained weights, written at the end; empty: none
};

struct OptimizerConfig {
  std::string type = "adamw";  // adamw | sgd
  double lr = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
  double momentum = 0.0;                          // sgd
  double clip_grad_norm = 1.0;                    // 0: no clipping
  std::int64_t warmup_steps = 0;                  // linear warm-up from 0
  std::string lr_schedule = "constant";           // constant | cosine (to min_lr at schedule.steps)
  double min_lr = 0.0;
  // Micro-batches of data.batch_size per optimizer step: gradients add up over them and
  // are reduced over dp once per step, so a step trains on batch_size x accumulate samples.
  std::int64_t accumulate = 1;
  // The dtype gradients cross the network in (ddp/fsdp2 over dp, tp- and
  // domain-replicated sums): f32, or bf16 for half the bytes at bf16 rounding per sum.
  // Gradients and the update stay f32 either way.
  DType reduce_dtype = DType::f32;
};

struct ScheduleConfig {
  std::int64_t steps = 100;   // total optimizer steps (a resumed run continues to this step)
  std::int64_t log_every = 10;
  std::int64_t eval_every = 0;  // validation every N steps (and at the last); 0: at the last only
  std::uint64_t seed = 42;    // initialisation and data order
};

struct CheckpointConfig {
  std::string dir;  // empty: no checkpoints
  io::CheckpointLayout layout = io::CheckpointLayout::shared;
  std::int64_t interval = 0;  // save every N steps (0: only at the end); always at the end
  int keep_last = 0;          // > 0: keep only the newest N step directories
  // Save in the background (io/async_checkpoint.hpp): the step's state is copied to host
  // memory and training goes on while a writer thread produces the same files. Needs
  // MPI_THREAD_MULTIPLE (tessera-run asks for it when this is set).
  bool async = false;
};

// `tessera-run predict`: the autoregressive rollout of a trained field emulator.
struct PredictConfig {
  std::string checkpoint;            // root, step directory or file; empty: checkpoint.dir
  std::int64_t initial_time = 0;     // time index of the data that starts the rollout
  std::int64_t steps = 10;           // model steps (each data.lead snapshots ahead)
  std::string output = "prediction.nc";  // CF netCDF-4 file
  std::int64_t log_every = 10;       // a progress line every N steps
};

// The `pipeline` section: how parallelism.pipeline stages run (decoder only).
struct PipelineRunConfig {
  std::int64_t microbatches = 0;          // per dp replica's batch; 0: parallelism.pipeline
  std::string schedule = "1f1b";          // gpipe | 1f1b
  std::vector<std::string> cut_points;    // dotted paths where stages 1, 2, ... begin; empty: even split
  std::string activations = "stash";      // stash | recompute: how a stage keeps a microbatch's activations
};

struct RunConfig {
  std::string source;  // the file name (plus " (with --set ...)")
  std::string text;    // the effective YAML (after --set overrides)
  ParallelismConfig parallelism;
  std::string model_type = "field_emulator";  // field_emulator | decoder | onnx
  models::FieldEmulatorConfig model;  // field_emulator: architecture keys; grid and data facts come from the data
  DecoderRunConfig decoder;           // decoder
  OnnxRunConfig onnx;                 // onnx
  // model.activation_checkpointing (both model types): which blocks recompute their
  // forward in backward instead of keeping their activations (nn/activation_checkpoint.hpp).
  nn::CheckpointPolicy activation_checkpointing;
  DataConfig data;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  CheckpointConfig checkpoint;
  // "" (start fresh), "latest" (checkpoint.dir's latest; an error when there is none),
  // "latest_or_start" (the same, or step 0 when the directory holds no checkpoint), or a path.
  std::string resume;
  // A checkpoint (checkpoint.h5, step directory, or root with its `latest`) whose model
  // weights start a fresh run: step 0, fresh optimizer state, any layout (an imported
  // PyTorch model, a pretrained base). A checkpoint that `resume` finds takes precedence.
  std::string init_weights;
  LogLevel log_level = LogLevel::info;
  std::string metrics_file;  // logging.metrics_file: JSON lines of every progress record; empty: none
  std::string device = "auto";  // auto | host | cuda: where the model, its state and the batches live
  // precision: the numerics of the model's GEMMs (tessera/precision.hpp); parameters,
  // optimizer state and checkpoints stay f32 either way.
  Precision precision = Precision::fp32;
  // Seconds after which a rank stuck in a collective reports and aborts the job
  // (set_collective_timeout); absent (< 0): TESSERA_COLLECTIVE_TIMEOUT decides; 0: none.
  double collective_timeout = -1;
  PredictConfig predict;  // the `predict` section
  PipelineRunConfig pipeline;  // the `pipeline` section
};

// Parses `path` with `overrides` ("key.sub=value", value as YAML) applied first.
// Throws ConfigError (naming the key) or IoError (naming the file).
RunConfig parse_run_config(const std::string& path, const std::vector<std::string>& overrides);
RunConfig parse_run_config_text(const std::string& text, const std::string& source,
                                const std::vector<std::string>& overrides);

// The learning rate at (1-based) step `step` of `total`.
double learning_rate_at(const OptimizerConfig& config, std::int64_t step, std::int64_t total);

}  // namespace tessera::train
