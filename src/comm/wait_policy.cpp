#include "tessera/wait_policy.hpp"

#include <cstdlib>
#include <string>

#include "tessera/error.hpp"

namespace tessera {

std::string_view wait_policy_name(WaitPolicy policy) noexcept {
  switch (policy) {
    case WaitPolicy::spin: return "spin";
    case WaitPolicy::sleep: return "sleep";
    case WaitPolicy::automatic: return "auto";
  }
  return "?";
}

WaitPolicy parse_wait_policy(std::string_view text, std::string_view what) {
  for (WaitPolicy p : {WaitPolicy::spin, WaitPolicy::sleep, WaitPolicy::automatic}) {
    if (text == wait_policy_name(p)) return p;
  }
  throw ConfigError(std::string(what) + ": unknown wait policy '" + std::string(text) +
                    "' (expected spin, sleep or auto)");
}

WaitPolicy auto_wait_policy(int ranks_on_node, int usable_cores) noexcept {
  return ranks_on_node > usable_cores ? WaitPolicy::sleep : WaitPolicy::spin;
}

WaitPolicy resolve_wait_policy(WaitPolicy requested, int ranks_on_node, int usable_cores) {
  if (requested != WaitPolicy::automatic) return requested;
  if (const char* env = std::getenv("TESSERA_WAIT_POLICY"); env != nullptr && *env != '\0') {
    const WaitPolicy from_env = parse_wait_policy(env, "environment variable TESSERA_WAIT_POLICY");
    if (from_env != WaitPolicy::automatic) return from_env;
  }
  return auto_wait_policy(ranks_on_node, usable_cores);
}

std::chrono::microseconds resolve_sleep_interval(std::chrono::microseconds requested) {
  const char* env = std::getenv("TESSERA_WAIT_SLEEP_US");
  if (env == nullptr || *env == '\0') return requested;
  char* end = nullptr;
  const long value = std::strtol(env, &end, 10);
  if (*end != '\0' || value < 0 || value > 100000) {
    throw ConfigError(std::string("environment variable TESSERA_WAIT_SLEEP_US: expected an integer "
                                  "number of microseconds in [0, 100000], got '") +
                      env + "'");
  }
  return std::chrono::microseconds(value);
}

}  // namespace tessera
