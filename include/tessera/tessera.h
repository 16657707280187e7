#ifndef TESSERA_TESSERA_H
#define TESSERA_TESSERA_H
/*
 * tessera C API: the process mesh, domain decomposition and halo exchange on
 * caller-owned arrays, and checkpoints of caller-owned named arrays, for existing MPI
 * codes written in C (and, through src/fortran/tessera.f90, in Fortran).
 *
 * Conventions (docs/c-api.md has the whole guide):
 *
 *  - Every function returns an int status: TESSERA_OK (0) or one of the tessera_status_t
 *    codes below, which are the values of tessera::ErrorCode one for one.
 *    tessera_error_string(code) names the code; tessera_last_error() is the message of
 *    the last failed call on the calling thread (it names the offending argument, array,
 *    dataset or rank). No C++ exception ever leaves this API.
 *  - Results come back through pointer arguments, which must not be NULL.
 *  - Handles are opaque; *_destroy(&handle) frees one and sets it to NULL (destroying a
 *    NULL handle is a no-op). Handles share ownership of what they were built from, so
 *    they may be destroyed in any order, but all of them before MPI_Finalize.
 *  - Communicators come in as MPI_Comm, or as MPI_Fint in the *_f variants (converted
 *    with MPI_Comm_f2c) for Fortran. tessera duplicates what it is given, so its messages
 *    never match the caller's.
 *  - Collective functions (marked "Collective") either succeed on every rank or return
 *    the same status and message on every rank. Argument errors that can only be seen
 *    locally (a NULL handle) return at once on the rank that made them.
 *
 * Arrays. A caller array is (data, dtype, order, ndim, shape): `shape` lists the ndim
 * extents in declaration order; TESSERA_ORDER_C is row-major (last index fastest),
 * TESSERA_ORDER_FORTRAN column-major (first index fastest). tessera's logical view of a
 * gridded field is (leading..., lat, lon) in C order, so:
 *
 *     C:        double t[nlev][nlat][nlon]          shape {nlev, nlat, nlon}
 *     Fortran:  real(real64) :: t(nlon, nlat, nlev) shape {nlon, nlat, nlev}
 *
 * describe the same memory and the same field. Other layouts (latitude fastest, levels
 * between lat and lon) go through tessera_halo_add_field_strided. Arrays are never
 * copied by the halo exchange: it works on the caller's memory in place.
 */

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Seen from C++ (the library itself, C++ callers) every enum below has int as its fixed
 * underlying type, so any int a caller passes is a value of the type: out-of-range
 * values are TESSERA_ERR_INVALID_ARGUMENT, never undefined behaviour. In C the types
 * are plain enums, passed as ints all the same. */
#ifdef __cplusplus
#define TESSERA_ENUM_INT_ : int
#else
#define TESSERA_ENUM_INT_
#endif

/* ------------------------------------------------------------------------------------
 * Status codes (== tessera::ErrorCode)
 * ---------------------------------------------------------------------------------- */
typedef enum tessera_status TESSERA_ENUM_INT_ {
  TESSERA_OK = 0,
  TESSERA_ERR_INVALID_ARGUMENT = 1, /* NULL handle or pointer, bad enum or value */
  TESSERA_ERR_CONFIG = 2,           /* a configuration key or value is wrong */
  TESSERA_ERR_SHAPE = 3,            /* shapes or dtypes do not agree */
  TESSERA_ERR_UNSUPPORTED = 4,      /* valid request this build cannot serve */
  TESSERA_ERR_MPI = 5,              /* an MPI call failed */
  TESSERA_ERR_HDF5 = 6,             /* an HDF5 call failed */
  TESSERA_ERR_CUDA = 7,
  TESSERA_ERR_NCCL = 8,
  TESSERA_ERR_CUBLAS = 9,
  TESSERA_ERR_IO = 10,              /* a file could not be read or written */
  TESSERA_ERR_INTERNAL = 11         /* a tessera bug, or out of memory */
} tessera_status_t;

/* Short stable name of a status ("ok", "invalid_argument", ...; "unknown" otherwise).
 * Never NULL; static storage. */
const char* tessera_error_string(int code);
/* The message of the last failed call on this thread ("" when none failed). Valid until
 * the next failing call on this thread. Successful calls leave it unchanged. */
const char* tessera_last_error(void);
/* "0.1.0". */
const char* tessera_version(void);
/* MPI_Abort(MPI_COMM_WORLD, code) (or abort() when MPI is not running). For the Fortran
 * module's "no ierr given" path; returns only if MPI_Abort does. */
int tessera_abort(int code);
/* For the Fortran module: on (1) while a call made through it runs on this thread, so
 * that messages describe arrays in Fortran order with 1-based index ranges, lon first,
 * and name the procedure without the `_f` suffix; off (0) otherwise. */
int tessera_set_fortran_caller(int on);

/* ------------------------------------------------------------------------------------
 * Enums
 * ---------------------------------------------------------------------------------- */
typedef enum tessera_dtype TESSERA_ENUM_INT_ { TESSERA_F32 = 0, TESSERA_F64 = 1 } tessera_dtype_t;
typedef enum tessera_order TESSERA_ENUM_INT_ { TESSERA_ORDER_C = 0, TESSERA_ORDER_FORTRAN = 1 } tessera_order_t;
typedef enum tessera_data_mode TESSERA_ENUM_INT_ {
  TESSERA_DATA_NONE = 0,
  TESSERA_DATA_DDP = 1,
  TESSERA_DATA_FSDP2 = 2
} tessera_data_mode_t;
/* A mesh dimension, or the whole mesh (TESSERA_MESH_WORLD). TESSERA_MESH_PIPELINE: the
 * ranks that differ only in their pipeline stage (docs/pipeline.md); size 1 on a mesh
 * without a pipeline. */
