#pragma once
// The tessera error hierarchy. Every error carries a code (stable, used by the C API)
// and a message that names the offending thing: the config key, the parameter, the
// dataset, the rank.

#include <stdexcept>
#include <string>
#include <string_view>

namespace tessera {

enum class ErrorCode : int {
  ok = 0,
  invalid_argument = 1,  // a caller passed a bad value (shape, dim, dtype, rank ...)
  config = 2,            // a configuration key or value is wrong
  shape = 3,             // tensor shapes or dtypes do not agree
  unsupported = 4,       // valid request this build or device cannot serve
  mpi = 5,               // an MPI call failed
  hdf5 = 6,              // an HDF5 call failed
  cuda = 7,              // a CUDA runtime call failed (or no GPU is visible)
  nccl = 8,              // an NCCL call failed
  cublas = 9,            // a cuBLAS call failed
  io = 10,               // a file could not be read or written
  internal = 11,         // a tessera bug
};

// Short stable name of a code ("config", "mpi", ...).
std::string_view error_code_name(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

#define TESSERA_DEFINE_ERROR(Name, Code)                                         \
  class Name : public Error {                                                    \
   public:                                                                       \
    explicit Name(const std::string& message) : Error(ErrorCode::Code, message) {} \
  }

TESSERA_DEFINE_ERROR(InvalidArgument, invalid_argument);
TESSERA_DEFINE_ERROR(ConfigError, config);
TESSERA_DEFINE_ERROR(ShapeError, shape);
TESSERA_DEFINE_ERROR(UnsupportedError, unsupported);
TESSERA_DEFINE_ERROR(MpiError, mpi);
TESSERA_DEFINE_ERROR(Hdf5Error, hdf5);
TESSERA_DEFINE_ERROR(CudaError, cuda);
TESSERA_DEFINE_ERROR(NcclError, nccl);
TESSERA_DEFINE_ERROR(CublasError, cublas);
TESSERA_DEFINE_ERROR(IoError, io);
TESSERA_DEFINE_ERROR(InternalError, internal);

#undef TESSERA_DEFINE_ERROR

// Throws the subclass of Error that matches `code`, so an error that travelled between
// ranks (see agree.hpp) is caught by the same handler on every rank.
[[noreturn]] void throw_error(ErrorCode code, const std::string& message);

}  // namespace tessera
