#ifndef TESSERA_TESSERA_TRAINER_H
#define TESSERA_TESSERA_TRAINER_H
/*
 * Online training from a running code (docs/online-training.md): a field emulator
 * created from a tessera-run YAML config (the same keys, parsed by the same code), trained
 * one optimizer step at a time on arrays the code owns, run for inference, and saved and
 * restored inside the code's own restart cycle. The step is tessera-run's (the
 * latitude-weighted MSE, the dp, tp and domain gradient reductions, clipping, the
 * learning-rate schedule, the optimizer), so the same config and the same data give the
 * same loss curve either way.
 *
 * Included by tessera.h; its conventions (status codes, tessera_last_error, handles,
 * MPI_Comm and MPI_Fint forms, array descriptions) hold here.
 *
 * Which keys count. model (type field_emulator, width, mlp_hidden, blocks, kernel,
 * residual, pole, activation_checkpointing), parallelism (data, tensor, domain), optimizer
 * (all but accumulate, which must be 1: a call is one step), schedule (steps: where the
 * learning-rate schedule ends, not a limit; seed: the initial weights), checkpoint (dir:
 * the default of save and restore; layout; keep_last) and device. The data section's keys
 * name tessera-run's files and are not read: the arrays are the data, trained on as they
 * are passed (normalise them as data.normalize would, if their units are far from 1).
 *
 * Fields. input and target are f32 (B, channels, lat_count, nlon) in tessera's view
 * (C: float x[B][C][lat][lon]; Fortran: real(real32) :: x(nlon, lat, C, B); ndim 3 means
 * B = 1) over this rank's latitude band (tessera_trainer_box): the bands of a
 * tessera_decomp_create(comm_of_domain_group, nlat, nlon, domain, 1). Every tp rank of a
 * replica passes the same fields; each dp replica passes its own B samples (the same B
 * on every replica), and the loss is averaged over the replicas.
 * ---------------------------------------------------------------------------------- */

#include <mpi.h>
#include <stdint.h>

#include "tessera/tessera.h" /* the status codes, enums and conventions (it includes this header last) */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tessera_trainer tessera_trainer_t;

/* The latitude grid of tessera_trainer_create. */
#define TESSERA_LATITUDES_CELL_CENTRES 0 /* nlat rows between the poles, none on them */
#define TESSERA_LATITUDES_WITH_POLES 1   /* the first and last rows are the poles */

/* Collective over comm: reads the config at `config_path` (TESSERA_ERR_CONFIG naming the
 * file, line and key; TESSERA_ERR_IO when unreadable), lays a dp x tp x domain mesh over
 * comm from its parallelism section (comm's size must be their product), builds the
 * field emulator of its model section on an nlat x nlon grid of `channels` channels
 * (latitude_grid: TESSERA_LATITUDES_*), and initialises it from schedule.seed: the same
 * weights as tessera-run's at every layout. */
int tessera_trainer_create(const char* config_path, MPI_Comm comm, int64_t channels, int64_t nlat, int64_t nlon,
                           int latitude_grid, tessera_trainer_t** trainer);
int tessera_trainer_create_f(const char* config_path, MPI_Fint comm, int64_t channels, int64_t nlat, int64_t nlon,
                             int latitude_grid, tessera_trainer_t** trainer);
int tessera_trainer_destroy(tessera_trainer_t** trainer);

/* This rank's latitude band (0-based start and count) and longitudes. */
int tessera_trainer_box(const tessera_trainer_t* trainer, int64_t* lat_start, int64_t* lat_count,
                        int64_t* lon_start, int64_t* lon_count);
/* The mesh: sizes[3] = {dp, tp, domain} and this rank's coords[3] in them (0-based). */
int tessera_trainer_mesh(const tessera_trainer_t* trainer, int* sizes, int* coords);
/* Optimizer steps taken (restored ones included). */
int tessera_trainer_steps(const tessera_trainer_t* trainer, int64_t* steps);

/* Collective over the mesh: one optimizer step on (input, target) -- see "Fields" above;
 * both arrays are read only. *loss (may be NULL) receives the step's loss averaged over
 * the dp replicas, the same on every rank. Argument errors (dtype not TESSERA_F32, a
 * shape that is not this rank's band, B = 0, replicas with different B) are returned on
 * every rank before any collective starts. */
int tessera_trainer_step(tessera_trainer_t* trainer, const void* input, const void* target, tessera_dtype_t dtype,
                         tessera_order_t order, int ndim, const int64_t* shape, double* loss);
/* Collective over the mesh (fsdp2 gathers its parameters over dp): the model's prediction
 * for `input` into `output` (the input's shape; may be the input array itself). No
 * gradient changes. */
int tessera_trainer_predict(tessera_trainer_t* trainer, const void* input, void* output, tessera_dtype_t dtype,
                            tessera_order_t order, int ndim, const int64_t* shape);

/* Collective over the mesh: saves the weights and the optimizer state as the checkpoint
 * of the current step under `dir` (NULL or "": the config's checkpoint.dir) --
 * dir/step_<steps>/, dir/latest -- with checkpoint.layout and checkpoint.keep_last. The
 * checkpoint is tessera-run's: tessera-run resumes it, tessera_model_load runs it. */
int tessera_trainer_save(tessera_trainer_t* trainer, const char* dir);
/* Collective over the mesh: the weights, the optimizer state and the step count from
 * `path` (a checkpoint.h5, a step directory or a root whose latest is read; NULL or "":
 * checkpoint.dir's latest), saved at any layout. The training that follows is the one
 * that would have followed the save, bit for bit. A checkpoint of another architecture
 * is TESSERA_ERR_CONFIG naming the first difference, before any weight is read. */
int tessera_trainer_restore(tessera_trainer_t* trainer, const char* path);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_TESSERA_TRAINER_H */
