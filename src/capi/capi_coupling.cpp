// C API: redistribution of caller arrays between the code's decomposition and a model's
// layout on a subset of the ranks (domain::Redistribution).

#include "capi/capi_coupling.hpp"

#include <optional>

#include "capi/capi_internal.hpp"
#include "tessera/agree.hpp"

using namespace tessera;
using tessera::capi::guarded;
using tessera::capi::require;
using tessera::domain::ModelRanks;
using tessera::domain::Redistribution;

struct tessera_redist {
  std::shared_ptr<tessera_decomp_state> decomp;  // the plan refers to its decomposition
  std::optional<Redistribution> plan;
  std::vector<Tensor> code_fields, model_fields;  // model_fields: on model ranks only
  // As for the halo (capi_halo.cpp): every registration call, successful or not, makes
  // the next transfer agree on the field count and check the fields collectively again,
  // so a registration that failed on one rank only cannot leave the ranks in different
  // checks.
  bool field_count_agreed = false;
};

namespace tessera::capi {

ModelRanks model_ranks_of(int nmodel, const int* ranks) {
  if (ranks != nullptr) {
    return ModelRanks::list(nmodel > 0 ? std::vector<int>(ranks, ranks + nmodel) : std::vector<int>{});
  }
  return nmodel == 0 ? ModelRanks::per_node() : ModelRanks::count(nmodel);
}

}  // namespace tessera::capi

namespace {

Redistribution& plan_of(tessera_redist_t* r) {
  require(r, "the redistribution handle");
  if (!r->plan) throw InvalidArgument("the redistribution handle is not initialised");
  return *r->plan;
}

const Redistribution& plan_of(const tessera_redist_t* r) { return plan_of(const_cast<tessera_redist_t*>(r)); }

Redistribution& agreed_plan(tessera_redist_t* r) {
  Redistribution& plan = plan_of(r);
  if (r->field_count_agreed) return plan;
  const std::string mine = std::to_string(r->code_fields.size());
  require_same_on_all_ranks(plan.code().comm().mpi_comm(), mine,
                            "the ranks of the redistribution's communicator registered different numbers of fields; "
                            "every rank registers the same fields before a transfer");
  plan.forget_fields();
  r->field_count_agreed = true;
  return plan;
}

void start(tessera_redist_t* r, bool to_model) {
  Redistribution& plan = agreed_plan(r);
  const std::vector<Tensor> none;
  const std::vector<Tensor>& model = plan.is_model_rank() ? r->model_fields : none;
  if (to_model) {
    plan.start_to_model(r->code_fields, model);
  } else {
    plan.start_to_code(model, r->code_fields);
  }
}

void add_field(tessera_redist_t* r, void* code_data, void* model_data, int dtype, int order, int ndim,
               const std::int64_t* shape, int* index) {
  r->field_count_agreed = false;
  Redistribution& plan = plan_of(r);
  if (plan.in_flight()) throw InvalidArgument("cannot register a field while a transfer is in flight");
  const std::string what = "field " + capi::caller_index(static_cast<std::int64_t>(r->code_fields.size()));
  Tensor code = capi::array_view(code_data, dtype, order, ndim, shape, what + ": the code array");
  const domain::LocalBox box = plan.code().box();
  const Shape& s = code.shape();
  capi::check_extents(s, box.lat.length, box.lon.length, box, nullptr, "", what + ": the code array");
  Tensor model;
  if (plan.is_model_rank()) {
    if (model_data == nullptr) {
      throw InvalidArgument(what + ": the model array is NULL on model rank " + std::to_string(plan.model_rank()));
    }
    model = capi::logical_view(model_data, capi::to_dtype(dtype, what),
                               plan.model_shape(Shape(s.begin(), s.end() - 2)), what + ": the model array");
  }
  r->code_fields.push_back(std::move(code));
  if (model.defined()) r->model_fields.push_back(std::move(model));
  if (index != nullptr) *index = static_cast<int>(r->code_fields.size()) - 1;
}

}  // namespace

