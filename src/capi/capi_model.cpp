// C API: loading a trained model (tessera::load_any_model) and running it on the caller's
// mesh -- a field emulator on caller-owned fields, a decoder on token ids -- or, coupled,
// a field emulator on a subset of a decomposition's ranks (models::CoupledModel).

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "capi/capi_coupling.hpp"
#include "capi/capi_internal.hpp"
#include "tessera/agree.hpp"
#include "tessera/models/coupled_model.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/onnx/onnx_model.hpp"
#include "tessera/optim.hpp"

struct tessera_model {
  std::shared_ptr<tessera::Mesh> mesh;  // the model refers to it
  std::unique_ptr<tessera::models::FieldEmulator> model;
  // A decoder instead (tessera_model_load of a decoder checkpoint).
  std::unique_ptr<tessera::models::LoadedDecoder> decoder;
  // The decomposition a coupled model or a split ONNX graph refers to, kept alive with it
  // (declared before both, so it outlives their plans).
  std::shared_ptr<tessera_decomp_state> decomp;
  // A coupled model instead (tessera_model_load_coupled).
  std::unique_ptr<tessera::models::CoupledModel> coupled;
  // An imported ONNX graph instead (tessera_model_load_onnx; tessera_model_split_onnx).
  std::unique_ptr<tessera::onnx::OnnxModel> onnx;
  // Its optimizer (tessera_model_onnx_train_step), made at the first step, and its kind.
  std::unique_ptr<tessera::Optimizer> onnx_optimizer;
  int onnx_optimizer_kind = -1;
};

using namespace tessera;
using tessera::capi::guarded;
using tessera::capi::require;