typedef enum tessera_mesh_dim TESSERA_ENUM_INT_ {
  TESSERA_MESH_DP = 0,
  TESSERA_MESH_TP = 1,
  TESSERA_MESH_DOMAIN = 2,
  TESSERA_MESH_WORLD = 3,
  TESSERA_MESH_PIPELINE = 4
} tessera_mesh_dim_t;
typedef enum tessera_pole TESSERA_ENUM_INT_ {
  TESSERA_POLE_ZERO = 0,        /* zero beyond the poles */
  TESSERA_POLE_REPLICATE = 1,   /* the edge row repeated (zero-gradient boundary) */
  TESSERA_POLE_ACROSS_POLE = 2, /* the mirrored row, half the circle round */
  TESSERA_POLE_ACROSS_POLE_POINT = 3 /* the same on a grid whose edge rows are the poles */
} tessera_pole_t;
/* What fills the halo beyond one edge (tessera_halo_create_edges; docs/domain.md, "Edge
 * policies"). North is latitude row 0's side, west longitude column 0's. */
typedef enum tessera_edge TESSERA_ENUM_INT_ {
  TESSERA_EDGE_POLE = 0,        /* north/south only: the `pole` argument's policy */
  TESSERA_EDGE_PERIODIC = 1,    /* wraps to the opposite edge (which must be periodic too) */
  TESSERA_EDGE_ZERO = 2,
  TESSERA_EDGE_NONE = 3,        /* left exactly as the caller wrote it (walls, open boundaries) */
  TESSERA_EDGE_REPLICATE = 4,   /* north/south: the edge row repeated */
  TESSERA_EDGE_MIRROR_EVEN = 5, /* north/south: mirrored about the edge */
  TESSERA_EDGE_MIRROR_ODD = 6   /* north/south: mirrored and negated (normal velocity at a wall) */
} tessera_edge_t;
/* How an uneven split places its remainder (tessera_decomp_create_split / _cart). */
typedef enum tessera_split TESSERA_ENUM_INT_ {
  TESSERA_SPLIT_FIRST_RANKS = 0, /* the first n % P blocks hold one more: 10 over 4 -> 3, 3, 2, 2 */
  TESSERA_SPLIT_LAST_RANK = 1    /* n / P each, the last the remainder too: 10 over 4 -> 2, 2, 2, 4 */
} tessera_split_t;
/* The dimension order of a 2-D Cartesian communicator (tessera_decomp_create_cart). */
typedef enum tessera_cart_order TESSERA_ENUM_INT_ {
  TESSERA_CART_LAT_LON = 0, /* dims = {P_lat, P_lon}: longitude the fastest-varying rank */
  TESSERA_CART_LON_LAT = 1  /* dims = {P_lon, P_lat}: a Fortran code's (i, j) order */
} tessera_cart_order_t;
/* Where a halo field's values sit on an Arakawa C-grid (docs/domain.md, "Staggered
 * fields"): cell centres, the cells' east faces, or the faces between latitude rows. */
typedef enum tessera_stagger TESSERA_ENUM_INT_ {
  TESSERA_STAGGER_NONE = 0,     /* cell centres: (nlat, nlon) */
  TESSERA_STAGGER_LON_FACE = 1, /* u on the east faces: (nlat, nlon), boxes as the cells' */
  TESSERA_STAGGER_LAT_FACE = 2  /* v between rows: (nlat + 1, nlon), (nlat - 1, nlon) for pole points */
} tessera_stagger_t;
typedef enum tessera_layout TESSERA_ENUM_INT_ {
  TESSERA_LAYOUT_SHARED = 0,   /* one file, parallel HDF5 */
  TESSERA_LAYOUT_PER_RANK = 1  /* one file per writing rank plus an index */
} tessera_layout_t;
#undef TESSERA_ENUM_INT_

/* The most dims an array may have. */
#define TESSERA_MAX_DIMS 8

typedef struct tessera_mesh tessera_mesh_t;
typedef struct tessera_decomp tessera_decomp_t;
typedef struct tessera_halo tessera_halo_t;
typedef struct tessera_checkpoint tessera_checkpoint_t;
typedef struct tessera_model tessera_model_t;
typedef struct tessera_stats tessera_stats_t;

/* ------------------------------------------------------------------------------------
 * Mesh: pipeline x dp x tp x domain over a parent communicator (rank g: domain = g % D,
 * tp = (g / D) % T, dp = (g / (T D)) % P, pipeline stage = g / (P T D)); without a
 * pipeline (pipeline 1) dp = g / (T D), every rank and communicator as before.
 * ---------------------------------------------------------------------------------- */
/* Collective over parent. TESSERA_ERR_CONFIG when tensor * domain overflows int, when the
 * world size is not divisible by it (or data NONE leaves more than one replica). */
int tessera_mesh_create(MPI_Comm parent, tessera_data_mode_t data, int tensor, int domain,
                        tessera_mesh_t** mesh);
int tessera_mesh_create_f(MPI_Fint parent, tessera_data_mode_t data, int tensor, int domain,
                          tessera_mesh_t** mesh);
/* The same with `pipeline` stages (>= 1), the outermost dimension; pipeline 1 is
 * tessera_mesh_create. TESSERA_ERR_CONFIG also when pipeline * tensor * domain overflows
 * int or does not divide the world size. */
