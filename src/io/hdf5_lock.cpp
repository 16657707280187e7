// The process-wide mutex that serialises HDF5 calls between threads (hdf5_lock.hpp).
#include "tessera/io/hdf5_lock.hpp"

namespace tessera::io {

std::recursive_mutex& hdf5_mutex() {
  // Recursive: a writer that holds it for a whole save calls functions that may take it
  // again around their own HDF5 calls.
  static std::recursive_mutex mutex;
  return mutex;
}

}  // namespace tessera::io
