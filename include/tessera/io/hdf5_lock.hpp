#pragma once
// The HDF5 library tessera links is not built thread-safe (H5_HAVE_THREADSAFE unset on
// the distributions it is tested with): two threads must never be inside it at once. An
// asynchronous checkpoint's writer thread (io/async_checkpoint.hpp) holds this mutex
// from the start of its background write to its end. A program that calls HDF5 itself
// while a save may be in flight takes the same mutex around those calls; it must hold it
// around local HDF5 calls only, never across a collective (MPI, or a tessera call that
// communicates), or its rank could wait for a peer whose writer waits for this rank's.

#include <mutex>

namespace tessera::io {

// The one process-wide mutex that serialises HDF5 calls between threads.
std::recursive_mutex& hdf5_mutex();

}  // namespace tessera::io
