#pragma once
// The scaffolding the doc samples share and the guides do not show: a deterministic
// input, the same on every rank, and the distance each sample's checks compare against
// its serial twin.
#include <tessera/tessera.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

namespace doc_sample {

// A deterministic f32 tensor, the same on every rank.
inline tessera::Tensor filled(const tessera::Shape& shape, double salt) {
  std::vector<float> v(static_cast<std::size_t>(tessera::shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + salt));
  return tessera::Tensor::from_vector(v, shape);
}

// The largest element-wise difference of two f32 tensors of one shape.
inline double max_diff(const tessera::Tensor& a, const tessera::Tensor& b) {
  if (a.shape() != b.shape()) throw std::runtime_error("max_diff: shapes differ: " + a.str() + " and " + b.str());
  const std::vector<float> x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(static_cast<double>(x[i]) - y[i]));
  return m;
}

}  // namespace doc_sample
