#include "tessera/wait_policy.hpp"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>

#include "tessera/error.hpp"
#include "tessera/detail/enum_table.hpp"

namespace tessera {

constexpr tessera::detail::EnumName<WaitPolicy> kWaitPolicyNames[] = {
    {WaitPolicy::spin, "spin"},
    {WaitPolicy::sleep, "sleep"},
    {WaitPolicy::automatic, "auto"},
};

std::string_view wait_policy_name(WaitPolicy policy) noexcept {
  return tessera::detail::name_of(kWaitPolicyNames, policy);
}

WaitPolicy parse_wait_policy(std::string_view text, std::string_view what) {
  return tessera::detail::parse_enum(kWaitPolicyNames, text, what, "wait policy");
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

namespace {
// < 0: not set by the program (the environment decides).
std::atomic<double> g_collective_timeout{-1.0};
}  // namespace

double collective_timeout() {
  const double set = g_collective_timeout.load();
  if (set >= 0) return set;
  const char* env = std::getenv("TESSERA_COLLECTIVE_TIMEOUT");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const double value = std::strtod(env, &end);
  if (*end != '\0' || !std::isfinite(value) || value < 0) {
    throw ConfigError(std::string("environment variable TESSERA_COLLECTIVE_TIMEOUT: expected a number of seconds "
                                  ">= 0 (0: no watchdog), got '") +
                      env + "'");
  }
  return value;
}

void set_collective_timeout(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) {
    throw InvalidArgument("set_collective_timeout: expected seconds >= 0 (0: no watchdog), got " +
                          std::to_string(seconds));
  }
  g_collective_timeout.store(seconds);
}

}  // namespace tessera
