#pragma once
// Private: the one compute interface of tessera. Every kernel a layer, loss, optimizer,
// halo exchange or initialiser runs goes through it; two backends implement it:
//
//   backend/host  (HostCompute: OpenBLAS / any CBLAS for GEMM, plain loops for the rest)
//   backend/cuda  (CudaCompute: cuBLAS for GEMM, CUDA kernels for the rest)
//
// Code above the backend floor never asks which device a tensor is on. It calls
//
//     detail::compute_for(t, "nn::functional::gelu").activation(...)
//
// and the tensor's device picks the implementation (compute_for also checks that the
// device can run the tensor: a CUDA tensor without a visible GPU, or a view of memory
// the GPU cannot address, is an UnsupportedError naming the caller). No vendor header
// here, so src/nn, src/tp, src/domain, ... include it freely.
//
// Conventions: `device` is the tensors' device ordinal (ignored on the host; on CUDA the
// call makes it current and restores the caller's device); pointers are contiguous
// memory of that device; `dtype` is f32 or f64 unless stated; work is ordered with every
// other tessera operation on the device (on CUDA: its compute stream). Functions that
// return a host value (sum, dot, sum_squares) synchronise. Accumulations run in double
// on both backends, so a result differs between them only by fp32 rounding.
//
// The operations are listed once, in compute_operations.def, which this header and both
// backends expand (the pure virtuals here, the overrides there). Adding a kernel: add its
// entry to that list, in its family; define it in both backends (host: a loop in the
// backend/host/host_*.cpp file of its family; cuda: a kernel in the backend/cuda file
// of its family); call it through compute_for from the layer; add a host test plus its
// CUDA twin.

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/kernel_math.hpp"
#include "tessera/backend.hpp"
#include "tessera/detail/halo_rect.hpp"
#include "tessera/detail/strided_index.hpp"
#include "tessera/dtype.hpp"
#include "tessera/error.hpp"
#include "tessera/tensor.hpp"

namespace tessera::detail {

enum class Activation { gelu, silu };

// One SGD step's constants (torch.optim.SGD's rule; optim.hpp documents the options).
struct SgdStep {
  double lr = 0, weight_decay = 0, momentum = 0, dampening = 0;
  bool nesterov = false;
  bool first = false;  // the first step copies the direction into the momentum buffer
};

// One AdamW step's constants, precomputed on the host from the step count t:
//   decay = 1 - lr * weight_decay, step_size = lr / (1 - beta1^t),
//   bias_correction2_sqrt = sqrt(1 - beta2^t).
struct AdamWStep {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double decay = 1, step_size = 0, bias_correction2_sqrt = 1;
};

struct GemmArgs {
  DType ab = DType::f32;  // dtype of A and B: f32, f64 or bf16
  DType c = DType::f32;   // f32/f64 as A and B; with bf16 inputs bf16 or f32 (f32 accumulation)
  bool transpose_a = false, transpose_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  std::int64_t lda = 0;  // row strides in elements
  const void* b = nullptr;
  std::int64_t ldb = 0;
  void* out = nullptr;
  std::int64_t ldc = 0;
  double alpha = 1.0, beta = 0.0;
  // Precision::bf16_mixed on f32 operands (ab and c f32): A and B are rounded to bf16
  // (nearest even) and multiplied as the bf16 GEMM does, fp32 accumulation. The backend
  // rounds on its side (a scratch copy), so no bf16 tensor is made per call.
  bool round_to_bf16 = false;
};

// The geometry of one attention call (see Compute::attention).
struct AttentionShape {
  std::int64_t batch = 0, seq = 0, width = 0, heads = 1;
  bool causal = false;
  double scale = 1.0;  // 1 / sqrt(head_dim)
  // Grouped-query attention: k and v hold kv_heads heads ([batch, seq, kv_heads * head_dim]);
  // query head h reads key/value head h / (heads / kv_heads). 0 means kv_heads = heads.
  std::int64_t kv_heads = 0;
  std::int64_t head_dim() const { return width / heads; }
  std::int64_t kv_count() const { return kv_heads > 0 ? kv_heads : heads; }
  std::int64_t kv_width() const { return kv_count() * head_dim(); }
  std::int64_t group() const { return heads / kv_count(); }
};

// The geometry of one rotary-embedding call (see Compute::rope).
struct RopeShape {
  std::int64_t batch = 0, seq = 0, width = 0, head_dim = 2;  // width = heads * head_dim, head_dim even
  double theta = 10000.0;
};

class Compute {
 public:
  virtual ~Compute() = default;

  // Every operation of compute_operations.def, documented there.
#define TESSERA_COMPUTE_OPERATION(result, name, parameters) virtual result name parameters = 0;
#include "backend/compute_operations.def"
};

// The compute entries serving `t`'s device, after checking that the device can run `t`
// (Backend::require_usable). `who` starts every error message ("ops::gemm: A").
inline Compute& compute_for(const Tensor& t, const std::string& who) {
  require_usable(t, who);
  return backend_for(t.device()).compute();
}

// The compute entries of a device, without a tensor to check (a Mesh's device).
inline Compute& compute_for(Device device) { return backend_for(device).compute(); }

}  // namespace tessera::detail
