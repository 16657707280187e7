#pragma once
// tessera-ckpt import / export: PyTorch weights (safetensors) in and out of tessera
// checkpoints, with a key mapping (io/weight_mapping.hpp). docs/pytorch.md is the guide.

#include <string>
#include <vector>

namespace tessera::ckpt {

// `args` are the words after the command name. Both return the exit status (0) or
// throw; a usage error is an InvalidArgument whose message says what is wrong.
//   import INPUT.safetensors OUTPUT_ROOT [--mapping MAP.yaml] [--metadata META.yaml]
//          [--dtype f32|f64|bf16] [--step N] [--layout shared|per_rank] [--partial true]
//   export PATH OUTPUT.safetensors [--format safetensors] [--mapping MAP.yaml]
int import_command(const std::vector<std::string>& args);
int export_command(const std::vector<std::string>& args);

}  // namespace tessera::ckpt