namespace {

// The calls of one kind of model on the other name what the handle holds.
models::FieldEmulator& model_of(const tessera_model_t* m) {
  require(m, "the model handle");
  if (m->decoder) {
    throw InvalidArgument("the model handle holds a decoder (model type 'decoder'), not a field emulator: run it "
                          "with tessera_model_logits");
  }
  if (m->onnx) {
    throw InvalidArgument("the model handle holds an ONNX model (model type 'onnx'), not a field emulator: run it "
                          "with tessera_model_run");
  }
  if (!m->model) throw InvalidArgument("the model handle is not initialised");
  return *m->model;
}

models::LoadedDecoder& decoder_of(const tessera_model_t* m) {
  require(m, "the model handle");
  if (m->model || m->coupled) {
    throw InvalidArgument("the model handle holds a field emulator (model type 'field_emulator'), not a decoder: run "
                          "it with tessera_model_predict / tessera_model_forward");
  }
  if (m->onnx) {
    throw InvalidArgument("the model handle holds an ONNX model (model type 'onnx'), not a decoder: run it with "
                          "tessera_model_run");
  }
  if (!m->decoder) throw InvalidArgument("the model handle is not initialised");
  return *m->decoder;
}

onnx::OnnxModel& onnx_of(const tessera_model_t* m) {
  require(m, "the model handle");
  if (m->decoder) {
    throw InvalidArgument("the model handle holds a decoder (model type 'decoder'), not an ONNX model: run it with "
                          "tessera_model_logits");
  }
  if (m->model || m->coupled) {
    throw InvalidArgument("the model handle holds a field emulator (model type 'field_emulator'), not an ONNX model: "
                          "run it with tessera_model_predict / tessera_model_forward");
  }
  if (!m->onnx) throw InvalidArgument("the model handle is not initialised");
  return *m->onnx;
}

// "[2, 3, 8]" in the caller's order.
std::string caller_extents(Shape shape, int order) {
  if (order == TESSERA_ORDER_FORTRAN) std::reverse(shape.begin(), shape.end());
  return shape_str(shape);
}

// The caller's array as the graph's input or output: its dtype and extents must be the
// graph's (named in the caller's order), so nothing is reshaped behind the caller's back.
Tensor onnx_array(const void* data, int ndim, const std::int64_t* shape, int dtype, int order, const Shape& expected,
                  DType expected_dtype, const std::string& what) {
  Tensor view = capi::array_view(const_cast<void*>(data), dtype, order, ndim, shape, what);
  if (view.dtype() != expected_dtype) {
    throw InvalidArgument(what + ": the graph's is " + std::string(dtype_name(expected_dtype)) + ", the array is " +
                          std::string(dtype_name(view.dtype())));
  }
  if (view.shape() != expected) {
    throw ShapeError(what + ": the graph's extents are " + caller_extents(expected, order) + ", the array's " +
                     caller_extents(view.shape(), order));
  }
  return view;
}

bool is_coupled(const tessera_model_t* m) {
  require(m, "the model handle");
  return m->coupled != nullptr;
}

// A coupled model: the caller's arrays are the code's box on every rank of the
// decomposition; the CoupledModel agrees on every argument error itself.
void run_coupled(tessera_model_t* handle, const void* input, void* output, int dtype, int order, int ndim,
                 const std::int64_t* shape, bool physical) {
  models::CoupledModel& model = *handle->coupled;
  Tensor in, out;
  agree_on_success(model.plan().code().comm().mpi_comm(), [&] {
    if (dtype != TESSERA_F32) {
      throw InvalidArgument("model fields must be TESSERA_F32 (0), got dtype " + std::to_string(dtype));
    }
    in = capi::array_view(const_cast<void*>(input), dtype, order, ndim, shape, "model input");
    out = capi::array_view(output, dtype, order, ndim, shape, "model output");
    // Checked here too, so that the message speaks the caller's order.
    in = capi::batch_view(in, model.config().channels, model.plan().code().box(), "model input");
    out = out.reshape(in.shape());
  });
  // The input travels to the model ranks before the output is written, so the two may
  // be the same array.
  if (physical) {
    model.predict(in, out);
  } else {
    model.forward(in, out);
  }
}

// The ranks whose halos (domain) or shards (tp) meet in the forward must pass the same
// batch; otherwise their halo messages differ in size and the error would read as a halo
// argument mismatch. Named as a batch error, agreed over the world.
void check_same_batch(const Mesh& mesh, std::int64_t batch) {
  const auto range = [&](Communicator& comm) {
    Tensor t = Tensor::from_vector(std::vector<std::int64_t>{batch, -batch}, {2});
    comm.all_reduce(t, ReduceOp::max);
    const auto v = t.to_vector<std::int64_t>();
    return std::pair{-v[1], v[0]};
  };
  // Plain variables, not structured bindings: clang 14 cannot capture those in a lambda.
  const std::pair<std::int64_t, std::int64_t> domain_range = range(mesh.domain()), tp_range = range(mesh.tp());
  const std::int64_t domain_min = domain_range.first, domain_max = domain_range.second;
  const std::int64_t tp_min = tp_range.first, tp_max = tp_range.second;
  agree_on_success(mesh.world().mpi_comm(), [&] {
    if (domain_min != domain_max || tp_min != tp_max) {
      throw InvalidArgument("model input: the batch size (the slowest-varying dimension in C order, the last in "
                            "Fortran) differs between the ranks that run the model together: this rank passes " +
                            std::to_string(batch) + ", they pass " + std::to_string(std::min(domain_min, tp_min)) +
                            " to " + std::to_string(std::max(domain_max, tp_max)) +
                            "; every rank of one model call must pass the same batch");
    }
  });
}

void run(tessera_model_t* handle, const void* input, void* output, int dtype, int order, int ndim,
         const std::int64_t* shape, bool physical) {
  if (is_coupled(handle)) return run_coupled(handle, input, output, dtype, order, ndim, shape, physical);
  models::FieldEmulator& model = model_of(handle);
  Tensor in, out;
  // Argument errors are agreed before the collective forward, so no rank is left in it.
  agree_on_success(handle->mesh->world().mpi_comm(), [&] {
    if (dtype != TESSERA_F32) {
      throw InvalidArgument("model fields must be TESSERA_F32 (0), got dtype " + std::to_string(dtype));
    }
    in = capi::array_view(const_cast<void*>(input), dtype, order, ndim, shape, "model input");
    out = capi::array_view(output, dtype, order, ndim, shape, "model output");
    in = capi::batch_view(in, model.config().channels, model.decomposition().box(), "model input");
    out = out.reshape(in.shape());
  });
  check_same_batch(*handle->mesh, in.size(0));
  const Tensor x = in.clone();  // the model may keep its input; the caller's array may be the output
  Tensor y = physical ? model.predict(x) : model.forward(x);
  out.copy_from(y);
}

// Sum of (y - t)^2 over this rank's elements, and y - t scaled by `scale` into `grad`.
template <class T>
double squared_error(const Tensor& y, const Tensor& t, Tensor& grad, double scale) {
  const T* a = y.data<T>();
  const T* b = t.data<T>();
  T* g = grad.data<T>();
  double sum = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    sum += d * d;
    g[i] = static_cast<T>(scale * d);
  }
  return sum;
}