int tessera_mesh_create_pipeline(MPI_Comm parent, tessera_data_mode_t data, int tensor, int domain, int pipeline,
                                 tessera_mesh_t** mesh);
int tessera_mesh_create_pipeline_f(MPI_Fint parent, tessera_data_mode_t data, int tensor, int domain,
                                   int pipeline, tessera_mesh_t** mesh);
/* Collective: reads a YAML parallelism config (trainer.parallelism or parallelism block,
 * its `pipeline` key included). */
int tessera_mesh_create_from_file(MPI_Comm parent, const char* path, tessera_mesh_t** mesh);
int tessera_mesh_create_from_file_f(MPI_Fint parent, const char* path, tessera_mesh_t** mesh);
int tessera_mesh_destroy(tessera_mesh_t** mesh);

int tessera_mesh_config(const tessera_mesh_t* mesh, tessera_data_mode_t* data, int* tensor, int* domain);
/* This rank's coordinate along `dim` (the rank in the parent for TESSERA_MESH_WORLD). */
int tessera_mesh_rank(const tessera_mesh_t* mesh, tessera_mesh_dim_t dim, int* rank);
int tessera_mesh_size(const tessera_mesh_t* mesh, tessera_mesh_dim_t dim, int* size);
/* The communicator of `dim` (a private duplicate of the parent for TESSERA_MESH_WORLD).
 * Owned by the mesh: do not free it; it stays valid while the mesh exists. */
int tessera_mesh_comm(const tessera_mesh_t* mesh, tessera_mesh_dim_t dim, MPI_Comm* comm);
int tessera_mesh_comm_f(const tessera_mesh_t* mesh, tessera_mesh_dim_t dim, MPI_Fint* comm);

/* ------------------------------------------------------------------------------------
 * Decomposition: a global (nlat, nlon) grid over a communicator. Leading dims (levels)
 * are whole on every rank and come with each array. Who owns which box:
 *
 * - The code's own decomposition, taken as it is (docs/c-api.md, "Bring your
 *   decomposition"): tessera_decomp_create_cart reads a 2-D Cartesian communicator
 *   (dims, periods and every rank's coordinates, in either dimension order);
 *   tessera_decomp_create_boxes takes each rank's own box and derives every neighbour
 *   from the boxes; tessera_decomp_create_split places the remainder as the code does.
 *   Then tessera_decomp_check_box, once, proves that tessera and the code agree.
 * - tessera's rule (tessera_decomp_create): a grid_lat x grid_lon process grid, domain
 *   rank r at (r / grid_lon, r % grid_lon) (longitude fastest); grid_lat = 0 and
 *   grid_lon = 0 mean "split along latitude only" (size x 1); the first n % P parts get
 *   one extra row. A 2-D Cartesian communicator whose order this cannot tell (equal
 *   extents) is refused, naming both orders; one ordered (lon, lat) is adopted.
 * ---------------------------------------------------------------------------------- */
int tessera_decomp_create(MPI_Comm comm, int64_t nlat, int64_t nlon, int grid_lat, int grid_lon,
                          tessera_decomp_t** decomp);
int tessera_decomp_create_f(MPI_Fint comm, int64_t nlat, int64_t nlon, int grid_lat, int grid_lon,
                            tessera_decomp_t** decomp);
/* tessera's rank order, the remainder placed by `split`. Collective. */
int tessera_decomp_create_split(MPI_Comm comm, int64_t nlat, int64_t nlon, int grid_lat, int grid_lon,
                                tessera_split_t split, tessera_decomp_t** decomp);
int tessera_decomp_create_split_f(MPI_Fint comm, int64_t nlat, int64_t nlon, int grid_lat, int grid_lon,
                                  tessera_split_t split, tessera_decomp_t** decomp);
/* A 2-D Cartesian communicator (MPI_Cart_create) as it is: its dims in `order`, every
 * rank's position from MPI_Cart_coords, its periods as the code's periodicity (a halo
 * whose periodic_lon contradicts it is refused). Collective. */
int tessera_decomp_create_cart(MPI_Comm cart, int64_t nlat, int64_t nlon, tessera_cart_order_t order,
                               tessera_split_t split, tessera_decomp_t** decomp);
int tessera_decomp_create_cart_f(MPI_Fint cart, int64_t nlat, int64_t nlon, tessera_cart_order_t order,
                                 tessera_split_t split, tessera_decomp_t** decomp);
/* Each rank's own box (0-based global first indices and counts). Collective: the boxes
 * must tile the grid without gap or overlap as blocks (the boxes of a process-grid row
 * share their latitudes, of a column their longitudes); otherwise
 * TESSERA_ERR_INVALID_ARGUMENT on every rank, naming the ranks and boxes at fault. */
int tessera_decomp_create_boxes(MPI_Comm comm, int64_t nlat, int64_t nlon, int64_t lat_start, int64_t lat_count,
                                int64_t lon_start, int64_t lon_count, tessera_decomp_t** decomp);
int tessera_decomp_create_boxes_f(MPI_Fint comm, int64_t nlat, int64_t nlon, int64_t lat_start,
                                  int64_t lat_count, int64_t lon_start, int64_t lon_count,
                                  tessera_decomp_t** decomp);
/* Collective: TESSERA_OK on every rank when each rank's box (0-based starts, counts) is
 * the one it passes; else TESSERA_ERR_INVALID_ARGUMENT on every rank, naming the first
 * rank that differs and both boxes. */
