#pragma once
// load_model / load_decoder / load_any_model: rebuild a trained model from its
// checkpoint alone, at the caller's layout.
//
// tessera-run stores the model's architecture as YAML in the checkpoint's metadata
// attribute (a top-level `model:` mapping whose `type` is field_emulator or decoder).
// The loaders read it, build the model on `mesh` (any tp/domain split: the checkpoint
// loader reads exactly the hyperslabs the current layout needs; pipeline 1, since the
// whole model runs on every rank: InvalidArgument otherwise) and load the weights
// (no optimizer state). load_any_model dispatches on the stored type; it is the entry
// point the C and Fortran inference calls use. The field emulator:
//
//   tessera::Mesh mesh(comm, {tessera::DataParallelMode::none, /*tensor=*/1, /*domain=*/4});
//   auto model = tessera::load_model("runs/demo", mesh);        // root, step dir or file
//   const auto box = model->decomposition().box();              // this rank's lat band
//   tessera::Tensor y = model->predict(x);   // x f32 [B, C, box.lat.length, nlon], physical units
//
// The decoder (models::Decoder, any tp; the mesh's domain and pipeline sizes must be 1):
//
//   tessera::Mesh mesh(comm, {tessera::DataParallelMode::none, /*tensor=*/2, /*domain=*/1});
//   auto decoder = tessera::load_decoder("runs/tiny", mesh);
//   tessera::Tensor logits = decoder->logits(ids);   // ids i64 [B, S] -> f32 [B, S, vocab]
//
// Collective over mesh.world(). Any failure (no such checkpoint, metadata that is not a
// description of the model asked for, weights that do not match) throws the same error
// on every rank, naming the file, key or dataset.

#include <memory>
#include <string>

#include "tessera/mesh.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/field_emulator.hpp"

namespace tessera {

namespace models {

// The kinds of model a checkpoint's `model.type` names.
enum class ModelType { field_emulator, decoder };
// "field_emulator", "decoder": the metadata's spelling.
const char* model_type_name(ModelType type);

// A decoder rebuilt for inference: the serial Decoder parallelised over mesh.tp() by
// parallelize_decoder (the plan tessera-run trains with, the same FQNs) with sequence
// parallelism off -- inference has no activation memory to save, and replicated
// activations keep the caller's ids whole on every tp rank.
class LoadedDecoder {
 public:
  // The model without weights (load_decoder loads them). InvalidArgument naming the mesh
  // when its domain or pipeline size is not 1; the tp checks of parallelize_decoder.
  LoadedDecoder(const DecoderConfig& config, const Mesh& mesh);

  // ids i64 [B, S] (any device; values in [0, vocab)) -> logits f32 [B, S, vocab] on the
  // mesh's device, whole on every tp rank: a vocab-sharded head's logits are
  // all-gathered over tp (tied embeddings: already replicated). Collective over
  // mesh.tp(); every tp rank passes the same ids, the dp replicas their own.
  Tensor logits(const Tensor& ids);

  const DecoderConfig& config() const { return config_; }
  const Mesh& mesh() const { return mesh_; }
  Decoder& decoder() { return *decoder_; }  // the parallelised module (its logits are tp-local)
  bool vocab_sharded_logits() const { return vocab_sharded_; }

 private:
  DecoderConfig config_;
  const Mesh& mesh_;
  std::unique_ptr<Decoder> decoder_;
  bool vocab_sharded_ = false;
};

// One of the two, as load_any_model found it.
struct LoadedModel {
  ModelType type = ModelType::field_emulator;
  std::unique_ptr<FieldEmulator> emulator;  // type field_emulator
  std::unique_ptr<LoadedDecoder> decoder;   // type decoder
};

}  // namespace models

// A field-emulator checkpoint (a decoder's is a ConfigError pointing to load_decoder).
std::unique_ptr<models::FieldEmulator> load_model(const std::string& checkpoint_path, const Mesh& mesh);
// A decoder checkpoint (a field emulator's is a ConfigError pointing to load_model).
std::unique_ptr<models::LoadedDecoder> load_decoder(const std::string& checkpoint_path, const Mesh& mesh);
// Either, by the metadata's model.type.
models::LoadedModel load_any_model(const std::string& checkpoint_path, const Mesh& mesh);

namespace models {

// The `model.type` of checkpoint metadata (ConfigError naming `source` when there is no
// `model:` mapping or the type is neither). A mapping without `type` is a field
// emulator (FieldEmulatorConfig::from_yaml's default).
ModelType model_type_from_metadata(const std::string& metadata, const std::string& source);

// The architecture stored in a checkpoint (serial, no communication): `checkpoint_path`
// is a checkpoint.h5 file, a step directory or a root directory (through `latest`).
FieldEmulatorConfig read_model_config(const std::string& checkpoint_path);
// The same, from metadata text: a document whose `model:` mapping describes the model.
FieldEmulatorConfig model_config_from_metadata(const std::string& metadata, const std::string& source);
// Metadata text holding `config` under `model:` (and `extra`, more top-level YAML, after it).
std::string model_metadata(const FieldEmulatorConfig& config, const std::string& extra = "");

// The decoder's architecture in the metadata's format (what tessera-run writes: `type:
// decoder`, vocab, d_model, n_heads, hidden, n_layers, eps, tie_embeddings, and
// n_kv_heads / rope / rope_theta only where they differ from the defaults).
std::string decoder_yaml(const DecoderConfig& config);
DecoderConfig decoder_config_from_metadata(const std::string& metadata, const std::string& source);
std::string decoder_metadata(const DecoderConfig& config, const std::string& extra = "");

}  // namespace models
}  // namespace tessera
