// The training step of docs/data-parallel.md, run on 4 ranks (fsdp2 over dp 1 x tp 2 x
// domain 2; at 8 ranks the same program runs fsdp2 over dp 2). FieldNet, x_for and
// loss_grad are this file's: a domain-parallel 3x3 convolution, a tensor-parallel
// channel-MLP block and a 1x1 head, trained to map a synthetic field to a shifted one.
#include <tessera/tessera.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

using namespace tessera;

namespace {

constexpr std::int64_t kInC = 2, kC = 4, kHidden = 8, kOutC = 1, kLat = 8, kLon = 16;

// y = head(mlp(conv(x))): children reached through at(), so DataParallel can wrap them.
class FieldNet : public nn::Module {
 public:
  explicit FieldNet(const Mesh* mesh) {
    decomposition_ = std::make_unique<domain::Decomposition>(*mesh, Shape{kLat, kLon});
    register_child("conv", std::make_unique<domain::DomainConv2d>(*decomposition_, kInC, kC, 3, 3));
    register_child("mlp", std::make_unique<models::ChannelMlpBlock>(kC, kHidden));  // opts in to tp
    register_child("head", std::make_unique<nn::Conv2d>(kC, kOutC, 1, 1));
  }
  Tensor forward(const Tensor& x) override { return at("head").forward(at("mlp").forward(at("conv").forward(x))); }
  Tensor backward(const Tensor& dy) override { return at("conv").backward(at("mlp").backward(at("head").backward(dy))); }
  std::string type_name() const override { return "FieldNet"; }
  const domain::Decomposition& decomposition() const { return *decomposition_; }

 private:
  std::unique_ptr<domain::Decomposition> decomposition_;
};

// Sample i, channel c, at global (lat, lon): a smooth field, and as the target the first
// channel shifted by one cell in longitude.
float field(std::int64_t i, std::int64_t c, std::int64_t lat, std::int64_t lon) {
  return static_cast<float>(std::sin(0.4 * static_cast<double>(lon) + 0.3 * static_cast<double>(i) + c) *
                            std::cos(0.35 * static_cast<double>(lat)));
}

// This rank's latitude rows of the samples `ids`: [n, channels, rows, kLon].
Tensor rows_of(const FieldNet& model, const std::vector<std::int64_t>& ids, std::int64_t channels, bool target) {
  const auto box = model.decomposition().box();
  std::vector<float> v;
  for (std::int64_t i : ids)
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t lat = box.lat.start; lat < box.lat.start + box.lat.length; ++lat)
        for (std::int64_t lon = 0; lon < kLon; ++lon) v.push_back(field(i, c, lat, target ? (lon + 1) % kLon : lon));
  return Tensor::from_vector(v, {static_cast<std::int64_t>(ids.size()), channels, box.lat.length, kLon});
}

Tensor x_for(const FieldNet& model, const std::vector<std::int64_t>& ids) { return rows_of(model, ids, kInC, false); }

// This rank's share of each step's loss, 0.5 * sum((y - t)^2) / n over its rows.
std::vector<double> local_losses;

// d/dy of 0.5 * sum((y - t)^2) / n, n the element count of the whole local batch (every
// latitude of it), so the domain ranks' partial gradients sum to the batch's gradient.
Tensor loss_grad(const FieldNet& model, const Tensor& y, const std::vector<std::int64_t>& ids) {
  const double n = static_cast<double>(static_cast<std::int64_t>(ids.size()) * kOutC * kLat * kLon);
  Tensor dy = y.contiguous().clone();
  ops::axpy(-1.0, rows_of(model, ids, kOutC, true), dy);
  local_losses.push_back(0.5 * ops::dot(dy, dy) / n);
  ops::scale(dy, 1.0 / n);
  return dy;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    const std::uint64_t seed = 5;
    const std::int64_t dataset_size = 8, batch = 2;
    const int epochs = 3;

    Mesh mesh(MPI_COMM_WORLD, {DataParallelMode::fsdp2, /*tensor=*/2, /*domain=*/2});
    FieldNet model(&mesh);                       // DomainConv2d + tp channel MLP, say
    nn::initialize_parameters(model, seed);      // same master values at every layout
    tp::apply_tensor_parallel(model, mesh.tp());
    dp::DataParallel data_parallel(model, mesh);             // mode from mesh.config().data
    AdamW optimizer(model.named_parameters(), {.lr = 1e-3}); // built on the (sharded) parameters
    dp::DistributedSampler sampler(dataset_size, mesh, {.shuffle = true, .seed = 17});

    for (int epoch = 0; epoch < epochs; ++epoch) {
      sampler.set_epoch(epoch);
      for (std::int64_t b = 0; b < sampler.num_batches(batch); ++b) {
        const auto ids = sampler.batch(b, batch);      // identical on tp/domain peers
        optimizer.zero_grad();
        Tensor y = model.forward(x_for(model, ids));    // domain ranks: their latitude rows
        model.backward(loss_grad(model, y, ids));       // loss normalised over the local batch
        data_parallel.finish_gradient_sync();           // dp: average (ddp) / reduce-scatter (fsdp2)
        tp::sync_replicated_gradients(model, mesh.tp());
        domain::sync_domain_gradients(model, mesh);     // SUM of the domain partial gradients
        clip_grad_norm(model.named_parameters(), 1.0, mesh);
        optimizer.step();
      }
    }

    // The first and last steps' losses: the sum of the domain ranks' shares.
    Tensor ends = Tensor::from_vector(std::vector<double>{local_losses.front(), local_losses.back()}, {2});
    mesh.domain().all_reduce(ends, ReduceOp::sum);
    const double first = ends.to_vector<double>()[0], last = ends.to_vector<double>()[1];

    if (mesh.global_rank() == 0) {
      std::printf("dp %d x tp %d x domain %d (%s): loss %.6f at the first step, %.6f at the last of %d epochs\n",
                  mesh.dp_size(), mesh.tp_size(), mesh.domain_size(), std::string(data_parallel_mode_name(mesh.config().data)).c_str(), first,
                  last, epochs);
    }
    if (!(last < first)) {
      std::fprintf(stderr, "doc_data_parallel: the loss did not decrease (%g -> %g)\n", first, last);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Finalize();
}
