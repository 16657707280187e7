// C API: loading a trained field emulator and running it on caller-owned fields.

#include "capi/capi_internal.hpp"
#include "tessera/agree.hpp"
#include "tessera/models/load_model.hpp"

struct tessera_model {
  std::shared_ptr<tessera::Mesh> mesh;  // the model refers to it
  std::unique_ptr<tessera::models::FieldEmulator> model;
};

using namespace tessera;
using tessera::capi::guarded;
using tessera::capi::require;

namespace {

models::FieldEmulator& model_of(const tessera_model_t* m) {
  require(m, "the model handle");
  if (!m->model) throw InvalidArgument("the model handle is not initialised");
  return *m->model;
}

void run(tessera_model_t* handle, const void* input, void* output, int dtype, int order, int ndim,
         const std::int64_t* shape, bool physical) {
  models::FieldEmulator& model = model_of(handle);
  Tensor in, out;
  // Argument errors are agreed before the collective forward, so no rank is left in it.
  agree_on_success(handle->mesh->world().mpi_comm(), [&] {
    if (dtype != TESSERA_F32) {
      throw InvalidArgument("model fields must be TESSERA_F32 (0), got dtype " + std::to_string(dtype));
    }
    in = capi::array_view(const_cast<void*>(input), dtype, order, ndim, shape, "model input");
    out = capi::array_view(output, dtype, order, ndim, shape, "model output");
    if (in.dim() == 3) {
      in = in.reshape({1, in.size(0), in.size(1), in.size(2)});
      out = out.reshape(in.shape());
    }
    const models::FieldEmulatorConfig& c = model.config();
    const domain::LocalBox box = model.decomposition().box();
    if (in.dim() != 4 || in.size(1) != c.channels || in.size(2) != box.lat.length || in.size(3) != box.lon.length) {
      throw ShapeError("model input " + shape_str(in.shape()) + " (tessera view) is not (B, " +
                       std::to_string(c.channels) + ", " + std::to_string(box.lat.length) + ", " +
                       std::to_string(box.lon.length) + "): B fields of this rank's band " + box.str());
    }
    // An empty batch has nothing to predict, and the normalisation divides by B.
    if (in.size(0) == 0) {
      throw InvalidArgument("model input " + shape_str(in.shape()) +
                            " (tessera view) has batch B = 0; pass at least one field");
    }
  });
  const Tensor x = in.clone();  // the model may keep its input; the caller's array may be the output
  Tensor y = physical ? model.predict(x) : model.forward(x);
  out.copy_from(y);
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
    handle->model = load_model(path, *mesh->mesh);
    *model = handle.release();
  });
}

int tessera_model_destroy(tessera_model_t** model) {
  return guarded("tessera_model_destroy", [&] {
    require(model, "the pointer to the model handle");
    std::unique_ptr<tessera_model> owned(*model);
    *model = nullptr;
  });
}

int tessera_model_info(const tessera_model_t* model, int64_t* channels, int64_t* nlat, int64_t* nlon) {
  return guarded("tessera_model_info", [&] {
    const models::FieldEmulatorConfig& c = model_of(model).config();
    *require(channels, "channels") = c.channels;
    *require(nlat, "nlat") = c.nlat;
    *require(nlon, "nlon") = c.nlon;
  });
}

int tessera_model_box(const tessera_model_t* model, int64_t* lat_start, int64_t* lat_count, int64_t* lon_start,
                      int64_t* lon_count) {
  return guarded("tessera_model_box", [&] {
    const domain::LocalBox box = model_of(model).decomposition().box();
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
