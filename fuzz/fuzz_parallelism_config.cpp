// libFuzzer target: the bytes as YAML text for ParallelismConfig::from_yaml_string
// (include/tessera/parallelism.hpp), the parser behind every trainer config and
// tessera_mesh_create_from_file.
//
// Contract checked: the parser either returns a valid config or throws a tessera::Error
// (a ConfigError naming the key). Anything else is a finding: a crash, a sanitizer
// report, another exception type escaping (e.g. a YAML::Exception or std::bad_alloc the
// parser forgot to translate), or a config it returned that is not valid or does not
// survive its own round trip through str().

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "fuzz_input.hpp"
#include "tessera/error.hpp"
#include "tessera/parallelism.hpp"

namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_parallelism_config: FINDING: %s: %s\n", what, detail.c_str());
  std::abort();
}

// The size of the document as a tree, aliases expanded: nodes are shared through aliases
// (yaml-cpp keeps one node per anchor), identified here by their position in the text.
// -1 when the graph has a cycle (an alias inside its own anchor), capped at `limit`.
class ExpandedSize {
 public:
  explicit ExpandedSize(long long limit) : limit_(limit) {}
  long long of(const YAML::Node& node) {
    const int pos = node.Mark().pos;
    if (pos >= 0) {
      if (const auto it = done_.find(pos); it != done_.end()) return it->second;
      if (!open_.insert(pos).second) return -1;  // back at an ancestor: a cycle
    }
    long long n = 1;
    if (node.IsSequence() || node.IsMap()) {
      for (const auto& item : node) {
        for (const YAML::Node& child : node.IsMap() ? std::initializer_list<YAML::Node>{item.first, item.second}
                                                    : std::initializer_list<YAML::Node>{item}) {
          const long long c = of(child);
          if (c < 0) return -1;
          n = std::min(limit_, n + c);
        }
      }
    }
    if (pos >= 0) {
      open_.erase(pos);
      done_[pos] = n;
    }
    return n;
  }

 private:
  long long limit_;
  std::unordered_map<int, long long> done_;
  std::unordered_set<int> open_;
};

// FINDING fuzz/findings/fuzz_parallelism_config-alias-cycle-recursion and
// -alias-fanout-exponential: reject_duplicate_keys (src/mesh/parallelism.cpp) walks the
// document with aliases expanded and no memory of visited nodes, so an alias inside its own
// anchor ("a: &p {b: *p}") recurses until the stack overflows, and a few hundred bytes of
// nested aliases take minutes. Such documents are left out unless asked for
// (TESSERA_FUZZ_INCLUDE_FINDINGS=1); the parser sees every other input.
bool reaches_reported_bug(std::string_view yaml) {
  if (tessera::fuzz::include_findings() || yaml.find('*') == std::string_view::npos) return false;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    constexpr long long kLimit = 100000;
    const long long n = ExpandedSize(kLimit).of(root);
    return n < 0 || n >= kLimit;
  } catch (...) {
    return false;  // the parser rejects it too
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  if (reaches_reported_bug(yaml)) return 0;
  tessera::ParallelismConfig config;
  try {
    config = tessera::ParallelismConfig::from_yaml_string(yaml, "fuzz.yaml");
  } catch (const tessera::Error&) {
    return 0;  // a rejected config: the expected outcome for most inputs
  } catch (const std::exception& e) {
    finding("non-tessera exception from from_yaml_string", e.what());
  } catch (...) {
    finding("non-std exception from from_yaml_string", "(unknown type)");
  }

  // An accepted config is valid, prints, and parses back to itself.
  try {
    config.validate();
  } catch (const std::exception& e) {
    finding("from_yaml_string returned a config that validate() rejects", e.what());
  }
  const std::string text = "parallelism: " + config.str();
  try {
    const auto again = tessera::ParallelismConfig::from_yaml_string(text, "round-trip");
    if (!(again == config)) finding("round trip changed the config", text + " -> " + again.str());
  } catch (const std::exception& e) {
    finding("str() of an accepted config does not parse", text + ": " + e.what());
  }

  // The dp arithmetic every mesh does with it: a ConfigError or a count, never a trap.
  for (int world : {1, 2, 3, 4, 8, 64, 1 << 30, 2147483647}) {
    try {
      const int dp = tessera::dp_world_size(config, world);
      if (dp < 1 || static_cast<long long>(dp) * config.tensor * config.domain != world) {
        finding("dp_world_size is inconsistent", config.str() + " at world " + std::to_string(world) +
                                                      " gave dp " + std::to_string(dp));
      }
    } catch (const tessera::Error&) {
    } catch (const std::exception& e) {
      finding("non-tessera exception from dp_world_size", e.what());
    }
  }
  return 0;
}
