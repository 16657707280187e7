// tessera-onnx: check an ONNX import without writing code (docs/onnx.md).
//
//   tessera-onnx info MODEL.onnx [IN.npy]                 opsets, inputs, outputs, op counts, parameters
//                                                         (with IN.npy and --domain: how each node runs split)
//   tessera-onnx run  MODEL.onnx IN.npy OUT.npy           the output for one input
//   tessera-onnx grad MODEL.onnx IN.npy WEIGHT.npy GRADS.npz
//                                                         d sum(output * weight) / d every parameter
//   tessera-onnx time MODEL.onnx IN.npy REPEATS           median seconds of a forward (and of a
//                                                         forward + backward), after one warm-up
//
// Options (before or after the command's arguments):
//   --domain N        run domain-parallel under mpiexec -n N: the model's input is split
//                     over N ranks (MPI_COMM_WORLD, which must have N ranks) along its last
//                     two axes (a balanced process grid), or along --split-axis
//   --grid LATxLON    the process grid (default: the most balanced one for the field)
//   --split-axis A    split along axis A only (the columns of a per-column model)
//   --tensor N        refused: tensor parallelism of an imported graph is not built yet
//
// On the host backend. The input's shape resolves a symbolic dim of the model's one
// input; every rank reads IN.npy and takes its block, and rank 0 gathers the output and
// writes the files. GRADS.npz is keyed by the initializers' names
// (numpy.load(GRADS)[name]). Exit status: 0 success, 2 usage or any error (the message
// names the file, node or value at fault).

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "npy.hpp"
#include "npz.hpp"
#include "tessera/comm.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/error.hpp"
#include "tessera/onnx/onnx_model.hpp"

using namespace tessera;

namespace {

int usage() {
  std::cerr << "usage: tessera-onnx info MODEL.onnx\n"
               "       tessera-onnx run MODEL.onnx IN.npy OUT.npy\n"
               "       tessera-onnx grad MODEL.onnx IN.npy WEIGHT.npy GRADS.npz\n"
               "       tessera-onnx time MODEL.onnx IN.npy REPEATS\n"
               "       options: --domain N [--grid LATxLON | --split-axis A] (under mpiexec -n N)\n"
               "IN.npy, WEIGHT.npy: float32 or float64 arrays (the model's input dtype), C order.\n"
               "Not yet: --tensor N (tensor-parallel execution of an imported graph).\n";
  return 2;
}

struct Options {
  int domain = 0;       // 0: serial
  int split_axis = -1;  // >= 0: split along this axis only
  int grid_lat = 0, grid_lon = 0;  // 0: tessera's choice
};

// The split run's communicator and decomposition (none when serial).
struct Split {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<domain::Decomposition> decomposition;
  onnx::SplitInput input;
};

Split make_split(const Options& options, const Shape& global) {
  Split split;
  if (options.domain == 0) return split;
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != options.domain) {
    throw InvalidArgument("--domain " + std::to_string(options.domain) + " needs mpiexec -n " +
                          std::to_string(options.domain) + "; this job has " + std::to_string(world) + " ranks");
  }
  split.comm = std::make_unique<Communicator>(MPI_COMM_WORLD);
  const auto rank = static_cast<int>(global.size());
  if (options.split_axis >= 0) {
    if (options.split_axis >= rank) throw InvalidArgument("--split-axis " + std::to_string(options.split_axis) + " for an input of rank " + std::to_string(rank));
    split.decomposition = std::make_unique<domain::Decomposition>(
        *split.comm, Shape{global[static_cast<std::size_t>(options.split_axis)], 1}, domain::ProcessGrid{world, 1});
    split.input = {"", options.split_axis, -1, false};
  } else {
    if (rank < 2) throw InvalidArgument("--domain splits the input's last two axes; it has rank " + std::to_string(rank));
    const Shape field{global[rank - 2], global[rank - 1]};
    split.decomposition = options.grid_lat > 0
        ? std::make_unique<domain::Decomposition>(*split.comm, field, domain::ProcessGrid{options.grid_lat, options.grid_lon})
        : std::make_unique<domain::Decomposition>(*split.comm, field);
    split.input = {"", -2, -1, true};
  }
  return split;
}

