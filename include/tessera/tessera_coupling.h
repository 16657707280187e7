#ifndef TESSERA_TESSERA_COUPLING_H
#define TESSERA_TESSERA_COUPLING_H
/*
 * Coupling: a model on fewer ranks than the code (docs/coupling.md). The code keeps its
 * decomposition (every rank of its communicator, each its box); a model runs on M <= N
 * of those ranks with a layout of its own, and a redistribution plan moves fields
 * between the two layouts, both ways, exactly (values are copied, never computed).
 *
 * Included by tessera.h; its conventions (status codes, tessera_last_error, handles,
 * MPI_Comm and MPI_Fint forms, array descriptions) hold here.
 *
 * Model ranks (tessera_redist_create, tessera_model_load_coupled):
 *   nmodel = 0, model_ranks NULL  one rank per GPU on each node, spread over the node's
 *                                 ranks; one rank (the node's first) on a node without GPUs
 *   nmodel > 0, model_ranks NULL  nmodel ranks spread evenly: code ranks floor(i N / nmodel)
 *   model_ranks != NULL           the nmodel code ranks listed; model rank i = model_ranks[i]
 * M > N, a rank outside [0, N), a duplicate in the list, or ranks that pass different
 * choices are TESSERA_ERR_INVALID_ARGUMENT on every rank, naming the argument.
 */

#include <mpi.h>
#include <stdint.h>

#include "tessera/tessera.h" /* the status codes, enums, handles and conventions (it includes this header last) */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tessera_redist tessera_redist_t;

/* Collective over the decomposition's communicator. The model's layout: a grid_lat x
 * grid_lon domain grid (0, 0: latitude bands, (M / replicas) x 1) whose boxes are each
 * held by `replicas` model ranks (model rank m holds the box of domain rank
 * m % (grid_lat grid_lon), as a tessera mesh with tensor degree `replicas` lays out its
 * ranks); replicas = 1 normally. The plan keeps the decomposition alive. */
int tessera_redist_create(const tessera_decomp_t* decomp, int nmodel, const int* model_ranks, int grid_lat,
                          int grid_lon, int replicas, tessera_redist_t** redist);
int tessera_redist_destroy(tessera_redist_t** redist);
/* M, and this rank's model rank (-1 on ranks that are not model ranks). */
int tessera_redist_model_size(const tessera_redist_t* redist, int* size);
int tessera_redist_model_rank(const tessera_redist_t* redist, int* model_rank);
/* The M code ranks of the model, in model-rank order, into ranks[0 .. M). */
int tessera_redist_model_ranks(const tessera_redist_t* redist, int* ranks);
/* This model rank's box (0-based starts, counts); counts 0 on other ranks. */
int tessera_redist_model_box(const tessera_redist_t* redist, int64_t* lat_start, int64_t* lat_count,
                             int64_t* lon_start, int64_t* lon_count);
/* The model ranks' communicator (model-rank order; owned by tessera, do not free) for
 * the model's own mesh; MPI_COMM_NULL on other ranks. */
int tessera_redist_model_comm(const tessera_redist_t* redist, MPI_Comm* comm);
int tessera_redist_model_comm_f(const tessera_redist_t* redist, MPI_Fint* comm);

/* Local. Registers a pair of arrays: the code's (leading..., box lat, box lon) in
 * tessera's view, `code_shape` in declaration order as everywhere, and the model's, the
 * same dtype, order and leading dims over this rank's model box (ignored, may be NULL,
 * on ranks that are not model ranks). The memory must stay valid while registered.
 * `index` (may be NULL) receives the pair's position. Every rank registers the same
 * fields (count, dtypes, leading dims); any mix of f32 and f64 travels in one transfer. */
int tessera_redist_add_field(tessera_redist_t* redist, void* code_data, void* model_data, tessera_dtype_t dtype,
                             tessera_order_t order, int ndim, const int64_t* code_shape, int* index);
int tessera_redist_clear_fields(tessera_redist_t* redist);
int tessera_redist_num_fields(const tessera_redist_t* redist, int* count);
/* Collective: every registered code array's box into the model arrays (to_model), or
 * the model arrays back into the code arrays (to_code; each cell from replica 0). Split
 * for overlap: start_*, then finish (waits under the wait policy); between them write
 * no source and touch no destination. One transfer in flight per plan. */
int tessera_redist_to_model(tessera_redist_t* redist);
int tessera_redist_to_code(tessera_redist_t* redist);
int tessera_redist_start_to_model(tessera_redist_t* redist);
int tessera_redist_start_to_code(tessera_redist_t* redist);
int tessera_redist_finish(tessera_redist_t* redist);
int tessera_redist_in_flight(const tessera_redist_t* redist, int* in_flight);

/* Collective over the decomposition's communicator: the field emulator stored at `path`
 * (as tessera_model_load) run on the model ranks chosen by (nmodel, model_ranks) in
 * latitude bands x `tensor` tensor-parallel ranks (tensor divides M), on their GPUs when
 * every model rank sees one. The result is an ordinary model handle whose
 * tessera_model_predict / _forward take every rank's fields in the code's layout,
 * (B, channels, box lat, box lon) in tessera's view over the decomposition's box
 * (tessera_model_box returns it), move them to the model ranks, run the model there and
 * return the result in the same layout; the ranks that run no model wait in the
 * library's wait policy meanwhile. A model trained on another grid than the
 * decomposition's is TESSERA_ERR_INVALID_ARGUMENT on every rank. */
int tessera_model_load_coupled(const tessera_decomp_t* decomp, const char* path, int nmodel, const int* model_ranks,
                               int tensor, tessera_model_t** model);
/* Collective: one online training step of a coupled model (tessera_model_load_coupled)
 * on normalised fields in the code's layout, input and target (B, channels, box lat,
 * box lon) in tessera's view on every rank, dtype TESSERA_F32. Both go to the model
 * ranks in one transfer; there the model runs forward, the latitude-weighted MSE
 * (tessera-run's loss), backward, its gradient sync and an optimizer step: `optimizer`
 * "adamw" (torch's defaults but lr) or "sgd" (no momentum), created on the first step
 * and kept (another kind later is TESSERA_ERR_INVALID_ARGUMENT), learning rate `lr`.
 * *loss (may be NULL) receives the step's loss, the same on every rank. A model of
 * tessera_model_load is TESSERA_ERR_INVALID_ARGUMENT (train it with tessera-run). */
int tessera_model_train_step(tessera_model_t* model, const void* input, const void* target, tessera_dtype_t dtype,
                             tessera_order_t order, int ndim, const int64_t* shape, const char* optimizer, double lr,
                             double* loss);
/* Steps taken by tessera_model_train_step. */
int tessera_model_train_steps(const tessera_model_t* model, int64_t* steps);
/* The ranks that run the model and this rank's place among them (-1 when it runs none);
 * for a model of tessera_model_load: the mesh's size and this rank's rank in it. */
int tessera_model_coupling(const tessera_model_t* model, int* model_size, int* model_rank);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_TESSERA_COUPLING_H */
