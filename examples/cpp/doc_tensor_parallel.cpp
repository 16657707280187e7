// The code fragments of docs/tensor-parallel.md, each run on a tp group of every rank
// (1, 2 and 4 ranks in the tests) and checked against its serial twin where the guide
// says they agree. The guide shows the fragments verbatim; the lines around them make
// them a program.
#include <tessera/tessera.hpp>

#include "doc_sample_checks.hpp"

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

using namespace tessera;
using tp::Layout;
using tp::ParallelStyle;

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("doc_tensor_parallel: " + what);
}

using doc_sample::filled;
using doc_sample::max_diff;

// dL/dy for L = |y|^2 / 2.
Tensor loss_gradient(const Tensor& y) { return y.clone(); }

// "From a serial layer and back".
void from_serial_and_back(Communicator& tp, std::uint64_t seed) {
  nn::Linear serial_linear(8, 16);
  nn::initialize_parameters(serial_linear, seed, "mlp.up");
  auto column = tp::ColumnParallelLinear::from_serial(serial_linear, tp, /*gather_output=*/false, "mlp.up");
  std::unique_ptr<nn::Linear> back = column->to_serial();  // collective over tp
  Tensor w = column->master_weight();                      // collective over tp
  require(max_diff(w, serial_linear.weight.value) == 0, "master_weight differs from the serial weight");
  require(max_diff(back->weight.value, serial_linear.weight.value) == 0, "to_serial differs from the serial layer");
}

// "Example: ml.models.parallel's two-layer model".
void two_layer_model(const Mesh& mesh, std::uint64_t seed) {
  Communicator& tp = mesh.tp();
  const std::int64_t vocab = 16, in_features = 8, out_features = 12;

  nn::Sequential serial;  // nn.Sequential(Embedding, Linear, Linear)
  nn::Embedding& embedding = serial.append(std::make_unique<nn::Embedding>(vocab, in_features));
  nn::Linear& first = serial.append(std::make_unique<nn::Linear>(in_features, out_features));
  nn::Linear& second = serial.append(std::make_unique<nn::Linear>(out_features, out_features));
  nn::initialize_parameters(serial, seed);

  nn::Sequential parallel;  // the same master weights, sharded over tp
  parallel.append(tp::ParallelEmbedding::from_serial(embedding, tp, "0"));
  parallel.append(tp::ColumnParallelLinear::from_serial(first, tp, /*gather_output=*/false, "1"));
  parallel.append(tp::RowParallelLinear::from_serial(second, tp, /*input_is_parallel=*/true, "2"));

  const Tensor ids = Tensor::from_vector<std::int64_t>({1, 4, 9, 0, 15, 4}, {2, 3});  // [bsz, tsz]
  Tensor y = parallel.forward(ids);  // [2, 3, 12], equal to serial.forward(ids)
  parallel.backward(y);              // dL/dy for L = |y|^2 / 2

  const Tensor y_serial = serial.forward(ids);
  require(max_diff(y, y_serial) < 1e-5, "the parallel two-layer model differs from the serial one");

  nn::Sequential direct;
  direct.append(std::make_unique<tp::ParallelEmbedding>(vocab, in_features, tp));
  direct.append(std::make_unique<tp::ColumnParallelLinear>(in_features, out_features, tp, /*gather_output=*/false));
  direct.append(std::make_unique<tp::RowParallelLinear>(out_features, out_features, tp, /*input_is_parallel=*/true));
  nn::initialize_parameters(direct, seed);  // same values as `serial`: same seed, same FQNs

  require(max_diff(direct.forward(ids), y_serial) < 1e-5, "the directly built model differs from the serial one");
}

// "Example: CREDIT's 1x1 convolution pair".
void credit_conv_pair(Communicator& tp, std::uint64_t seed) {
  const std::int64_t C = 8;
  nn::Conv2d proj_up(C, 4 * C, 1, 1), proj_out(4 * C, C, 1, 1);
  nn::initialize_parameters(proj_up, seed, "blocks.0.proj_up");
  nn::initialize_parameters(proj_out, seed, "blocks.0.proj_out");

  auto up = tp::ColumnParallelConv2d::from_serial(proj_up, tp, /*gather_output=*/false, "blocks.0.proj_up");
  auto out = tp::RowParallelConv2d::from_serial(proj_out, tp, /*input_is_parallel=*/true, "blocks.0.proj_out");
  nn::GELU act;

  const Tensor x = Tensor::zeros({2, C, 16, 32}, DType::f32);  // (B, C, H, W), replicated
  Tensor h = act.forward(up->forward(x));  // (B, 4C/tp, H, W): this rank's channels
  Tensor z = out->forward(h);              // (B, C, H, W): all-reduced, bias added once
  Tensor dx = up->backward(act.backward(out->backward(z)));

  nn::GELU serial_act;
  const Tensor z_serial = proj_out.forward(serial_act.forward(proj_up.forward(x)));
  require(max_diff(z, z_serial) < 1e-5, "the tp convolution pair differs from the serial pair");
  require(dx.shape() == x.shape(), "dx has the wrong shape");
}

