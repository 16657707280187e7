/*
 * The caller's decomposition through the C API (issue 41). The program: a
 * 12 x 16 (lat x lon) f64 field on a code's MPI_Cart_create communicator with dims
 * ordered {lon, lat}, halo 1, periodic in longitude. Handed to tessera_decomp_create it
 * used to exchange with the wrong neighbours at 4 ranks (96 wrong halo cells, every
 * return code 0). Now every path gives correct halos or an error on every rank, never
 * wrong values with success codes: the old call (refused at 2 x 2, correct where the
 * order cannot matter), tessera_decomp_create_cart, tessera_decomp_create_boxes with
 * the code's own boxes (remainder on the last rank), tessera_decomp_check_box, and
 * per-edge policies (walls the model owns: TESSERA_EDGE_NONE; a mirrored, negated wall),
 * and a checkpoint of a halo field saved from the code's boxes and loaded into tessera's
 * row-major latitude bands (every cell exact). The first argument is a scratch folder.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

enum { NLAT = 12, NLON = 16, LEVELS = 2 };
static const double kSentinel = -7.0;

/* A value naming (level, global lat, global lon). */
static double encode(int64_t level, int64_t i, int64_t j) { return 1.0 + level * 1.0e6 + i * 1000.0 + j; }

/* The code's own arithmetic: `parts` blocks of n, the remainder on the last block (when
 * last_takes_rest) or one extra on the first n % parts blocks. */
static void block(int64_t n, int parts, int index, int last_takes_rest, int64_t* start, int64_t* count) {
  const int64_t base = n / parts, extra = n % parts;
  if (last_takes_rest) {
    *start = index * base;
    *count = index == parts - 1 ? n - (parts - 1) * base : base;
  } else {
    *start = index * base + (index < extra ? index : extra);
    *count = base + (index < extra ? 1 : 0);
  }
}

typedef struct {
  int64_t lat_start, lat_count, lon_start, lon_count;
} box_t;

/* The halo rule of these tests: periodic longitude; beyond the north edge `north`, the
 * south edge `south` (TESSERA_EDGE_POLE: zero). Returns the value cell (i, j) must hold. */
static double want(int64_t level, int64_t i, int64_t j, tessera_edge_t north, tessera_edge_t south) {
  const int64_t jj = ((j % NLON) + NLON) % NLON;
  if (i >= 0 && i < NLAT) return encode(level, i, jj);
  const tessera_edge_t edge = i < 0 ? north : south;
  if (edge == TESSERA_EDGE_NONE) return kSentinel;
  if (edge == TESSERA_EDGE_MIRROR_ODD) return -encode(level, i < 0 ? -1 - i : 2 * NLAT - 1 - i, jj);
  return 0.0;
}

/* Fills this rank's padded field, exchanges, counts the wrong cells. */
static int exchange_and_count(tessera_halo_t* halo, box_t box, tessera_edge_t north, tessera_edge_t south) {
  const int64_t pl = box.lat_count + 2, pn = box.lon_count + 2;
  double* field = malloc(sizeof(double) * LEVELS * pl * pn);
  for (int64_t l = 0; l < LEVELS; ++l)
    for (int64_t a = 0; a < pl; ++a)
      for (int64_t b = 0; b < pn; ++b) {
        const int64_t i = box.lat_start - 1 + a, j = box.lon_start - 1 + b;
        const int inside = a >= 1 && a <= box.lat_count && b >= 1 && b <= box.lon_count;
        field[(l * pl + a) * pn + b] = inside ? encode(l, i, j) : kSentinel;
      }
  const int64_t shape[3] = {LEVELS, pl, pn};
  CHECK(tessera_halo_add_field(halo, field, TESSERA_F64, TESSERA_ORDER_C, 3, shape, NULL) == TESSERA_OK, "add field");
  CHECK(tessera_halo_exchange(halo) == TESSERA_OK, "exchange");
  int wrong = 0;
  for (int64_t l = 0; l < LEVELS; ++l)
    for (int64_t a = 0; a < pl; ++a)
      for (int64_t b = 0; b < pn; ++b) {
        const int64_t i = box.lat_start - 1 + a, j = box.lon_start - 1 + b;
        if (field[(l * pl + a) * pn + b] != want(l, i, j, north, south)) ++wrong;
      }
  free(field);
  return wrong;
}

static box_t box_of(const tessera_decomp_t* d) {
  box_t b;
  CHECK(tessera_decomp_box(d, &b.lat_start, &b.lat_count, &b.lon_start, &b.lon_count) == TESSERA_OK, "box");
  return b;
}

