// detail/enum_table.hpp: a table read both ways. name_of gives each value's name and "?"
// for a value the table lacks; parse_enum gives the value back and refuses any other text
// with a ConfigError naming the key, the text and every allowed name in table order; and
// the library's parsers built on it refuse alike.

#include <gtest/gtest.h>

#include "expect_error.hpp"
#include "tessera/detail/enum_table.hpp"
#include "tessera/parallelism.hpp"
#include "tessera/pp/schedule.hpp"
#include "tessera/precision.hpp"
#include "tessera/wait_policy.hpp"

namespace tessera {
namespace {

using testing::expect_error;

enum class Colour { red, green, blue };
constexpr detail::EnumName<Colour> kColours[] = {{Colour::red, "red"}, {Colour::green, "green"}, {Colour::blue, "blue"}};

TEST(EnumTable, NamesEveryValueAndMarksAnOutsider) {
  EXPECT_EQ(detail::name_of(kColours, Colour::red), "red");
  EXPECT_EQ(detail::name_of(kColours, Colour::blue), "blue");
  EXPECT_EQ(detail::name_of(kColours, static_cast<Colour>(7)), "?");
  static_assert(detail::name_of(kColours, Colour::green) == "green");
}

TEST(EnumTable, ListsTheNamesForAMessage) {
  EXPECT_EQ(detail::names_of(kColours), "red, green or blue");
  constexpr detail::EnumName<Colour> one[] = {{Colour::red, "red"}};
  EXPECT_EQ(detail::names_of(one), "red");
}

TEST(EnumTable, ParsesEachNameBack) {
  for (const auto& entry : kColours) EXPECT_EQ(detail::parse_enum(kColours, entry.name, "k", "colour"), entry.value);
}

TEST(EnumTable, RefusesOtherTextNamingKeyValueAndChoices) {
  expect_error<ConfigError>([] { (void)detail::parse_enum(kColours, "Red", "paint.colour", "colour"); },
                            {"paint.colour: unknown colour 'Red' (expected red, green or blue)"});
  expect_error<ConfigError>([] { (void)detail::parse_enum(kColours, "", "paint.colour", "colour"); }, {"''"});
}

TEST(EnumTable, LibraryParsersRaiseOneErrorType) {
  expect_error<ConfigError>([] { (void)pp::parse_schedule("2f2b", "pipeline.schedule"); },
                            {"pipeline.schedule", "'2f2b'", "gpipe or 1f1b"});
  expect_error<ConfigError>([] { (void)parse_precision("fp16", "precision"); }, {"'fp16'", "fp32 or bf16-mixed"});
  expect_error<ConfigError>([] { (void)parse_wait_policy("busy", "wait"); }, {"'busy'", "spin, sleep or auto"});
  expect_error<ConfigError>([] { (void)parse_data_parallel_mode("fsdp", "parallelism.data"); },
                            {"'fsdp'", "none, ddp or fsdp2"});
  EXPECT_EQ(pp::parse_schedule(pp::schedule_name(pp::Schedule::one_f_one_b)), pp::Schedule::one_f_one_b);
}

}  // namespace
}  // namespace tessera
