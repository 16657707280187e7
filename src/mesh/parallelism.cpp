#include "tessera/parallelism.hpp"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "tessera/detail/checked_math.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera {

namespace {

// "config.yaml:4: trainer.parallelism.tensor"
std::string where(std::string_view source, const YAML::Node& node, const std::string& path) {
  std::string s(source);
  const YAML::Mark mark = node.Mark();
  if (mark.line >= 0) s += ":" + std::to_string(mark.line + 1);
  return s + ": " + path;
}

int parse_positive_int(const YAML::Node& node, std::string_view source, const std::string& path) {
  if (node.IsNull()) throw ConfigError(where(source, node, path) + " has no value (expected an integer >= 1)");
  if (!node.IsScalar()) {
    throw ConfigError(where(source, node, path) + " must be an integer >= 1, got a " +
                      (node.IsMap() ? "mapping" : "sequence"));
  }
  const std::string text = node.Scalar();
  std::size_t i = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
  bool digits = i < text.size();
  for (std::size_t j = i; j < text.size(); ++j) digits = digits && text[j] >= '0' && text[j] <= '9';
  if (!digits) {
    throw ConfigError(where(source, node, path) + " must be an integer >= 1, got '" + text + "'");
  }
  errno = 0;
  const long long value = std::strtoll(text.c_str(), nullptr, 10);
  if (errno == ERANGE || value > std::numeric_limits<int>::max()) {
    throw ConfigError(where(source, node, path) + " is out of range, got '" + text + "'");
  }
  if (value < 1) {
    throw ConfigError(where(source, node, path) + " must be an integer >= 1, got " + text);
  }
  return static_cast<int>(value);
}

ParallelismConfig parse_block(const YAML::Node& block, std::string_view source, const std::string& path) {
  ParallelismConfig config;
  if (!block.IsDefined() || block.IsNull()) return config;
  if (!block.IsMap()) {
    throw ConfigError(where(source, block, path) + " must be a mapping with keys data, tensor, domain, pipeline");
  }
  for (const auto& item : block) {
    const std::string key = item.first.IsScalar() ? item.first.Scalar() : std::string("<non-scalar>");
    const std::string key_path = path + "." + key;
    const YAML::Node& value = item.second;
    if (key == "data") {
      if (!value.IsScalar()) {
        throw ConfigError(where(source, value, key_path) + " must be one of none, ddp, fsdp2");
      }
      config.data = parse_data_parallel_mode(value.Scalar(), where(source, value, key_path));
    } else if (key == "tensor") {
      config.tensor = parse_positive_int(value, source, key_path);
    } else if (key == "domain") {
      config.domain = parse_positive_int(value, source, key_path);
    } else if (key == "pipeline") {
      config.pipeline = parse_positive_int(value, source, key_path);
    } else {
      throw ConfigError(where(source, item.first, key_path) + ": unknown key '" + key +
                        "' (expected data, tensor, domain, pipeline)");
    }
  }
  return config;
}

// Walks every mapping once: nodes reached again through an alias (YAML's &anchor /
// *alias; yaml-cpp gives both the same node) are skipped, so a cycle (`a: &p {b: *p}`)
// or an alias fan-out cannot make the walk recurse for ever or visit exponentially many
// nodes (both found by fuzz_parallelism_config).
void reject_duplicate_keys(const YAML::Node& node, std::string_view source, const std::string& path,
                           std::vector<YAML::Node>& seen_nodes) {
  if (!node.IsSequence() && !node.IsMap()) return;
  for (const YAML::Node& seen : seen_nodes) {
    if (seen.is(node)) return;
  }
  seen_nodes.push_back(node);
  if (node.IsSequence()) {
    for (std::size_t i = 0; i < node.size(); ++i) {
      reject_duplicate_keys(node[i], source, path + "[" + std::to_string(i) + "]", seen_nodes);
    }
    return;
  }
  std::vector<std::pair<std::string, int>> seen;  // key, line (1-based)
  for (const auto& item : node) {
    const std::string key = item.first.IsScalar() ? item.first.Scalar() : std::string("<non-scalar>");
    const std::string key_path = path.empty() ? key : path + "." + key;
    const int line = item.first.Mark().line + 1;
    for (const auto& [other, other_line] : seen) {
      if (other == key) {
        throw ConfigError(where(source, item.first, key_path) + ": the key appears twice (first at line " +
                          std::to_string(other_line) + "); YAML keys must be unique, keep one");
      }
    }
    seen.emplace_back(key, line);
    reject_duplicate_keys(item.second, source, key_path, seen_nodes);
  }
}

// The YAML document of `yaml`: ConfigError naming `source` when it is not YAML or holds
// a key twice.
YAML::Node load_unique_yaml(std::string_view yaml, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    throw ConfigError(std::string(source) + ": invalid YAML: " + e.what());
  }
  std::vector<YAML::Node> seen_nodes;
  reject_duplicate_keys(root, source, "", seen_nodes);
  return root;
}

