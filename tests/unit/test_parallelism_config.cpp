// ParallelismConfig parsing, validation, the dp arithmetic and the mesh layout formula.
// Every invalid input must be a ConfigError whose message names the key and the bad value.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tessera/error.hpp"
#include "tessera/mesh.hpp"
#include "tessera/parallelism.hpp"
#include "tessera/placement.hpp"

using namespace tessera;

namespace {

// Expects a ConfigError whose message contains every fragment.
void expect_config_error(const std::string& yaml, std::initializer_list<std::string> fragments) {
  try {
    ParallelismConfig::from_yaml_string(yaml, "test.yaml");
    ADD_FAILURE() << "no error for:\n" << yaml;
  } catch (const ConfigError& e) {
    for (const auto& f : fragments) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
          << "message '" << e.what() << "' lacks '" << f << "' for:\n" << yaml;
    }
  }
}

}  // namespace

TEST(ParallelismConfig, TrainerBlockAsInCredit) {
  const auto c = ParallelismConfig::from_yaml_string(
      "trainer:\n  epochs: 3\n  parallelism: {data: fsdp2, tensor: 2, domain: 2}\nmodel: {}\n");
  EXPECT_EQ(c.data, DataParallelMode::fsdp2);
  EXPECT_EQ(c.tensor, 2);
  EXPECT_EQ(c.domain, 2);
  EXPECT_EQ(c.str(), "{data: fsdp2, tensor: 2, domain: 2}");
}

TEST(ParallelismConfig, BareBlockAndDefaults) {
  const auto c = ParallelismConfig::from_yaml_string("parallelism:\n  data: ddp\n  tensor: 4\n");
  EXPECT_EQ(c.data, DataParallelMode::ddp);
  EXPECT_EQ(c.tensor, 4);
  EXPECT_EQ(c.domain, 1);
  EXPECT_EQ(ParallelismConfig::from_yaml_string(""), ParallelismConfig{});
  EXPECT_EQ(ParallelismConfig::from_yaml_string("model: {layers: 2}"), ParallelismConfig{});
  EXPECT_EQ(ParallelismConfig::from_yaml_string("parallelism:"), ParallelismConfig{});
  EXPECT_EQ(ParallelismConfig::from_yaml_string("trainer: {epochs: 1}"), ParallelismConfig{});
  EXPECT_EQ(ParallelismConfig::from_yaml_string("parallelism: {data: none}").data, DataParallelMode::none);
}

TEST(ParallelismConfig, ZeroNegativeAndNonIntegerDegreesAreRejected) {
  expect_config_error("parallelism: {tensor: 0}", {"parallelism.tensor", "0"});
  expect_config_error("parallelism: {domain: -2}", {"parallelism.domain", "-2"});
  expect_config_error("parallelism: {tensor: 2.5}", {"parallelism.tensor", "'2.5'"});
  expect_config_error("parallelism: {tensor: 2.0}", {"parallelism.tensor", "'2.0'"});
  expect_config_error("parallelism: {tensor: two}", {"parallelism.tensor", "'two'"});
  expect_config_error("parallelism: {tensor: true}", {"parallelism.tensor", "'true'"});
  expect_config_error("parallelism: {tensor: 1e3}", {"parallelism.tensor", "'1e3'"});
  expect_config_error("parallelism: {domain: 99999999999}", {"parallelism.domain", "out of range"});
  expect_config_error("parallelism: {tensor: }", {"parallelism.tensor", "no value"});
  expect_config_error("parallelism: {tensor: [2]}", {"parallelism.tensor", "sequence"});
  expect_config_error("trainer:\n  parallelism:\n    domain: {x: 1}\n",
                      {"test.yaml:3", "trainer.parallelism.domain", "mapping"});
}

TEST(ParallelismConfig, UnknownModeAndUnknownKeyAreRejected) {
  expect_config_error("parallelism: {data: zero3}", {"parallelism.data", "'zero3'", "none, ddp or fsdp2"});
  expect_config_error("parallelism: {data: [ddp]}", {"parallelism.data"});
  expect_config_error("trainer:\n  parallelism: {data: ddp, expert: 2}\n",
                      {"trainer.parallelism.expert", "unknown key 'expert'"});
  expect_config_error("parallelism: {Tensor: 2}", {"unknown key 'Tensor'"});
}