// This rank's block of a global array split like `split` says along (lat, lon) axes.
Tensor block_of(const Tensor& global, int lat_axis, int lon_axis, const domain::LocalBox& box) {
  Tensor block = global.narrow(lat_axis, box.lat.start, box.lat.length);
  if (lon_axis >= 0) block = block.narrow(lon_axis, box.lon.start, box.lon.length);
  return block.contiguous();
}

// The model with its one input's shape taken from `input` (the global array), split
// over `split` when there is one.
std::unique_ptr<onnx::OnnxModel> load_for(const std::string& path, const Tensor& input, Split& split) {
  onnx::LoadOptions options;
  options.input_shapes_in_order.push_back(input.shape());
  auto model = onnx::load_onnx(path, options);
  if (split.decomposition) {
    split.input.input = model->input_names().at(0);
    model->split_over(*split.decomposition, {split.input});
  }
  return model;
}

// This rank's part of the model's input.
Tensor local_input(const Tensor& input, const Split& split) {
  if (!split.decomposition) return input;
  const int rank = input.dim();
  const int lat = split.input.lat_axis < 0 ? split.input.lat_axis + rank : split.input.lat_axis;
  const int lon = split.input.has_lon ? split.input.lon_axis + rank : -1;
  return block_of(input, lat, lon, split.decomposition->box());
}

// The whole output on rank 0 (every rank's block, placed by its box); undefined elsewhere.
Tensor gather_output(onnx::OnnxModel& model, const Tensor& local, const Split& split) {
  if (!split.decomposition) return local;
  const onnx::OnnxModel::OutputSplit how = model.output_split(0);
  if (!how.split) return split.comm->rank() == 0 ? local : Tensor{};
  Shape global_shape = local.shape();
  global_shape[static_cast<std::size_t>(how.lat_axis)] = how.global_lat;
  if (how.lon_axis >= 0) global_shape[static_cast<std::size_t>(how.lon_axis)] = how.global_lon;
  // Every rank's box, through the communicator (its wait policy, its error handling).
  const Tensor mine = Tensor::from_vector(
      std::vector<std::int64_t>{how.box.lat.start, how.box.lat.length, how.box.lon.start, how.box.lon.length}, {4});
  Tensor gathered = Tensor::empty({4 * static_cast<std::int64_t>(split.comm->size())}, DType::i64);
  split.comm->all_gather(mine, gathered);
  const std::vector<std::int64_t> boxes = gathered.to_vector<std::int64_t>();
  if (split.comm->rank() != 0) {
    split.comm->send(local, 0, 7);
    return Tensor{};
  }
  Tensor global = Tensor::zeros(global_shape, local.dtype());
  for (int r = 0; r < split.comm->size(); ++r) {
    const domain::LocalBox box{{boxes[4 * r], boxes[4 * r + 1]}, {boxes[4 * r + 2], boxes[4 * r + 3]}};
    Tensor block = local;
    if (r != 0) {
      Shape shape = local.shape();
      shape[static_cast<std::size_t>(how.lat_axis)] = box.lat.length;
      if (how.lon_axis >= 0) shape[static_cast<std::size_t>(how.lon_axis)] = box.lon.length;
      block = Tensor::empty(shape, local.dtype());
      split.comm->recv(block, r, 7);
    }
    Tensor place = global.narrow(how.lat_axis, box.lat.start, box.lat.length);
    if (how.lon_axis >= 0) place = place.narrow(how.lon_axis, box.lon.start, box.lon.length);
    place.copy_from(block);
  }
  return global;
}

bool writes(const Split& split) { return !split.comm || split.comm->rank() == 0; }

int info(const std::string& path, const std::vector<std::string>& inputs, const Options& options) {
  if (inputs.empty()) {
    onnx::LoadOptions load;
    load.defer_symbolic_inputs = true;  // looking, not running
    std::cout << onnx::load_onnx(path, load)->info();
    return 0;
  }
  const Tensor input = onnx_tool::read_npy(inputs[0]);
  Split split = make_split(options, input.shape());
  auto model = load_for(path, input, split);
  (void)model->forward(local_input(input, split));
  if (writes(split)) {
    std::cout << model->info();
    if (split.decomposition) std::cout << "split over " << split.decomposition->str() << ":\n" << model->placement_summary();
  }
  return 0;
}