int tessera_decomp_check_box(const tessera_decomp_t* decomp, int64_t lat_start, int64_t lat_count,
                             int64_t lon_start, int64_t lon_count);
/* The periodicity the decomposition knows (from a Cartesian communicator): 1 periodic,
 * 0 not, -1 unknown (the other constructors). */
int tessera_decomp_periodic(const tessera_decomp_t* decomp, int* lat, int* lon);
/* Over the mesh's domain communicator. */
int tessera_decomp_create_from_mesh(const tessera_mesh_t* mesh, int64_t nlat, int64_t nlon, int grid_lat,
                                    int grid_lon, tessera_decomp_t** decomp);
int tessera_decomp_destroy(tessera_decomp_t** decomp);

int tessera_decomp_rank(const tessera_decomp_t* decomp, int* rank);
int tessera_decomp_size(const tessera_decomp_t* decomp, int* size);
int tessera_decomp_global(const tessera_decomp_t* decomp, int64_t* nlat, int64_t* nlon);
int tessera_decomp_grid(const tessera_decomp_t* decomp, int* grid_lat, int* grid_lon);
/* Process-grid position of this rank. */
int tessera_decomp_coords(const tessera_decomp_t* decomp, int* lat, int* lon);
/* The box a rank owns, 0-based global starts and counts. `rank` in [0, size). */
int tessera_decomp_box(const tessera_decomp_t* decomp, int64_t* lat_start, int64_t* lat_count,
                       int64_t* lon_start, int64_t* lon_count);
int tessera_decomp_box_of(const tessera_decomp_t* decomp, int rank, int64_t* lat_start, int64_t* lat_count,
                          int64_t* lon_start, int64_t* lon_count);
/* Normalisation statistics from the code's own fields (docs/online-training.md,
 * "Statistics from the code's fields"): the per-channel mean and population std over
 * every step added, from exact sums, so bit-identical at every rank count. Collective:
 * create, add (argument errors agreed), finish. add takes one step's fields in this
 * rank's box, (samples..., channels, local lat, local lon) in C order (Fortran: the
 * reverse), f32 or f64. finish writes mean[channels] and std[channels]; a channel whose
 * std is below relative_floor * max(|mean|, 1) (a constant channel) gets that floor and
 * floored[c] = 1 (floored and count may be NULL). TESSERA_ERR_INVALID_ARGUMENT before any
 * add or for a floor that is not finite and > 0. */
int tessera_stats_create(const tessera_decomp_t* decomp, int64_t channels, tessera_stats_t** stats);
int tessera_stats_add(tessera_stats_t* stats, const void* local, tessera_dtype_t dtype, tessera_order_t order,
                      int ndim, const int64_t* shape);
int tessera_stats_finish(tessera_stats_t* stats, double relative_floor, double* mean, double* std, int* floored,
                         int64_t* count);
int tessera_stats_destroy(tessera_stats_t** stats);
/* The decomposition's communicator (owned by tessera; do not free). */
int tessera_decomp_comm(const tessera_decomp_t* decomp, MPI_Comm* comm);
int tessera_decomp_comm_f(const tessera_decomp_t* decomp, MPI_Fint* comm);
/* Collective. `local` is this rank's box, (leading..., local lat, local lon) in tessera's
 * view; `global` on root is the whole field with the same leading dims and layout
 * (order), ignored elsewhere (may be NULL there). Shapes are those of `local`. */
int tessera_decomp_scatter(const tessera_decomp_t* decomp, const void* global, void* local,
                           tessera_dtype_t dtype, tessera_order_t order, int ndim, const int64_t* local_shape,
                           int root);
int tessera_decomp_gather(const tessera_decomp_t* decomp, const void* local, void* global,
                          tessera_dtype_t dtype, tessera_order_t order, int ndim, const int64_t* local_shape,
                          int root);
/* Collective. The sum over every rank of its `local` box (as for scatter), added exactly
 * and rounded once: the same bits at every decomposition and rank count (conservation
 * diagnostics). NaN for any NaN, +-inf for infinities of one sign. docs/domain.md. */
int tessera_decomp_global_sum(const tessera_decomp_t* decomp, const void* local, tessera_dtype_t dtype,
                              tessera_order_t order, int ndim, const int64_t* local_shape, double* sum);
/* Not collective: the process grid (grid_lat x grid_lon = ranks) that gives each rank of
 * an nlat x nlon grid the shortest box boundary, like MPI_Dims_create; pass the result
 * to tessera_decomp_create. TESSERA_ERR_INVALID_ARGUMENT when no grid gives every rank a cell. */
int tessera_decomp_auto_grid(int ranks, int64_t nlat, int64_t nlon, int* grid_lat, int* grid_lon);

/* ------------------------------------------------------------------------------------
 * Halo exchange on caller arrays. A field is this rank's box plus a halo frame:
 * (leading..., lat_before + local lat + lat_after, lon_before + local lon + lon_after)
 * in tessera's view ("before" = the low-index side). Fields are registered once
 * (pointer, dtype, shape) and every exchange fills the halos of all registered fields
 * with one message per neighbour.
 * ---------------------------------------------------------------------------------- */
/* Collective over the decomposition's communicator. */
int tessera_halo_create(const tessera_decomp_t* decomp, int lat_before, int lat_after, int lon_before,
                        int lon_after, int periodic_lon, tessera_pole_t pole, tessera_halo_t** halo);
/* The same with a policy per edge (TESSERA_EDGE_POLE on north/south takes `pole`;
 * west/east must name their policy). Collective. TESSERA_ERR_INVALID_ARGUMENT for one
 * periodic edge of an axis, replicate/mirror on west/east, or edges that contradict a
 * Cartesian decomposition's periods (tessera_decomp_create_cart). */
