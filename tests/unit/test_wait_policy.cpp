// Wait policy parsing and the auto rule (no timing is asserted anywhere).

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>

#include "tessera/error.hpp"
#include "tessera/wait_policy.hpp"

using namespace tessera;

namespace {
// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  std::string old;
  bool had = false;
  ScopedEnv(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) { had = true; old = v; }
    if (value) setenv(n, value, 1); else unsetenv(n);
  }
  ~ScopedEnv() { if (had) setenv(name.c_str(), old.c_str(), 1); else unsetenv(name.c_str()); }
};
}  // namespace

TEST(WaitPolicy, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_wait_policy("spin", "k"), WaitPolicy::spin);
  EXPECT_EQ(parse_wait_policy("sleep", "k"), WaitPolicy::sleep);
  EXPECT_EQ(parse_wait_policy("auto", "k"), WaitPolicy::automatic);
  try {
    parse_wait_policy("busy", "comm.wait");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("comm.wait"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'busy'"), std::string::npos);
  }
  EXPECT_EQ(wait_policy_name(WaitPolicy::automatic), "auto");
}

TEST(WaitPolicy, AutoSleepsOnlyWhenRanksOutnumberCores) {
  EXPECT_EQ(auto_wait_policy(2, 2), WaitPolicy::spin);
  EXPECT_EQ(auto_wait_policy(1, 2), WaitPolicy::spin);
  EXPECT_EQ(auto_wait_policy(4, 2), WaitPolicy::sleep);
  EXPECT_EQ(auto_wait_policy(8, 2), WaitPolicy::sleep);
  EXPECT_EQ(auto_wait_policy(64, 128), WaitPolicy::spin);
}

TEST(WaitPolicy, ExplicitPolicyIgnoresTheEnvironment) {
  ScopedEnv env("TESSERA_WAIT_POLICY", "sleep");
  EXPECT_EQ(resolve_wait_policy(WaitPolicy::spin, 8, 2), WaitPolicy::spin);
}

TEST(WaitPolicy, EnvironmentDecidesAuto) {
  {
    ScopedEnv env("TESSERA_WAIT_POLICY", "sleep");
    EXPECT_EQ(resolve_wait_policy(WaitPolicy::automatic, 1, 16), WaitPolicy::sleep);
  }
  {
    ScopedEnv env("TESSERA_WAIT_POLICY", "spin");
    EXPECT_EQ(resolve_wait_policy(WaitPolicy::automatic, 8, 2), WaitPolicy::spin);
  }
  {
    ScopedEnv env("TESSERA_WAIT_POLICY", "auto");
    EXPECT_EQ(resolve_wait_policy(WaitPolicy::automatic, 8, 2), WaitPolicy::sleep);
  }
  {
    ScopedEnv env("TESSERA_WAIT_POLICY", nullptr);
    EXPECT_EQ(resolve_wait_policy(WaitPolicy::automatic, 2, 2), WaitPolicy::spin);
  }
  {
    ScopedEnv env("TESSERA_WAIT_POLICY", "fast");
    try {
      resolve_wait_policy(WaitPolicy::automatic, 2, 2);
      FAIL();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("TESSERA_WAIT_POLICY"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("'fast'"), std::string::npos);
    }
  }
}

TEST(WaitPolicy, SleepIntervalFromEnvironment) {
  using std::chrono::microseconds;
  {
    ScopedEnv env("TESSERA_WAIT_SLEEP_US", nullptr);
    EXPECT_EQ(resolve_sleep_interval(microseconds(20)), microseconds(20));
  }
  {
    ScopedEnv env("TESSERA_WAIT_SLEEP_US", "50");
    EXPECT_EQ(resolve_sleep_interval(microseconds(20)), microseconds(50));
  }
  for (const char* bad : {"-1", "abc", "10us", "1000000"}) {
    ScopedEnv env("TESSERA_WAIT_SLEEP_US", bad);
    EXPECT_THROW(resolve_sleep_interval(microseconds(20)), ConfigError) << bad;
  }
}

// The collective watchdog's timeout: the environment variable, its errors, and the
// program's own setting (which takes precedence once made).
TEST(CollectiveTimeout, ReadsTheEnvironmentAndRejectsBadValues) {
  {
    ScopedEnv unset("TESSERA_COLLECTIVE_TIMEOUT", nullptr);
    EXPECT_EQ(collective_timeout(), 0.0);
  }
  {
    ScopedEnv env("TESSERA_COLLECTIVE_TIMEOUT", "2.5");
    EXPECT_EQ(collective_timeout(), 2.5);
  }
  {
    ScopedEnv env("TESSERA_COLLECTIVE_TIMEOUT", "0");
    EXPECT_EQ(collective_timeout(), 0.0);
  }
  for (const char* bad : {"-1", "ten", "5s", "inf", "nan"}) {
    ScopedEnv env("TESSERA_COLLECTIVE_TIMEOUT", bad);
    try {
      (void)collective_timeout();
      FAIL() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("TESSERA_COLLECTIVE_TIMEOUT"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(CollectiveTimeout, TheProgramsSettingWinsAndIsChecked) {
  ScopedEnv env("TESSERA_COLLECTIVE_TIMEOUT", "7");
  EXPECT_THROW(set_collective_timeout(-1), InvalidArgument);
  EXPECT_THROW(set_collective_timeout(std::numeric_limits<double>::infinity()), InvalidArgument);
  set_collective_timeout(3);
  EXPECT_EQ(collective_timeout(), 3.0);
  set_collective_timeout(0);  // 0: no watchdog, even with the variable set
  EXPECT_EQ(collective_timeout(), 0.0);
}
