#include <string>

#include "io/hdf5_check.hpp"

namespace tessera::detail {

namespace {

// Collects "function(): description" for each frame of the HDF5 error stack,
// innermost first (that is where the cause is, e.g. "unable to open file").
herr_t collect_frame(unsigned n, const H5E_error2_t* frame, void* out) {
  auto& text = *static_cast<std::string*>(out);
  if (n > 0) text += "; ";
  text += std::string(frame->func_name ? frame->func_name : "?") + "(): " +
          (frame->desc ? frame->desc : "");
  return 0;
}

}  // namespace

void hdf5_errors_as_exceptions() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void throw_hdf5_error(long long status, const char* expr, const char* file, int line) {
  std::string stack;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, &collect_frame, &stack);
  H5Eclear2(H5E_DEFAULT);
  if (stack.empty()) stack = "no message on the HDF5 error stack";
  throw Hdf5Error(describe_failed_call(expr, file, line,
                                       "HDF5 returned " + std::to_string(status) + ": " + stack));
}

}  // namespace tessera::detail