int tessera_halo_create_edges(const tessera_decomp_t* decomp, int lat_before, int lat_after, int lon_before,
                              int lon_after, tessera_edge_t north, tessera_edge_t south, tessera_edge_t west,
                              tessera_edge_t east, tessera_pole_t pole, tessera_halo_t** halo);
/* Collective over the ranks of the halo's communicator that share a node (it frees the
 * shared memory its on-node messages travel through): destroy halos in the same order on
 * every rank. */
int tessera_halo_destroy(tessera_halo_t** halo);
/* Padded local extents of a field. */
int tessera_halo_padded(const tessera_halo_t* halo, int64_t* lat, int64_t* lon);

/* Local (no communication). Registers a field; `index` (may be NULL) receives its
 * 0-based position. The memory must stay valid while the field is registered.
 * TESSERA_ERR_SHAPE when its lat/lon extents are not the padded ones. */
int tessera_halo_add_field(tessera_halo_t* halo, void* data, tessera_dtype_t dtype, tessera_order_t order,
                           int ndim, const int64_t* shape, int* index);
/* Any layout: `shape` is tessera's view (leading..., padded lat, padded lon), `strides`
 * the distance in elements between neighbours along each of those dims. */
int tessera_halo_add_field_strided(tessera_halo_t* halo, void* data, tessera_dtype_t dtype, int ndim,
                                   const int64_t* shape, const int64_t* strides, int* index);
/* Marks two registered fields (their indices) as the horizontal components of one
 * vector field (u eastward, v northward): under TESSERA_POLE_ACROSS_POLE[_POINT] every
 * exchange (tessera_halo_exchange, _finish) negates their halo rows beyond a pole, and
 * every adjoint (_exchange_adjoint, _start_adjoint) negates them first: a vector mirrored
 * across the pole points the other way. Cleared with the fields. Not collective. */
int tessera_halo_set_vector_pair(tessera_halo_t* halo, int u_index, int v_index);
/* C-grid staggering. A field on faces is registered with its stagger (shape as for
 * tessera_halo_add_field, with the padded extents of tessera_halo_padded_staggered) and
 * exchanged with the others by every exchange and adjoint. TESSERA_STAGGER_LON_FACE: u
 * on the cells' east faces (face j east of cell j, owned with it). TESSERA_STAGGER_LAT_FACE:
 * v on the faces between latitude rows, each owned by the rank of the row south of it
 * (row 0 is north): nlat + 1 faces, the first and last on the poles, or, under
 * TESSERA_POLE_ACROSS_POLE_POINT (pole-point rows), the nlat - 1 faces between rows;
 * beyond a pole they mirror about the pole. TESSERA_ERR_INVALID_ARGUMENT for a lat_face
 * field on a grid whose face halo cannot be planned (the message says why). Local. */
int tessera_halo_add_field_staggered(tessera_halo_t* halo, void* data, tessera_dtype_t dtype,
                                     tessera_order_t order, int ndim, const int64_t* shape,
                                     tessera_stagger_t stagger, int* index);
/* Padded local extents of a field on `stagger`, and the global and owned (0-based start,
 * count) extents of its faces. Local. */
/* tessera_halo_add_field_staggered for a field in any layout: `shape` and `strides` as
 * for tessera_halo_add_field_strided (tessera's view: leading..., padded lat, padded
 * lon, with the padded extents of tessera_halo_padded_staggered). Local. */
int tessera_halo_add_field_staggered_strided(tessera_halo_t* halo, void* data, tessera_dtype_t dtype, int ndim,
                                             const int64_t* shape, const int64_t* strides,
                                             tessera_stagger_t stagger, int* index);
int tessera_halo_padded_staggered(const tessera_halo_t* halo, tessera_stagger_t stagger, int64_t* lat,
                                  int64_t* lon);
int tessera_halo_box_staggered(const tessera_halo_t* halo, tessera_stagger_t stagger, int64_t* global_lat,
                               int64_t* global_lon, int64_t* lat_start, int64_t* lat_count, int64_t* lon_start,
                               int64_t* lon_count);
/* tessera_halo_gather / _scatter for a field on `stagger`: root's `global` has the
 * faces' global extents. Collective. */
int tessera_halo_gather_staggered(const tessera_halo_t* halo, const void* field, void* global,
                                  tessera_dtype_t dtype, tessera_order_t order, int ndim, const int64_t* shape,
                                  tessera_stagger_t stagger, int root);
int tessera_halo_scatter_staggered(const tessera_halo_t* halo, const void* global, void* field,
                                   tessera_dtype_t dtype, tessera_order_t order, int ndim, const int64_t* shape,
                                   tessera_stagger_t stagger, int root);
/* tessera_halo_gather_staggered / _scatter_staggered for a field in any layout: `shape`
 * and `strides` as for tessera_halo_add_field_staggered_strided (tessera's view: leading...,
 * padded lat, padded lon); root's `global` is described the same way, its view's extents
 * `global_shape` (the field's, with the faces' global lat and lon extents of
 * tessera_halo_box_staggered, else TESSERA_ERR_SHAPE) and `strides` `global_strides` (both
 * read on the root only). TESSERA_STAGGER_NONE: cell-centred fields. Collective; argument
 * errors fail every rank. */