TEST(ParallelismConfig, StructuralErrors) {
  expect_config_error("parallelism: 4", {"parallelism", "mapping"});
  expect_config_error("- a\n- b\n", {"top level must be a mapping"});
  expect_config_error("trainer: 3", {"trainer", "mapping"});
  expect_config_error("trainer: {parallelism: {tensor: 2}}\nparallelism: {tensor: 2}\n",
                      {"both trainer.parallelism and a top-level parallelism"});
  expect_config_error("parallelism: {tensor: 2", {"invalid YAML"});
}

TEST(ParallelismConfig, FileLoadingNamesThePath) {
  const std::string path = "test_parallelism_config.tmp.yaml";
  {
    std::ofstream out(path);
    out << "trainer:\n  parallelism:\n    data: ddp\n    tensor: 0\n";
  }
  try {
    ParallelismConfig::from_yaml_file(path);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":4: trainer.parallelism.tensor"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
  try {
    ParallelismConfig::from_yaml_file("/nonexistent/mesh.yaml");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/mesh.yaml"), std::string::npos);
  }
  // Issue 46: a device would be read until memory ran out, a FIFO blocked the open, a
  // directory read as an empty (valid) config. Each is refused, naming what it is.
  const std::string fifo = ::testing::TempDir() + "tessera_mesh_fifo_" + std::to_string(::getpid());
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [where, kind] : std::vector<std::pair<std::string, std::string>>{
           {"/dev/zero", "a character device"}, {"/tmp", "a directory"}, {fifo, "a FIFO"}}) {
    try {
      ParallelismConfig::from_yaml_file(where);
      FAIL() << where;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("config file '" + where + "' is " + kind + ", not a regular file"),
                std::string::npos)
          << e.what();
    }
  }
  std::remove(fifo.c_str());
}

TEST(ParallelismConfig, ValidateCatchesProgrammaticValues) {
  ParallelismConfig c;
  c.tensor = 0;
  EXPECT_THROW(c.validate(), ConfigError);
  c.tensor = 1;
  c.domain = -1;
  EXPECT_THROW(c.validate(), ConfigError);
}

TEST(DpWorldSize, IsTheQuotientAndRejectsRemainders) {
  ParallelismConfig c{DataParallelMode::fsdp2, 2, 2};
  EXPECT_EQ(dp_world_size(c, 8), 2);
  EXPECT_EQ(dp_world_size(c, 4), 1);
  EXPECT_EQ(dp_world_size({DataParallelMode::ddp, 1, 1}, 8), 8);
  try {
    dp_world_size(c, 6);
    FAIL();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("world size 6"), std::string::npos) << what;
    EXPECT_NE(what.find("tensor (2) * domain (2) = 4"), std::string::npos) << what;
  }
  EXPECT_THROW(dp_world_size({DataParallelMode::ddp, 3, 1}, 8), ConfigError);
  EXPECT_THROW(dp_world_size(c, 0), InvalidArgument);
}

TEST(DpWorldSize, DataNoneAllowsOnlyOneReplica) {
  EXPECT_EQ(dp_world_size({DataParallelMode::none, 2, 2}, 4), 1);
  try {
    dp_world_size({DataParallelMode::none, 2, 1}, 8);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallelism.data is none"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("4 data-parallel replicas"), std::string::npos);
  }
}

// tensor * domain used to be computed in int: 65536 * 65536 wrapped to 0 and the world
// size was divided by it (SIGFPE); INT_MAX * INT_MAX wrapped to 1 and a one-rank mesh was
// accepted. The product must fit in an int (a rank count) and the error names both keys.
TEST(ParallelismConfig, DegreesWhoseProductOverflowsAreRejected) {
  for (const auto& [t, d] : {std::pair{65536, 65536}, std::pair{INT_MAX, INT_MAX}, std::pair{2, INT_MAX / 2 + 1}}) {
    const ParallelismConfig c{DataParallelMode::none, t, d};
    try {
      c.validate();
      ADD_FAILURE() << "no error for " << c.str();
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("parallelism.tensor (" + std::to_string(t) + ")"), std::string::npos) << what;
      EXPECT_NE(what.find("parallelism.domain (" + std::to_string(d) + ")"), std::string::npos) << what;
    }
    EXPECT_THROW(dp_world_size(c, 4), ConfigError);
  }
  EXPECT_NO_THROW((ParallelismConfig{DataParallelMode::none, INT_MAX, 1}.validate()));
  // From YAML, the error also names the source.
  expect_config_error("parallelism: {tensor: 65536, domain: 65536}",
                      {"test.yaml", "parallelism.tensor (65536)", "parallelism.domain (65536)"});
}

