#pragma once
// FieldEmulator: a next-state emulator for gridded (B, C, lat, lon) fields, split over
// the mesh's domain (latitude bands) and tensor (channel-MLP hidden channels) groups.
//
//   x (B, channels, lat, lon)                         normalised fields at time t
//   -> "encoder"  domain::DomainConv2d channels -> width, k x k, halo-exchanging
//   -> "blocks"   n_blocks models::ChannelMlpBlock(width, mlp_hidden): residual 1x1
//                 column/row convolutions, tensor-parallel through
//                 tp::apply_tensor_parallel (mlp_hidden split over tp)
//   -> GELU ("act")
//   -> "decoder"  domain::DomainConv2d width -> channels, k x k
//   y = x + decoder(...)  when residual (the network predicts the tendency), else decoder(...)
//
// The encoder and decoder weights are replicated over tp and domain; the blocks' weights
// are tp-sharded and domain-replicated. Gradients of domain-replicated weights are
// partial sums: call domain::sync_domain_gradients (and tp::sync_replicated_gradients)
// after backward. Initialisation is counter-based, so the master weights are the same at
// every (dp, tp, domain) layout.
//
// FieldEmulatorConfig is the whole architecture plus what an inference caller needs to
// feed the model physical fields (variable names, per-channel mean/std, the grid and the
// time step). It serialises to YAML text, which tessera-run stores as the checkpoint's
// metadata, so load_model (models/load_model.hpp) rebuilds the model from the checkpoint
// alone.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/nn/activation_checkpoint.hpp"
#include "tessera/nn/module.hpp"

namespace tessera {
class Mesh;
}

namespace tessera::models {

struct FieldEmulatorConfig {
  // Architecture.
  std::int64_t channels = 3;     // input = output channels
  std::int64_t width = 32;       // channels after the encoder conv
  std::int64_t mlp_hidden = 64;  // hidden channels of each block (split over tp)
  std::int64_t n_blocks = 2;
  int kernel = 3;                // encoder/decoder kernel (k x k, "same" padding)
  bool residual = true;          // y = x + net(x)
  domain::PolePolicy pole = domain::PolePolicy::zero;  // latitude padding beyond the poles
  // longitude is always periodic

  // Grid the model runs on (the decomposition's global lat x lon).
  std::int64_t nlat = 0;
  std::int64_t nlon = 0;
  domain::LatitudeGrid latitude_grid = domain::LatitudeGrid::cell_centres;
  std::vector<double> latitudes;  // explicit_rows: every row's latitude in degrees (else empty)
  // The loss weights' geometry (latitude_grid with latitudes).
  domain::LatitudeSpec latitude_spec() const;

  // Data description for inference callers: forward() works on normalised fields,
  // (x - mean) / std per channel; predict() applies it on physical fields.
  std::vector<std::string> variables;  // channel names, size channels (may be empty)
  std::vector<double> mean;            // size channels, or empty (= 0)
  std::vector<double> std;             // size channels, or empty (= 1)
  double dt_seconds = 0;               // time between input and target (0: unknown)

  // Throws ConfigError naming the field ("model.width must be >= 1, got 0").
  void validate() const;
  // The model's parameter count (every rank builds the whole model before tensor
  // parallelism slices its blocks); ConfigError when it does not fit in int64.
  std::int64_t parameter_count() const;
  // A YAML mapping ("type: field_emulator\nchannels: 3\n..."); from_yaml reads it back
  // (unknown keys are ConfigErrors naming the key; `source` names the text in errors).
  std::string to_yaml() const;
  static FieldEmulatorConfig from_yaml(std::string_view yaml, std::string_view source = "<metadata>");
  bool operator==(const FieldEmulatorConfig&) const = default;
};

// "with_poles" "cell_centres" "explicit_rows" "unweighted"
std::string_view latitude_grid_name(domain::LatitudeGrid grid) noexcept;
domain::LatitudeGrid parse_latitude_grid(std::string_view text, std::string_view key);
domain::PolePolicy parse_pole_policy(std::string_view text, std::string_view key);

class FieldEmulator : public nn::Module {
 public:
  // Collective over mesh.domain() (plans the halo exchanges) and, with tensor
  // parallelism, over mesh.tp(): the blocks are converted by apply_tensor_parallel.
  // The parameters live on mesh.device() (inputs must too) and are zero; call nn::initialize_parameters(model, seed) or load a
  // checkpoint. The mesh must outlive the model.
  FieldEmulator(const FieldEmulatorConfig& config, const Mesh& mesh);
  ~FieldEmulator() override;

  // x: normalised local field [B, channels, local_lat, local_lon] (this rank's
  // latitude band, decomposition().box()), f32 on mesh.device(), identical on every tp rank.
  // Returns the predicted next state, same shape. Collective over tp and domain.
  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::string type_name() const override { return "FieldEmulator"; }

  // Physical units in and out: normalise, forward, denormalise.
  Tensor predict(const Tensor& physical_input);
  void normalize(Tensor& field) const;    // in place, f32 [B, channels, ...]
  void denormalize(Tensor& field) const;  // in place

  const FieldEmulatorConfig& config() const { return config_; }
  // The split of the (B, channels, nlat, nlon) grid over mesh.domain() (latitude bands).
  const domain::Decomposition& decomposition() const { return *decomposition_; }
  std::string describe() const;  // "FieldEmulator(channels=3, width=32, ..., grid 32x64)"

 private:
  FieldEmulatorConfig config_;
  std::unique_ptr<domain::Decomposition> decomposition_;  // the children's halo plans refer to it
};

// Activation checkpointing of the emulator's ChannelMlpBlocks ("blocks.<i>") that
// `policy` selects (nn/activation_checkpoint.hpp); returns their paths. The constructor
// has already applied tensor parallelism; call it after nn::initialize_parameters (or a
// checkpoint load) and before dp::DataParallel. FQNs do not change.
std::vector<std::string> checkpoint_activations(FieldEmulator& model, const nn::CheckpointPolicy& policy);

}  // namespace tessera::models