int tessera_halo_gather_staggered_strided(const tessera_halo_t* halo, const void* field, void* global,
                                          tessera_dtype_t dtype, int ndim, const int64_t* shape,
                                          const int64_t* strides, const int64_t* global_shape,
                                          const int64_t* global_strides, tessera_stagger_t stagger, int root);
int tessera_halo_scatter_staggered_strided(const tessera_halo_t* halo, const void* global,
                                           const int64_t* global_shape, const int64_t* global_strides, void* field,
                                           tessera_dtype_t dtype, int ndim, const int64_t* shape,
                                           const int64_t* strides, tessera_stagger_t stagger, int root);
int tessera_halo_clear_fields(tessera_halo_t* halo);
int tessera_halo_num_fields(const tessera_halo_t* halo, int* count);

/* Collective: fill every registered field's halo. The first exchange of a field set
 * checks (collectively) that every rank registered matching fields (the same count,
 * dtypes and leading extents; a rank with none counts). Change the field set on every
 * rank alike. */
int tessera_halo_exchange(tessera_halo_t* halo);
/* Split for overlap: between start and finish read only the interior, write nothing. */
int tessera_halo_start(tessera_halo_t* halo);
int tessera_halo_finish(tessera_halo_t* halo);
/* The transpose: add every halo value into the cell it came from, zero the halos. */
int tessera_halo_exchange_adjoint(tessera_halo_t* halo);
int tessera_halo_start_adjoint(tessera_halo_t* halo);
int tessera_halo_finish_adjoint(tessera_halo_t* halo);
int tessera_halo_in_flight(const tessera_halo_t* halo, int* in_flight);

/* Collective: the interior of padded `field` (shape as for add_field) on every rank
 * into root's `global`, which has the field's layout with the global lat/lon extents;
 * and the reverse (every rank's interior is overwritten, the halo is untouched). */
int tessera_halo_gather(const tessera_halo_t* halo, const void* field, void* global, tessera_dtype_t dtype,
                        tessera_order_t order, int ndim, const int64_t* shape, int root);
int tessera_halo_scatter(const tessera_halo_t* halo, const void* global, void* field, tessera_dtype_t dtype,
                         tessera_order_t order, int ndim, const int64_t* shape, int root);

/* ------------------------------------------------------------------------------------
 * Checkpoints of caller-owned named arrays (docs/checkpoint-format.md): begin a save or
 * a load, add the arrays, commit. Every array is a block of a global array; the file
 * stores the global array, so a restart written at 2 ranks loads at 4.
 *
 * Placement strings name how the block is laid out over the mesh, in the form
 * "dp: Replicate, tp: Replicate, domain: Shard(1)" (missing dims are Replicate; NULL or
 * "" is all Replicate). Shard(d) counts dims in declaration order: from 0 for
 * TESSERA_ORDER_C, from 1 for TESSERA_ORDER_FORTRAN. A block is written by the ranks
 * whose coordinate is 0 along every dim it is Replicate over.
 * Shapes and offsets are in declaration order (Fortran offsets 0-based too); the file
 * holds the C-order (reversed) view of Fortran arrays, as HDF5's own Fortran API does.
 * ---------------------------------------------------------------------------------- */
/* Local. `root_dir` receives root_dir/step_<step>/ and root_dir/latest. */
int tessera_checkpoint_begin_save(const tessera_mesh_t* mesh, const char* root_dir, int64_t step,
                                  tessera_layout_t layout, tessera_checkpoint_t** checkpoint);
/* Local. `path`: a checkpoint.h5, a step directory, or a root (through `latest`). */
int tessera_checkpoint_begin_load(const tessera_mesh_t* mesh, const char* path,
                                  tessera_checkpoint_t** checkpoint);
/* Save: free text stored verbatim. Load: ignored. */
int tessera_checkpoint_set_metadata(tessera_checkpoint_t* checkpoint, const char* metadata);
/* Save: keep only the newest n step directories (0: all). */
int tessera_checkpoint_set_keep_last(tessera_checkpoint_t* checkpoint, int keep_last);
/* Load: strict (default 1) demands that the file holds exactly the added arrays. */
int tessera_checkpoint_set_strict(tessera_checkpoint_t* checkpoint, int strict);
/* Local. Adds a named array: its memory is read at commit (save) or written (load). */
int tessera_checkpoint_add_array(tessera_checkpoint_t* checkpoint, const char* name, void* data,
                                 tessera_dtype_t dtype, tessera_order_t order, int ndim,
                                 const int64_t* global_shape, const int64_t* local_offset,
                                 const int64_t* local_shape, const char* placement);
/* Local. Adds the interior of a padded halo field (shape as for tessera_halo_add_field):
 * global shape (leading..., nlat, nlon), offset and placement (domain: Shard(lat))
 * come from the halo's decomposition, which must be over the checkpoint mesh's domain
 * communicator (or a communicator with the same ranks in the same order). */
int tessera_checkpoint_add_halo_field(tessera_checkpoint_t* checkpoint, const char* name,
                                      const tessera_halo_t* halo, void* field, tessera_dtype_t dtype,
                                      tessera_order_t order, int ndim, const int64_t* shape);
/* Local. tessera_checkpoint_add_halo_field for a field in any layout: `shape` and
 * `strides` as for tessera_halo_add_field_strided (tessera's view, leading..., padded
 * lat, padded lon). The file holds the (leading..., nlat, nlon) global array, so a field
 * saved from one layout loads into another. */
int tessera_checkpoint_add_halo_field_strided(tessera_checkpoint_t* checkpoint, const char* name,
                                              const tessera_halo_t* halo, void* field, tessera_dtype_t dtype,
                                              int ndim, const int64_t* shape, const int64_t* strides);
