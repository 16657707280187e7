#pragma once
// Private: MPI datatypes and reduction operations for tessera dtypes. MPI has no
// bfloat16, so bf16 travels as a committed 2-byte datatype with user-defined
// sum/max/min operations that compute in float.

#include <mpi.h>

#include <cstddef>
#include <cstdint>

#include "tessera/comm.hpp"
#include "tessera/dtype.hpp"

namespace tessera::detail {

MPI_Datatype mpi_datatype(DType dtype);
// avg is reduced as sum; the division happens after completion.
MPI_Op mpi_reduce_op(ReduceOp op, DType dtype);

// A block of a strided array as a datatype of bytes, so MPI reads or writes it in place
// of a packed buffer: counts[d] elements along dim d, strides[d] elements apart (may be
// negative), dims in row-major order (the last fastest), which is the order its bytes
// travel in, the packed order. Displacements are relative to the block's first element
// (pass its address, or MPI_BOTTOM with it in a struct). A contiguous last dim is one
// run of bytes; MPI walks the rest as nested hvectors. The caller frees the type (it is
// not committed: commit it, or put it in a struct and commit that).
MPI_Datatype strided_block_type(std::size_t element_bytes, int ndim, const std::int64_t* counts,
                                const std::int64_t* strides);

}  // namespace tessera::detail