// The layout formula divides by tensor * domain and by domain: bad degrees are errors,
// not SIGFPE, and so is a rank or coordinate whose global rank does not fit in an int.
TEST(MeshLayout, FormulaRejectsDegreesItCannotDivideBy) {
  EXPECT_EQ(mesh_coords_of(7, 2, 2), (MeshCoords{1, 1, 1}));
  EXPECT_EQ(mesh_global_rank_of({1, 1, 1}, 2, 2), 7);
  EXPECT_THROW(mesh_coords_of(5, 65536, 65536), InvalidArgument);
  EXPECT_THROW(mesh_coords_of(5, 0, 1), InvalidArgument);
  EXPECT_THROW(mesh_coords_of(5, 1, 0), InvalidArgument);
  EXPECT_THROW(mesh_coords_of(-1, 1, 1), InvalidArgument);
  EXPECT_THROW(mesh_global_rank_of({INT_MAX, 1, 0}, 2, 1), InvalidArgument);
  EXPECT_THROW(mesh_global_rank_of({0, 0, 0}, 65536, 65536), InvalidArgument);
}

// The Mesh constructor validates in an agreed step: every rank gets the ConfigError.
TEST(MeshLayout, MeshWithOverflowingDegreesIsAConfigError) {
  try {
    Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, 65536, 65536});
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallelism.domain (65536)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, INT_MAX, INT_MAX}), ConfigError);
}

// YAML forbids duplicate keys; yaml-cpp keeps both and a lookup returns one of them, so
// without this check `tensor: 2` followed by `tensor: 4` would silently lose one.
TEST(ParallelismConfig, DuplicateKeysAreRejectedWithBothLines) {
  expect_config_error("parallelism:\n  tensor: 2\n  tensor: 4\n",
                    {"test.yaml:3", "parallelism.tensor", "appears twice", "first at line 2"});
  expect_config_error("trainer:\n  parallelism: {domain: 2}\ntrainer: {}\n", {"test.yaml:3", "trainer", "appears twice"});
  EXPECT_THROW(check_unique_yaml_keys("model:\n  blocks:\n    - {a: 1, a: 2}\n", "m.yaml"), ConfigError);
  EXPECT_NO_THROW(check_unique_yaml_keys("a: {x: 1}\nb: {x: 1}\nc: [{x: 1}, {x: 2}]\n", "ok.yaml"));
}

// Regressions found by fuzz_parallelism_config: the duplicate-key walk followed YAML
// aliases without remembering them, so an alias inside its own anchor recursed until
// the stack overflowed, and seven levels of ten aliases each took minutes. Each node is
// now walked once.
TEST(ParallelismConfig, AliasCyclesAndFanOutAreWalkedOnce) {
  EXPECT_NO_THROW(ParallelismConfig::from_yaml_string("a: &p {b: *p}\nparallelism: {tensor: 2}\n", "cycle.yaml"));
  std::string fanout = "l0: &a0 [1]\n";
  for (int level = 1; level <= 7; ++level) {
    fanout += "l" + std::to_string(level) + ": &a" + std::to_string(level) + " [";
    for (int k = 0; k < 10; ++k) fanout += (k ? ", *a" : "*a") + std::to_string(level - 1);
    fanout += "]\n";
  }
  EXPECT_EQ(ParallelismConfig::from_yaml_string(fanout + "parallelism: {domain: 2}\n", "fanout.yaml").domain, 2);
  // A duplicate inside an aliased mapping is still found.
  expect_config_error("a: &p {x: 1, x: 2}\nb: *p\n", {"test.yaml:1", "a.x", "appears twice"});
}

// Regression found by fuzz_capi_shapes: a long digit string overflowed int inside
// Placement::parse (undefined behaviour) before being rejected.
TEST(Placement, LongDigitStringsAreRejectedWithoutOverflow) {
  EXPECT_THROW(Placement::parse("Shard(99999999999)", "p"), InvalidArgument);
  EXPECT_THROW(Placement::parse("Shard(64)", "p"), InvalidArgument);
  EXPECT_EQ(Placement::parse("Shard(63)", "p").dim, 63);
}
