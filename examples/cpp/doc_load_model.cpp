// The load_model sample of docs/driver.md, run on 4 ranks (domain 4) in a directory where
// runs/demo holds a field-emulator checkpoint written by tessera-run (in the tests: two
// steps at 1 rank). Predicts the next state of a synthetic 3-channel field, band by band.
#include <tessera/tessera.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

#include <tessera/models/load_model.hpp>

// Collective over comm (4 ranks): the model's next state for this rank's latitude band.
tessera::Tensor predict_band(MPI_Comm comm, const tessera::Tensor& state) {  // state: f32 [B, C, nlat, nlon]
  tessera::Mesh mesh(comm, {tessera::DataParallelMode::none, /*tensor=*/1, /*domain=*/4});
  auto model = tessera::load_model("runs/demo", mesh);   // root (latest), step directory or file
  const auto box = model->decomposition().box();        // this rank's latitude band
  const tessera::Tensor x = state.narrow(2, box.lat.start, box.lat.length).contiguous();
  return model->predict(x);                             // x: f32 [B, C, box.lat.length, nlon], physical units
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  {
    // The architecture (channels, grid) comes from the checkpoint alone.
    const tessera::models::FieldEmulatorConfig config = tessera::models::read_model_config("runs/demo");
    const std::int64_t B = 1, C = config.channels, nlat = config.nlat, nlon = config.nlon;
    std::vector<float> v(static_cast<std::size_t>(B * C * nlat * nlon));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.01 * static_cast<double>(i)));
    const tessera::Tensor state = tessera::Tensor::from_vector(v, {B, C, nlat, nlon});

    const tessera::Tensor y = predict_band(MPI_COMM_WORLD, state);
    double sum = 0;
    for (float f : y.to_vector<float>()) sum += f;
    std::printf("rank %d: predicted [%lld, %lld, %lld, %lld], sum %.6g\n", rank, static_cast<long long>(y.size(0)),
                static_cast<long long>(y.size(1)), static_cast<long long>(y.size(2)), static_cast<long long>(y.size(3)),
                sum);
    if (!std::isfinite(sum) || y.size(2) * 4 != nlat) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}