/* Local. tessera_checkpoint_add_halo_field[_strided] for a field on `stagger` (shape as
 * for tessera_halo_add_field_staggered[_strided]): the file holds the global face array
 * (leading..., global lat, global lon of tessera_halo_box_staggered: nlat + 1 latitude
 * faces with the pole faces), so a field saved at one decomposition loads at another. */
int tessera_checkpoint_add_halo_field_staggered(tessera_checkpoint_t* checkpoint, const char* name,
                                                const tessera_halo_t* halo, void* field, tessera_dtype_t dtype,
                                                tessera_order_t order, int ndim, const int64_t* shape,
                                                tessera_stagger_t stagger);
int tessera_checkpoint_add_halo_field_staggered_strided(tessera_checkpoint_t* checkpoint, const char* name,
                                                        const tessera_halo_t* halo, void* field,
                                                        tessera_dtype_t dtype, int ndim, const int64_t* shape,
                                                        const int64_t* strides, tessera_stagger_t stagger);
/* Collective over the mesh: writes (atomically) or reads and verifies every array. */
int tessera_checkpoint_commit(tessera_checkpoint_t* checkpoint);
/* Save: the step given; load: the step read (after commit). */
int tessera_checkpoint_step(const tessera_checkpoint_t* checkpoint, int64_t* step);
/* Load: the stored metadata after commit (valid while the handle lives). */
int tessera_checkpoint_metadata(const tessera_checkpoint_t* checkpoint, const char** metadata);
int tessera_checkpoint_destroy(tessera_checkpoint_t** checkpoint);

/* ------------------------------------------------------------------------------------
 * Model inference (tessera::load_any_model): a model trained by tessera-run, rebuilt
 * from its checkpoint alone on the caller's mesh, of the type its metadata names.
 *
 * The mesh must have pipeline 1 (TESSERA_ERR_INVALID_ARGUMENT otherwise): inference runs
 * the whole model on every rank, not in stages.
 * A field emulator (any tp / domain split) runs on caller-owned fields
 * (tessera_model_predict / _forward). Fields are f32 (B, channels, local lat, nlon) in
 * tessera's view -- C: float x[B][C][lat][lon]; Fortran: real(real32) :: x(nlon, lat, C, B)
 * -- where the local latitudes are the model's box (tessera_model_box), the band of this
 * rank's domain coordinate. ndim 3 means B = 1. Every tp rank passes the same input.
 *
 * A decoder (any tp; the mesh's domain must be 1) runs on token ids
 * (tessera_model_logits). The calls of one type on a model of the other, and
 * tessera_model_info / _box on a decoder, are TESSERA_ERR_INVALID_ARGUMENT naming the
 * model type the handle holds.
 * ---------------------------------------------------------------------------------- */
/* Collective over the mesh: `path` is a checkpoint.h5, a step directory or a root. */
int tessera_model_load(const tessera_mesh_t* mesh, const char* path, tessera_model_t** model);
int tessera_model_destroy(tessera_model_t** model);
/* The model types of tessera_model_type. */
#define TESSERA_MODEL_FIELD_EMULATOR 0
#define TESSERA_MODEL_DECODER 1
/* *type: TESSERA_MODEL_FIELD_EMULATOR (also a coupled model) or TESSERA_MODEL_DECODER. */
int tessera_model_type(const tessera_model_t* model, int* type);
/* A decoder's vocabulary size (the last extent of its logits). */
int tessera_model_vocab(const tessera_model_t* model, int64_t* vocab);
/* Collective over the mesh (the forward itself over its tp groups): a decoder's logits
 * for `batch` sequences of `seq` token ids. ids: int64 ids[batch][seq] (Fortran:
 * integer(int64) :: ids(seq, batch)), each in [0, vocab); logits: float
 * logits[batch][seq][vocab] (Fortran: real(real32) :: logits(vocab, seq, batch)), whole
 * on every rank (a vocabulary-sharded head's logits are gathered over tp). `vocab` is the
 * logits array's last extent and must equal tessera_model_vocab (TESSERA_ERR_SHAPE
 * otherwise). Every rank of a tp group passes the same ids (ranks of different dp
 * replicas their own); tp ranks with different (batch, seq) are TESSERA_ERR_SHAPE, batch
 * or seq < 1 and ids out of range TESSERA_ERR_INVALID_ARGUMENT, on every rank. The
 * decoder runs without sequence parallelism, causal over the whole sequence, no cache. */
int tessera_model_logits(tessera_model_t* model, const int64_t* ids, int64_t batch, int64_t seq, float* logits,
                         int64_t vocab);
/* A field emulator's grid and channel count. */
int tessera_model_info(const tessera_model_t* model, int64_t* channels, int64_t* nlat, int64_t* nlon);
/* This rank's latitude band (0-based start and count) and longitudes. */
int tessera_model_box(const tessera_model_t* model, int64_t* lat_start, int64_t* lat_count, int64_t* lon_start,
                      int64_t* lon_count);
/* Collective over the mesh's tp and domain groups. predict: physical units in and out
 * (normalised with the stored per-channel mean/std); forward: normalised fields.
 * `output` has the input's shape and may be the input array itself. dtype must be
 * TESSERA_F32 (TESSERA_ERR_INVALID_ARGUMENT otherwise), B >= 1 (B = 0 is
 * TESSERA_ERR_INVALID_ARGUMENT on every rank); a shape that is not this rank's band is
 * TESSERA_ERR_SHAPE on every rank. */
