// HostCompute, rotary position embeddings: one loop over (batch, position, head, pair),
// rotating in double with the rope_math.hpp functions the CUDA kernel also runs.

#include <vector>

#include "backend/host/host_compute.hpp"
#include "backend/rope_math.hpp"

namespace tessera::detail {

void HostCompute::rope(DType dtype, const void* x, void* out, const RopeShape& shape, bool inverse, int) {
  const std::int64_t B = shape.batch, S = shape.seq, W = shape.width, hd = shape.head_dim;
  const std::int64_t pairs = hd / 2, heads = W / hd;
  // The angles depend on (position, pair) only: computed once per position and shared
  // by every batch row and head.
  std::vector<double> angle(static_cast<std::size_t>(pairs));
  for_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(out);
    for (std::int64_t s = 0; s < S; ++s) {
      for (std::int64_t i = 0; i < pairs; ++i) angle[static_cast<std::size_t>(i)] = rope_angle(s, i, hd, shape.theta);
      for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t row = (b * S + s) * W;
        for (std::int64_t h = 0; h < heads; ++h) {
          for (std::int64_t i = 0; i < pairs; ++i) {
            const std::int64_t e = row + h * hd + 2 * i;
            double y0, y1;
            rope_rotate(static_cast<double>(xs[e]), static_cast<double>(xs[e + 1]),
                        angle[static_cast<std::size_t>(i)], inverse, y0, y1);
            ys[e] = static_cast<T>(y0);
            ys[e + 1] = static_cast<T>(y1);
          }
        }
      }
    }
  });
}

}  // namespace tessera::detail
