// The loss weights from the caller's geometry (issue 41): a regional grid's own
// latitudes (explicit_rows) and no weighting (unweighted), at every process grid of this
// world size, against the serial formula written here; bad latitudes refused naming the
// row; the field emulator's config keeps the latitudes through its YAML.

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "domain_test_support.hpp"
#include "expect_error.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/error.hpp"
#include "tessera/models/field_emulator.hpp"

namespace tessera::testing {
namespace {

using domain::LatitudeGrid;
using domain::LatitudeSpec;

constexpr std::int64_t kLat = 11, kLon = 6, kLead = 2;

double prediction_at(std::int64_t l, std::int64_t i, std::int64_t j) { return std::sin(0.3 * i + 0.7 * j + l); }
double target_at(std::int64_t l, std::int64_t i, std::int64_t j) { return std::cos(0.2 * i - 0.5 * j + 2.0 * l); }

// The serial loss: sum of w_i (p - t)^2 / N with w_i = c_i / mean(c).
double serial_loss(const std::vector<double>& c) {
  double mean = 0;
  for (double v : c) mean += v;
  mean /= static_cast<double>(c.size());
  double sum = 0;
  for (std::int64_t l = 0; l < kLead; ++l)
    for (std::int64_t i = 0; i < kLat; ++i)
      for (std::int64_t j = 0; j < kLon; ++j) {
        const double d = prediction_at(l, i, j) - target_at(l, i, j);
        sum += c[static_cast<std::size_t>(i)] / mean * d * d;
      }
  return sum / static_cast<double>(kLead * kLat * kLon);
}

double parallel_loss(const domain::Decomposition& d, const LatitudeSpec& spec) {
  const domain::LocalBox box = d.box();
  std::vector<double> p, t;
  for (std::int64_t l = 0; l < kLead; ++l)
    for (std::int64_t i = box.lat.start; i < box.lat.end(); ++i)
      for (std::int64_t j = box.lon.start; j < box.lon.end(); ++j) {
        p.push_back(prediction_at(l, i, j));
        t.push_back(target_at(l, i, j));
      }
  const Shape shape{kLead, box.lat.length, box.lon.length};
  return domain::lat_weighted_mse(Tensor::from_vector(p, shape), Tensor::from_vector(t, shape), d, spec).value;
}

TEST(LossGeometry, ARegionalGridIsWeightedByItsOwnLatitudes) {
  std::vector<double> degrees, cosines;
  for (std::int64_t i = 0; i < kLat; ++i) {
    degrees.push_back(86.5 - 2.15 * static_cast<double>(i));  // 86.5 .. 65 N
    cosines.push_back(std::cos(degrees.back() * std::numbers::pi / 180.0));
  }
  for (const domain::ProcessGrid& grid : grids()) {
    const domain::Decomposition d(world(), {kLat, kLon}, grid);
    EXPECT_NEAR(parallel_loss(d, LatitudeSpec::from_latitudes(degrees)), serial_loss(cosines), 1e-13);
    EXPECT_NEAR(parallel_loss(d, LatitudeGrid::unweighted), serial_loss(std::vector<double>(kLat, 1.0)), 1e-13);
  }
}

TEST(LossGeometry, BadLatitudesAreRefusedNamingTheRow) {
  const domain::Decomposition d(world(), {kLat, kLon});
  std::vector<double> degrees(kLat, 10.0);
  degrees[4] = 91.0;
  expect_error<InvalidArgument>([&] { parallel_loss(d, LatitudeSpec::from_latitudes(degrees)); },
                                {"row 4", "outside [-90, 90]"});
  expect_error<InvalidArgument>([&] { parallel_loss(d, LatitudeSpec::from_latitudes({1.0, 2.0})); },
                                {"2 latitudes for a grid of 11 rows"});
  expect_error<InvalidArgument>([&] { parallel_loss(d, LatitudeSpec::from_latitudes(std::vector<double>(kLat, 90.0))); },
                                {"every row lies at a pole", "unweighted"});
}

TEST(LossGeometry, TheModelConfigKeepsTheLatitudes) {
  models::FieldEmulatorConfig c;
  c.nlat = 3;
  c.nlon = 4;
  c.latitude_grid = LatitudeGrid::explicit_rows;
  c.latitudes = {70.25, 68.125, 66.0};
  EXPECT_NO_THROW(c.validate());
  const models::FieldEmulatorConfig back = models::FieldEmulatorConfig::from_yaml(c.to_yaml());
  EXPECT_EQ(back, c);
  EXPECT_EQ(back.latitude_spec(), LatitudeSpec::from_latitudes({70.25, 68.125, 66.0}));
  c.latitudes.pop_back();
  expect_error<ConfigError>([&] { c.validate(); }, {"model.latitude_grid explicit_rows", "2 latitudes"});
}

}  // namespace
}  // namespace tessera::testing
