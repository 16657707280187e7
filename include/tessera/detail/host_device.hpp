#pragma once
// Marks inline functions shared by host and device code (index math, conversions), so
// the host tests exercise exactly what the CUDA kernels run.

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif
