// The dispatch sample of docs/architecture.md ("The compute backend"): a GELU through the
// internal compute interface (src/backend/compute.hpp, not a public header), checked
// bit for bit against nn::functional::gelu, which makes the same call.
#include <tessera/tessera.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/compute.hpp"

namespace tessera {

Tensor gelu_through_the_compute_interface(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  detail::compute_for(x, "nn::functional::gelu: input")   // check + pick by x's device
      .activation(detail::Activation::gelu, x.dtype(), x.data(), y.data(), x.numel(), x.device().index);
  return y;
}

}  // namespace tessera

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    std::vector<float> v(64);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i)) * 4.0);
    const tessera::Tensor x = tessera::Tensor::from_vector(v, {8, 8});
    const tessera::Tensor a = tessera::gelu_through_the_compute_interface(x);
    const tessera::Tensor b = tessera::nn::functional::gelu(x);
    status = std::memcmp(a.data(), b.data(), a.nbytes()) == 0 ? 0 : 1;
    std::printf("gelu through the compute interface and nn::functional::gelu: %s\n",
                status == 0 ? "bit-identical" : "DIFFERENT");
  }
  MPI_Finalize();
  return status;
}
