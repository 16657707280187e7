/*
 * Every function of the C API (include/tessera/tessera.h), on success and on each of its
 * error paths (NULL handle, NULL pointer, wrong dtype or enum, mismatched shape), with
 * the documented status. Compiled as C, so the header is checked to be plain C.
 * Runs at 1, 2 and 4 ranks (45 latitudes: uneven splits at 2 and 4). Exit status 0 when
 * every check passed on every rank; failures are printed with their rank and line.
 */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tessera/tessera.h>

static int failures = 0;
static int world_rank = 0, world_size = 1;
static char scratch[512];

#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      ++failures;                                                                             \
      fprintf(stderr, "[rank %d] %s:%d: CHECK(%s) failed; last error: %s\n", world_rank,      \
              __FILE__, __LINE__, #cond, tessera_last_error());                               \
    }                                                                                         \
  } while (0)

#define EXPECT_STATUS(call, expected)                                                         \
  do {                                                                                        \
    int got_ = (call);                                                                        \
    if (got_ != (expected)) {                                                                 \
      ++failures;                                                                             \
      fprintf(stderr, "[rank %d] %s:%d: %s returned %d (%s), expected %d (%s); last error: %s\n", \
              world_rank, __FILE__, __LINE__, #call, got_, tessera_error_string(got_),        \
              (int)(expected), tessera_error_string(expected), tessera_last_error());         \
    }                                                                                         \
  } while (0)

#define EXPECT_OK(call) EXPECT_STATUS(call, TESSERA_OK)

/* The last error names the function that failed and the offending thing. */
#define EXPECT_MESSAGE(needle) CHECK(strstr(tessera_last_error(), (needle)) != NULL)

enum { NLAT = 45, NLON = 8 };

static double encode(int64_t lev, int64_t i, int64_t j) { return 10000.0 * lev + 100.0 * i + j + 1.0; }

/* ------------------------------------------------------------------------------------ */

