#pragma once
// Private: checking HDF5 calls. HDF5 reports failure as a negative return value
// (herr_t, htri_t, hid_t) and describes it on its error stack. TESSERA_CHECK_HDF5 is an
// expression: it evaluates the call once, returns its value when non-negative, and
// otherwise throws Hdf5Error naming the call, file:line and the stack's messages.
//
//   hid_t file = TESSERA_CHECK_HDF5(H5Fopen(path, H5F_ACC_RDONLY, fapl));
//   TESSERA_CHECK_HDF5(H5Dwrite(...));

#include <hdf5.h>

#include "tessera/check.hpp"

namespace tessera::detail {

// Turns off HDF5's automatic printing of the error stack, so failures surface once, as
// exceptions. Idempotent; the I/O code calls it before its first HDF5 call.
void hdf5_errors_as_exceptions();

[[noreturn]] void throw_hdf5_error(long long status, const char* expr, const char* file, int line);

template <class T>
T check_hdf5(T status, const char* expr, const char* file, int line) {
  if (status < 0) throw_hdf5_error(static_cast<long long>(status), expr, file, line);
  return status;
}

}  // namespace tessera::detail

#define TESSERA_CHECK_HDF5(expr) ::tessera::detail::check_hdf5((expr), #expr, __FILE__, __LINE__)