int run(const std::string& model_path, const std::string& in_path, const std::string& out_path, const Options& options) {
  const Tensor input = onnx_tool::read_npy(in_path);
  Split split = make_split(options, input.shape());
  auto model = load_for(model_path, input, split);
  const Tensor output = gather_output(*model, model->forward(local_input(input, split)), split);
  if (writes(split)) onnx_tool::write_npy(out_path, output);
  return 0;
}

int grad(const std::string& model_path, const std::string& in_path, const std::string& weight_path,
         const std::string& out_path, const Options& options) {
  const Tensor input = onnx_tool::read_npy(in_path);
  const Tensor weight = onnx_tool::read_npy(weight_path);
  Split split = make_split(options, input.shape());
  auto model = load_for(model_path, input, split);
  const Tensor output = model->forward(local_input(input, split));
  Tensor local_weight = weight;
  if (split.decomposition) {
    const onnx::OnnxModel::OutputSplit how = model->output_split(0);
    if (how.split && weight.dim() == output.dim()) local_weight = block_of(weight, how.lat_axis, how.lon_axis, how.box);
  }
  if (local_weight.shape() != output.shape() || local_weight.dtype() != output.dtype()) {
    throw InvalidArgument("'" + weight_path + "' is " + weight.str() + "; the weight must match the output, " +
                          output.str() + (split.decomposition ? " (this rank's block)" : ""));
  }
  model->zero_grad();
  model->backward(local_weight);  // d sum(output * weight) / d output = weight
  std::map<std::string, Tensor> grads;
  for (const auto& entry : model->named_parameters()) grads[entry.first] = entry.second->grad;
  if (writes(split)) onnx_tool::write_npz(out_path, grads);
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
int time_model(const std::string& model_path, const std::string& in_path, const std::string& repeats_text,
               const Options& options) {
  const int repeats = std::stoi(repeats_text);
  if (repeats < 1) throw InvalidArgument("REPEATS must be at least 1, got " + repeats_text);
  const Tensor global_input = onnx_tool::read_npy(in_path);
  Split split = make_split(options, global_input.shape());
  auto model = load_for(model_path, global_input, split);
  const Tensor input = local_input(global_input, split);
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
  if (writes(split)) std::cout << "forward_s " << forward << " train_step_s " << train << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 2;
  try {
    std::vector<std::string> args;
    Options options;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--tensor") {
        throw UnsupportedError("--tensor is not supported yet: tensor parallelism of an imported graph is not built");
      }
      if (a == "--domain" || a == "--split-axis") {
        if (i + 1 >= argc) throw InvalidArgument(a + " needs a number");
        const int value = std::stoi(argv[++i]);
        if (a == "--domain" && value < 1) throw InvalidArgument("--domain needs at least 1 rank, got " + std::to_string(value));
        if (a == "--split-axis" && value < 0) throw InvalidArgument("--split-axis needs an axis >= 0, got " + std::to_string(value));
        (a == "--domain" ? options.domain : options.split_axis) = value;
        continue;
      }
      if (a == "--grid") {
        const std::string grid = i + 1 < argc ? argv[++i] : "";
        const auto x = grid.find('x');
        if (x == std::string::npos) throw InvalidArgument("--grid needs LATxLON (2x2, say), got '" + grid + "'");
        options.grid_lat = std::stoi(grid.substr(0, x));
        options.grid_lon = std::stoi(grid.substr(x + 1));
        continue;
      }
      args.push_back(a);
    }
    if ((args.size() == 2 || args.size() == 3) && args[0] == "info") {
      status = info(args[1], std::vector<std::string>(args.begin() + 2, args.end()), options);
    } else if (args.size() == 4 && args[0] == "run") {
      status = run(args[1], args[2], args[3], options);
    } else if (args.size() == 4 && args[0] == "time") {
      status = time_model(args[1], args[2], args[3], options);
    } else if (args.size() == 5 && args[0] == "grad") {
      status = grad(args[1], args[2], args[3], args[4], options);
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
