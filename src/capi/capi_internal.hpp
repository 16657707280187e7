#pragma once
// Internals of the C API (include/tessera/tessera.h): the handle structs, the guard that
// turns every C++ exception into a status plus a thread-local message, and the
// translation of caller array descriptions into Tensor views.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/parameter.hpp"
#include "tessera/tensor.hpp"
#include "tessera/tessera.h"

struct tessera_mesh {
  std::shared_ptr<tessera::Mesh> mesh;
};

// What a decomposition needs alive: its communicator (owned, or the mesh's domain
// communicator kept alive through the mesh) and the decomposition itself.
struct tessera_decomp_state {
  std::shared_ptr<tessera::Communicator> comm;
  std::optional<tessera::domain::Decomposition> d;
};

struct tessera_decomp {
  std::shared_ptr<tessera_decomp_state> state;
};

struct tessera_halo {
  std::shared_ptr<tessera_decomp_state> decomp;
  std::optional<tessera::domain::HaloExchange> exchange;
  std::vector<tessera::Tensor> fields;
  std::vector<int> vector_components;  // indices of fields flagged by tessera_halo_set_vector_pair
  // The field count was agreed on every rank since the last registration call (add,
  // successful or not, or clear): see agreed_exchange in capi_halo.cpp.
  bool field_count_agreed = false;
};

struct tessera_checkpoint {
  std::shared_ptr<tessera::Mesh> mesh;
  bool save = true;
  bool committed = false;
  std::string path;
  tessera::io::SaveOptions save_options;
  tessera::io::LoadOptions load_options;
  std::vector<std::unique_ptr<tessera::Parameter>> arrays;
  tessera::NamedParameters named;
  std::int64_t loaded_step = 0;
  std::string loaded_metadata;
  // Add calls that failed (reported when a commit finds no array at all).
  int failed_adds = 0;
  std::string first_failed_add;
};

