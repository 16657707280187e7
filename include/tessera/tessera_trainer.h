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
 * (all keys; accumulate N: N calls of tessera_trainer_step make one optimizer step),
 * schedule (steps: where the learning-rate schedule ends, not a limit; seed: the initial
 * weights), checkpoint (dir: the default of save and restore; layout; keep_last), device
 * and data.normalize. The other data keys name tessera-run's files and are not read: the
 * arrays are the data, trained on as they are passed.
 *
 * Normalisation. data.normalize (true unless the config says false, as in tessera-run)
 * needs the per-channel mean and std of the fields, which the code passes to
 * tessera_trainer_create_normalized (tessera-run reads the same numbers from its data
 * file). The trainer then trains on (x - mean) / std, as tessera-run does, and
 * predictions come back in physical units; the statistics go into the checkpoint, so
 * tessera_model_predict on it takes physical fields too. With data.normalize: false the
 * fields are trained on as they are.
 *
 * Fields. input and target are f32 or f64 (B, channels, lat_count, nlon) in tessera's
 * view (C: float or double x[B][C][lat][lon]; Fortran: real(real32) or real(real64) ::
 * x(nlon, lat, C, B); ndim 3 means B = 1) over this rank's latitude band
 * (tessera_trainer_box): the bands of a tessera_decomp_create(comm_of_domain_group,
 * nlat, nlon, domain, 1), or, after tessera_trainer_use_decomp, over this rank's box of
 * the code's own decomposition. f64 fields are rounded to f32, the model's precision, as they
 * are read; predictions come back in the fields' dtype. Every tp rank of a replica passes
 * the same fields; each dp replica passes its own B samples (the same B on every replica
 * and, within one optimizer step, in every micro-batch), and the loss is averaged over
 * the replicas.
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
#define TESSERA_LATITUDES_UNWEIGHTED 2   /* every row weighs the same (a plane; no latitudes) */
#define TESSERA_LATITUDES_EXPLICIT 3     /* the caller's latitudes (tessera_trainer_create_latitudes):
                                            a regional or limited-area grid, any spacing */

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
/* tessera_trainer_create for data.normalize (see "Normalisation" above): mean[channels]
 * and std[channels], the same on every rank, in the fields' physical units (finite; std
 * > 0). NULL for both is tessera_trainer_create. A config with data.normalize: false and
 * statistics, or data.normalize (the default) without them, is TESSERA_ERR_CONFIG naming
 * data.normalize; a bad value is TESSERA_ERR_INVALID_ARGUMENT naming mean[c] or std[c]. */
int tessera_trainer_create_normalized(const char* config_path, MPI_Comm comm, int64_t channels, int64_t nlat,
                                      int64_t nlon, int latitude_grid, const double* mean, const double* std,
                                      tessera_trainer_t** trainer);
/* The Fortran module's form: also the lengths of the caller's mean and std arrays
 * (-1: `channels`), checked with the rest on every rank, so a rank given statistics of
 * another length fails the collective create on every rank instead of returning alone. */
int tessera_trainer_create_normalized_f(const char* config_path, MPI_Fint comm, int64_t channels, int64_t nlat,
                                        int64_t nlon, int latitude_grid, const double* mean, int64_t mean_count,
                                        const double* std, int64_t std_count, tessera_trainer_t** trainer);
/* The same on the caller's grid: latitudes[nlat], row i's latitude in degrees in the
 * caller's row order (a regional grid, 65-86.5 N, is weighted by cos(latitude) over its
 * own rows, not as a slice of a global grid), the same on every rank; mean and std as in
 * tessera_trainer_create_normalized (NULL for both: no statistics). A latitude outside
 * [-90, 90] is TESSERA_ERR_INVALID_ARGUMENT naming the row. */
int tessera_trainer_create_latitudes(const char* config_path, MPI_Comm comm, int64_t channels, int64_t nlat,
                                     int64_t nlon, const double* latitudes, const double* mean, const double* std,
                                     tessera_trainer_t** trainer);
/* The Fortran module's form, with the caller's array lengths (-1: nlat, channels). */
int tessera_trainer_create_latitudes_f(const char* config_path, MPI_Fint comm, int64_t channels, int64_t nlat,
                                       int64_t nlon, const double* latitudes, int64_t latitudes_count,
                                       const double* mean, int64_t mean_count, const double* std, int64_t std_count,
                                       tessera_trainer_t** trainer);
int tessera_trainer_destroy(tessera_trainer_t** trainer);

/* This rank's latitude band (0-based start and count) and longitudes. */
int tessera_trainer_box(const tessera_trainer_t* trainer, int64_t* lat_start, int64_t* lat_count,
                        int64_t* lon_start, int64_t* lon_count);
/* The mesh: sizes[3] = {dp, tp, domain} and this rank's coords[3] in them (0-based). */
int tessera_trainer_mesh(const tessera_trainer_t* trainer, int* sizes, int* coords);
/* Optimizer steps taken (restored ones included). With optimizer.accumulate N it grows
 * by one on every N-th tessera_trainer_step call, the one that updates the weights. */
