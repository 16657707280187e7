// CoupledModel: the field emulator on M model ranks, fed and read back in the code's
// layout through a domain::Redistribution.

#include "tessera/models/coupled_model.hpp"

#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/check.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/models/load_model.hpp"

namespace tessera::models {

CoupledModel::CoupledModel(const std::string& checkpoint_path, const domain::Decomposition& code,
                           const domain::ModelRanks& ranks, CoupledModelOptions options)
    : code_(&code) {
  Communicator& comm = code.comm();
  // Every rank learns the architecture (rank 0 reads, the text is broadcast), so a grid
  // that is not the code's fails everywhere before any model rank builds anything.
  const io::CheckpointMetadata header = io::read_checkpoint_metadata(checkpoint_path, comm);
  config_ = model_config_from_metadata(header.metadata, header.file);
  if (config_.nlat != code.global_lat() || config_.nlon != code.global_lon()) {
    throw InvalidArgument("CoupledModel: the model in " + header.file + " runs on a " + std::to_string(config_.nlat) +
                          " x " + std::to_string(config_.nlon) + " grid (nlat x nlon) but the code's decomposition is " +
                          std::to_string(code.global_lat()) + " x " + std::to_string(code.global_lon()) +
                          "; the two grids must be the same");
  }
  // The model's layout is the FieldEmulator's: latitude bands over its mesh's domain
  // group, every band on `tensor` ranks, model rank m = mesh rank m (domain innermost).
  plan_ = std::make_unique<domain::Redistribution>(code, ranks, domain::ModelLayout{{0, 0}, options.tensor});
  const int m = plan_->model_size();
  agree_on_success(comm.mpi_comm(), [&] {
    if (!plan_->is_model_rank()) return;
    Communicator& model_comm = plan_->model_comm();
    Device device = Device::host();
    if (options.use_gpus) {
      // The GPU only when every model rank has one (agreed over the model ranks).
      Tensor gpus = Tensor::from_vector(std::vector<std::int64_t>{cuda_device_count()}, {1});
      model_comm.all_reduce(gpus, ReduceOp::min);
      if (gpus.to_vector<std::int64_t>()[0] > 0) device = Device::cuda();
    }
    mesh_ = std::make_unique<Mesh>(model_comm.mpi_comm(),
                                   ParallelismConfig{DataParallelMode::none, options.tensor, m / options.tensor},
                                   device);
    model_ = load_model(checkpoint_path, *mesh_);
    if (!(model_->decomposition().box() == plan_->model_box())) {
      throw InternalError("CoupledModel: the model's band " + model_->decomposition().box().str() +
                          " on model rank " + std::to_string(plan_->model_rank()) + " is not the plan's " +
                          plan_->model_box().str());
    }
  });
}

CoupledModel::~CoupledModel() = default;

FieldEmulator& CoupledModel::model() const {
  if (!model_) {
    throw InvalidArgument("CoupledModel::model: code rank " + std::to_string(code_->rank()) +
                          " is not a model rank (" + plan_->str() + ")");
  }
  return *model_;
}

const Mesh& CoupledModel::mesh() const {
  if (!mesh_) {
    throw InvalidArgument("CoupledModel::mesh: code rank " + std::to_string(code_->rank()) + " is not a model rank");
  }
  return *mesh_;
}

Tensor CoupledModel::predict(const Tensor& code_input) {
  Tensor out = code_input.defined() ? Tensor::empty(code_input.shape(), code_input.dtype()) : Tensor{};
  run(code_input, out, true);
  return out;
}

Tensor CoupledModel::forward(const Tensor& code_input) {
  Tensor out = code_input.defined() ? Tensor::empty(code_input.shape(), code_input.dtype()) : Tensor{};
  run(code_input, out, false);
  return out;
}

void CoupledModel::predict(const Tensor& code_input, Tensor& output) { run(code_input, output, true); }
void CoupledModel::forward(const Tensor& code_input, Tensor& output) { run(code_input, output, false); }

void CoupledModel::run(const Tensor& code_input, Tensor& output, bool physical) {
  const MPI_Comm comm = code_->comm().mpi_comm();
  std::int64_t batch = 1;
  // Argument errors are agreed before any rank starts a transfer.
  agree_on_success(comm, [&] {
    const std::string what = physical ? "CoupledModel::predict" : "CoupledModel::forward";
    if (!code_input.defined() || code_input.dtype() != DType::f32) {
      throw InvalidArgument(what + ": the input " + (code_input.defined() ? code_input.str() : std::string("undefined")) +
                            " must be f32");
    }
    const Shape& s = code_input.shape();
    const int d = code_input.dim();
    const domain::LocalBox box = code_->box();
    if ((d != 3 && d != 4) || s[d - 3] != config_.channels || s[d - 2] != box.lat.length ||
        s[d - 1] != box.lon.length) {
      throw ShapeError(what + ": the input " + shape_str(s) + " is not (B, " + std::to_string(config_.channels) +
                       ", " + std::to_string(box.lat.length) + ", " + std::to_string(box.lon.length) +
                       "): B fields of code rank " + std::to_string(code_->rank()) + "'s box " + box.str());
    }
    batch = d == 4 ? s[0] : 1;
    if (batch == 0) throw InvalidArgument(what + ": the input has batch B = 0; pass at least one field");
    if (!output.defined() || output.shape() != s || output.dtype() != DType::f32) {
      throw ShapeError(what + ": the output " + (output.defined() ? output.str() : std::string("undefined")) +
                       " must be f32 of the input's shape " + shape_str(s));
    }
  });
  // The fields travel with the caller's leading dims ((B, C) or (C)); the model sees
  // (B, C, band lat, nlon).
  const bool model = plan_->is_model_rank();
  const Shape leading(code_input.shape().begin(), code_input.shape().end() - 2);
  Tensor x_model = model ? Tensor::empty(plan_->model_shape(leading), DType::f32) : Tensor{};
  plan_->to_model({code_input}, model ? std::vector<Tensor>{x_model} : std::vector<Tensor>{});
  // The other ranks wait here, in the agreement's (sleep-polled) wait, while the model
  // runs; a failure of the forward on the model ranks then fails every rank.
  Tensor y_model;
  agree_on_success(comm, [&] {
    if (!model) return;
    const Shape& ms = x_model.shape();
    const Tensor input =
        x_model.reshape({batch, config_.channels, ms[ms.size() - 2], ms.back()}).to(mesh_->device());
    const Tensor y = physical ? model_->predict(input) : model_->forward(input);
    y_model = y.to(Device::host()).contiguous().reshape(ms);
  });
  plan_->to_code(model ? std::vector<Tensor>{y_model} : std::vector<Tensor>{}, {output});
}

}  // namespace tessera::models