ParallelismConfig parse_document(const YAML::Node& root, std::string_view source) {
  if (!root.IsDefined() || root.IsNull()) return {};
  if (!root.IsMap()) {
    throw ConfigError(std::string(source) + ": the top level must be a mapping");
  }
  // A default-constructed YAML::Node is a *defined* null node, so presence is tracked
  // with explicit flags rather than by testing nodes.
  const YAML::Node trainer = root["trainer"];
  const YAML::Node bare = root["parallelism"];
  const bool has_bare = bare.IsDefined();
  if (trainer.IsDefined() && !trainer.IsNull() && !trainer.IsMap()) {
    throw ConfigError(where(source, trainer, "trainer") + " must be a mapping");
  }
  // (YAML::Node's operator= assigns *into* the node, so `nested` is bound once here.)
  const YAML::Node nested = trainer.IsDefined() && trainer.IsMap() ? trainer["parallelism"] : YAML::Node();
  const bool has_nested = trainer.IsDefined() && trainer.IsMap() && nested.IsDefined();
  if (has_nested && has_bare) {
    throw ConfigError(std::string(source) +
                      ": both trainer.parallelism and a top-level parallelism block are given; keep one");
  }
  if (has_nested) return parse_block(nested, source, "trainer.parallelism");
  if (has_bare) return parse_block(bare, source, "parallelism");
  return {};
}

}  // namespace

constexpr tessera::detail::EnumName<DataParallelMode> kDataParallelModeNames[] = {
    {DataParallelMode::none, "none"},
    {DataParallelMode::ddp, "ddp"},
    {DataParallelMode::fsdp2, "fsdp2"},
};

std::string_view data_parallel_mode_name(DataParallelMode mode) noexcept {
  return tessera::detail::name_of(kDataParallelModeNames, mode);
}

DataParallelMode parse_data_parallel_mode(std::string_view text, std::string_view key) {
  return tessera::detail::parse_enum(kDataParallelModeNames, text, key, "data-parallel mode");
}

void ParallelismConfig::validate() const {
  if (tensor < 1) throw ConfigError("parallelism.tensor must be >= 1, got " + std::to_string(tensor));
  if (domain < 1) throw ConfigError("parallelism.domain must be >= 1, got " + std::to_string(domain));
  if (pipeline < 1) throw ConfigError("parallelism.pipeline must be >= 1, got " + std::to_string(pipeline));
  // tensor * domain (* pipeline) is a rank count that the world size is divided by:
  // wrapped, it was 0 (a division by zero) or a small number (a mesh over the wrong groups).
  const auto replica = detail::try_mul(tensor, domain);
  if (!replica) {
    throw ConfigError("parallelism.tensor (" + std::to_string(tensor) + ") * parallelism.domain (" +
                      std::to_string(domain) + ") overflows int: no launch has that many ranks");
  }
  if (!detail::try_mul(*replica, pipeline)) {
    throw ConfigError("parallelism.pipeline (" + std::to_string(pipeline) + ") * tensor (" +
                      std::to_string(tensor) + ") * domain (" + std::to_string(domain) +
                      ") overflows int: no launch has that many ranks");
  }
}

std::string ParallelismConfig::str() const {
  return "{data: " + std::string(data_parallel_mode_name(data)) + ", tensor: " + std::to_string(tensor) +
         ", domain: " + std::to_string(domain) + (pipeline == 1 ? "" : ", pipeline: " + std::to_string(pipeline)) +
         "}";
}

ParallelismConfig ParallelismConfig::from_yaml_string(std::string_view yaml, std::string_view source) {
  const YAML::Node root = load_unique_yaml(yaml, source);
  const ParallelismConfig config = parse_document(root, source);
  try {
    config.validate();  // what the keys cannot say alone: their product
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(source) + ": " + e.what());
  }
  return config;
}

ParallelismConfig ParallelismConfig::from_yaml_file(const std::string& path) {
  return from_yaml_string(tessera::detail::read_regular_file(path, "config file"), path);
}

void check_unique_yaml_keys(std::string_view yaml, std::string_view source) { (void)load_unique_yaml(yaml, source); }

int dp_world_size(const ParallelismConfig& config, int world_size) {
  config.validate();
  if (world_size < 1) throw InvalidArgument("dp_world_size: world size must be >= 1, got " + std::to_string(world_size));
  // The ranks of one data-parallel replica: every stage's tp × domain groups.
  const int replica = config.pipeline * config.tensor * config.domain;
  // Named as the user wrote it; the pipeline factor only when there is one, so the
  // messages of configs without a pipeline read as before.
  const std::string pipeline_factor =
      config.pipeline == 1 ? "" : "pipeline (" + std::to_string(config.pipeline) + ") * ";
  if (world_size % replica != 0) {
    throw ConfigError("world size " + std::to_string(world_size) + " is not divisible by " + pipeline_factor +
                      "tensor (" + std::to_string(config.tensor) + ") * domain (" + std::to_string(config.domain) +
                      ") = " + std::to_string(replica) + "; launch a multiple of " + std::to_string(replica) +
                      " ranks");
  }
  const int dp = world_size / replica;
  if (config.data == DataParallelMode::none && dp > 1) {
    throw ConfigError("parallelism.data is none but " + std::to_string(world_size) + " ranks / (" +
                      (config.pipeline == 1 ? "" : "pipeline " + std::to_string(config.pipeline) + " * ") + "tensor " + std::to_string(config.tensor) + " * domain " +
                      std::to_string(config.domain) + ") gives " + std::to_string(dp) +
                      " data-parallel replicas that would never synchronise; set data to ddp or "
                      "fsdp2, or launch " + std::to_string(replica) + " ranks");
  }
  return dp;
}

}  // namespace tessera