// "Vocab-parallel embedding and cross-entropy".
void vocab_parallel_loss(Communicator& tp) {
  const std::int64_t hidden = 8, V = 16, N = 6;
  const Tensor h = filled({N, hidden}, 0.5);
  const Tensor targets = Tensor::from_vector<std::int64_t>({3, 0, 15, 7, 8, 1}, {N});
  tp::ColumnParallelLinear lm_head(hidden, V, tp, /*gather_output=*/false);
  Tensor logits = lm_head.forward(h);                                  // [N, V/tp]
  tp::CrossEntropyResult ce = tp::vocab_parallel_cross_entropy(logits, targets, tp);
  Tensor dh = lm_head.backward(ce.grad_logits);
  // A zero head: every logit is 0, so the loss is log V.
  require(std::abs(ce.loss - std::log(static_cast<double>(V))) < 1e-6, "the loss of a zero head is not log V");
  require(dh.shape() == h.shape(), "dh has the wrong shape");
}

// "The module tree".
void module_tree() {
  nn::Sequential model;  // children "0", "1", "2"
  model.append(std::make_unique<nn::Linear>(8, 16));
  model.append(std::make_unique<nn::GELU>());
  model.append(std::make_unique<nn::Linear>(16, 8));

  for (const auto& [path, module] : model.named_modules("net")) {
    std::printf("%-6s %s\n", path.c_str(), module->type_name().c_str());  // net Sequential, net.0 Linear, ...
  }
  nn::Module& up = model.at("0");                   // InvalidArgument naming the missing component
  nn::Module* maybe = model.find("3");              // nullptr: no such child
  std::unique_ptr<nn::Module> old = model.replace("2", std::make_unique<nn::Linear>(16, 8));

  require(up.type_name() == "Linear" && maybe == nullptr && old != nullptr, "the module tree is not as documented");
}

// "parallelize plans".
void plan(const Mesh& mesh, std::uint64_t seed) {
  nn::Sequential model;
  model.append(std::make_unique<nn::Linear>(8, 16));
  model.append(std::make_unique<nn::GELU>());
  model.append(std::make_unique<nn::Linear>(16, 8));
  model.append(std::make_unique<nn::LayerNorm>(8));
  nn::initialize_parameters(model, seed);
  const Tensor x = filled({4, 8}, 1.5);
  const Tensor y_serial = model.forward(x);

  tp::parallelize(model, mesh.tp(), {
      {"0", ParallelStyle::colwise()},     // Linear(8, 16)  -> ColumnParallelLinear, output Shard(features)
      {"2", ParallelStyle::rowwise()},     // Linear(16, 8)  -> RowParallelLinear, output Replicate
      {"3", ParallelStyle::replicated()},  // LayerNorm stays as it is (documents the intent)
  });

  require(max_diff(model.forward(x), y_serial) < 1e-5, "the parallelized model differs from the serial one");
}

// "Opt-in blocks: apply_tensor_parallel".
// y = x + mlp(x), with mlp = Sequential{1x1 conv, GELU, 1x1 conv}: CREDIT's opt-in block.
class FieldMlp : public nn::Module {
 public:
  FieldMlp(std::int64_t channels, std::int64_t hidden) {
    auto mlp = std::make_unique<nn::Sequential>();
    mlp->append(std::make_unique<nn::Conv2d>(channels, hidden, 1, 1));
    mlp->append(std::make_unique<nn::GELU>());
    mlp->append(std::make_unique<nn::Conv2d>(hidden, channels, 1, 1));
    register_child("mlp", std::move(mlp));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = at("mlp").forward(x).clone();  // looked up now, so a replaced child takes effect
    ops::axpy(1.0, x, y);
    return y;
  }
  Tensor backward(const Tensor& dy) override {
    Tensor dx = at("mlp").backward(dy).clone();
    ops::axpy(1.0, dy, dx);
    return dx;
  }
  std::string type_name() const override { return "FieldMlp"; }
  std::optional<TensorParallelPaths> tensor_parallel_paths() const override {
    return TensorParallelPaths{/*column=*/"mlp.0", /*row=*/"mlp.2"};
  }
};