namespace tessera::capi {

void set_last_error(const char* function, const char* message) noexcept;

// Runs `body`; returns TESSERA_OK, or the code of the exception it threw with the
// message recorded for tessera_last_error(). Nothing escapes.
template <class Body>
int guarded(const char* function, Body&& body) noexcept {
  try {
    body();
    return TESSERA_OK;
  } catch (const Error& e) {
    set_last_error(function, e.what());
    return static_cast<int>(e.code());
  } catch (const std::bad_alloc&) {
    set_last_error(function, "out of memory");
    return TESSERA_ERR_INTERNAL;
  } catch (const std::exception& e) {
    set_last_error(function, e.what());
    return TESSERA_ERR_INTERNAL;
  } catch (...) {
    set_last_error(function, "unknown exception");
    return TESSERA_ERR_INTERNAL;
  }
}

// The calling thread's current call came through the Fortran module (which brackets
// each call with tessera_set_fortran_caller): messages then describe arrays as the
// caller declared them, dims in Fortran order and index ranges 1-based, lon first, and
// name the procedure without the C API's `_f` suffix.
bool caller_is_fortran() noexcept;
// Extents of tessera's C-order view (leading..., lat, lon): "[a, b, c]" for C callers,
// "(c, b, a)" (declaration order) for Fortran callers.
std::string caller_shape(const Shape& view);
// A block's offset in such a view: 0-based "[a, b, c]", or the 1-based first indices
// "(c+1, b+1, a+1)" in declaration order.
std::string caller_offset(const Shape& offset);
// A box: "lat [0, 4) x lon [0, 8)", or "lon 1:8 x lat 1:4" (1-based, inclusive, lon first).
std::string caller_box(const domain::LocalBox& box);
// A range of indices: "[0, 4)", or "1:4" (1-based, inclusive).
std::string caller_range(const ShardRange& range);
// An index of a list the caller fills (a registered field): 0-based for C callers,
// 1-based for Fortran callers, whose module counts fields from 1.
std::string caller_index(std::int64_t index);

// Throws InvalidArgument "<what> is NULL" when p is null.
template <class T>
T* require(T* p, const char* what) {
  if (p == nullptr) throw InvalidArgument(std::string(what) + " is NULL");
  return p;
}

void require_mpi();
MPI_Comm comm_from_fortran(MPI_Fint comm);
DType to_dtype(int dtype, const std::string& what);
std::string dtype_label(int dtype);

// Tensor::view of caller memory (row-major unless `strides` are given); its errors (an
// element count, span or byte size that overflows) are prefixed with `what`, the array.
Tensor caller_view(void* data, DType dtype, const Shape& shape, const Shape& strides, const std::string& what);
// Checks (data, dtype, order, ndim, shape) and returns the declaration-order extents.
Shape declared_shape(const void* data, int dtype, int order, int ndim, const std::int64_t* shape,
                     const std::string& what);
// tessera's C-order view (leading..., lat, lon) of a caller array: the shape as given for
// C order, reversed for Fortran order (same memory, no strides needed).
Tensor array_view(void* data, int dtype, int order, int ndim, const std::int64_t* shape, const std::string& what);
// tessera's view of a caller array in any layout: `shape` is the view's extents
// (leading..., lat, lon), `strides` the distance in elements between neighbours along
// each of them (positive).
Tensor strided_view(void* data, int dtype, int ndim, const std::int64_t* shape, const std::int64_t* strides,
                    const std::string& what);
// Same shape, other memory: the view of `data` with `logical` (C-order) extents.
Tensor logical_view(void* data, DType dtype, const Shape& logical, const std::string& what);

const domain::Decomposition& decomposition_of(const tessera_decomp* d);
domain::HaloExchange& exchange_of(tessera_halo* h);
const domain::HaloExchange& exchange_of(const tessera_halo* h);
// The plan of a halo's fields on `stagger` (a TESSERA_STAGGER_* value; capi_halo.cpp).
const domain::HaloExchange& staggered_exchange_of(const tessera_halo* halo, int stagger);
// Checks that a halo field's view has the padded lat/lon extents.
void check_padded(const domain::HaloExchange& ex, const Tensor& field, const std::string& what);
// Checks that a caller array's view (leading..., lat, lon) ends in the (lat, lon) extents
// of this rank's `box` (`halo`: the widths around it, if any; `kind`: "padded " or "",
// how the message names those extents). ShapeError in the caller's order otherwise.
void check_extents(const Shape& view, std::int64_t lat, std::int64_t lon, const domain::LocalBox& box,
                   const domain::HaloWidths* halo, const std::string& kind, const std::string& what);
// A batch of B fields of `channels` channels over this rank's `box`: the view (B, C, lat,
// lon), or (C, lat, lon) as one field. ShapeError (InvalidArgument for B = 0) naming
// `what` in the caller's order otherwise.
Tensor batch_view(Tensor view, std::int64_t channels, const domain::LocalBox& box, const std::string& what);
// The caller's arrays of a scatter or gather, as tessera's views (leading..., lat, lon):
// the local array, and root's global one given the extents its view must have (called on
// the root only). Either may throw; the errors name the array.
struct CallerArrays {
  std::function<Tensor()> local;
  std::function<Tensor(const Shape& global_view)> global;
};
// Contiguous arrays in `order`, the local one of extents shape[0..ndim) (the global one
// the same layout with the global lat/lon extents).
CallerArrays contiguous_arrays(const void* global, void* local, int dtype, int order, int ndim,
                               const std::int64_t* shape, const std::string& what);
// Collective scatter (gather = false) or gather between root's global array and every
// rank's local array, which `to_local` turns into the block it owns (the interior of a
// padded field, or the array itself). Argument errors are agreed over the communicator.
void scatter_gather(const domain::Decomposition& d, bool gather, int root, const CallerArrays& arrays,
                    const std::function<Tensor(Tensor)>& to_local, const std::string& what);

}  // namespace tessera::capi
