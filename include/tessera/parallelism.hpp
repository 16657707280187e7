#pragma once
// ParallelismConfig: how the world is split into pipeline-, data-, tensor- and
// domain-parallel groups. The YAML form follows CREDIT's `trainer.parallelism` block:
//
//   trainer:
//     parallelism: {data: fsdp2, tensor: 2, domain: 2, pipeline: 2}
//
// or a bare top-level `parallelism:` block. Absent keys take their defaults
// (data: none, tensor: 1, domain: 1, pipeline: 1); a document without either block is
// the default configuration. Unknown keys inside the block, values that are not positive
// integers, unknown data modes and a pipeline × tensor × domain product that overflows
// int are ConfigErrors naming the keys and the values.

#include <string>
#include <string_view>

namespace tessera {

enum class DataParallelMode { none, ddp, fsdp2 };
std::string_view data_parallel_mode_name(DataParallelMode mode) noexcept;
// "none" | "ddp" | "fsdp2"; throws ConfigError naming `key` and the value.
DataParallelMode parse_data_parallel_mode(std::string_view text, std::string_view key);

// Throws ConfigError when a mapping anywhere in the YAML text holds the same key twice
// (YAML forbids it; a parser that kept the last one would silently drop the first),
// naming `source`, the key's dotted path and both lines. Every config reader of tessera
// (ParallelismConfig, tessera-run) calls it first. Invalid YAML is a ConfigError too.
void check_unique_yaml_keys(std::string_view yaml, std::string_view source);

struct ParallelismConfig {
  DataParallelMode data = DataParallelMode::none;
  int tensor = 1;  // tensor-parallel degree, >= 1
  int domain = 1;  // domain-parallel degree, >= 1
  // Pipeline stages, >= 1 (the outermost mesh dimension: docs/pipeline.md). Last, so the
  // brace-initialised {data, tensor, domain} configs keep their meaning.
  int pipeline = 1;

  // Throws ConfigError when tensor, domain or pipeline < 1, or when their product
  // overflows int.
  void validate() const;
  // "{data: fsdp2, tensor: 2, domain: 2}", with ", pipeline: N" appended when N > 1.
  std::string str() const;
  bool operator==(const ParallelismConfig&) const = default;

  // Parse from YAML text or a file. `source` names the text in error messages.
  static ParallelismConfig from_yaml_string(std::string_view yaml,
                                           std::string_view source = "<string>");
  static ParallelismConfig from_yaml_file(const std::string& path);
};

// Number of data-parallel replicas for `world_size` ranks: the single source of the dp
// arithmetic (Mesh, data_parallel_coords and the data-parallel wrappers all use it),
// world_size / (pipeline * tensor * domain).
// Throws ConfigError when world_size is not divisible by pipeline*tensor*domain, and when
// data is `none` but the quotient is more than one replica (ranks that hold copies of
// the model would silently never synchronise).
int dp_world_size(const ParallelismConfig& config, int world_size);

}  // namespace tessera
