// tessera-onnx: check an ONNX import without writing code (docs/onnx.md).
//
//   tessera-onnx info MODEL.onnx                          opsets, inputs, outputs, op counts, parameters
//   tessera-onnx run  MODEL.onnx IN.npy OUT.npy           the output for one input
//   tessera-onnx grad MODEL.onnx IN.npy WEIGHT.npy GRADS.npz
//                                                         d sum(output * weight) / d every parameter
//   tessera-onnx time MODEL.onnx IN.npy REPEATS           median seconds of a forward (and of a
//                                                         forward + backward), after one warm-up
//
// Serial, on the host backend. The input's shape resolves a symbolic dim of the model's
// one input. GRADS.npz is keyed by the initializers' names (numpy.load(GRADS)[name]).
// Exit status: 0 success, 2 usage or any error (the message names the file, node or
// value at fault).

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "npy.hpp"
#include "npz.hpp"
#include "tessera/error.hpp"
#include "tessera/onnx/onnx_model.hpp"

using namespace tessera;

namespace {

int usage() {
  std::cerr << "usage: tessera-onnx info MODEL.onnx\n"
               "       tessera-onnx run MODEL.onnx IN.npy OUT.npy\n"
               "       tessera-onnx grad MODEL.onnx IN.npy WEIGHT.npy GRADS.npz\n"
               "       tessera-onnx time MODEL.onnx IN.npy REPEATS\n"
               "IN.npy, WEIGHT.npy: float32 or float64 arrays (the model's input dtype), C order.\n"
               "Not yet: --domain N and --tensor N (domain- and tensor-parallel execution of an\n"
               "imported model under mpiexec); tessera-onnx runs serially on the host.\n";
  return 2;
}

// The model with its one input's shape taken from `input`.
std::unique_ptr<onnx::OnnxModel> load_for(const std::string& path, const Tensor& input) {
  onnx::LoadOptions options;
  options.input_shapes_in_order.push_back(input.shape());
  return onnx::load_onnx(path, options);
}

int info(const std::string& path) {
  onnx::LoadOptions options;
  options.defer_symbolic_inputs = true;  // looking, not running
  std::cout << onnx::load_onnx(path, options)->info();
  return 0;
}

int run(const std::string& model_path, const std::string& in_path, const std::string& out_path) {
  const Tensor input = onnx_tool::read_npy(in_path);
  auto model = load_for(model_path, input);
  onnx_tool::write_npy(out_path, model->forward(input));
  return 0;
}

int grad(const std::string& model_path, const std::string& in_path, const std::string& weight_path,
         const std::string& out_path) {
  const Tensor input = onnx_tool::read_npy(in_path);
  const Tensor weight = onnx_tool::read_npy(weight_path);
  auto model = load_for(model_path, input);
  const Tensor output = model->forward(input);
  if (weight.shape() != output.shape() || weight.dtype() != output.dtype()) {
    throw InvalidArgument("'" + weight_path + "' is " + weight.str() + "; the weight must match the output, " +
                          output.str());
  }
  model->zero_grad();
  model->backward(weight);  // d sum(output * weight) / d output = weight
  std::map<std::string, Tensor> grads;
  for (const auto& entry : model->named_parameters()) grads[entry.first] = entry.second->grad;
  onnx_tool::write_npz(out_path, grads);
  return 0;
}

// The median of `repeats` timings of `step` (seconds), after one untimed warm-up.
template <class Step>
double median_seconds(int repeats, Step&& step) {
  step();
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    step();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

// One line a benchmark script reads: "forward_s <median> train_step_s <median>" (the
// training step: forward, zero_grad, backward of sum(output)).
int time_model(const std::string& model_path, const std::string& in_path, const std::string& repeats_text) {
  const int repeats = std::stoi(repeats_text);
  if (repeats < 1) throw InvalidArgument("REPEATS must be at least 1, got " + repeats_text);
  const Tensor input = onnx_tool::read_npy(in_path);
  auto model = load_for(model_path, input);
  const double forward = median_seconds(repeats, [&] { (void)model->forward(input); });
  const double train = median_seconds(repeats, [&] {
    const Tensor y = model->forward(input);
    model->zero_grad();
    Tensor ones = Tensor::empty(y.shape(), y.dtype());
    if (y.dtype() == DType::f32) {
      std::fill_n(ones.data<float>(), ones.numel(), 1.0f);
    } else {
      std::fill_n(ones.data<double>(), ones.numel(), 1.0);
    }
    (void)model->backward(ones);
  });
  std::cout << "forward_s " << forward << " train_step_s " << train << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 2;
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    for (const std::string& a : args) {
      if (a == "--domain" || a == "--tensor") {
        throw UnsupportedError(a + " is not supported yet: tessera-onnx runs imported models serially");
      }
    }
    if (args.size() == 2 && args[0] == "info") {
      status = info(args[1]);
    } else if (args.size() == 4 && args[0] == "run") {
      status = run(args[1], args[2], args[3]);
    } else if (args.size() == 4 && args[0] == "time") {
      status = time_model(args[1], args[2], args[3]);
    } else if (args.size() == 5 && args[0] == "grad") {
      status = grad(args[1], args[2], args[3], args[4]);
    } else {
      status = usage();
    }
  } catch (const std::exception& e) {
    std::cerr << "tessera-onnx: error: " << e.what() << "\n";
    status = 2;
  }
  MPI_Finalize();
  return status;
}