static void test_errors_and_version(void) {
  static const char* names[] = {"ok",  "invalid_argument", "config", "shape",  "unsupported", "mpi",
                                "hdf5", "cuda",            "nccl",   "cublas", "io",          "internal"};
  for (int code = 0; code <= TESSERA_ERR_INTERNAL; ++code) CHECK(strcmp(tessera_error_string(code), names[code]) == 0);
  CHECK(strcmp(tessera_error_string(-1), "unknown") == 0);
  CHECK(strcmp(tessera_error_string(99), "unknown") == 0);
  CHECK(tessera_version() != NULL && strchr(tessera_version(), '.') != NULL);

  /* A failure records a message naming the function; a success leaves it unchanged. */
  EXPECT_STATUS(tessera_mesh_destroy(NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("tessera_mesh_destroy");
  tessera_mesh_t* none = NULL;
  EXPECT_OK(tessera_mesh_destroy(&none)); /* destroying a NULL handle is a no-op */
  EXPECT_MESSAGE("tessera_mesh_destroy");
}

/* ------------------------------------------------------------------------------------ */

static void test_mesh(void) {
  tessera_mesh_t* mesh = NULL;
  const int domain = world_size >= 2 ? 2 : 1;
  const int tensor = world_size / domain;
  EXPECT_OK(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, tensor, domain, &mesh));
  CHECK(mesh != NULL);

  tessera_data_mode_t data = TESSERA_DATA_FSDP2;
  int t = 0, d = 0;
  EXPECT_OK(tessera_mesh_config(mesh, &data, &t, &d));
  CHECK(data == TESSERA_DATA_NONE && t == tensor && d == domain);
  EXPECT_STATUS(tessera_mesh_config(NULL, &data, &t, &d), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_config(mesh, NULL, &t, &d), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("data is NULL");

  /* Layout formula: domain = g % D, tp = (g / D) % T, dp = g / (T D). */
  const int expected_rank[4] = {0, (world_rank / domain) % tensor, world_rank % domain, world_rank};
  const int expected_size[4] = {1, tensor, domain, world_size};
  for (int dim = TESSERA_MESH_DP; dim <= TESSERA_MESH_WORLD; ++dim) {
    int r = -1, s = -1;
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Fint fcomm = 0;
    EXPECT_OK(tessera_mesh_rank(mesh, (tessera_mesh_dim_t)dim, &r));
    EXPECT_OK(tessera_mesh_size(mesh, (tessera_mesh_dim_t)dim, &s));
    EXPECT_OK(tessera_mesh_comm(mesh, (tessera_mesh_dim_t)dim, &comm));
    EXPECT_OK(tessera_mesh_comm_f(mesh, (tessera_mesh_dim_t)dim, &fcomm));
    CHECK(r == expected_rank[dim] && s == expected_size[dim]);
    int cr = -1, cs = -1;
    MPI_Comm_rank(comm, &cr);
    MPI_Comm_size(comm, &cs);
    CHECK(cr == r && cs == s);
    CHECK(MPI_Comm_f2c(fcomm) == comm);
  }
  int r = 0;
  MPI_Comm comm;
  MPI_Fint fcomm;
  EXPECT_STATUS(tessera_mesh_rank(mesh, (tessera_mesh_dim_t)9, &r), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("mesh dim 9");
  EXPECT_STATUS(tessera_mesh_rank(NULL, TESSERA_MESH_TP, &r), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_rank(mesh, TESSERA_MESH_TP, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_size(NULL, TESSERA_MESH_TP, &r), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_size(mesh, (tessera_mesh_dim_t)-1, &r), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_size(mesh, TESSERA_MESH_DP, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_comm(NULL, TESSERA_MESH_TP, &comm), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_comm(mesh, TESSERA_MESH_TP, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_comm_f(NULL, TESSERA_MESH_TP, &fcomm), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_comm_f(mesh, TESSERA_MESH_TP, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_OK(tessera_mesh_destroy(&mesh));
  CHECK(mesh == NULL);

  /* The Fortran-handle variant. */
  EXPECT_OK(tessera_mesh_create_f(MPI_Comm_c2f(MPI_COMM_WORLD), TESSERA_DATA_DDP, 1, 1, &mesh));
  EXPECT_OK(tessera_mesh_config(mesh, &data, &t, &d));
  CHECK(data == TESSERA_DATA_DDP && t == 1 && d == 1);
  EXPECT_OK(tessera_mesh_size(mesh, TESSERA_MESH_DP, &r));
  CHECK(r == world_size);
  EXPECT_OK(tessera_mesh_destroy(&mesh));

  /* Errors: every rank gets the same status. */
  EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, 1, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_create(MPI_COMM_NULL, TESSERA_DATA_NONE, 1, 1, &mesh), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("MPI_COMM_NULL");
  EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, (tessera_data_mode_t)7, 1, 1, &mesh),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("data mode 7");
  EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 0, 1, &mesh), TESSERA_ERR_CONFIG);
  EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, world_size + 1, &mesh),
                TESSERA_ERR_CONFIG);
  CHECK(mesh == NULL);
  EXPECT_STATUS(tessera_mesh_create_f(MPI_Comm_c2f(MPI_COMM_WORLD), TESSERA_DATA_NONE, -1, 1, &mesh),
                TESSERA_ERR_CONFIG);
  /* tensor * domain overflowing int: 65536^2 wrapped to 0 (SIGFPE), INT_MAX^2 to 1 (a
   * wrapped mesh returned OK). The error names both arguments. */
  EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 65536, 65536, &mesh), TESSERA_ERR_CONFIG);
  EXPECT_MESSAGE("tensor (65536)");
  EXPECT_MESSAGE("domain (65536)");
  EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, INT_MAX, INT_MAX, &mesh), TESSERA_ERR_CONFIG);
  EXPECT_MESSAGE("overflows");
  EXPECT_STATUS(tessera_mesh_create_f(MPI_Comm_c2f(MPI_COMM_WORLD), TESSERA_DATA_DDP, INT_MAX, INT_MAX, &mesh),
                TESSERA_ERR_CONFIG);
  CHECK(mesh == NULL);

  /* From a YAML file. */
  char good[600], bad[600], missing[600];
  snprintf(good, sizeof good, "%s/mesh.yaml", scratch);
  snprintf(bad, sizeof bad, "%s/bad.yaml", scratch);
  snprintf(missing, sizeof missing, "%s/no_such.yaml", scratch);
  if (world_rank == 0) {
    FILE* f = fopen(good, "w");
    fprintf(f, "trainer:\n  parallelism:\n    data: none\n    tensor: 1\n    domain: %d\n", world_size);
    fclose(f);
    f = fopen(bad, "w");
    fprintf(f, "parallelism: {tensor: zero}\n");
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_OK(tessera_mesh_create_from_file(MPI_COMM_WORLD, good, &mesh));
  EXPECT_OK(tessera_mesh_size(mesh, TESSERA_MESH_DOMAIN, &r));
  CHECK(r == world_size);
  EXPECT_OK(tessera_mesh_destroy(&mesh));
  EXPECT_OK(tessera_mesh_create_from_file_f(MPI_Comm_c2f(MPI_COMM_WORLD), good, &mesh));
  EXPECT_OK(tessera_mesh_destroy(&mesh));
  EXPECT_STATUS(tessera_mesh_create_from_file(MPI_COMM_WORLD, bad, &mesh), TESSERA_ERR_CONFIG);
  EXPECT_MESSAGE("tensor");
  EXPECT_STATUS(tessera_mesh_create_from_file(MPI_COMM_WORLD, missing, &mesh), TESSERA_ERR_IO);
  EXPECT_MESSAGE("no_such.yaml");
  EXPECT_STATUS(tessera_mesh_create_from_file(MPI_COMM_WORLD, NULL, &mesh), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_mesh_create_from_file_f(MPI_Comm_c2f(MPI_COMM_WORLD), missing, &mesh), TESSERA_ERR_IO);
  EXPECT_STATUS(tessera_mesh_create_from_file_f(MPI_Comm_c2f(MPI_COMM_WORLD), good, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  CHECK(mesh == NULL);
}

/* ------------------------------------------------------------------------------------ */

static void test_decomp(void) {
  tessera_decomp_t* d = NULL;
  EXPECT_OK(tessera_decomp_create(MPI_COMM_WORLD, NLAT, NLON, 0, 0, &d));
  int r = -1, s = -1, gl = -1, gn = -1, cl = -1, cn = -1;
  int64_t nlat = 0, nlon = 0;
  EXPECT_OK(tessera_decomp_rank(d, &r));
  EXPECT_OK(tessera_decomp_size(d, &s));
  CHECK(r == world_rank && s == world_size);
  EXPECT_OK(tessera_decomp_global(d, &nlat, &nlon));
  CHECK(nlat == NLAT && nlon == NLON);
  EXPECT_OK(tessera_decomp_grid(d, &gl, &gn));
  CHECK(gl == world_size && gn == 1);
  EXPECT_OK(tessera_decomp_coords(d, &cl, &cn));
  CHECK(cl == world_rank && cn == 0);

  /* shard_range: the first NLAT % P ranks get one more row. */
  int64_t start = 0;
  for (int k = 0; k < world_size; ++k) {
    int64_t a, b, c, e;
    EXPECT_OK(tessera_decomp_box_of(d, k, &a, &b, &c, &e));
    const int64_t count = NLAT / world_size + (k < NLAT % world_size ? 1 : 0);
    CHECK(a == start && b == count && c == 0 && e == NLON);
    if (k == world_rank) {
      int64_t a2, b2, c2, e2;
      EXPECT_OK(tessera_decomp_box(d, &a2, &b2, &c2, &e2));
      CHECK(a2 == a && b2 == b && c2 == c && e2 == e);
    }
    start += count;
  }
  int64_t a, b, c, e;
  EXPECT_STATUS(tessera_decomp_box_of(d, world_size, &a, &b, &c, &e), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("rank");
  EXPECT_STATUS(tessera_decomp_box_of(d, 0, &a, NULL, &c, &e), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_box(NULL, &a, &b, &c, &e), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_box(d, NULL, &b, &c, &e), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_box_of(NULL, 0, &a, &b, &c, &e), TESSERA_ERR_INVALID_ARGUMENT);

  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Fint fcomm = 0;
  EXPECT_OK(tessera_decomp_comm(d, &comm));
  EXPECT_OK(tessera_decomp_comm_f(d, &fcomm));
  CHECK(MPI_Comm_f2c(fcomm) == comm);
  int result = MPI_UNEQUAL;
  MPI_Comm_compare(comm, MPI_COMM_WORLD, &result);
  CHECK(result == MPI_CONGRUENT); /* a duplicate: same ranks, own context */

  /* Null handles and null outputs of every query. */
  EXPECT_STATUS(tessera_decomp_rank(NULL, &r), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("decomposition handle is NULL");
  EXPECT_STATUS(tessera_decomp_rank(d, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_size(NULL, &s), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_size(d, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_global(NULL, &nlat, &nlon), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_global(d, &nlat, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_grid(NULL, &gl, &gn), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_grid(d, NULL, &gn), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_coords(NULL, &cl, &cn), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_coords(d, &cl, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_comm(NULL, &comm), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_comm(d, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_comm_f(NULL, &fcomm), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_comm_f(d, NULL), TESSERA_ERR_INVALID_ARGUMENT);

  /* Scatter / gather, C order with 2 leading dims, then Fortran order. */
  EXPECT_OK(tessera_decomp_box(d, &a, &b, &c, &e));
  const int64_t L = 2;
  double* global = malloc(sizeof(double) * (size_t)(L * NLAT * NLON));
  double* back = malloc(sizeof(double) * (size_t)(L * NLAT * NLON));
  double* local = malloc(sizeof(double) * (size_t)(L * b * e));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < NLAT; ++i)
      for (int64_t j = 0; j < NLON; ++j) global[(l * NLAT + i) * NLON + j] = encode(l, i, j);
  const int64_t local_shape[3] = {L, b, e};
  EXPECT_OK(tessera_decomp_scatter(d, world_rank == 0 ? global : NULL, local, TESSERA_F64, TESSERA_ORDER_C, 3,
                                   local_shape, 0));
  int bad = 0;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < e; ++j) bad += local[(l * b + i) * e + j] != encode(l, a + i, c + j);
  CHECK(bad == 0);
  memset(back, 0, sizeof(double) * (size_t)(L * NLAT * NLON));
  EXPECT_OK(tessera_decomp_gather(d, local, back, TESSERA_F64, TESSERA_ORDER_C, 3, local_shape, 0));
  if (world_rank == 0) CHECK(memcmp(back, global, sizeof(double) * (size_t)(L * NLAT * NLON)) == 0);

  /* Fortran order: local(lon, lat, lev), the same memory as C's [lev][lat][lon]. */
  const int64_t fortran_shape[3] = {e, b, L};
  memset(local, 0, sizeof(double) * (size_t)(L * b * e));
  EXPECT_OK(tessera_decomp_scatter(d, global, local, TESSERA_F64, TESSERA_ORDER_FORTRAN, 3, fortran_shape, 0));
  bad = 0;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < e; ++j) bad += local[j + e * (i + b * l)] != encode(l, a + i, c + j);
  CHECK(bad == 0);

  /* Errors, each agreed by every rank. */
  EXPECT_STATUS(tessera_decomp_scatter(d, global, local, (tessera_dtype_t)5, TESSERA_ORDER_C, 3, local_shape, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("dtype 5");
  EXPECT_STATUS(tessera_decomp_scatter(d, global, local, TESSERA_F64, (tessera_order_t)3, 3, local_shape, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_scatter(d, global, NULL, TESSERA_F64, TESSERA_ORDER_C, 3, local_shape, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_scatter(d, global, local, TESSERA_F64, TESSERA_ORDER_C, 3, NULL, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_scatter(d, global, local, TESSERA_F64, TESSERA_ORDER_C, 3, local_shape, world_size),
                TESSERA_ERR_INVALID_ARGUMENT);
  /* Only root's NULL global is an error, and every rank learns of it. */
  EXPECT_STATUS(tessera_decomp_scatter(d, NULL, local, TESSERA_F64, TESSERA_ORDER_C, 3, local_shape, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("global array is NULL");
  EXPECT_STATUS(tessera_decomp_gather(d, local, NULL, TESSERA_F64, TESSERA_ORDER_C, 3, local_shape, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  const int64_t wrong_shape[3] = {L, b + 1, e};
  EXPECT_STATUS(tessera_decomp_scatter(d, global, local, TESSERA_F64, TESSERA_ORDER_C, 3, wrong_shape, 0),
                TESSERA_ERR_SHAPE);
  EXPECT_STATUS(tessera_decomp_gather(d, local, back, TESSERA_F64, TESSERA_ORDER_C, 3, wrong_shape, 0),
                TESSERA_ERR_SHAPE);
  EXPECT_STATUS(tessera_decomp_gather(d, local, back, (tessera_dtype_t)2, TESSERA_ORDER_C, 3, local_shape, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_gather(NULL, local, back, TESSERA_F64, TESSERA_ORDER_C, 3, local_shape, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  /* Leading extents whose element counts overflow int64 (they used to wrap to small
   * counts): a shape error on every rank, naming the array. */
  const int64_t huge_shape[3] = {INT64_MAX / 2, b, e};
  EXPECT_STATUS(tessera_decomp_scatter(d, global, local, TESSERA_F64, TESSERA_ORDER_C, 3, huge_shape, 0),
                TESSERA_ERR_SHAPE);
  EXPECT_MESSAGE("scatter: the local array");
  const int64_t huge_f[4] = {e, b, 2, (int64_t)1 << 61}; /* 2^62 * b * e elements: wraps */
  EXPECT_STATUS(tessera_decomp_gather(d, local, back, TESSERA_F64, TESSERA_ORDER_FORTRAN, 4, huge_f, 0),
                TESSERA_ERR_SHAPE);
  EXPECT_STATUS(tessera_decomp_scatter(NULL, global, local, TESSERA_F64, TESSERA_ORDER_C, 3, local_shape, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  free(global);
  free(back);
  free(local);

  EXPECT_OK(tessera_decomp_destroy(&d));
  CHECK(d == NULL);
  EXPECT_OK(tessera_decomp_destroy(&d));
  EXPECT_STATUS(tessera_decomp_destroy(NULL), TESSERA_ERR_INVALID_ARGUMENT);

  /* Creation errors. */
  EXPECT_OK(tessera_decomp_create_f(MPI_Comm_c2f(MPI_COMM_WORLD), NLAT, NLON, world_size, 1, &d));
  EXPECT_OK(tessera_decomp_destroy(&d));
  EXPECT_STATUS(tessera_decomp_create(MPI_COMM_WORLD, NLAT, NLON, 0, 0, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_create(MPI_COMM_NULL, NLAT, NLON, 0, 0, &d), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_create(MPI_COMM_WORLD, NLAT, NLON, world_size + 1, 1, &d),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("process grid");
  EXPECT_STATUS(tessera_decomp_create(MPI_COMM_WORLD, 0, NLON, 0, 0, &d), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_decomp_create_f(MPI_Comm_c2f(MPI_COMM_WORLD), -3, NLON, 0, 0, &d),
                TESSERA_ERR_INVALID_ARGUMENT);
  /* A process grid whose rank count overflows int (INT_MAX^2 wrapped to 1 rank), and a
   * global grid whose cell count overflows int64. */
  EXPECT_STATUS(tessera_decomp_create(MPI_COMM_WORLD, NLAT, NLON, INT_MAX, INT_MAX, &d),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("grid_lat (2147483647) * grid_lon (2147483647)");
  EXPECT_STATUS(tessera_decomp_create(MPI_COMM_WORLD, INT64_MAX / 2, NLON, 0, 0, &d), TESSERA_ERR_SHAPE);
  EXPECT_MESSAGE("nlat");
  EXPECT_STATUS(tessera_decomp_create_from_mesh(NULL, NLAT, NLON, 0, 0, &d), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("mesh handle is NULL");
  CHECK(d == NULL);

  /* From a mesh: over its domain communicator; the handle keeps the mesh alive. */
  tessera_mesh_t* mesh = NULL;
  EXPECT_OK(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_DDP, 1, world_size >= 2 ? 2 : 1, &mesh));
  EXPECT_OK(tessera_decomp_create_from_mesh(mesh, NLAT, NLON, 0, 0, &d));
  EXPECT_STATUS(tessera_decomp_create_from_mesh(mesh, NLAT, NLON, 0, 0, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_OK(tessera_mesh_destroy(&mesh));
  EXPECT_OK(tessera_decomp_size(d, &s));
  CHECK(s == (world_size >= 2 ? 2 : 1));
  EXPECT_OK(tessera_decomp_rank(d, &r));
  CHECK(r == world_rank % s);
  EXPECT_OK(tessera_decomp_destroy(&d));
}

/* ------------------------------------------------------------------------------------ */

/* Expected value of padded cell (a, b) of level l after a forward exchange with
 * periodic longitude and replicate poles, width 1. */
static double expected_halo(int64_t l, int64_t lat0, int64_t lon0, int64_t a, int64_t b) {
  int64_t i = lat0 - 1 + a, j = lon0 - 1 + b;
  if (i < 0) i = 0;
  if (i >= NLAT) i = NLAT - 1;
  j = (j % NLON + NLON) % NLON;
  return encode(l, i, j);
}

static void test_halo(void) {
  tessera_decomp_t* d = NULL;
  tessera_halo_t* h = NULL;
  EXPECT_OK(tessera_decomp_create(MPI_COMM_WORLD, NLAT, NLON, 0, 0, &d));
  EXPECT_STATUS(tessera_halo_create(NULL, 1, 1, 1, 1, 1, TESSERA_POLE_REPLICATE, &h), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_create(d, 1, 1, 1, 1, 1, TESSERA_POLE_REPLICATE, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_create(d, -1, 1, 1, 1, 1, TESSERA_POLE_REPLICATE, &h), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("negative");
  EXPECT_STATUS(tessera_halo_create(d, 1, 1, 1, 1, 1, (tessera_pole_t)4, &h), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("pole policy 4");
  /* across_pole needs periodic longitude (the library's check, agreed on every rank). */
  EXPECT_STATUS(tessera_halo_create(d, 1, 1, 1, 1, 0, TESSERA_POLE_ACROSS_POLE, &h), TESSERA_ERR_INVALID_ARGUMENT);
  CHECK(h == NULL);

  EXPECT_OK(tessera_halo_create(d, 1, 1, 1, 1, 1, TESSERA_POLE_REPLICATE, &h));
  int64_t lat0, nl, lon0, nn, pl = 0, pn = 0;
  EXPECT_OK(tessera_decomp_box(d, &lat0, &nl, &lon0, &nn));
  EXPECT_OK(tessera_decomp_destroy(&d)); /* the halo keeps what it needs alive */
  EXPECT_OK(tessera_halo_padded(h, &pl, &pn));
  CHECK(pl == nl + 2 && pn == nn + 2);
  EXPECT_STATUS(tessera_halo_padded(NULL, &pl, &pn), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("halo handle is NULL");
  EXPECT_STATUS(tessera_halo_padded(h, NULL, &pn), TESSERA_ERR_INVALID_ARGUMENT);

  /* Three fields: f64 C order with 2 levels, f32 Fortran order, and an f64 field laid
   * out (lev, lat, lon) in Fortran order (levels fastest) through strides. */
  const int64_t L = 2;
  const size_t n2 = (size_t)(pl * pn);
  double* a = calloc(n2 * L, sizeof(double));
  float* f = calloc(n2, sizeof(float));
  double* s = calloc(n2 * L, sizeof(double));
  const int64_t shape_c[3] = {L, pl, pn};
  const int64_t shape_f[2] = {pn, pl};
  const int64_t strided_shape[3] = {L, pl, pn};
  const int64_t strides[3] = {1, L, L * pl};
  int index = -1, count = -1;
  EXPECT_OK(tessera_halo_add_field(h, a, TESSERA_F64, TESSERA_ORDER_C, 3, shape_c, &index));
  CHECK(index == 0);
  EXPECT_OK(tessera_halo_add_field(h, f, TESSERA_F32, TESSERA_ORDER_FORTRAN, 2, shape_f, &index));
  CHECK(index == 1);
  EXPECT_OK(tessera_halo_add_field_strided(h, s, TESSERA_F64, 3, strided_shape, strides, &index));
  CHECK(index == 2);
  EXPECT_OK(tessera_halo_num_fields(h, &count));
  CHECK(count == 3);

  /* Registration errors (local). */
  const int64_t wrong[3] = {L, pl + 1, pn};
  const int64_t wrong_f[2] = {pl, pn}; /* (lat, lon) given in Fortran order: transposed */
  EXPECT_STATUS(tessera_halo_add_field(h, a, TESSERA_F64, TESSERA_ORDER_C, 3, wrong, NULL), TESSERA_ERR_SHAPE);
  EXPECT_MESSAGE("padded");
  if (pl != pn) {
    EXPECT_STATUS(tessera_halo_add_field(h, f, TESSERA_F32, TESSERA_ORDER_FORTRAN, 2, wrong_f, NULL),
                  TESSERA_ERR_SHAPE);
  }
  EXPECT_STATUS(tessera_halo_add_field(h, a, (tessera_dtype_t)3, TESSERA_ORDER_C, 3, shape_c, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("dtype 3");
  EXPECT_STATUS(tessera_halo_add_field(h, NULL, TESSERA_F64, TESSERA_ORDER_C, 3, shape_c, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("data pointer is NULL");
  EXPECT_STATUS(tessera_halo_add_field(h, a, TESSERA_F64, TESSERA_ORDER_C, 3, NULL, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_add_field(h, a, TESSERA_F64, (tessera_order_t)2, 3, shape_c, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_add_field(h, a, TESSERA_F64, TESSERA_ORDER_C, 1, shape_c, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_add_field(h, a, TESSERA_F64, TESSERA_ORDER_C, 9, shape_c, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_add_field(NULL, a, TESSERA_F64, TESSERA_ORDER_C, 3, shape_c, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_add_field_strided(h, s, TESSERA_F64, 3, strided_shape, NULL, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  const int64_t zero_strides[3] = {1, 0, L * pl};
  EXPECT_STATUS(tessera_halo_add_field_strided(h, s, TESSERA_F64, 3, strided_shape, zero_strides, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_add_field_strided(h, s, TESSERA_F64, 3, wrong, strides, NULL), TESSERA_ERR_SHAPE);
  /* Extents and strides that overflow int64 used to register a field whose size had
   * wrapped; the next exchange wrote out of bounds. */
  const int64_t huge_c[3] = {INT64_MAX / 4, pl, pn};
  EXPECT_STATUS(tessera_halo_add_field(h, a, TESSERA_F64, TESSERA_ORDER_C, 3, huge_c, NULL), TESSERA_ERR_SHAPE);
  EXPECT_MESSAGE("field 3");
  const int64_t huge_strides[3] = {INT64_MAX / 2, L, L * pl};
  EXPECT_STATUS(tessera_halo_add_field_strided(h, s, TESSERA_F64, 3, strided_shape, huge_strides, NULL),
                TESSERA_ERR_SHAPE);
  EXPECT_MESSAGE("field 3");
  EXPECT_STATUS(tessera_halo_add_field_strided(h, NULL, TESSERA_F64, 3, strided_shape, strides, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_add_field_strided(h, s, TESSERA_F32 + 7, 3, strided_shape, strides, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_add_field_strided(NULL, s, TESSERA_F64, 3, strided_shape, strides, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_OK(tessera_halo_num_fields(h, &count));
  CHECK(count == 3);
  EXPECT_STATUS(tessera_halo_num_fields(NULL, &count), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_num_fields(h, NULL), TESSERA_ERR_INVALID_ARGUMENT);

  /* Fill the interiors (halos hold junk), exchange, check every padded cell. */
#define FILL()                                                                              \
  for (int64_t x = 0; x < pl; ++x)                                                          \
    for (int64_t y = 0; y < pn; ++y) {                                                      \
      const int inside = x >= 1 && x <= nl && y >= 1 && y <= nn;                            \
      for (int64_t l = 0; l < L; ++l) {                                                     \
        a[(l * pl + x) * pn + y] = inside ? encode(l, lat0 + x - 1, lon0 + y - 1) : -7.0;   \
        s[l + L * (x + pl * y)] = inside ? encode(l, lat0 + x - 1, lon0 + y - 1) : -7.0;    \
      }                                                                                     \
      f[y + pn * x] = inside ? (float)encode(0, lat0 + x - 1, lon0 + y - 1) : -7.0f;        \
    }
#define VERIFY()                                                                            \
  do {                                                                                      \
    int wrong_ = 0;                                                                         \
    for (int64_t x = 0; x < pl; ++x)                                                        \
      for (int64_t y = 0; y < pn; ++y) {                                                    \
        for (int64_t l = 0; l < L; ++l) {                                                   \
          wrong_ += a[(l * pl + x) * pn + y] != expected_halo(l, lat0, lon0, x, y);         \
          wrong_ += s[l + L * (x + pl * y)] != expected_halo(l, lat0, lon0, x, y);          \
        }                                                                                   \
        wrong_ += f[y + pn * x] != (float)expected_halo(0, lat0, lon0, x, y);               \
      }                                                                                     \
    CHECK(wrong_ == 0);                                                                     \
  } while (0)

  FILL();
  EXPECT_OK(tessera_halo_exchange(h));
  VERIFY();

  int flight = -1;
  FILL();
  EXPECT_OK(tessera_halo_in_flight(h, &flight));
  CHECK(flight == 0);
  EXPECT_OK(tessera_halo_start(h));
  EXPECT_OK(tessera_halo_in_flight(h, &flight));
  CHECK(flight == 1);
  EXPECT_STATUS(tessera_halo_add_field(h, a, TESSERA_F64, TESSERA_ORDER_C, 3, shape_c, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_MESSAGE("in flight");
  EXPECT_STATUS(tessera_halo_clear_fields(h), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_OK(tessera_halo_finish(h));
  VERIFY();
  EXPECT_STATUS(tessera_halo_finish(h), TESSERA_ERR_INVALID_ARGUMENT); /* finish without start */
  EXPECT_STATUS(tessera_halo_finish_adjoint(h), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_in_flight(NULL, &flight), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_in_flight(h, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_exchange(NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_start(NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_finish(NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_exchange_adjoint(NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_start_adjoint(NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_finish_adjoint(NULL), TESSERA_ERR_INVALID_ARGUMENT);

  /* Adjoint: <A x, y> = <x, A^T y> over all ranks, on the C-order field alone. */
  EXPECT_OK(tessera_halo_clear_fields(h));
  EXPECT_OK(tessera_halo_num_fields(h, &count));
  CHECK(count == 0);
  EXPECT_STATUS(tessera_halo_clear_fields(NULL), TESSERA_ERR_INVALID_ARGUMENT);
  double* x = malloc(sizeof(double) * n2 * L);
  double* y = malloc(sizeof(double) * n2 * L);
  double* y2 = malloc(sizeof(double) * n2 * L);
  srand(1234u + (unsigned)world_rank);
  for (size_t k = 0; k < n2 * L; ++k) {
    x[k] = rand() / (double)RAND_MAX - 0.5;
    y[k] = rand() / (double)RAND_MAX - 0.5;
  }
  memcpy(a, x, sizeof(double) * n2 * L);
  EXPECT_OK(tessera_halo_add_field(h, a, TESSERA_F64, TESSERA_ORDER_C, 3, shape_c, NULL));
  EXPECT_OK(tessera_halo_exchange(h)); /* a = A x */
  memcpy(y2, y, sizeof(double) * n2 * L);
  memcpy(a, y, sizeof(double) * n2 * L);
  EXPECT_OK(tessera_halo_exchange_adjoint(h)); /* a = A^T y */
  double lhs = 0.0, rhs = 0.0;
  {
    /* Recompute A x into y (a holds A^T y now). */
    double* ax = malloc(sizeof(double) * n2 * L);
    double* aty = malloc(sizeof(double) * n2 * L);
    memcpy(aty, a, sizeof(double) * n2 * L);
    memcpy(a, x, sizeof(double) * n2 * L);
    EXPECT_OK(tessera_halo_exchange(h));
    memcpy(ax, a, sizeof(double) * n2 * L);
    for (size_t k = 0; k < n2 * L; ++k) {
      lhs += ax[k] * y[k];
      rhs += x[k] * aty[k];
    }
    /* The split adjoint equals the blocking one. */
    memcpy(a, y2, sizeof(double) * n2 * L);
    EXPECT_OK(tessera_halo_start_adjoint(h));
    EXPECT_OK(tessera_halo_finish_adjoint(h));
    CHECK(memcmp(a, aty, sizeof(double) * n2 * L) == 0);
    free(ax);
    free(aty);
  }
  double sums[2] = {lhs, rhs}, total[2];
  MPI_Allreduce(sums, total, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  CHECK(fabs(total[0] - total[1]) <= 1e-12 * (fabs(total[0]) + 1.0));

  /* Halo scatter / gather: interiors only. */
  double* global = malloc(sizeof(double) * (size_t)(L * NLAT * NLON));
  double* back = calloc((size_t)(L * NLAT * NLON), sizeof(double));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < NLAT; ++i)
      for (int64_t j = 0; j < NLON; ++j) global[(l * NLAT + i) * NLON + j] = encode(l, i, j);
  for (size_t k = 0; k < n2 * L; ++k) a[k] = -7.0;
  EXPECT_OK(tessera_halo_scatter(h, global, a, TESSERA_F64, TESSERA_ORDER_C, 3, shape_c, 0));
  int bad = 0;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t xx = 0; xx < pl; ++xx)
      for (int64_t yy = 0; yy < pn; ++yy) {
        const int inside = xx >= 1 && xx <= nl && yy >= 1 && yy <= nn;
        bad += a[(l * pl + xx) * pn + yy] != (inside ? encode(l, lat0 + xx - 1, lon0 + yy - 1) : -7.0);
      }
  CHECK(bad == 0);
  EXPECT_OK(tessera_halo_gather(h, a, world_rank == 0 ? back : NULL, TESSERA_F64, TESSERA_ORDER_C, 3, shape_c, 0));
  if (world_rank == 0) CHECK(memcmp(back, global, sizeof(double) * (size_t)(L * NLAT * NLON)) == 0);
  EXPECT_STATUS(tessera_halo_gather(h, a, back, TESSERA_F64, TESSERA_ORDER_C, 3, wrong, 0), TESSERA_ERR_SHAPE);
  EXPECT_STATUS(tessera_halo_scatter(h, global, a, TESSERA_F64, TESSERA_ORDER_C, 3, wrong, 0), TESSERA_ERR_SHAPE);
  EXPECT_STATUS(tessera_halo_gather(h, a, back, (tessera_dtype_t)9, TESSERA_ORDER_C, 3, shape_c, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_scatter(h, global, NULL, TESSERA_F64, TESSERA_ORDER_C, 3, shape_c, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_gather(NULL, a, back, TESSERA_F64, TESSERA_ORDER_C, 3, shape_c, 0),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_halo_scatter(NULL, global, a, TESSERA_F64, TESSERA_ORDER_C, 3, shape_c, 0),
                TESSERA_ERR_INVALID_ARGUMENT);

  free(global);
  free(back);
  free(x);
  free(y);
  free(y2);
  EXPECT_OK(tessera_halo_destroy(&h));
  CHECK(h == NULL);
  EXPECT_OK(tessera_halo_destroy(&h));
  EXPECT_STATUS(tessera_halo_destroy(NULL), TESSERA_ERR_INVALID_ARGUMENT);
  free(a);
  free(f);
  free(s);
}

/* A rank that registered no fields and one that registered a field: the first exchange
 * used to hang (the empty field set looked already agreed on, so that rank skipped the
 * collective check the others waited in). Every rank must get the same error instead,
 * for each way of starting an exchange, and the handle must stay usable. */
static void test_halo_field_count(void) {
  tessera_decomp_t* d = NULL;
  EXPECT_OK(tessera_decomp_create(MPI_COMM_WORLD, NLAT, NLON, 0, 0, &d));
  int64_t pl = 0, pn = 0;
  int (*const starts[4])(tessera_halo_t*) = {tessera_halo_exchange, tessera_halo_start, tessera_halo_exchange_adjoint,
                                             tessera_halo_start_adjoint};
  for (int k = 0; k < 4; ++k) {
    tessera_halo_t* h = NULL;
    EXPECT_OK(tessera_halo_create(d, 1, 1, 1, 1, 1, TESSERA_POLE_ZERO, &h));
    EXPECT_OK(tessera_halo_padded(h, &pl, &pn));
    double* q = calloc((size_t)(pl * pn), sizeof(double));
    const int64_t shape[2] = {pl, pn};
    if (world_rank != 0) EXPECT_OK(tessera_halo_add_field(h, q, TESSERA_F64, TESSERA_ORDER_C, 2, shape, NULL));
    if (world_size > 1) {
      EXPECT_STATUS(starts[k](h), TESSERA_ERR_INVALID_ARGUMENT);
      EXPECT_MESSAGE("rank 0 registered 0 field(s), rank 1 registered 1");
      int flight = -1;
      EXPECT_OK(tessera_halo_in_flight(h, &flight));
      CHECK(flight == 0);
    }
    /* Once every rank registers the same field, exchanges run. */
    EXPECT_OK(tessera_halo_clear_fields(h));
    EXPECT_OK(tessera_halo_add_field(h, q, TESSERA_F64, TESSERA_ORDER_C, 2, shape, NULL));
    EXPECT_OK(starts[k](h));
    if (k % 2 == 1) EXPECT_OK(k == 1 ? tessera_halo_finish(h) : tessera_halo_finish_adjoint(h));
    EXPECT_OK(tessera_halo_destroy(&h));
    free(q);
  }
  /* No fields on any rank is consistent, not an error. */
  tessera_halo_t* h = NULL;
  EXPECT_OK(tessera_halo_create(d, 1, 1, 1, 1, 1, TESSERA_POLE_ZERO, &h));
  EXPECT_OK(tessera_halo_exchange(h));
  EXPECT_OK(tessera_halo_destroy(&h));
  EXPECT_OK(tessera_decomp_destroy(&d));
}

/* ------------------------------------------------------------------------------------ */

static void test_checkpoint(void) {
  char root[600];
  snprintf(root, sizeof root, "%s/ckpt", scratch);
  tessera_mesh_t* mesh = NULL;
  tessera_decomp_t* d = NULL;
  tessera_halo_t* h = NULL;
  tessera_checkpoint_t* ck = NULL;
  EXPECT_OK(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, world_size, &mesh));
  EXPECT_OK(tessera_decomp_create_from_mesh(mesh, NLAT, NLON, 0, 0, &d));
  EXPECT_OK(tessera_halo_create(d, 1, 1, 1, 1, 1, TESSERA_POLE_ZERO, &h));
  int64_t lat0, nl, lon0, nn, pl, pn;
  EXPECT_OK(tessera_decomp_box(d, &lat0, &nl, &lon0, &nn));
  EXPECT_OK(tessera_halo_padded(h, &pl, &pn));

  /* A padded f64 field, a Fortran-order f32 block split along latitude by hand, and a
   * replicated f64 vector. */
  double* field = calloc((size_t)(pl * pn), sizeof(double));
  float* block = calloc((size_t)(nl * NLON), sizeof(float));
  double params[3] = {1.5, -2.25, 3.0};
  for (int64_t x = 1; x <= nl; ++x)
    for (int64_t y = 1; y <= nn; ++y) field[x * pn + y] = encode(0, lat0 + x - 1, lon0 + y - 1);
  for (int64_t i = 0; i < nl; ++i)
    for (int64_t j = 0; j < NLON; ++j) block[j + NLON * i] = (float)encode(1, lat0 + i, j);
  const int64_t field_shape[2] = {pl, pn};
  const int64_t block_global[2] = {NLON, NLAT}, block_offset[2] = {0, lat0}, block_local[2] = {NLON, nl};
  const int64_t vec_shape[1] = {3}, vec_offset[1] = {0};

  EXPECT_STATUS(tessera_checkpoint_begin_save(NULL, root, 7, TESSERA_LAYOUT_SHARED, &ck), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_checkpoint_begin_save(mesh, NULL, 7, TESSERA_LAYOUT_SHARED, &ck), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_checkpoint_begin_save(mesh, root, -1, TESSERA_LAYOUT_SHARED, &ck),
                TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_checkpoint_begin_save(mesh, root, 7, (tessera_layout_t)5, &ck), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_checkpoint_begin_save(mesh, root, 7, TESSERA_LAYOUT_SHARED, NULL),
                TESSERA_ERR_INVALID_ARGUMENT);
  CHECK(ck == NULL);

  for (int layout = TESSERA_LAYOUT_SHARED; layout <= TESSERA_LAYOUT_PER_RANK; ++layout) {
    const int64_t step = 7 + layout;
    EXPECT_OK(tessera_checkpoint_begin_save(mesh, root, step, (tessera_layout_t)layout, &ck));
    EXPECT_OK(tessera_checkpoint_set_metadata(ck, "capi test"));
    EXPECT_STATUS(tessera_checkpoint_set_metadata(ck, NULL), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_set_metadata(NULL, "x"), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_OK(tessera_checkpoint_set_keep_last(ck, 0));
    EXPECT_STATUS(tessera_checkpoint_set_keep_last(ck, -1), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_set_keep_last(NULL, 1), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_OK(tessera_checkpoint_add_halo_field(ck, "field", h, field, TESSERA_F64, TESSERA_ORDER_C, 2, field_shape));
    EXPECT_OK(tessera_checkpoint_add_array(ck, "block", block, TESSERA_F32, TESSERA_ORDER_FORTRAN, 2, block_global,
                                           block_offset, block_local, "domain: Shard(2)"));
    EXPECT_OK(tessera_checkpoint_add_array(ck, "params", params, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                           vec_offset, vec_shape, NULL));
    /* add errors (local) */
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "params", params, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                               vec_offset, vec_shape, ""),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("already added");
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "a/b", params, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                               vec_offset, vec_shape, ""),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, NULL, params, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                               vec_offset, vec_shape, ""),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "p2", NULL, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                               vec_offset, vec_shape, ""),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "p2", params, (tessera_dtype_t)4, TESSERA_ORDER_C, 1, vec_shape,
                                               vec_offset, vec_shape, ""),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "p2", params, TESSERA_F64, TESSERA_ORDER_C, 1, NULL, vec_offset,
                                               vec_shape, ""),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "p2", params, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape, NULL,
                                               vec_shape, ""),
                  TESSERA_ERR_INVALID_ARGUMENT);
    const int64_t too_far[1] = {1};
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "p2", params, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape, too_far,
                                               vec_shape, ""),
                  TESSERA_ERR_SHAPE);
    EXPECT_MESSAGE("outside the global shape");
    /* offset + local extent overflowing int64 used to wrap negative and pass the check;
     * so did a global shape whose element count overflows. */
    const int64_t far_offset[1] = {INT64_MAX - 1};
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "p2", params, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                               far_offset, vec_shape, ""),
                  TESSERA_ERR_SHAPE);
    EXPECT_MESSAGE("array 'p2'");
    const int64_t huge_global[2] = {INT64_MAX / 2, 4}, zero_offset[2] = {0, 0}, one_by_three[2] = {1, 3};
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "p2", params, TESSERA_F64, TESSERA_ORDER_C, 2, huge_global,
                                               zero_offset, one_by_three, ""),
                  TESSERA_ERR_SHAPE);
    EXPECT_MESSAGE("global shape");
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "p2", params, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                               vec_offset, vec_shape, "domain: Shard(1)"),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "p2", params, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                               vec_offset, vec_shape, "space: Replicate"),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "p2", params, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                               vec_offset, vec_shape, "tp: Sideways"),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_add_array(NULL, "p2", params, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                               vec_offset, vec_shape, ""),
                  TESSERA_ERR_INVALID_ARGUMENT);
    const int64_t wrong_field[2] = {pl, pn + 1};
    EXPECT_STATUS(tessera_checkpoint_add_halo_field(ck, "f2", h, field, TESSERA_F64, TESSERA_ORDER_C, 2, wrong_field),
                  TESSERA_ERR_SHAPE);
    EXPECT_STATUS(tessera_checkpoint_add_halo_field(ck, "f2", h, field, (tessera_dtype_t)6, TESSERA_ORDER_C, 2,
                                                    field_shape),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_add_halo_field(ck, "f2", NULL, field, TESSERA_F64, TESSERA_ORDER_C, 2,
                                                    field_shape),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_add_halo_field(ck, "f2", h, NULL, TESSERA_F64, TESSERA_ORDER_C, 2, field_shape),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_add_halo_field(NULL, "f2", h, field, TESSERA_F64, TESSERA_ORDER_C, 2,
                                                    field_shape),
                  TESSERA_ERR_INVALID_ARGUMENT);

    EXPECT_OK(tessera_checkpoint_commit(ck));
    EXPECT_STATUS(tessera_checkpoint_commit(ck), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("already committed");
    int64_t got = -1;
    const char* meta = NULL;
    EXPECT_OK(tessera_checkpoint_step(ck, &got));
    CHECK(got == step);
    EXPECT_OK(tessera_checkpoint_metadata(ck, &meta));
    CHECK(meta != NULL && strcmp(meta, "capi test") == 0);
    EXPECT_OK(tessera_checkpoint_destroy(&ck));
    CHECK(ck == NULL);
  }
  /* Regression (hardening issue): a save whose every add failed used to commit an empty
   * checkpoint and move `latest` past step 8. Now the commit fails on every rank and
   * writes nothing: the load of the root's latest below still finds step 8. */
  {
    EXPECT_OK(tessera_checkpoint_begin_save(mesh, root, 9, TESSERA_LAYOUT_PER_RANK, &ck));
    EXPECT_STATUS(tessera_checkpoint_add_array(ck, "params", NULL, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                               vec_offset, vec_shape, ""),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_checkpoint_commit(ck), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("no array was added to this checkpoint (1 add call(s) failed; the first: 'params'");
    EXPECT_OK(tessera_checkpoint_destroy(&ck));
  }
  /* Issue 46: blocks of two ranks that overlap ended the shared save in
   * TESSERA_ERR_INTERNAL after the file was written. Now every rank's commit fails with
   * an argument error naming the array, the two ranks and their boxes, in either layout,
   * before anything is written; so does a block layout that leaves elements out. Rank r
   * writes 4 elements at 3r of 3n + 1 (overlap from 2 ranks on), then 2 at 3r of 3n (a
   * gap at every rank count); `latest` stays at step 8 (the load below). */
  for (int layout = TESSERA_LAYOUT_SHARED; layout <= TESSERA_LAYOUT_PER_RANK; ++layout) {
    double four[4] = {1, 2, 3, 4};
    for (int gap = world_size > 1 ? 0 : 1; gap <= 1; ++gap) {
      const int64_t global[1] = {gap ? 3 * world_size : 3 * world_size + 1}, offset[1] = {3 * world_rank};
      const int64_t local[1] = {gap ? 2 : 4};
      EXPECT_OK(tessera_checkpoint_begin_save(mesh, root, 11, (tessera_layout_t)layout, &ck));
      EXPECT_OK(tessera_checkpoint_add_array(ck, "tiles", four, TESSERA_F64, TESSERA_ORDER_C, 1, global, offset, local,
                                             "domain: Shard(0)"));
      EXPECT_STATUS(tessera_checkpoint_commit(ck), TESSERA_ERR_INVALID_ARGUMENT);
      EXPECT_MESSAGE("tensor /model/tiles");
      if (gap) {
        char covered[96];
        snprintf(covered, sizeof covered, "blocks cover %d of its %d elements (rank 0 [0, 2)", 2 * world_size,
                 3 * world_size);
        EXPECT_MESSAGE(covered);
      } else {
        EXPECT_MESSAGE("the blocks of ranks 0 and 1 overlap (rank 0 writes [0, 4), rank 1 writes [3, 7)");
      }
      EXPECT_OK(tessera_checkpoint_destroy(&ck));
      char step_dir[700];
      snprintf(step_dir, sizeof step_dir, "%s/step_00000011", root);
      CHECK(access(step_dir, F_OK) != 0);
    }
  }
  EXPECT_STATUS(tessera_checkpoint_commit(NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_checkpoint_step(NULL, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_checkpoint_metadata(NULL, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_checkpoint_destroy(NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_OK(tessera_checkpoint_destroy(&ck));

  /* Load the latest (per_rank, step 8) into fresh arrays with another layout: the
   * field at C order on a 2-D process grid where one exists, the block in C order. */
  tessera_decomp_t* d2 = NULL;
  tessera_halo_t* h2 = NULL;
  const int grid_lon = world_size == 4 ? 2 : 1;
  EXPECT_OK(tessera_decomp_create_from_mesh(mesh, NLAT, NLON, world_size / grid_lon, grid_lon, &d2));
  EXPECT_OK(tessera_halo_create(d2, 2, 1, 1, 2, 1, TESSERA_POLE_ZERO, &h2));
  int64_t la, lna, lo, lno, ppl, ppn;
  EXPECT_OK(tessera_decomp_box(d2, &la, &lna, &lo, &lno));
  EXPECT_OK(tessera_halo_padded(h2, &ppl, &ppn));
  double* field2 = calloc((size_t)(ppl * ppn), sizeof(double));
  const int64_t field2_shape[2] = {ppl, ppn};
  /* The block again, but split along longitude now, in C order (lat, lon). */
  const int64_t lon_start = (int64_t)world_rank * NLON / world_size;
  const int64_t lon_count = (int64_t)(world_rank + 1) * NLON / world_size - lon_start;
  float* block2 = calloc((size_t)(NLAT * lon_count), sizeof(float));
  const int64_t b2_global[2] = {NLAT, NLON}, b2_offset[2] = {0, lon_start}, b2_local[2] = {NLAT, lon_count};
  double params2[3] = {0, 0, 0};

  EXPECT_STATUS(tessera_checkpoint_begin_load(NULL, root, &ck), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_checkpoint_begin_load(mesh, NULL, &ck), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(tessera_checkpoint_begin_load(mesh, root, NULL), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_OK(tessera_checkpoint_begin_load(mesh, root, &ck));
  int64_t got = 0;
  EXPECT_STATUS(tessera_checkpoint_step(ck, &got), TESSERA_ERR_INVALID_ARGUMENT); /* only after commit */
  EXPECT_OK(tessera_checkpoint_set_strict(ck, 1));
  EXPECT_STATUS(tessera_checkpoint_set_strict(NULL, 1), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_OK(tessera_checkpoint_add_halo_field(ck, "field", h2, field2, TESSERA_F64, TESSERA_ORDER_C, 2, field2_shape));
  EXPECT_OK(tessera_checkpoint_add_array(ck, "block", block2, TESSERA_F32, TESSERA_ORDER_C, 2, b2_global, b2_offset,
                                         b2_local, "domain: Shard(1)"));
  EXPECT_OK(tessera_checkpoint_add_array(ck, "params", params2, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                         vec_offset, vec_shape, "dp: Replicate, tp: Replicate, domain: Replicate"));
  EXPECT_OK(tessera_checkpoint_commit(ck));
  EXPECT_OK(tessera_checkpoint_step(ck, &got));
  CHECK(got == 8);
  const char* meta = NULL;
  EXPECT_OK(tessera_checkpoint_metadata(ck, &meta));
  CHECK(meta != NULL && strcmp(meta, "capi test") == 0);
  EXPECT_OK(tessera_checkpoint_destroy(&ck));
  int bad = 0;
  for (int64_t x = 0; x < ppl; ++x)
    for (int64_t y = 0; y < ppn; ++y) {
      const int inside = x >= 2 && x < 2 + lna && y >= 1 && y < 1 + lno;
      bad += field2[x * ppn + y] != (inside ? encode(0, la + x - 2, lo + y - 1) : 0.0);
    }
  for (int64_t i = 0; i < NLAT; ++i)
    for (int64_t j = 0; j < lon_count; ++j) bad += block2[i * lon_count + j] != (float)encode(1, i, lon_start + j);
  bad += params2[0] != 1.5 || params2[1] != -2.25 || params2[2] != 3.0;
  CHECK(bad == 0);

  /* Load errors, the same on every rank: a dtype that differs from the file's, a name
   * the file lacks (strict), a missing checkpoint. */
  EXPECT_OK(tessera_checkpoint_begin_load(mesh, root, &ck));
  EXPECT_OK(tessera_checkpoint_set_strict(ck, 0));
  EXPECT_OK(tessera_checkpoint_add_array(ck, "params", block, TESSERA_F32, TESSERA_ORDER_C, 1, vec_shape, vec_offset,
                                         vec_shape, NULL));
  EXPECT_STATUS(tessera_checkpoint_commit(ck), TESSERA_ERR_SHAPE);
  EXPECT_MESSAGE("dtype");
  EXPECT_OK(tessera_checkpoint_destroy(&ck));

  EXPECT_OK(tessera_checkpoint_begin_load(mesh, root, &ck));
  EXPECT_OK(tessera_checkpoint_add_array(ck, "params", params2, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                         vec_offset, vec_shape, NULL));
  EXPECT_STATUS(tessera_checkpoint_commit(ck), TESSERA_ERR_INVALID_ARGUMENT); /* strict: the file has more */
  EXPECT_OK(tessera_checkpoint_destroy(&ck));

  EXPECT_OK(tessera_checkpoint_begin_load(mesh, root, &ck));
  EXPECT_OK(tessera_checkpoint_set_strict(ck, 0)); /* non-strict: a subset loads */
  params2[1] = 0;
  EXPECT_OK(tessera_checkpoint_add_array(ck, "params", params2, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                         vec_offset, vec_shape, NULL));
  EXPECT_OK(tessera_checkpoint_commit(ck));
  CHECK(params2[1] == -2.25);
  EXPECT_OK(tessera_checkpoint_destroy(&ck));

  const int64_t wrong_global[1] = {4};
  EXPECT_OK(tessera_checkpoint_begin_load(mesh, root, &ck));
  EXPECT_OK(tessera_checkpoint_set_strict(ck, 0));
  EXPECT_OK(tessera_checkpoint_add_array(ck, "params", params2, TESSERA_F64, TESSERA_ORDER_C, 1, wrong_global,
                                         vec_offset, vec_shape, NULL));
  EXPECT_STATUS(tessera_checkpoint_commit(ck), TESSERA_ERR_SHAPE); /* mismatched global shape */
  EXPECT_MESSAGE("params");
  EXPECT_OK(tessera_checkpoint_destroy(&ck));

  char missing[700];
  snprintf(missing, sizeof missing, "%s/no_such_checkpoint", scratch);
  EXPECT_OK(tessera_checkpoint_begin_load(mesh, missing, &ck));
  EXPECT_OK(tessera_checkpoint_add_array(ck, "params", params2, TESSERA_F64, TESSERA_ORDER_C, 1, vec_shape,
                                         vec_offset, vec_shape, NULL));
  EXPECT_STATUS(tessera_checkpoint_commit(ck), TESSERA_ERR_IO);
  EXPECT_OK(tessera_checkpoint_destroy(&ck));

  free(field);
  free(block);
  free(field2);
  free(block2);
  EXPECT_OK(tessera_halo_destroy(&h2));
  EXPECT_OK(tessera_decomp_destroy(&d2));
  EXPECT_OK(tessera_halo_destroy(&h));
  EXPECT_OK(tessera_decomp_destroy(&d));
  EXPECT_OK(tessera_mesh_destroy(&mesh));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  /* A scratch directory per run: argv[1], or the current directory. */
  snprintf(scratch, sizeof scratch, "%s/capi_np%d", argc > 1 ? argv[1] : ".", world_size);
  if (world_rank == 0) {
    char command[1100];
    snprintf(command, sizeof command, "rm -rf '%s' && mkdir -p '%s'", scratch, scratch);
    if (system(command) != 0) failures++;
  }
  MPI_Barrier(MPI_COMM_WORLD);

  test_errors_and_version();
  test_mesh();
  test_decomp();
  test_halo();
  test_halo_field_count();
  test_checkpoint();

  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) printf("test_capi: %d ranks, %d failed checks\n", world_size, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
