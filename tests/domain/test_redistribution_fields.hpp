#pragma once
// Fields and checks shared by the redistribution tests (test_redistribution.cpp and
// test_redistribution_routes.cpp): their global grid, a distinct value for every cell of
// every field, bit comparisons, the round trip of several fields checked cell by cell,
// and an error expected on every rank.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/redistribution.hpp"
#include "tessera/tensor.hpp"

namespace tessera::testing::redistribution {

// The global grid of the redistribution tests: 9 latitudes, 10 longitudes.
inline constexpr std::int64_t kLat = 9, kLon = 10;

// A distinct value for every (field, leading index, lat, lon), exact in f32.
inline double value(int field, std::int64_t lead, std::int64_t i, std::int64_t j) {
  return 1000.0 * field + 100.0 * static_cast<double>(lead) + 10.0 * static_cast<double>(i) +
         static_cast<double>(j) * 0.5 + 0.25;
}

// Field `k` of (leading..., box) filled from value() (times `sign`).
inline Tensor filled(int k, DType dtype, const Shape& leading, const domain::LocalBox& box, double sign = 1.0) {
  Shape s = leading;
  s.push_back(box.lat.length);
  s.push_back(box.lon.length);
  Tensor t = Tensor::empty(s, DType::f64);
  const std::int64_t lead = shape_numel(leading);
  double* p = t.data<double>();
  for (std::int64_t l = 0; l < lead; ++l)
    for (std::int64_t i = 0; i < box.lat.length; ++i)
      for (std::int64_t j = 0; j < box.lon.length; ++j)
        *p++ = sign * value(k, l, box.lat.start + i, box.lon.start + j);
  if (dtype == DType::f64) return t;
  std::vector<float> narrow;
  for (double v : t.to_vector<double>()) narrow.push_back(static_cast<float>(v));
  return Tensor::from_vector(narrow, s);
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data(), y.data(), x.nbytes()) == 0;
}

struct FieldSpec {
  DType dtype;
  Shape leading;
};
// Several fields: f32 and f64, with and without leading dims.
inline const std::vector<FieldSpec> kFields{{DType::f32, {2}}, {DType::f64, {}}, {DType::f64, {3, 2}}, {DType::f32, {1}}};

// Code -> model, every model cell checked; model -> code of the model's values negated;
// and the untouched round trip: bit-exact.
inline void check_round_trip(domain::Redistribution& plan, bool split) {
  const domain::Decomposition& code = plan.code();
  std::vector<Tensor> code_fields, model_fields, back;
  for (std::size_t k = 0; k < kFields.size(); ++k) {
    code_fields.push_back(filled(static_cast<int>(k), kFields[k].dtype, kFields[k].leading, code.box()));
    back.push_back(Tensor::zeros(code_fields.back().shape(), kFields[k].dtype));
    if (plan.is_model_rank()) {
      model_fields.push_back(Tensor::zeros(plan.model_shape(kFields[k].leading), kFields[k].dtype));
    }
  }
  if (split) {
    plan.start_to_model(code_fields, model_fields);
    EXPECT_TRUE(plan.in_flight());
    plan.finish();
  } else {
    plan.to_model(code_fields, model_fields);
  }
  EXPECT_FALSE(plan.in_flight());
  for (std::size_t k = 0; k < model_fields.size(); ++k) {
    const Tensor expected = filled(static_cast<int>(k), kFields[k].dtype, kFields[k].leading, plan.model_box());
    EXPECT_TRUE(same_bits(model_fields[k], expected)) << plan.str() << ", field " << k << " on model rank "
                                                       << plan.model_rank();
  }
  plan.to_code(model_fields, back);
  for (std::size_t k = 0; k < back.size(); ++k) {
    EXPECT_TRUE(same_bits(back[k], code_fields[k])) << plan.str() << ": round trip of field " << k;
  }
  // The model's values changed (negated) come back changed, in the code's boxes.
  for (std::size_t k = 0; k < model_fields.size(); ++k) {
    model_fields[k].copy_from(filled(static_cast<int>(k), kFields[k].dtype, kFields[k].leading, plan.model_box(), -1));
  }
  if (split) {
    plan.start_to_code(model_fields, back);
    plan.finish();
  } else {
    plan.to_code(model_fields, back);
  }
  for (std::size_t k = 0; k < back.size(); ++k) {
    const Tensor expected = filled(static_cast<int>(k), kFields[k].dtype, kFields[k].leading, code.box(), -1);
    EXPECT_TRUE(same_bits(back[k], expected)) << plan.str() << ": model -> code of field " << k;
  }
}

// Runs `call` expecting an `E` whose message holds `needle`, on every rank.
template <class E, class F>
void expect_error(F&& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "another error: " << e.what();
  }
}

}  // namespace tessera::testing::redistribution