static int halo_check(const tessera_decomp_t* d, box_t expected, const char* what) {
  const box_t b = box_of(d);
  CHECK(memcmp(&b, &expected, sizeof b) == 0, "%s: box lat [%lld +%lld) lon [%lld +%lld)", what,
        (long long)b.lat_start, (long long)b.lat_count, (long long)b.lon_start, (long long)b.lon_count);
  tessera_halo_t* halo = NULL;
  CHECK(tessera_halo_create(d, 1, 1, 1, 1, 1, TESSERA_POLE_ZERO, &halo) == TESSERA_OK, "%s: halo", what);
  const int wrong = exchange_and_count(halo, b, TESSERA_EDGE_POLE, TESSERA_EDGE_POLE);
  CHECK(wrong == 0, "%s: %d wrong halo cells", what, wrong);
  tessera_halo_destroy(&halo);
  return wrong;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int dims[2] = {0, 0}, periods[2] = {1, 0}; /* {lon, lat}: periodic in longitude */
  MPI_Dims_create(size, 2, dims);
  MPI_Comm cart;
  MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
  MPI_Comm_rank(cart, &rank);
  int coords[2];
  MPI_Cart_coords(cart, rank, 2, coords); /* (lon block, lat block) */
  box_t mine;
  block(NLAT, dims[1], coords[1], 0, &mine.lat_start, &mine.lat_count);
  block(NLON, dims[0], coords[0], 0, &mine.lon_start, &mine.lon_count);

  /* 1. The old call with the code's grid: an error on every rank, or correct halos. */
  tessera_decomp_t* d = NULL;
  const int rc = tessera_decomp_create(cart, NLAT, NLON, dims[1], dims[0], &d);
  int rcs[2] = {rc, -rc}, extremes[2];
  MPI_Allreduce(rcs, extremes, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(extremes[0] == -extremes[1], "tessera_decomp_create returned different codes on different ranks");
  if (rc == TESSERA_OK) {
    halo_check(d, mine, "tessera_decomp_create on the Cartesian communicator");
    tessera_decomp_destroy(&d);
  } else {
    CHECK(rc == TESSERA_ERR_INVALID_ARGUMENT, "rc %d", rc);
    CHECK(strstr(tessera_last_error(), "(lon, lat)") != NULL, "the refusal names both orders");
    CHECK(dims[0] == dims[1], "refused a grid whose order it can read");
  }

  /* 2. The communicator as it is. */
  CHECK(tessera_decomp_create_cart(cart, NLAT, NLON, TESSERA_CART_LON_LAT, TESSERA_SPLIT_FIRST_RANKS, &d) ==
            TESSERA_OK, "create_cart");
  CHECK(tessera_decomp_check_box(d, mine.lat_start, mine.lat_count, mine.lon_start, mine.lon_count) == TESSERA_OK,
        "check_box");
  int plat = -2, plon = -2;
  CHECK(tessera_decomp_periodic(d, &plat, &plon) == TESSERA_OK && plat == 0 && plon == 1, "periodic %d %d", plat, plon);
  halo_check(d, mine, "tessera_decomp_create_cart");
  {
    /* Walls the model owns at the north edge, a mirrored odd wall at the south one. */
    tessera_halo_t* halo = NULL;
    CHECK(tessera_halo_create_edges(d, 1, 1, 1, 1, TESSERA_EDGE_NONE, TESSERA_EDGE_MIRROR_ODD, TESSERA_EDGE_PERIODIC,
                                    TESSERA_EDGE_PERIODIC, TESSERA_POLE_ZERO, &halo) == TESSERA_OK, "edges");
    const int wrong = exchange_and_count(halo, mine, TESSERA_EDGE_NONE, TESSERA_EDGE_MIRROR_ODD);
    CHECK(wrong == 0, "edges: %d wrong halo cells", wrong);
    tessera_halo_destroy(&halo);
    /* A periodic longitude contradicted by a zero west edge: refused on every rank. */
    CHECK(tessera_halo_create_edges(d, 1, 1, 1, 1, TESSERA_EDGE_ZERO, TESSERA_EDGE_ZERO, TESSERA_EDGE_ZERO,
                                    TESSERA_EDGE_ZERO, TESSERA_POLE_ZERO, &halo) == TESSERA_ERR_INVALID_ARGUMENT,
          "a halo contradicting the communicator's periods");
    CHECK(strstr(tessera_last_error(), "periods") != NULL, "names the periods");
    CHECK(tessera_halo_create_edges(d, 1, 1, 1, 1, TESSERA_EDGE_ZERO, TESSERA_EDGE_ZERO, TESSERA_EDGE_POLE,
                                    TESSERA_EDGE_PERIODIC, TESSERA_POLE_ZERO, &halo) == TESSERA_ERR_INVALID_ARGUMENT,
          "TESSERA_EDGE_POLE on the west edge");
  }
  tessera_decomp_destroy(&d);

  /* 3. The code's own boxes, remainder on the last rank, in the Cartesian rank order. */
  box_t last;
  block(NLAT, dims[1], coords[1], 1, &last.lat_start, &last.lat_count);
  block(NLON, dims[0], coords[0], 1, &last.lon_start, &last.lon_count);
  CHECK(tessera_decomp_create_boxes(cart, NLAT, NLON, last.lat_start, last.lat_count, last.lon_start, last.lon_count,
                                    &d) == TESSERA_OK, "create_boxes");
  halo_check(d, last, "tessera_decomp_create_boxes");
  /* One rank that thinks otherwise: an error on every rank, naming it. */
  const int64_t off = rank == size - 1 ? 1 : 0;
  CHECK(tessera_decomp_check_box(d, last.lat_start, last.lat_count - off, last.lon_start, last.lon_count) ==
            TESSERA_ERR_INVALID_ARGUMENT,
        "check_box with one wrong box");
  tessera_decomp_destroy(&d);

  /* 4. A restart across layouts: saved from the code's boxes, loaded into latitude bands. */
  if (argc > 1) {
    char root[4096];
    snprintf(root, sizeof root, "%s/cart_restart_np%d", argv[1], size); /* runs at several sizes may overlap */
    tessera_mesh_t* mesh = NULL;
    CHECK(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, size, &mesh) == TESSERA_OK, "mesh");
    tessera_decomp_t* bands = NULL;
    tessera_halo_t *save_halo = NULL, *load_halo = NULL;
    CHECK(tessera_decomp_create_boxes(cart, NLAT, NLON, last.lat_start, last.lat_count, last.lon_start, last.lon_count,
                                      &d) == TESSERA_OK, "boxes again");
    CHECK(tessera_decomp_create(MPI_COMM_WORLD, NLAT, NLON, 0, 0, &bands) == TESSERA_OK, "bands");
    CHECK(tessera_halo_create(d, 1, 1, 1, 1, 1, TESSERA_POLE_ZERO, &save_halo) == TESSERA_OK, "save halo");
    CHECK(tessera_halo_create(bands, 1, 1, 1, 1, 1, TESSERA_POLE_ZERO, &load_halo) == TESSERA_OK, "load halo");
    const box_t band = box_of(bands);
    const int64_t save_shape[3] = {LEVELS, last.lat_count + 2, last.lon_count + 2};
    const int64_t load_shape[3] = {LEVELS, band.lat_count + 2, band.lon_count + 2};
    double* saved = calloc((size_t)(save_shape[0] * save_shape[1] * save_shape[2]), sizeof(double));
    double* loaded = calloc((size_t)(load_shape[0] * load_shape[1] * load_shape[2]), sizeof(double));
    for (int64_t l = 0; l < LEVELS; ++l)
      for (int64_t a = 0; a < last.lat_count; ++a)
        for (int64_t b = 0; b < last.lon_count; ++b)
          saved[(l * save_shape[1] + a + 1) * save_shape[2] + b + 1] = encode(l, last.lat_start + a, last.lon_start + b);
    tessera_checkpoint_t* ck = NULL;
    CHECK(tessera_checkpoint_begin_save(mesh, root, 3, TESSERA_LAYOUT_SHARED, &ck) == TESSERA_OK, "begin_save");
    CHECK(tessera_checkpoint_add_halo_field(ck, "h", save_halo, saved, TESSERA_F64, TESSERA_ORDER_C, 3, save_shape) ==
              TESSERA_OK, "add (save)");
    CHECK(tessera_checkpoint_commit(ck) == TESSERA_OK, "commit (save)");
    tessera_checkpoint_destroy(&ck);
    CHECK(tessera_checkpoint_begin_load(mesh, root, &ck) == TESSERA_OK, "begin_load");
    CHECK(tessera_checkpoint_add_halo_field(ck, "h", load_halo, loaded, TESSERA_F64, TESSERA_ORDER_C, 3, load_shape) ==
              TESSERA_OK, "add (load)");
    CHECK(tessera_checkpoint_commit(ck) == TESSERA_OK, "commit (load)");
    tessera_checkpoint_destroy(&ck);
    int wrong = 0;
    for (int64_t l = 0; l < LEVELS; ++l)
      for (int64_t a = 0; a < band.lat_count; ++a)
        for (int64_t b = 0; b < band.lon_count; ++b)
          if (loaded[(l * load_shape[1] + a + 1) * load_shape[2] + b + 1] !=
              encode(l, band.lat_start + a, band.lon_start + b))
            ++wrong;
    CHECK(wrong == 0, "restart across layouts: %d wrong cells", wrong);
    free(saved);
    free(loaded);
    tessera_halo_destroy(&save_halo);
    tessera_halo_destroy(&load_halo);
    tessera_decomp_destroy(&bands);
    tessera_decomp_destroy(&d);
    tessera_mesh_destroy(&mesh);
  }

  /* 5. Overlapping boxes: an argument error on every rank (not an internal one). */
  if (size > 1) {
    const int rc_overlap = tessera_decomp_create_boxes(cart, NLAT, NLON, 0, NLAT, 0, NLON, &d);
    CHECK(rc_overlap == TESSERA_ERR_INVALID_ARGUMENT, "overlap rc %d", rc_overlap);
    CHECK(strstr(tessera_last_error(), "overlap") != NULL, "names the overlap");
  }

  MPI_Comm_free(&cart);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