extern "C" {

int tessera_redist_create(const tessera_decomp_t* decomp, int nmodel, const int* model_ranks, int grid_lat,
                          int grid_lon, int replicas, tessera_redist_t** redist) {
  return guarded("tessera_redist_create", [&] {
    require(redist, "the output handle pointer");
    *redist = nullptr;
    const domain::Decomposition& code = capi::decomposition_of(decomp);
    auto handle = std::make_unique<tessera_redist>();
    handle->decomp = decomp->state;
    handle->plan.emplace(code, capi::model_ranks_of(nmodel, model_ranks),
                         domain::ModelLayout{domain::ProcessGrid{grid_lat, grid_lon}, replicas});
    *redist = handle.release();
  });
}

int tessera_redist_destroy(tessera_redist_t** redist) {
  return guarded("tessera_redist_destroy", [&] {
    require(redist, "the pointer to the redistribution handle");
    std::unique_ptr<tessera_redist> owned(*redist);
    *redist = nullptr;
  });
}

int tessera_redist_model_size(const tessera_redist_t* redist, int* size) {
  return guarded("tessera_redist_model_size", [&] { *require(size, "size") = plan_of(redist).model_size(); });
}

int tessera_redist_model_rank(const tessera_redist_t* redist, int* model_rank) {
  return guarded("tessera_redist_model_rank",
                 [&] { *require(model_rank, "model_rank") = plan_of(redist).model_rank(); });
}

int tessera_redist_model_ranks(const tessera_redist_t* redist, int* ranks) {
  return guarded("tessera_redist_model_ranks", [&] {
    const std::vector<int>& all = plan_of(redist).model_ranks();
    require(ranks, "ranks");
    std::copy(all.begin(), all.end(), ranks);
  });
}

int tessera_redist_model_box(const tessera_redist_t* redist, int64_t* lat_start, int64_t* lat_count,
                             int64_t* lon_start, int64_t* lon_count) {
  return guarded("tessera_redist_model_box", [&] {
    const Redistribution& plan = plan_of(redist);
    require(lat_start, "lat_start");
    require(lat_count, "lat_count");
    require(lon_start, "lon_start");
    require(lon_count, "lon_count");
    const domain::LocalBox box = plan.is_model_rank() ? plan.model_box() : domain::LocalBox{};
    *lat_start = box.lat.start;
    *lat_count = box.lat.length;
    *lon_start = box.lon.start;
    *lon_count = box.lon.length;
  });
}

int tessera_redist_model_comm(const tessera_redist_t* redist, MPI_Comm* comm) {
  return guarded("tessera_redist_model_comm", [&] {
    const Redistribution& plan = plan_of(redist);
    *require(comm, "comm") = plan.is_model_rank() ? plan.model_comm().mpi_comm() : MPI_COMM_NULL;
  });
}

int tessera_redist_model_comm_f(const tessera_redist_t* redist, MPI_Fint* comm) {
  return guarded("tessera_redist_model_comm_f", [&] {
    const Redistribution& plan = plan_of(redist);
    *require(comm, "comm") = MPI_Comm_c2f(plan.is_model_rank() ? plan.model_comm().mpi_comm() : MPI_COMM_NULL);
  });
}

int tessera_redist_add_field(tessera_redist_t* redist, void* code_data, void* model_data, tessera_dtype_t dtype,
                             tessera_order_t order, int ndim, const int64_t* code_shape, int* index) {
  return guarded("tessera_redist_add_field",
                 [&] { add_field(redist, code_data, model_data, dtype, order, ndim, code_shape, index); });
}

int tessera_redist_clear_fields(tessera_redist_t* redist) {
  return guarded("tessera_redist_clear_fields", [&] {
    Redistribution& plan = plan_of(redist);
    redist->field_count_agreed = false;
    if (plan.in_flight()) throw InvalidArgument("cannot clear the fields while a transfer is in flight");
    redist->code_fields.clear();
    redist->model_fields.clear();
  });
}

int tessera_redist_num_fields(const tessera_redist_t* redist, int* count) {
  return guarded("tessera_redist_num_fields", [&] {
    (void)plan_of(redist);
    *require(count, "count") = static_cast<int>(redist->code_fields.size());
  });
}

int tessera_redist_to_model(tessera_redist_t* redist) {
  return guarded("tessera_redist_to_model", [&] {
    start(redist, true);
    redist->plan->finish();
  });
}

int tessera_redist_to_code(tessera_redist_t* redist) {
  return guarded("tessera_redist_to_code", [&] {
    start(redist, false);
    redist->plan->finish();
  });
}

int tessera_redist_start_to_model(tessera_redist_t* redist) {
  return guarded("tessera_redist_start_to_model", [&] { start(redist, true); });
}

int tessera_redist_start_to_code(tessera_redist_t* redist) {
  return guarded("tessera_redist_start_to_code", [&] { start(redist, false); });
}

int tessera_redist_finish(tessera_redist_t* redist) {
  return guarded("tessera_redist_finish", [&] { plan_of(redist).finish(); });
}

int tessera_redist_in_flight(const tessera_redist_t* redist, int* in_flight) {
  return guarded("tessera_redist_in_flight",
                 [&] { *require(in_flight, "in_flight") = plan_of(redist).in_flight() ? 1 : 0; });
}

}  // extern "C"
