#pragma once
// The scaffolding the doc samples share and the guides do not show: the program around
// the fragments, a deterministic input, the same on every rank, and the distance each
// sample's checks compare against its serial twin.
#include <tessera/tessera.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <exception>
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

// Runs `body(world_size)` between MPI_Init and MPI_Finalize. An exception on any rank is
// printed with that rank and aborts the job, so the test fails instead of waiting for the
// ranks that went on.
template <class Body>
int run_on_world(int argc, char** argv, Body&& body) {
  MPI_Init(&argc, &argv);
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  try {
    body(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    status = 1;
  }
  if (status != 0) MPI_Abort(MPI_COMM_WORLD, status);
  MPI_Finalize();
  return 0;
}

}  // namespace doc_sample