// The optimizer of the first step; later steps must ask for the same kind.
Optimizer& onnx_optimizer(tessera_model_t* model, int kind, double lr) {
  if (kind != TESSERA_OPTIMIZER_SGD && kind != TESSERA_OPTIMIZER_ADAMW) {
    throw InvalidArgument("optimizer must be TESSERA_OPTIMIZER_SGD (0) or TESSERA_OPTIMIZER_ADAMW (1), got " +
                          std::to_string(kind));
  }
  if (!model->onnx_optimizer) {
    const NamedParameters params = model->onnx->named_parameters();
    if (kind == TESSERA_OPTIMIZER_SGD) {
      model->onnx_optimizer = std::make_unique<Sgd>(params, SgdOptions{.lr = lr});
    } else {
      // No weight decay, as tessera-run's optimizer.weight_decay default (AdamWOptions' is 1e-2).
      model->onnx_optimizer = std::make_unique<AdamW>(params, AdamWOptions{.lr = lr, .weight_decay = 0.0});
    }
    model->onnx_optimizer_kind = kind;
  } else if (kind != model->onnx_optimizer_kind) {
    throw InvalidArgument("optimizer " + std::to_string(kind) + " differs from the first step's (" +
                          std::to_string(model->onnx_optimizer_kind) + "), whose state the model keeps");
  }
  model->onnx_optimizer->set_learning_rate(lr);
  return *model->onnx_optimizer;
}

}  // namespace

