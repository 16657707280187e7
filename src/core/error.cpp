#include "tessera/error.hpp"

#include <mpi.h>

#include "tessera/check.hpp"

namespace tessera {

std::string_view error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::config: return "config";
    case ErrorCode::shape: return "shape";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::mpi: return "mpi";
    case ErrorCode::hdf5: return "hdf5";
    case ErrorCode::cuda: return "cuda";
    case ErrorCode::nccl: return "nccl";
    case ErrorCode::cublas: return "cublas";
    case ErrorCode::io: return "io";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

void throw_error(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::invalid_argument: throw InvalidArgument(message);
    case ErrorCode::config: throw ConfigError(message);
    case ErrorCode::shape: throw ShapeError(message);
    case ErrorCode::unsupported: throw UnsupportedError(message);
    case ErrorCode::mpi: throw MpiError(message);
    case ErrorCode::hdf5: throw Hdf5Error(message);
    case ErrorCode::cuda: throw CudaError(message);
    case ErrorCode::nccl: throw NcclError(message);
    case ErrorCode::cublas: throw CublasError(message);
    case ErrorCode::io: throw IoError(message);
    case ErrorCode::ok:
    case ErrorCode::internal: break;
  }
  throw InternalError(message);
}

namespace detail {

std::string describe_failed_call(const char* expr, const char* file, int line,
                                 const std::string& detail) {
  std::string where = file ? file : "?";
  // Source paths are long and machine specific; the file name is what a reader needs.
  if (const auto slash = where.find_last_of('/'); slash != std::string::npos) {
    where = where.substr(slash + 1);
  }
  return where + ":" + std::to_string(line) + ": `" + expr + "` failed: " + detail;
}

void throw_mpi_error(int status, const char* expr, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(status, text, &length) != MPI_SUCCESS) length = 0;
  throw MpiError(describe_failed_call(
      expr, file, line,
      "MPI error " + std::to_string(status) + ": " + std::string(text, static_cast<std::size_t>(length))));
}

}  // namespace detail
}  // namespace tessera
