// C API: status strings, the thread-local last error, and the helpers every handle uses.

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "capi/capi_internal.hpp"
#include "tessera/version.hpp"

namespace tessera::capi {

namespace {
thread_local std::string last_error_message;
thread_local bool fortran_caller = false;

// The C status values are tessera::ErrorCode's, one for one.
static_assert(TESSERA_OK == static_cast<int>(ErrorCode::ok));
static_assert(TESSERA_ERR_INVALID_ARGUMENT == static_cast<int>(ErrorCode::invalid_argument));
static_assert(TESSERA_ERR_CONFIG == static_cast<int>(ErrorCode::config));
static_assert(TESSERA_ERR_SHAPE == static_cast<int>(ErrorCode::shape));
static_assert(TESSERA_ERR_UNSUPPORTED == static_cast<int>(ErrorCode::unsupported));
static_assert(TESSERA_ERR_MPI == static_cast<int>(ErrorCode::mpi));
static_assert(TESSERA_ERR_HDF5 == static_cast<int>(ErrorCode::hdf5));
static_assert(TESSERA_ERR_CUDA == static_cast<int>(ErrorCode::cuda));
static_assert(TESSERA_ERR_NCCL == static_cast<int>(ErrorCode::nccl));
static_assert(TESSERA_ERR_CUBLAS == static_cast<int>(ErrorCode::cublas));
static_assert(TESSERA_ERR_IO == static_cast<int>(ErrorCode::io));
static_assert(TESSERA_ERR_INTERNAL == static_cast<int>(ErrorCode::internal));
}  // namespace

void set_last_error(const char* function, const char* message) noexcept {
  try {
    std::string name = function;
    // A Fortran caller called the procedure without the suffix of its C entry point.
    if (fortran_caller && name.size() > 2 && name.ends_with("_f")) name.resize(name.size() - 2);
    last_error_message = name + ": " + message;
  } catch (...) {
    // Out of memory while recording the message: keep the previous one.
  }
}

bool caller_is_fortran() noexcept { return fortran_caller; }

std::string caller_shape(const Shape& view) {
  if (!fortran_caller) return shape_str(view);
  std::string out = "(";
  for (auto d = view.rbegin(); d != view.rend(); ++d) out += (d == view.rbegin() ? "" : ", ") + std::to_string(*d);
  return out + ")";
}

std::string caller_offset(const Shape& offset) {
  if (!fortran_caller) return shape_str(offset);
  Shape first(offset.size());
  std::transform(offset.begin(), offset.end(), first.begin(), [](std::int64_t o) { return o + 1; });
  return caller_shape(first);
}

std::string caller_range(const ShardRange& range) {
  if (!fortran_caller) return "[" + std::to_string(range.start) + ", " + std::to_string(range.end()) + ")";
  return std::to_string(range.start + 1) + ":" + std::to_string(range.end());
}

std::string caller_index(std::int64_t index) { return std::to_string(fortran_caller ? index + 1 : index); }

std::string caller_box(const domain::LocalBox& box) {
  if (!fortran_caller) return box.str();
  return "lon " + caller_range(box.lon) + " x lat " + caller_range(box.lat);
}

void require_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    throw InvalidArgument("MPI is not running (call MPI_Init before and MPI_Finalize after every tessera call)");
  }
}

MPI_Comm comm_from_fortran(MPI_Fint comm) {
  require_mpi();
  return MPI_Comm_f2c(comm);
}

DType to_dtype(int dtype, const std::string& what) {
  switch (dtype) {
    case TESSERA_F32: return DType::f32;
    case TESSERA_F64: return DType::f64;
    default:
      throw InvalidArgument(what + ": dtype " + std::to_string(dtype) +
                            " is not TESSERA_F32 (0) or TESSERA_F64 (1)");
  }
}

std::string dtype_label(int dtype) { return dtype == TESSERA_F32 ? "f32" : dtype == TESSERA_F64 ? "f64" : "?"; }

Shape declared_shape(const void* data, int dtype, int order, int ndim, const std::int64_t* shape,
                     const std::string& what) {
  to_dtype(dtype, what);
  if (order != TESSERA_ORDER_C && order != TESSERA_ORDER_FORTRAN) {
    throw InvalidArgument(what + ": order " + std::to_string(order) +
                          " is not TESSERA_ORDER_C (0) or TESSERA_ORDER_FORTRAN (1)");
  }
  if (data == nullptr) throw InvalidArgument(what + ": the data pointer is NULL");
  if (ndim < 1 || ndim > TESSERA_MAX_DIMS) {
    throw InvalidArgument(what + ": ndim " + std::to_string(ndim) + " is outside [1, " +
                          std::to_string(TESSERA_MAX_DIMS) + "]");
  }
  if (shape == nullptr) throw InvalidArgument(what + ": the shape pointer is NULL");
  Shape out(shape, shape + ndim);
  for (int i = 0; i < ndim; ++i) {
    if (out[static_cast<std::size_t>(i)] < 0) {
      throw InvalidArgument(what + ": extent " + std::to_string(out[static_cast<std::size_t>(i)]) + " of dim " +
                            std::to_string(i) + " is negative");
    }
  }
  return out;
}

Tensor caller_view(void* data, DType dtype, const Shape& shape, const Shape& strides, const std::string& what) {
  try {
    return Tensor::view(data, shape, dtype, Device::host(), strides);
  } catch (const Error& e) {
    throw_error(e.code(), what + ": " + e.what());
  }
}

