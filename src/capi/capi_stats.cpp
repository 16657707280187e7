// C API: normalisation statistics from the code's own fields (domain::ChannelStatistics).

#include <memory>
#include <optional>
#include <string>

#include "capi/capi_internal.hpp"
#include "tessera/agree.hpp"
#include "tessera/domain/channel_statistics.hpp"

using namespace tessera;
using tessera::capi::guarded;
using tessera::capi::require;

struct tessera_stats {
  std::shared_ptr<tessera_decomp_state> decomp;  // keeps the decomposition alive
  std::optional<domain::ChannelStatistics> stats;
  std::int64_t channels = 0;
};

namespace {

tessera_stats& state_of(tessera_stats_t* s) {
  require(s, "the statistics handle");
  if (!s->stats || !s->decomp || !s->decomp->d) throw InvalidArgument("the statistics handle is not initialised");
  return *s;
}

// A Fortran caller's fields against this rank's box, in its own terms (x(lon, lat,
// channels[, samples...]), the box 1-based, lon first), before the C++ layer's check,
// whose message speaks tessera's (samples..., C, lat, lon) view.
void check_caller_fields(const Tensor& view, std::int64_t channels, const domain::LocalBox& box) {
  if (!capi::caller_is_fortran()) return;
  const Shape& v = view.shape();
  const std::size_t n = v.size();
  if (n >= 3 && v[n - 3] == channels && v[n - 2] == box.lat.length && v[n - 1] == box.lon.length) return;
  throw ShapeError("the local array of extents " + capi::caller_shape(v) + " is not (" +
                   std::to_string(box.lon.length) + ", " + std::to_string(box.lat.length) + ", " +
                   std::to_string(channels) + "[, samples...]): " + std::to_string(channels) +
                   " channels of this rank's box " + capi::caller_box(box));
}

}  // namespace

extern "C" {

int tessera_stats_create(const tessera_decomp_t* decomp, int64_t channels, tessera_stats_t** stats) {
  return guarded("tessera_stats_create", [&] {
    require(stats, "the output handle pointer");
    *stats = nullptr;
    const domain::Decomposition& d = capi::decomposition_of(decomp);
    auto handle = std::make_unique<tessera_stats>();
    handle->decomp = decomp->state;
    handle->stats.emplace(d, channels);
    handle->channels = channels;
    *stats = handle.release();
  });
}

int tessera_stats_add(tessera_stats_t* stats, const void* local, tessera_dtype_t dtype, tessera_order_t order,
                      int ndim, const int64_t* shape) {
  return guarded("tessera_stats_add", [&] {
    tessera_stats& s = state_of(stats);
    Tensor view;
    // The caller's array is checked on every rank alike: a NULL pointer on one rank
    // fails every rank (the shape against the box is agreed by add itself).
    agree_on_success(s.decomp->d->comm().mpi_comm(), [&] {
      view = capi::array_view(const_cast<void*>(local), dtype, order, ndim, shape, "the local array");
      check_caller_fields(view, s.channels, s.decomp->d->box());
    });
    s.stats->add(view);
  });
}

int tessera_stats_finish(tessera_stats_t* stats, double relative_floor, double* mean, double* std, int* floored,
                         int64_t* count) {
  return guarded("tessera_stats_finish", [&] {
    tessera_stats& s = state_of(stats);
    domain::ChannelMoments m;
    agree_on_success(s.decomp->d->comm().mpi_comm(), [&] {
      require(mean, "mean");
      require(std, "std");
    });
    m = s.stats->finish(relative_floor);
    for (std::size_t c = 0; c < m.mean.size(); ++c) {
      mean[c] = m.mean[c];
      std[c] = m.std[c];
      if (floored != nullptr) floored[c] = m.floored[c] ? 1 : 0;
    }
    if (count != nullptr) *count = m.count;
  });
}

int tessera_stats_destroy(tessera_stats_t** stats) {
  return guarded("tessera_stats_destroy", [&] {
    require(stats, "the pointer to the statistics handle");
    std::unique_ptr<tessera_stats> owned(*stats);
    *stats = nullptr;
  });
}

}  // extern "C"
