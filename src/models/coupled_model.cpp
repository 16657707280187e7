// CoupledModel: the field emulator on M model ranks, fed and read back in the code's
// layout through a domain::Redistribution.

#include "tessera/models/coupled_model.hpp"

#include <cmath>

#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/check.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/tp/parallelize.hpp"
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

std::int64_t CoupledModel::check_field(const Tensor& field, const std::string& what, const std::string& role) const {
  if (!field.defined() || field.dtype() != DType::f32) {
    throw InvalidArgument(what + ": the " + role + " " + (field.defined() ? field.str() : std::string("undefined")) +
                          " must be f32");
  }
  const Shape& s = field.shape();
  const int d = field.dim();
  const domain::LocalBox box = code_->box();
  if ((d != 3 && d != 4) || s[d - 3] != config_.channels || s[d - 2] != box.lat.length ||
      s[d - 1] != box.lon.length) {
    throw ShapeError(what + ": the " + role + " " + shape_str(s) + " is not (B, " + std::to_string(config_.channels) +
                     ", " + std::to_string(box.lat.length) + ", " + std::to_string(box.lon.length) +
                     "): B fields of code rank " + std::to_string(code_->rank()) + "'s box " + box.str());
  }
  const std::int64_t batch = d == 4 ? s[0] : 1;
  if (batch == 0) throw InvalidArgument(what + ": the " + role + " has batch B = 0; pass at least one field");
  return batch;
}

void CoupledModel::run(const Tensor& code_input, Tensor& output, bool physical) {
  const MPI_Comm comm = code_->comm().mpi_comm();
  std::int64_t batch = 1;
  // Argument errors are agreed before any rank starts a transfer.
  agree_on_success(comm, [&] {
    const std::string what = physical ? "CoupledModel::predict" : "CoupledModel::forward";
    batch = check_field(code_input, what, "input");
    const Shape& s = code_input.shape();
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


namespace {

std::unique_ptr<Optimizer> make_optimizer(const CoupledTrainOptions& options, NamedParameters params) {
  if (options.optimizer == CoupledTrainOptions::Optimizer::adamw) {
    return std::make_unique<AdamW>(std::move(params), AdamWOptions{.lr = options.lr});
  }
  return std::make_unique<Sgd>(std::move(params), SgdOptions{.lr = options.lr});
}

const char* optimizer_name(CoupledTrainOptions::Optimizer kind) {
  return kind == CoupledTrainOptions::Optimizer::adamw ? "adamw" : "sgd";
}

}  // namespace

double CoupledModel::train_step(const Tensor& code_input, const Tensor& code_target,
                                const CoupledTrainOptions& options) {
  const MPI_Comm comm = code_->comm().mpi_comm();
  const std::string what = "CoupledModel::train_step";
  std::int64_t batch = 1;
  agree_on_success(comm, [&] {
    batch = check_field(code_input, what, "input");
    (void)check_field(code_target, what, "target");
    if (code_target.shape() != code_input.shape()) {
      throw ShapeError(what + ": the target " + shape_str(code_target.shape()) + " is not the input's shape " +
                       shape_str(code_input.shape()));
    }
    if (steps_ > 0 && options.optimizer != optimizer_kind_) {
      throw InvalidArgument(what + ": optimizer " + optimizer_name(options.optimizer) + ", but the first step " +
                            "created " + optimizer_name(optimizer_kind_) + "; the optimizer's state belongs to it");
    }
    if (!(options.lr >= 0.0) || !std::isfinite(options.lr)) {
      throw InvalidArgument(what + ": the learning rate lr = " + std::to_string(options.lr) +
                            " must be finite and >= 0");
    }
  });
  // Input and target travel in one transfer: one message per rank pair.
  const bool model = plan_->is_model_rank();
  const Shape leading(code_input.shape().begin(), code_input.shape().end() - 2);
  Tensor x_model, y_model;
  if (model) {
    x_model = Tensor::empty(plan_->model_shape(leading), DType::f32);
    y_model = Tensor::empty(plan_->model_shape(leading), DType::f32);
  }
  plan_->to_model({code_input, code_target}, model ? std::vector<Tensor>{x_model, y_model} : std::vector<Tensor>{});
  // The step of tessera-run's training loop on the model ranks; the other ranks wait in
  // the agreement (the wait policy), which also fails every rank if a model rank fails.
  Tensor loss = Tensor::zeros({1}, DType::f64);
  agree_on_success(comm, [&] {
    if (!model) return;
    if (!optimizer_) optimizer_ = make_optimizer(options, model_->named_parameters());
    optimizer_->set_learning_rate(options.lr);
    optimizer_->zero_grad();
    const Shape& ms = x_model.shape();
    const Shape shape{batch, config_.channels, ms[ms.size() - 2], ms.back()};
    const Tensor x = x_model.reshape(shape).to(mesh_->device());
    const Tensor y = y_model.reshape(shape).to(mesh_->device());
    const Tensor prediction = model_->forward(x);
    const domain::LossResult result =
        domain::lat_weighted_mse(prediction, y, model_->decomposition(), config_.latitude_spec());
    model_->backward(result.grad);
    // The reductions of the model's mesh (no data parallelism): each a no-op where its
    // group has one rank.
    if (mesh_->tp_size() > 1) tp::sync_replicated_gradients(*model_, mesh_->tp());
    if (mesh_->domain_size() > 1) domain::sync_domain_gradients(*model_, *mesh_);
    optimizer_->step();
    static_cast<double*>(loss.data())[0] = result.value;
  });
  optimizer_kind_ = options.optimizer;
  ++steps_;
  // The loss is the same on every model rank: model rank 0's goes to every code rank.
  code_->comm().broadcast(loss, plan_->model_ranks().front());
  return loss.to_vector<double>()[0];
}

}  // namespace tessera::models
