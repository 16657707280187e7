#pragma once
// Private: MPI datatypes and reduction operations for tessera dtypes. MPI has no
// bfloat16, so bf16 travels as a committed 2-byte datatype with user-defined
// sum/max/min operations that compute in float.

#include <mpi.h>

#include "tessera/comm.hpp"
#include "tessera/dtype.hpp"

namespace tessera::detail {

MPI_Datatype mpi_datatype(DType dtype);
// avg is reduced as sum; the division happens after completion.
MPI_Op mpi_reduce_op(ReduceOp op, DType dtype);

}  // namespace tessera::detail