void opt_in_blocks(const Mesh& mesh) {
  const Tensor x = filled({2, 4, 6, 8}, 2.5);
  nn::Sequential reference;
  reference.append(std::make_unique<FieldMlp>(4, 8));
  reference.append(std::make_unique<FieldMlp>(4, 8));
  nn::initialize_parameters(reference, /*seed=*/7, "emulator");
  const Tensor y_serial = reference.forward(x);

  nn::Sequential model;
  model.append(std::make_unique<FieldMlp>(/*channels=*/4, /*hidden=*/8));
  model.append(std::make_unique<FieldMlp>(4, 8));
  nn::initialize_parameters(model, /*seed=*/7, "emulator");
  tp::apply_tensor_parallel(model, mesh.tp());  // 0.mlp.0, 1.mlp.0 -> ColumnParallelConv2d; 0.mlp.2, 1.mlp.2 -> RowParallelConv2d

  require(dynamic_cast<tp::ColumnParallelConv2d*>(&model.at("0.mlp.0")) != nullptr, "0.mlp.0 was not converted");
  require(max_diff(model.forward(x), y_serial) < 1e-5, "the opt-in blocks differ from the serial ones");
}

// "Sequence parallelism", then "Optimizers": a training step.
void sequence_parallel_step(const Mesh& mesh, std::uint64_t seed) {
  nn::Sequential model;
  model.append(std::make_unique<nn::RMSNorm>(8));
  model.append(std::make_unique<nn::Linear>(8, 16));
  model.append(std::make_unique<nn::GELU>());
  model.append(std::make_unique<nn::Linear>(16, 8));
  model.append(std::make_unique<nn::LayerNorm>(8));
  nn::initialize_parameters(model, seed, "sp");
  const std::int64_t B = 2, S = 8;
  const Tensor full_x = filled({B, S, 8}, 3.5);
  const Tensor y_serial = model.forward(full_x);

  // x [B, S, 8] replicated -> RMSNorm -> Linear(8, 16) -> GELU -> Linear(16, 8) -> LayerNorm
  tp::parallelize(model, mesh.tp(), {
      {"0", ParallelStyle::sequence_parallel(Layout::replicate)},           // split here: Replicate -> Shard(sequence)
      {"1", ParallelStyle::colwise(Layout::shard_sequence)},                // all-gather the sequence
      {"3", ParallelStyle::rowwise(Layout::shard_features, Layout::shard_sequence)},  // reduce-scatter it
      {"4", ParallelStyle::sequence_parallel()},                            // norm on the shard
  });
  // model.forward(x) returns this rank's [B, S/p, 8]; pass backward the matching shard of dy.

  const std::int64_t rows = S / mesh.tp_size();
  const Tensor mine = y_serial.narrow(1, mesh.coords().tp * rows, rows).contiguous();
  require(max_diff(model.forward(full_x), mine) < 1e-5, "the sequence-parallel output differs from the serial shard");

  AdamW optimizer(model.named_parameters("sp"), {.lr = 1e-2});
  const std::string prefix = "sp";
  const double max_norm = 1.0;
  const Tensor& x = full_x;
  optimizer.zero_grad();
  Tensor y = model.forward(x);
  model.backward(loss_gradient(y));
  tp::sync_replicated_gradients(model, mesh.tp());                 // required under sequence parallelism
  clip_grad_norm(model.named_parameters(prefix), max_norm, mesh);  // optional
  optimizer.step();
}

}  // namespace

int main(int argc, char** argv) {
  return doc_sample::run_on_world(argc, argv, [](int world) {
    Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, /*tensor=*/world, /*domain=*/1});
    const std::uint64_t seed = 2024;
    from_serial_and_back(mesh.tp(), seed);
    two_layer_model(mesh, seed);
    credit_conv_pair(mesh.tp(), seed);
    vocab_parallel_loss(mesh.tp());
    if (mesh.global_rank() == 0) module_tree();
    plan(mesh, seed);
    opt_in_blocks(mesh);
    sequence_parallel_step(mesh, seed);
    if (mesh.global_rank() == 0) std::printf("doc_tensor_parallel: every fragment ran at tp %d\n", mesh.tp_size());
  });
}
