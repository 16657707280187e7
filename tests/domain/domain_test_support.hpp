#pragma once
// What the domain tests share: the world and self communicators, the process grids
// exercised at this world size, the cell value that names its global coordinates, and
// the rule every halo cell follows with the fill and the check of a field by it.

#include <mpi.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "mpi_test.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"

namespace tessera::testing {

inline Communicator& world() {
  static Communicator comm(MPI_COMM_WORLD);
  return comm;
}

// The serial twin's communicator: this rank alone.
inline Communicator& self() {
  static Communicator comm(MPI_COMM_SELF);
  return comm;
}

// Latitude bands, longitude bands (where they differ) and 2x2 at four ranks.
inline std::vector<domain::ProcessGrid> grids() {
  const int p = world_size();
  std::vector<domain::ProcessGrid> g{{p, 1}};
  if (p > 1) g.push_back({1, p});
  if (p == 4) g.push_back({2, 2});
  return g;
}

// A value naming (leading index, global lat, global lon); exact in f64 and f32.
inline double encode(std::int64_t lead, std::int64_t i, std::int64_t j) {
  return 1.0 + static_cast<double>(lead) * 1.0e6 + static_cast<double>(i) * 1000.0 + static_cast<double>(j);
}

// The rule every halo cell follows, written from the spec independently of the planner:
// latitude beyond a pole by the policy, then longitude wrap or zero. Sets (si, sj) to the
// global cell that (i, j) holds; false for a zero cell.
inline bool halo_source(std::int64_t i, std::int64_t j, std::int64_t nlat, std::int64_t nlon,
                        const domain::HaloSpec& spec, std::int64_t& si, std::int64_t& sj) {
  si = i;
  sj = j;
  if (i < 0 || i >= nlat) {
    switch (spec.pole) {
      case domain::PolePolicy::zero: return false;
      case domain::PolePolicy::replicate: si = i < 0 ? 0 : nlat - 1; break;
      case domain::PolePolicy::across_pole:
        si = i < 0 ? -(i + 1) : (nlat - 1) - (i - nlat);
        sj = j + nlon / 2;
        break;
      case domain::PolePolicy::across_pole_point:  // row -k is row k; row n-1+k is row n-1-k
        si = i < 0 ? -i : (nlat - 1) - (i - (nlat - 1));
        sj = j + nlon / 2;
        break;
    }
  }
  if (spec.periodic_lon) {
    sj = ((sj % nlon) + nlon) % nlon;
  } else if (sj < 0 || sj >= nlon) {
    return false;
  }
  return true;
}

// The value global cell (i, j) of leading index `lead` holds after an exchange under
// `spec`: encode() of its source cell, or 0.
inline double expected_halo_value(std::int64_t lead, std::int64_t i, std::int64_t j, std::int64_t nlat,
                                  std::int64_t nlon, const domain::HaloSpec& spec) {
  std::int64_t si = 0, sj = 0;
  return halo_source(i, j, nlat, nlon, spec, si, sj) ? encode(lead, si, sj) : 0.0;
}

// Fills a contiguous padded field of `ex` (elements T): the interior with encode() of its
// global coordinates, the halo with the sentinel -7.
template <class T = double>
void fill_coordinates(const domain::HaloExchange& ex, Tensor& field) {
  const domain::LocalBox box = ex.decomposition().box();
  const domain::HaloWidths w = ex.spec().width;
  const std::int64_t pl = field.size(field.dim() - 2), pn = field.size(field.dim() - 1);
  const std::int64_t lead = field.numel() / (pl * pn);
  T* p = field.data<T>();
  for (std::int64_t l = 0; l < lead; ++l)
    for (std::int64_t a = 0; a < pl; ++a)
      for (std::int64_t b = 0; b < pn; ++b) {
        const std::int64_t i = box.lat.start - w.lat_before + a, j = box.lon.start - w.lon_before + b;
        const bool inside = i >= box.lat.start && i < box.lat.end() && j >= box.lon.start && j < box.lon.end();
        p[(l * pl + a) * pn + b] = static_cast<T>(inside ? encode(l, i, j) : -7.0);
      }
}

// Checks every cell (leading index l, global i, j) of a contiguous padded field of `ex`
// against want(l, i, j), adding the cells checked to *checked when given; returns a
// description of the first few mismatches, empty when there are none.
template <class T = double, class Want>
std::string check_cells(const domain::HaloExchange& ex, const Tensor& field, Want&& want,
                        std::int64_t* checked = nullptr) {
  const domain::Decomposition& d = ex.decomposition();
  const domain::LocalBox box = d.box();
  const domain::HaloWidths w = ex.spec().width;
  const std::int64_t pl = field.size(field.dim() - 2), pn = field.size(field.dim() - 1);
  const std::int64_t lead = field.numel() / (pl * pn);
  const T* p = field.data<T>();
  std::ostringstream bad;
  int errors = 0;
  for (std::int64_t l = 0; l < lead; ++l)
    for (std::int64_t a = 0; a < pl; ++a)
      for (std::int64_t b = 0; b < pn; ++b) {
        const std::int64_t i = box.lat.start - w.lat_before + a, j = box.lon.start - w.lon_before + b;
        const double expected = want(l, i, j);
        const double got = static_cast<double>(p[(l * pl + a) * pn + b]);
        if (checked != nullptr) ++*checked;
        if (got != expected && errors++ < 5) {
          bad << " [rank " << d.rank() << " lead " << l << " cell (" << i << ", " << j << "): got " << got
              << " want " << expected << "]";
        }
      }
  if (errors) bad << " (" << errors << " wrong cells)";
  return bad.str();
}

// Checks every cell of such a field after the exchange (the interior unchanged, every
// halo cell by the rule).
template <class T = double>
std::string check_coordinates(const domain::HaloExchange& ex, const Tensor& field, std::int64_t* checked = nullptr) {
  const domain::Decomposition& d = ex.decomposition();
  return check_cells<T>(
      ex, field,
      [&](std::int64_t l, std::int64_t i, std::int64_t j) {
        return expected_halo_value(l, i, j, d.global_lat(), d.global_lon(), ex.spec());
      },
      checked);
}

}  // namespace tessera::testing