extern "C" {

int tessera_model_load(const tessera_mesh_t* mesh, const char* path, tessera_model_t** model) {
  return guarded("tessera_model_load", [&] {
    require(model, "the output handle pointer");
    *model = nullptr;
    require(mesh, "the mesh handle");
    if (!mesh->mesh) throw InvalidArgument("the mesh handle is not initialised");
    require(path, "the checkpoint path");
    auto handle = std::make_unique<tessera_model>();
    handle->mesh = mesh->mesh;
    models::LoadedModel loaded = load_any_model(path, *mesh->mesh);
    handle->model = std::move(loaded.emulator);
    handle->decoder = std::move(loaded.decoder);
    *model = handle.release();
  });
}

int tessera_model_type(const tessera_model_t* model, int* type) {
  return guarded("tessera_model_type", [&] {
    require(type, "type");
    require(model, "the model handle");
    if (model->decoder) {
      *type = TESSERA_MODEL_DECODER;
    } else if (model->onnx) {
      *type = TESSERA_MODEL_ONNX;
    } else {
      if (!is_coupled(model)) (void)model_of(model);
      *type = TESSERA_MODEL_FIELD_EMULATOR;
    }
  });
}

int tessera_model_vocab(const tessera_model_t* model, int64_t* vocab) {
  return guarded("tessera_model_vocab", [&] {
    require(vocab, "vocab");
    *vocab = decoder_of(model).config().vocab;
  });
}

int tessera_model_logits(tessera_model_t* model, const int64_t* ids, int64_t batch, int64_t seq, float* logits,
                         int64_t vocab) {
  return guarded("tessera_model_logits", [&] {
    models::LoadedDecoder& decoder = decoder_of(model);
    const Mesh& mesh = decoder.mesh();
    const std::int64_t V = decoder.config().vocab;
    Tensor in;
    // Argument errors are agreed before the collective forward, so no rank is left in it;
    // the tp ranks' comparison of (batch, seq) comes after this rank's own checks, which
    // every rank passes or every rank fails (a collective inside the agreement's body
    // would wait for a rank that threw before reaching it).
    agree_on_success(mesh.world().mpi_comm(), [&] {
      if (batch < 1 || seq < 1) {
        throw InvalidArgument("tessera_model_logits: batch (" + std::to_string(batch) + ") and seq (" +
                              std::to_string(seq) + ") must be >= 1");
      }
      if (vocab != V) {
        throw ShapeError("tessera_model_logits: the logits array's vocab extent is " + std::to_string(vocab) +
                         ", the model's vocabulary is " + std::to_string(V) + " (tessera_model_vocab)");
      }
      require(ids, "ids");
      require(logits, "logits");
      const std::vector<std::int64_t> values(ids, ids + batch * seq);
      const auto [least, most] = std::minmax_element(values.begin(), values.end());
      if (*least < 0 || *most >= V) {
        const std::int64_t bad = *least < 0 ? *least : *most;
        throw InvalidArgument("tessera_model_logits: token id " + std::to_string(bad) + " is outside [0, " +
                              std::to_string(V) + ")");
      }
      in = Tensor::from_vector(values, {batch, seq});
    });
    // The tp ranks compute one forward together: they must agree on its shape.
    Tensor lo = Tensor::from_vector<std::int64_t>({batch, seq}, {2}), hi = lo.clone();
    mesh.tp().all_reduce(lo, ReduceOp::min);
    mesh.tp().all_reduce(hi, ReduceOp::max);
    agree_on_success(mesh.world().mpi_comm(), [&] {
      if (lo.to_vector<std::int64_t>() != hi.to_vector<std::int64_t>()) {
        throw ShapeError("tessera_model_logits: the tp ranks pass different (batch, seq): every rank of a tp group "
                         "passes the same ids");
      }
    });
    const Tensor out = decoder.logits(in).to(Device::host()).contiguous();
    std::copy_n(out.data<float>(), out.numel(), logits);
  });
}

int tessera_model_load_onnx(const tessera_mesh_t* mesh, const char* path, tessera_model_t** model) {
  return guarded("tessera_model_load_onnx", [&] {
    require(model, "the output handle pointer");
    *model = nullptr;
    require(mesh, "the mesh handle");
    if (!mesh->mesh) throw InvalidArgument("the mesh handle is not initialised");
    require(path, "the ONNX file path");
    const Mesh& m = *mesh->mesh;
    auto handle = std::make_unique<tessera_model>();
    handle->mesh = mesh->mesh;
    // Every rank reads the file; one that fails fails every rank, so none is left
    // waiting in a later collective of the caller's.
    agree_on_success(m.world().mpi_comm(), [&] {
      if (m.tp_size() != 1 || m.domain_size() != 1 || m.pp_size() != 1) {
        throw UnsupportedError("tessera_model_load_onnx: an imported graph runs whole on every rank (data "
                               "parallel); this mesh has tensor " + std::to_string(m.tp_size()) + ", domain " +
                               std::to_string(m.domain_size()) + ", pipeline " + std::to_string(m.pp_size()) +
                               "; split the field with a decomposition instead (tessera_model_split_onnx)");
      }
      handle->onnx = onnx::load_onnx(path);
      if (handle->onnx->input_names().size() != 1 || handle->onnx->output_names().size() != 1) {
        throw InvalidArgument("ONNX file '" + std::string(path) + "' has " +
                              std::to_string(handle->onnx->input_names().size()) + " inputs and " +
                              std::to_string(handle->onnx->output_names().size()) +
                              " outputs; the C API runs one-input one-output graphs");
      }
    });
    *model = handle.release();
  });
}

int tessera_model_split_onnx(tessera_model_t* model, const tessera_decomp_t* decomp) {
  return guarded("tessera_model_split_onnx", [&] {
    onnx::OnnxModel& m = onnx_of(model);
    require(decomp, "the decomposition handle");
    if (!decomp->state || !decomp->state->d) throw InvalidArgument("the decomposition handle is not initialised");
    m.split_over(*decomp->state->d);
    model->decomp = decomp->state;  // kept alive with the model
  });
}

int tessera_model_onnx_shape(const tessera_model_t* model, int which, tessera_order_t order, tessera_dtype_t* dtype,
                             int* ndim, int64_t* shape) {
  return guarded("tessera_model_onnx_shape", [&] {
    onnx::OnnxModel& m = onnx_of(model);
    require(dtype, "dtype");
    require(ndim, "ndim");
    require(shape, "shape");
    if (which != 0 && which != 1) throw InvalidArgument("which must be 0 (input) or 1 (output), got " + std::to_string(which));
    if (order != TESSERA_ORDER_C && order != TESSERA_ORDER_FORTRAN) {
      throw InvalidArgument("order must be TESSERA_ORDER_C (0) or TESSERA_ORDER_FORTRAN (1), got " +
                            std::to_string(static_cast<int>(order)));
    }
    Shape extents;
    DType type;
    if (which == 0) {
      extents = m.block_input_shapes().front();
      type = m.input_dtypes().front();
    } else {
      // The output's extents follow from a forward of the declared input, as the
      // executor computes them (a file's declared output shape may be absent).
      Tensor probe = Tensor::zeros(m.block_input_shapes().front(), m.input_dtypes().front());
      const Tensor y = m.forward(probe);
      extents = y.shape();
      type = y.dtype();
    }
    if (type != DType::f32 && type != DType::f64) {
      throw UnsupportedError(std::string(which == 0 ? "the graph's input" : "the graph's output") + " is " +
                             std::string(dtype_name(type)) + "; the C API passes f32 or f64 arrays");
    }
    if (order == TESSERA_ORDER_FORTRAN) std::reverse(extents.begin(), extents.end());
    *dtype = type == DType::f32 ? TESSERA_F32 : TESSERA_F64;
    *ndim = static_cast<int>(extents.size());
    std::copy(extents.begin(), extents.end(), shape);
  });
}

int tessera_model_run(tessera_model_t* model, const void* input, int input_ndim, const int64_t* input_shape,
                      void* output, int output_ndim, const int64_t* output_shape, tessera_dtype_t dtype,
                      tessera_order_t order) {
  return guarded("tessera_model_run", [&] {
    onnx::OnnxModel& m = onnx_of(model);
    const Tensor x = onnx_array(input, input_ndim, input_shape, dtype, order, m.block_input_shapes().front(),
                                m.input_dtypes().front(), "model input")
                         .clone();  // the caller's output array may be the input
    const Tensor y = m.forward(x);
    Tensor out = onnx_array(output, output_ndim, output_shape, dtype, order, y.shape(), y.dtype(), "model output");
    out.copy_from(y);
  });
}

int tessera_model_onnx_train_step(tessera_model_t* model, const void* input, int input_ndim,
                                  const int64_t* input_shape, const void* target, int target_ndim,
                                  const int64_t* target_shape, tessera_dtype_t dtype, tessera_order_t order,
                                  int optimizer, double lr, double* loss) {
  return guarded("tessera_model_onnx_train_step", [&] {
    onnx::OnnxModel& m = onnx_of(model);
    require(loss, "loss");
    // Every rank checks the same arguments and its own arrays; one rank's refusal is
    // every rank's, before the forward's collectives of a split model.
    Tensor x;
    Optimizer* opt = nullptr;
    agree_on_success(model->mesh->world().mpi_comm(), [&] {
      if (!std::isfinite(lr) || lr < 0) throw InvalidArgument("lr must be finite and >= 0");
      opt = &onnx_optimizer(model, optimizer, lr);
      x = onnx_array(input, input_ndim, input_shape, dtype, order, m.block_input_shapes().front(),
                     m.input_dtypes().front(), "model input")
              .clone();
    });
    opt->zero_grad();
    const Tensor y = m.forward(x);
    Tensor t;
    agree_on_success(model->mesh->world().mpi_comm(), [&] {
      t = onnx_array(target, target_ndim, target_shape, dtype, order, y.shape(), y.dtype(), "model target");
    });
    // The mean squared error over every rank's elements: of the ranks of a split graph
    // (their blocks make one field), else of the mesh (each rank its own batch).
    Communicator& comm = model->decomp ? model->decomp->d->comm() : model->mesh->world();
    Tensor count = Tensor::from_vector(std::vector<double>{static_cast<double>(y.numel())}, {1});
    comm.all_reduce(count, ReduceOp::sum);
    const double n = count.to_vector<double>()[0];
    Tensor grad = Tensor::empty(y.shape(), y.dtype());
    const double sum = y.dtype() == DType::f32 ? squared_error<float>(y, t, grad, 2.0 / n)
                                               : squared_error<double>(y, t, grad, 2.0 / n);
    Tensor total = Tensor::from_vector(std::vector<double>{sum}, {1});
    comm.all_reduce(total, ReduceOp::sum);
    *loss = total.to_vector<double>()[0] / n;
    m.backward(grad);
    // A split graph's backward sums the parameters' gradients over its ranks itself.
    if (!model->decomp) {
      for (const auto& [name, p] : m.named_parameters()) comm.all_reduce(p->grad, ReduceOp::sum);
    }
    opt->step();
  });
}

int tessera_model_save_onnx(tessera_model_t* model, const char* in_path, const char* out_path) {
  return guarded("tessera_model_save_onnx", [&] {
    onnx::OnnxModel& m = onnx_of(model);
    // Every rank holds the same weights; rank 0 writes, and its failure is every rank's.
    agree_on_success(model->mesh->world().mpi_comm(), [&] {
      require(in_path, "in_path");
      require(out_path, "out_path");
      if (model->mesh->world().rank() == 0) onnx::save_onnx(m, in_path, out_path);
    });
  });
}

int tessera_model_destroy(tessera_model_t** model) {
  return guarded("tessera_model_destroy", [&] {
    require(model, "the pointer to the model handle");
    std::unique_ptr<tessera_model> owned(*model);
    *model = nullptr;
  });
}

int tessera_model_load_coupled(const tessera_decomp_t* decomp, const char* path, int nmodel, const int* model_ranks,
                               int tensor, tessera_model_t** model) {
  return guarded("tessera_model_load_coupled", [&] {
    require(model, "the output handle pointer");
    *model = nullptr;
    const domain::Decomposition& code = capi::decomposition_of(decomp);
    require(path, "the checkpoint path");
    auto handle = std::make_unique<tessera_model>();
    handle->decomp = decomp->state;
    handle->coupled = std::make_unique<models::CoupledModel>(path, code, capi::model_ranks_of(nmodel, model_ranks),
                                                             models::CoupledModelOptions{tensor, true});
    *model = handle.release();
  });
}

int tessera_model_train_step(tessera_model_t* model, const void* input, const void* target, tessera_dtype_t dtype,
                             tessera_order_t order, int ndim, const int64_t* shape, const char* optimizer, double lr,
                             double* loss) {
  return guarded("tessera_model_train_step", [&] {
    if (!is_coupled(model)) {
      throw InvalidArgument("tessera_model_train_step trains a coupled model (tessera_model_load_coupled); a model "
                            "of tessera_model_load is for inference (train it with tessera-run)");
    }
    models::CoupledModel& coupled = *model->coupled;
    Tensor in, tgt;
    models::CoupledTrainOptions options;
    agree_on_success(coupled.plan().code().comm().mpi_comm(), [&] {
      if (dtype != TESSERA_F32) {
        throw InvalidArgument("model fields must be TESSERA_F32 (0), got dtype " + std::to_string(dtype));
      }
      require(optimizer, "the optimizer name");
      const std::string kind = optimizer;
      if (kind != "adamw" && kind != "sgd") {
        throw InvalidArgument("optimizer '" + kind + "' is neither \"adamw\" nor \"sgd\"");
      }
      options.optimizer = kind == "adamw" ? models::CoupledTrainOptions::Optimizer::adamw
                                          : models::CoupledTrainOptions::Optimizer::sgd;
      options.lr = lr;
      in = capi::array_view(const_cast<void*>(input), dtype, order, ndim, shape, "model input");
      tgt = capi::array_view(const_cast<void*>(target), dtype, order, ndim, shape, "model target");
      // Checked here too, so that the message speaks the caller's order.
      const domain::LocalBox box = coupled.plan().code().box();
      in = capi::batch_view(in, coupled.config().channels, box, "model input");
      tgt = capi::batch_view(tgt, coupled.config().channels, box, "model target");
    });
    const double value = coupled.train_step(in, tgt, options);
    if (loss != nullptr) *loss = value;
  });
}

int tessera_model_train_steps(const tessera_model_t* model, int64_t* steps) {
  return guarded("tessera_model_train_steps", [&] {
    require(steps, "steps");
    *steps = is_coupled(model) ? model->coupled->steps() : 0;
  });
}

int tessera_model_coupling(const tessera_model_t* model, int* model_size, int* model_rank) {
  return guarded("tessera_model_coupling", [&] {
    require(model_size, "model_size");
    require(model_rank, "model_rank");
    if (is_coupled(model)) {
      *model_size = model->coupled->plan().model_size();
      *model_rank = model->coupled->plan().model_rank();
    } else {
      const Mesh& mesh = *require(model->mesh.get(), "the model's mesh");
      if (!model->decoder) (void)model_of(model);
      *model_size = mesh.world_size();
      *model_rank = mesh.global_rank();
    }
  });
}

int tessera_model_info(const tessera_model_t* model, int64_t* channels, int64_t* nlat, int64_t* nlon) {
  return guarded("tessera_model_info", [&] {
    const models::FieldEmulatorConfig& c = is_coupled(model) ? model->coupled->config() : model_of(model).config();
    *require(channels, "channels") = c.channels;
    *require(nlat, "nlat") = c.nlat;
    *require(nlon, "nlon") = c.nlon;
  });
}

int tessera_model_box(const tessera_model_t* model, int64_t* lat_start, int64_t* lat_count, int64_t* lon_start,
                      int64_t* lon_count) {
  return guarded("tessera_model_box", [&] {
    const domain::LocalBox box =
        is_coupled(model) ? model->coupled->plan().code().box() : model_of(model).decomposition().box();
    *require(lat_start, "lat_start") = box.lat.start;
    *require(lat_count, "lat_count") = box.lat.length;
    *require(lon_start, "lon_start") = box.lon.start;
    *require(lon_count, "lon_count") = box.lon.length;
  });
}

int tessera_model_predict(tessera_model_t* model, const void* input, void* output, tessera_dtype_t dtype,
                          tessera_order_t order, int ndim, const int64_t* shape) {
  return guarded("tessera_model_predict", [&] { run(model, input, output, dtype, order, ndim, shape, true); });
}

int tessera_model_forward(tessera_model_t* model, const void* input, void* output, tessera_dtype_t dtype,
                          tessera_order_t order, int ndim, const int64_t* shape) {
  return guarded("tessera_model_forward", [&] { run(model, input, output, dtype, order, ndim, shape, false); });
}

}  // extern "C"