Tensor logical_view(void* data, DType dtype, const Shape& logical, const std::string& what) {
  return caller_view(data, dtype, logical, {}, what);
}

Tensor array_view(void* data, int dtype, int order, int ndim, const std::int64_t* shape, const std::string& what) {
  Shape s = declared_shape(data, dtype, order, ndim, shape, what);
  if (order == TESSERA_ORDER_FORTRAN) std::reverse(s.begin(), s.end());
  return logical_view(data, to_dtype(dtype, what), s, what);
}

Tensor strided_view(void* data, int dtype, int ndim, const std::int64_t* shape, const std::int64_t* strides,
                    const std::string& what) {
  const Shape s = declared_shape(data, dtype, TESSERA_ORDER_C, ndim, shape, what);
  require(strides, "the strides pointer");
  const Shape st(strides, strides + ndim);
  for (std::int64_t x : st) {
    if (x < 1) throw InvalidArgument(what + ": stride " + std::to_string(x) + " is not positive");
  }
  return caller_view(data, to_dtype(dtype, what), s, st, what);
}

const domain::Decomposition& decomposition_of(const tessera_decomp* d) {
  require(d, "the decomposition handle");
  if (!d->state || !d->state->d) throw InvalidArgument("the decomposition handle is not initialised");
  return *d->state->d;
}

domain::HaloExchange& exchange_of(tessera_halo* h) {
  require(h, "the halo handle");
  if (!h->exchange) throw InvalidArgument("the halo handle is not initialised");
  return *h->exchange;
}

const domain::HaloExchange& exchange_of(const tessera_halo* h) {
  require(h, "the halo handle");
  if (!h->exchange) throw InvalidArgument("the halo handle is not initialised");
  return *h->exchange;
}

void check_extents(const Shape& s, std::int64_t lat, std::int64_t lon, const domain::LocalBox& box,
                   const domain::HaloWidths* halo, const std::string& kind, const std::string& what) {
  if (s.size() >= 2 && s[s.size() - 2] == lat && s.back() == lon) return;
  if (fortran_caller) {
    // The module hands over arrays in declaration order, so the reversed view is the
    // array as declared: lon and lat are its first two dims.
    const std::string widths = halo == nullptr ? ""
                                               : " plus halo lon " + std::to_string(halo->lon_before) + "+" +
                                                     std::to_string(halo->lon_after) + ", lat " +
                                                     std::to_string(halo->lat_before) + "+" +
                                                     std::to_string(halo->lat_after);
    throw ShapeError(what + ": array of extents " + caller_shape(s) + " should begin with the " + kind +
                     "(lon, lat) extents (" + std::to_string(lon) + ", " + std::to_string(lat) + ") of this rank (" +
                     caller_box(box) + widths + ")");
  }
  throw ShapeError(what + ": tessera view " + shape_str(s) + " should end in the " + kind + "(lat, lon) extents (" +
                   std::to_string(lat) + ", " + std::to_string(lon) + ") of this rank (" + box.str() +
                   (halo == nullptr ? "" : " plus halo " + halo->str()) + ")");
}

void check_padded(const domain::HaloExchange& ex, const Tensor& field, const std::string& what) {
  const Shape padded = ex.padded_shape(Shape{});
  check_extents(field.shape(), padded[0], padded[1], ex.decomposition().box(), &ex.spec().width, "padded ", what);
}

Tensor batch_view(Tensor view, std::int64_t channels, const domain::LocalBox& box, const std::string& what) {
  const Shape given = view.shape();
  if (view.dim() == 3) view = view.reshape({1, view.size(0), view.size(1), view.size(2)});
  if (view.dim() != 4 || view.size(1) != channels || view.size(2) != box.lat.length ||
      view.size(3) != box.lon.length) {
    if (fortran_caller) {
      throw ShapeError(what + " of extents " + caller_shape(given) + " is not (" + std::to_string(box.lon.length) +
                       ", " + std::to_string(box.lat.length) + ", " + std::to_string(channels) +
                       ", B): B fields of this rank's box " + caller_box(box) + " (B = 1 may be left out)");
    }
    throw ShapeError(what + " " + shape_str(view.shape()) + " (tessera view) is not (B, " + std::to_string(channels) +
                     ", " + std::to_string(box.lat.length) + ", " + std::to_string(box.lon.length) +
                     "): B fields of this rank's box " + box.str());
  }
  // An empty batch has nothing to predict, and the normalisation divides by B.
  if (view.size(0) == 0) {
    throw InvalidArgument(what + " " + caller_shape(given) + (fortran_caller ? "" : " (tessera view)") +
                          " has batch B = 0; pass at least one field");
  }
  return view;
}

}  // namespace tessera::capi

using namespace tessera;

extern "C" {

const char* tessera_error_string(int code) {
  if (code < TESSERA_OK || code > TESSERA_ERR_INTERNAL) return "unknown";
  // error_code_name returns views of string literals, so data() is NUL-terminated.
  return error_code_name(static_cast<ErrorCode>(code)).data();
}

const char* tessera_last_error(void) { return capi::last_error_message.c_str(); }

const char* tessera_version(void) { return version_string; }

int tessera_set_fortran_caller(int on) {
  capi::fortran_caller = on != 0;
  return TESSERA_OK;
}

int tessera_abort(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code == 0 ? 1 : code);
  std::abort();
}

}  // extern "C"
