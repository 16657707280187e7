#include "comm/mpi_types.hpp"

#include <algorithm>
#include <climits>
#include <string>

#include "tessera/check.hpp"

namespace tessera::detail {
namespace {

template <class Combine>
void bf16_reduce(void* in, void* inout, int* len, Combine combine) {
  const auto* a = static_cast<const bfloat16*>(in);
  auto* b = static_cast<bfloat16*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = bfloat16(combine(static_cast<float>(a[i]), static_cast<float>(b[i])));
  }
}

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return x + y; });
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return std::max(x, y); });
}
void bf16_min(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return std::min(x, y); });
}

struct Bf16Mpi {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL, min = MPI_OP_NULL;
};

// Frees the bf16 handles inside MPI_Finalize (attributes of MPI_COMM_SELF are deleted
// first), so no MPI object outlives MPI.
int free_bf16(MPI_Comm, int, void* attribute, void*) {
  auto* handles = static_cast<Bf16Mpi*>(attribute);
  MPI_Op_free(&handles->sum);
  MPI_Op_free(&handles->max);
  MPI_Op_free(&handles->min);
  MPI_Type_free(&handles->type);
  handles->type = MPI_DATATYPE_NULL;
  return MPI_SUCCESS;
}

Bf16Mpi& bf16_handles() {
  static Bf16Mpi handles;
  if (handles.type == MPI_DATATYPE_NULL) {
    TESSERA_CHECK_MPI(MPI_Type_contiguous(2, MPI_BYTE, &handles.type));
    TESSERA_CHECK_MPI(MPI_Type_commit(&handles.type));
    TESSERA_CHECK_MPI(MPI_Op_create(&bf16_sum, 1, &handles.sum));
    TESSERA_CHECK_MPI(MPI_Op_create(&bf16_max, 1, &handles.max));
    TESSERA_CHECK_MPI(MPI_Op_create(&bf16_min, 1, &handles.min));
    int keyval = MPI_KEYVAL_INVALID;
    TESSERA_CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &free_bf16, &keyval, nullptr));
    TESSERA_CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, &handles));
  }
  return handles;
}

}  // namespace

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
    case DType::bf16: return bf16_handles().type;
  }
  throw InternalError("mpi_datatype: unknown dtype");
}

MPI_Datatype strided_block_type(std::size_t element_bytes, int ndim, const std::int64_t* counts,
                                const std::int64_t* strides) {
  if (ndim < 1) throw InternalError("strided_block_type: ndim " + std::to_string(ndim) + " < 1");
  for (int d = 0; d < ndim; ++d) {
    if (counts[d] < 0 || counts[d] > INT_MAX) {
      throw UnsupportedError("strided_block_type: a count of " + std::to_string(counts[d]) +
                             " exceeds MPI's int count limit");
    }
  }
  const auto elem = static_cast<MPI_Aint>(element_bytes);
  const int last = ndim - 1;
  MPI_Datatype current = MPI_DATATYPE_NULL, next = MPI_DATATYPE_NULL;
  if (strides[last] == 1 || counts[last] <= 1) {
    const std::int64_t bytes = counts[last] * static_cast<std::int64_t>(element_bytes);
    if (bytes > INT_MAX) {
      throw UnsupportedError("strided_block_type: a row of " + std::to_string(bytes) +
                             " bytes exceeds MPI's int count limit");
    }
    TESSERA_CHECK_MPI(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &current));
  } else {
    MPI_Datatype element = MPI_DATATYPE_NULL;
    TESSERA_CHECK_MPI(MPI_Type_contiguous(static_cast<int>(element_bytes), MPI_BYTE, &element));
    const int status = MPI_Type_create_hvector(static_cast<int>(counts[last]), 1, strides[last] * elem, element, &current);
    MPI_Type_free(&element);
    TESSERA_CHECK_MPI(status);
  }
  for (int d = last - 1; d >= 0; --d) {
    const int status =
        MPI_Type_create_hvector(static_cast<int>(counts[d]), 1, strides[d] * elem, current, &next);
    MPI_Type_free(&current);
    TESSERA_CHECK_MPI(status);
    current = next;
  }
  return current;
}

MPI_Op mpi_reduce_op(ReduceOp op, DType dtype) {
  if (dtype == DType::bf16) {
    Bf16Mpi& h = bf16_handles();
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: return h.sum;
      case ReduceOp::max: return h.max;
      case ReduceOp::min: return h.min;
    }
  }
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  throw InternalError("mpi_reduce_op: unknown op");
}

}  // namespace tessera::detail
