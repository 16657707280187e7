// libFuzzer target: the bytes as YAML text for ParallelismConfig::from_yaml_string
// (include/tessera/parallelism.hpp), the parser behind every trainer config and
// tessera_mesh_create_from_file.
//
// Contract checked: the parser either returns a valid config or throws a tessera::Error
// (a ConfigError naming the key). Anything else is a finding: a crash, a sanitizer
// report, another exception type escaping (e.g. a YAML::Exception or std::bad_alloc the
// parser forgot to translate), or a config it returned that is not valid or does not
// survive its own round trip through str().

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "tessera/error.hpp"
#include "tessera/parallelism.hpp"

namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_parallelism_config: FINDING: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
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
      if (dp < 1 || static_cast<long long>(dp) * config.pipeline * config.tensor * config.domain != world) {
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