int tessera_model_predict(tessera_model_t* model, const void* input, void* output, tessera_dtype_t dtype,
                          tessera_order_t order, int ndim, const int64_t* shape);
int tessera_model_forward(tessera_model_t* model, const void* input, void* output, tessera_dtype_t dtype,
                          tessera_order_t order, int ndim, const int64_t* shape);

/* ------------------------------------------------------------------------------------
 * Your own model: an ONNX file (docs/onnx.md), e.g. written by torch.onnx.export.
 *
 * Every rank loads the whole graph and runs it on its own data (each rank its own batch:
 * data parallel), or, after tessera_model_split_onnx, on its block of a field split over a
 * decomposition (domain parallel). The graph must have one input and one output with
 * static shapes, f32 or f64. A mesh with tensor, domain or pipeline > 1 is
 * TESSERA_ERR_UNSUPPORTED (split the field with a decomposition instead). tessera_model_type gives
 * TESSERA_MODEL_ONNX; the field-emulator and decoder calls on it are
 * TESSERA_ERR_INVALID_ARGUMENT naming tessera_model_run, and tessera_model_run on those
 * models names theirs.
 * ---------------------------------------------------------------------------------- */
#define TESSERA_MODEL_ONNX 2
/* Collective over the mesh: a file that does not load on one rank fails on every rank,
 * with that rank's message (an op outside the supported set names the node, the op and
 * the opset). A build without ONNX support is TESSERA_ERR_UNSUPPORTED. */
int tessera_model_load_onnx(const tessera_mesh_t* mesh, const char* path, tessera_model_t** model);
/* Collective over the decomposition's communicator: from now on tessera_model_run takes
 * this rank's block of the field `decomp` splits, as the graph input's last two axes (in
 * C order [N, C, lat, lon]; in Fortran order x(lon, lat, C, N)), and writes this rank's
 * block of a split output, or the whole output when the graph reduces the field (docs/
 * onnx.md, "Domain-parallel execution"). A node that cannot run split is
 * TESSERA_ERR_UNSUPPORTED naming it, on every rank, at the first run. `decomp` must outlive
 * the model; the graph input's last two extents must be the decomposition's global grid
 * (TESSERA_ERR_INVALID_ARGUMENT otherwise). Once per model. */
int tessera_model_split_onnx(tessera_model_t* model, const tessera_decomp_t* decomp);
/* The graph's input (which = 0) or output (which = 1): its dtype, rank and extents in
 * the caller's order (TESSERA_ORDER_FORTRAN: reversed, as a Fortran array declares them).
 * `shape` has room for 8 extents. The output's are those of one forward of zeros of the
 * input's shape (what the graph computes, not what the file declares): call it once,
 * before the time loop. On a split model these are this rank's blocks, and the call is
 * collective (the forward is). */
int tessera_model_onnx_shape(const tessera_model_t* model, int which, tessera_order_t order, tessera_dtype_t* dtype,
                             int* ndim, int64_t* shape);
/* Local, no communication: output = graph(input). Both arrays are contiguous in `order`
 * and must have the graph's dtype and the shapes tessera_model_onnx_shape gives
 * (TESSERA_ERR_SHAPE naming the graph's and the caller's extents otherwise); `output` may
 * be the input array itself. */
int tessera_model_run(tessera_model_t* model, const void* input, int input_ndim, const int64_t* input_shape,
                      void* output, int output_ndim, const int64_t* output_shape, tessera_dtype_t dtype,
                      tessera_order_t order);

/* Fine-tuning an imported graph online (docs/onnx.md, "From C and Fortran"): one
 * optimizer step on the mean squared error between graph(input) and `target` (an array
 * of the output's shape, tessera_model_onnx_shape's, and the graph's dtype), the mean over
 * every rank's elements: the ranks of the decomposition of a split model (their
 * blocks make one field), else every rank of the mesh, each with its own batch (data
 * parallel: the parameters' gradients are summed over the ranks). `optimizer` is
 * TESSERA_OPTIMIZER_SGD (plain, no momentum) or TESSERA_OPTIMIZER_ADAMW (betas 0.9, 0.999,
 * eps 1e-8, no weight decay), made at the first step and kept with the model (a later
 * step asking for the other kind is TESSERA_ERR_INVALID_ARGUMENT); `lr` is this step's
 * learning rate. `*loss` is the loss before the step, the same on every rank. Collective
 * over those ranks; argument errors are agreed on every rank of the mesh. */
#define TESSERA_OPTIMIZER_SGD 0
#define TESSERA_OPTIMIZER_ADAMW 1
int tessera_model_onnx_train_step(tessera_model_t* model, const void* input, int input_ndim,
                                  const int64_t* input_shape, const void* target, int target_ndim,
                                  const int64_t* target_shape, tessera_dtype_t dtype, tessera_order_t order,
                                  int optimizer, double lr, double* loss);
/* Collective over the mesh: rank 0 writes `out_path`, the graph of `in_path` (the file
 * the model was loaded from) with the model's current weights as its initializers
 * (save_onnx: same graph, so PyTorch and ONNX Runtime users load the fine-tuned model);
 * a failure is every rank's. `out_path` may equal `in_path`. */
int tessera_model_save_onnx(tessera_model_t* model, const char* in_path, const char* out_path);

#ifdef __cplusplus
}
#endif

#include "tessera/tessera_coupling.h" /* a model on fewer ranks than the code (docs/coupling.md) */
#include "tessera/tessera_trainer.h"  /* online training (docs/online-training.md) */

#endif /* TESSERA_TESSERA_H */