int tessera_trainer_steps(const tessera_trainer_t* trainer, int64_t* steps);
/* Micro-batches accumulated towards the next optimizer step: 0 .. accumulate - 1 (always
 * 0 with accumulate 1). 0 right after the call that updated the weights. */
int tessera_trainer_pending(const tessera_trainer_t* trainer, int64_t* micro_batches);

/* Collective over the mesh: from now on tessera_trainer_step and tessera_trainer_predict
 * take their fields over this rank's box of `decomp` (the code's own decomposition: any
 * 2-D block layout, any rank order), (B, channels, box lat, box lon) in tessera's view,
 * f32 or f64, C or Fortran order, and predict writes the code's boxes. The trainer moves
 * them to its bands and predictions back itself, through the coupling's redistribution
 * plan (tessera_redist_*; every rank of the mesh a model rank, the tp ranks of a band its
 * replicas, each cell back from tp rank 0); values are copied, never computed, so the
 * losses and predictions are the banded ones. The decomposition's communicator must
 * hold the trainer's ranks (its size otherwise named with the trainer's), its grid must
 * be the trainer's nlat x nlon, and parallelism.data must be 1 (dp replicas train on
 * different samples, which one code state cannot feed): TESSERA_ERR_INVALID_ARGUMENT on
 * every rank otherwise, the trainer unchanged. The trainer keeps the decomposition
 * alive. NULL: the trainer's own bands again. tessera_trainer_box still returns the band. */
int tessera_trainer_use_decomp(tessera_trainer_t* trainer, const tessera_decomp_t* decomp);

/* Collective over the mesh: one micro-batch on (input, target) -- see "Fields" above;
 * both arrays are read only. With optimizer.accumulate N (1 by default) the N-th call
 * since the last update reduces the gradients, averages them over the N micro-batches
 * and updates the weights: N calls on B samples each are one step on the N B samples,
 * as in tessera-run (tessera_trainer_steps and tessera_trainer_pending say where the
 * calls stand). *loss (may be NULL) receives this micro-batch's loss (normalised units
 * under data.normalize) averaged over the dp replicas, the same on every rank; the
 * step's loss, as tessera-run logs it, is the mean of its N micro-batches' losses.
 * Argument errors (dtype not TESSERA_F32 or TESSERA_F64, a shape that is not this rank's
 * band or, after tessera_trainer_use_decomp, its box of the code's decomposition, B = 0,
 * replicas with different B, a B unlike the step's first micro-batch) are returned on
 * every rank before any collective starts. */
int tessera_trainer_step(tessera_trainer_t* trainer, const void* input, const void* target, tessera_dtype_t dtype,
                         tessera_order_t order, int ndim, const int64_t* shape, double* loss);
/* Collective over the mesh (fsdp2 gathers its parameters over dp): the model's prediction
 * for `input` into `output` (the input's shape and dtype, f32 or f64; may be the input
 * array itself), in physical units under data.normalize. No gradient changes: it may
 * come between the micro-batches of a step. */
int tessera_trainer_predict(tessera_trainer_t* trainer, const void* input, void* output, tessera_dtype_t dtype,
                            tessera_order_t order, int ndim, const int64_t* shape);

/* Collective over the mesh: saves the weights and the optimizer state as the checkpoint
 * of the current step under `dir` (NULL or "": the config's checkpoint.dir) --
 * dir/step_<steps>/, dir/latest -- with checkpoint.layout and checkpoint.keep_last. The
 * checkpoint is tessera-run's: tessera-run resumes it, tessera_model_load runs it.
 * Between the micro-batches of a step (tessera_trainer_pending > 0) it is
 * TESSERA_ERR_INVALID_ARGUMENT: a checkpoint holds no partial gradients.
 * With checkpoint.async: true the call returns once the state is copied to host memory
 * and the files are written by a background thread (docs/checkpoint-format.md,
 * "Asynchronous saves"): the same files, at most one save in flight (the next save
 * waits for the previous one). It needs MPI initialised with MPI_THREAD_MULTIPLE
 * (MPI_Init_thread); below it the first save is TESSERA_ERR_CONFIG naming the level. */
int tessera_trainer_save(tessera_trainer_t* trainer, const char* dir);
/* Collective over the mesh: waits for the background save in flight (checkpoint.async),
 * if any; its error (the same on every rank) is this call's. Call it before
 * tessera_trainer_destroy and MPI_Finalize; tessera_trainer_restore calls it itself.
 * Without a save in flight it returns TESSERA_OK at once. */
int tessera_trainer_wait_save(tessera_trainer_t* trainer);
/* Collective over the mesh: the weights, the optimizer state and the step count from
 * `path` (a checkpoint.h5, a step directory or a root whose latest is read; NULL or "":
 * checkpoint.dir's latest), saved at any layout. The training that follows is the one
 * that would have followed the save, bit for bit. A checkpoint of another architecture
 * (normalisation statistics included) is TESSERA_ERR_CONFIG naming the first
 * difference, before any weight is read. Micro-batches pending are dropped. */
int tessera_trainer_restore(tessera_trainer_t* trainer, const char* path);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_TESSERA_TRAINER_H */
