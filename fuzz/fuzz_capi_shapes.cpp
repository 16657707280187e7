// libFuzzer target: the C API functions that take shapes, strides, offsets, extents and
// counts (include/tessera/tessera.h), driven by a little op language decoded from the
// bytes, on MPI_COMM_SELF: mesh create (and from a YAML file), decomposition create and
// its queries, halo create, field registration (C/Fortran order and strided), exchanges
// (forward, adjoint, split), scatter/gather through the decomposition and the halo, and
// checkpoint save/load of caller arrays and halo fields.
//
// Contract checked (tessera.h, "Conventions"):
//  - no crash, no sanitizer report (ASan sees every caller array as an exact-size heap
//    block, so any access outside what the call's arguments describe is reported);
//  - every status is one of tessera_status_t, a failure leaves a message, and
//    TESSERA_ERR_INTERNAL ("a tessera bug, or out of memory") is only ever out of memory;
//  - what the API accepts is consistent: a registered field whose byte span does not fit
//    in int64, or whose lat/lon extents are not the padded ones, a checkpoint array whose
//    block lies outside its global shape -- accepted -- is a finding.
//
// Input format: a sequence of ops, each an opcode byte followed by its arguments; an
// integer argument is a selector byte (small value, 16-bit, special value such as
// INT_MAX / INT64_MIN, or a raw 64-bit value; see Input::i64). Missing bytes read as 0.
// fuzz/corpus/fuzz_capi_shapes/ holds hand-written seeds (fuzz/make_capi_seeds.py).
//
// Bounds of the harness (not of the library): caller arrays larger than kMaxBytes are
// not allocated; a field or array described by such a shape is registered with a small
// stand-in buffer and then no call that would touch its memory (exchange, commit,
// scatter/gather) is made while it is registered. Commits are skipped for global arrays
// over kMaxBytes (a legitimately huge checkpoint file).

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "tessera/tessera.h"

namespace fs = std::filesystem;
using tessera::fuzz::Input;

namespace {

constexpr std::int64_t kMaxBytes = std::int64_t{1} << 20;
constexpr int kMaxOps = 48;
constexpr int kMaxArgDims = 16;  // shape arrays the harness passes hold min(ndim, 16) entries

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_capi_shapes: FINDING: %s\n", what.c_str());
  std::abort();
}

// ---- caller arrays ---------------------------------------------------------------------
// An exact-size heap block (so ASan reports the first byte outside it) or, for shapes
// the harness will not allocate, a small stand-in marked invalid.
struct Array {
  std::unique_ptr<unsigned char[]> bytes;
  std::int64_t size = 0;
  bool valid = false;
  void* data() { return bytes.get(); }
};

// Element span of a view in elements: exact, or -1 when it does not fit in int64.
struct Span {
  __int128 elements = 0;
  bool negative = false;  // some extent (or stride) < 0: the library must reject it
};

Span span_of(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>* strides) {
  Span s;
  bool empty = false;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0 || (strides && (*strides)[d] < 0)) s.negative = true;
    if (shape[d] == 0) empty = true;
  }
  if (s.negative || empty) return s;
  constexpr __int128 cap = static_cast<__int128>(1) << 100;
  if (strides == nullptr) {
    __int128 n = 1;
    for (std::int64_t e : shape) n = n > cap / e ? cap : n * e;  // e >= 1 here
    s.elements = n;
  } else {
    __int128 n = 1;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      n += static_cast<__int128>(shape[d] - 1) * (*strides)[d];
      if (n > cap) n = cap;
    }
    s.elements = n;
  }
  return s;
}

int elem_size(int dtype) { return dtype == TESSERA_F32 ? 4 : 8; }

std::unique_ptr<Array> make_array(const Span& span, int dtype, bool null_data) {
  auto a = std::make_unique<Array>();
  if (null_data) return a;
  const __int128 bytes = span.elements * elem_size(dtype);
  if (!span.negative && bytes <= kMaxBytes) {
    a->size = static_cast<std::int64_t>(bytes);
    a->bytes.reset(new unsigned char[static_cast<std::size_t>(a->size > 0 ? a->size : 1)]);
    std::memset(a->bytes.get(), 0, static_cast<std::size_t>(a->size > 0 ? a->size : 1));
    a->valid = true;
  } else {
    a->size = 64;
    a->bytes.reset(new unsigned char[64]());
  }
  return a;
}

bool overflows_int64_bytes(const Span& span, int dtype) {
  return !span.negative && span.elements * elem_size(dtype) > std::numeric_limits<std::int64_t>::max();
}

// ---- the session: handles and the arrays registered with them ---------------------------
struct Session {
  tessera_mesh_t* mesh = nullptr;
  tessera_decomp_t* decomp = nullptr;
  tessera_halo_t* halo = nullptr;
  tessera_checkpoint_t* ckpt = nullptr;
  bool ckpt_save = true;
  std::int64_t padded_lat = -1, padded_lon = -1;  // of `halo`
  std::int64_t global_lat = -1, global_lon = -1;  // of `decomp`
  std::vector<std::unique_ptr<Array>> fields;     // registered with `halo`
  std::vector<std::unique_ptr<Array>> arrays;     // added to `ckpt`
  bool ckpt_global_small = true;                  // every added array's global size <= kMaxBytes
  std::string dir;                                // scratch directory of this process

  bool fields_valid() const {
    for (const auto& f : fields) if (!f->valid) return false;
    return true;
  }
  bool arrays_valid() const {
    for (const auto& a : arrays) if (!a->valid) return false;
    return true;
  }

  void drop_halo() {
    check(tessera_halo_destroy(&halo), "tessera_halo_destroy");
    fields.clear();  // after the handle: the memory must outlive the registration
    padded_lat = padded_lon = -1;
  }
  void drop_ckpt() {
    check(tessera_checkpoint_destroy(&ckpt), "tessera_checkpoint_destroy");
    arrays.clear();
    ckpt_global_small = true;
  }
  ~Session() {
    drop_ckpt();
    drop_halo();
    check(tessera_decomp_destroy(&decomp), "tessera_decomp_destroy");
    check(tessera_mesh_destroy(&mesh), "tessera_mesh_destroy");
  }

  // Every status is a tessera_status_t; INTERNAL only for out of memory; a failure says why.
  static int check(int status, const char* function) {
    if (status < TESSERA_OK || status > TESSERA_ERR_INTERNAL) {
      finding(std::string(function) + " returned " + std::to_string(status) + ", not a tessera_status_t");
    }
    if (status != TESSERA_OK) {
      const std::string message = tessera_last_error();
      if (message.empty()) finding(std::string(function) + " failed with an empty tessera_last_error()");
      if (status == TESSERA_ERR_INTERNAL && message.find("out of memory") == std::string::npos) {
        finding(std::string(function) + " returned TESSERA_ERR_INTERNAL: " + message);
      }
    }
    return status;
  }
};

std::vector<std::int64_t> read_dims(Input& in, int ndim) {
  const int n = ndim < 0 ? 0 : (ndim > kMaxArgDims ? kMaxArgDims : ndim);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = in.i64();
  return v;
}

// tessera's C-order view of a declared shape.
std::vector<std::int64_t> logical(std::vector<std::int64_t> shape, int order) {
  if (order == TESSERA_ORDER_FORTRAN) std::reverse(shape.begin(), shape.end());
  return shape;
}

bool valid_dims(int ndim) { return ndim >= 1 && ndim <= TESSERA_MAX_DIMS; }

// ---- ops -------------------------------------------------------------------------------
void op_mesh(Session& s, Input& in) {
  const int data = in.enum_value(3), tensor = in.i32(), domain = in.i32(), dim = in.enum_value(4);
  s.drop_ckpt();
  Session::check(tessera_mesh_destroy(&s.mesh), "tessera_mesh_destroy");
  if (Session::check(tessera_mesh_create(MPI_COMM_SELF, static_cast<tessera_data_mode_t>(data), tensor, domain,
                                         &s.mesh),
                     "tessera_mesh_create") != TESSERA_OK) {
    if (s.mesh != nullptr) finding("tessera_mesh_create failed but set the handle");
    return;
  }
  tessera_data_mode_t d;
  int t = 0, dm = 0;
  Session::check(tessera_mesh_config(s.mesh, &d, &t, &dm), "tessera_mesh_config");
  if (t != tensor || dm != domain) finding("tessera_mesh_config differs from the arguments");
  int rank = -1, size = -1;
  MPI_Comm comm = MPI_COMM_NULL;
  Session::check(tessera_mesh_rank(s.mesh, static_cast<tessera_mesh_dim_t>(dim), &rank), "tessera_mesh_rank");
  Session::check(tessera_mesh_size(s.mesh, static_cast<tessera_mesh_dim_t>(dim), &size), "tessera_mesh_size");
  Session::check(tessera_mesh_comm(s.mesh, static_cast<tessera_mesh_dim_t>(dim), &comm), "tessera_mesh_comm");
}

void op_mesh_from_file(Session& s, Input& in) {
  const std::string yaml = in.text(48);
  const std::string path = s.dir + "/mesh.yaml";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << yaml;
  s.drop_ckpt();
  Session::check(tessera_mesh_destroy(&s.mesh), "tessera_mesh_destroy");
  Session::check(tessera_mesh_create_from_file(MPI_COMM_SELF, path.c_str(), &s.mesh),
                 "tessera_mesh_create_from_file");
}

void op_decomp(Session& s, Input& in) {
  const std::int64_t nlat = in.i64(), nlon = in.i64();
  const int grid_lat = in.i32(), grid_lon = in.i32();
  const bool from_mesh = in.byte() & 1;
  const int box_rank = in.i32();
  s.drop_halo();
  Session::check(tessera_decomp_destroy(&s.decomp), "tessera_decomp_destroy");
  s.global_lat = s.global_lon = -1;
  const int status =
      from_mesh ? Session::check(tessera_decomp_create_from_mesh(s.mesh, nlat, nlon, grid_lat, grid_lon, &s.decomp),
                                 "tessera_decomp_create_from_mesh")
                : Session::check(tessera_decomp_create(MPI_COMM_SELF, nlat, nlon, grid_lat, grid_lon, &s.decomp),
                                 "tessera_decomp_create");
  if (status != TESSERA_OK) return;
  std::int64_t gl = 0, gn = 0, ls = 0, lc = 0, os = 0, oc = 0;
  int rank = 0, size = 0, glat = 0, glon = 0, clat = 0, clon = 0;
  Session::check(tessera_decomp_global(s.decomp, &gl, &gn), "tessera_decomp_global");
  if (gl != nlat || gn != nlon) finding("tessera_decomp_global differs from the arguments");
  s.global_lat = gl;
  s.global_lon = gn;
  Session::check(tessera_decomp_rank(s.decomp, &rank), "tessera_decomp_rank");
  Session::check(tessera_decomp_size(s.decomp, &size), "tessera_decomp_size");
  Session::check(tessera_decomp_grid(s.decomp, &glat, &glon), "tessera_decomp_grid");
  Session::check(tessera_decomp_coords(s.decomp, &clat, &clon), "tessera_decomp_coords");
  if (Session::check(tessera_decomp_box(s.decomp, &ls, &lc, &os, &oc), "tessera_decomp_box") == TESSERA_OK) {
    // One rank owns the whole grid.
    if (size == 1 && (ls != 0 || os != 0 || lc != nlat || oc != nlon)) {
      finding("one-rank decomposition box is not the whole grid: lat " + std::to_string(ls) + "+" +
              std::to_string(lc) + " lon " + std::to_string(os) + "+" + std::to_string(oc));
    }
  }
  Session::check(tessera_decomp_box_of(s.decomp, box_rank, &ls, &lc, &os, &oc), "tessera_decomp_box_of");
}

void op_halo(Session& s, Input& in) {
  const int lb = in.i32(), la = in.i32(), ob = in.i32(), oa = in.i32();
  const int periodic = in.byte() & 1;
  const int pole = in.enum_value(3);
  s.drop_ckpt();
  s.drop_halo();
  // fuzz/findings/fuzz_capi_shapes-halo-width-linear-time: planning a halo of 2^31 rows
  // took minutes (fixed: zero runs in one step, copied halos that wide rejected at once).
  if (Session::check(tessera_halo_create(s.decomp, lb, la, ob, oa, periodic, static_cast<tessera_pole_t>(pole),
                                         &s.halo),
                     "tessera_halo_create") != TESSERA_OK) {
    return;
  }
  Session::check(tessera_halo_padded(s.halo, &s.padded_lat, &s.padded_lon), "tessera_halo_padded");
}

// Checks a field registration the library accepted against what the harness knows.
void accepted_field(Session& s, const std::vector<std::int64_t>& view, const Span& span, int dtype,
                    std::unique_ptr<Array> array, const char* function) {
  if (overflows_int64_bytes(span, dtype)) finding(std::string(function) + " accepted a field whose byte span overflows int64");
  if (view.size() < 2 || view[view.size() - 2] != s.padded_lat || view.back() != s.padded_lon) {
    finding(std::string(function) + " accepted a field whose lat/lon extents are not the padded ones");
  }
  s.fields.push_back(std::move(array));
  int count = -1;
  Session::check(tessera_halo_num_fields(s.halo, &count), "tessera_halo_num_fields");
  if (count != static_cast<int>(s.fields.size())) finding("tessera_halo_num_fields disagrees with the registrations");
}

void op_add_field(Session& s, Input& in) {
  const int dtype = in.enum_value(2), order = in.enum_value(2), ndim = in.ndim();
  const std::vector<std::int64_t> shape = read_dims(in, ndim);
  const bool null_data = in.byte() == 0xff;
  const Span span = span_of(shape, nullptr);
  auto array = make_array(span, dtype, null_data);
  int index = -1;
  if (Session::check(tessera_halo_add_field(s.halo, array->data(), static_cast<tessera_dtype_t>(dtype),
                                            static_cast<tessera_order_t>(order), ndim,
                                            shape.empty() ? nullptr : shape.data(), &index),
                     "tessera_halo_add_field") == TESSERA_OK) {
    if (!valid_dims(ndim)) finding("tessera_halo_add_field accepted ndim " + std::to_string(ndim));
    if (index != static_cast<int>(s.fields.size())) finding("tessera_halo_add_field returned a wrong index");
    accepted_field(s, logical(shape, order), span, dtype, std::move(array), "tessera_halo_add_field");
  }
}

void op_add_field_strided(Session& s, Input& in) {
  const int dtype = in.enum_value(2), ndim = in.ndim();
  const std::vector<std::int64_t> shape = read_dims(in, ndim), strides = read_dims(in, ndim);
  const Span span = span_of(shape, &strides);
  auto array = make_array(span, dtype, false);
  int index = -1;
  if (Session::check(tessera_halo_add_field_strided(s.halo, array->data(), static_cast<tessera_dtype_t>(dtype), ndim,
                                                    shape.empty() ? nullptr : shape.data(),
                                                    strides.empty() ? nullptr : strides.data(), &index),
                     "tessera_halo_add_field_strided") == TESSERA_OK) {
    if (!valid_dims(ndim)) finding("tessera_halo_add_field_strided accepted ndim " + std::to_string(ndim));
    accepted_field(s, shape, span, dtype, std::move(array), "tessera_halo_add_field_strided");
  }
}

void op_exchange(Session& s, Input& in) {
  const int variant = in.byte() % 6;
  if (!s.fields_valid()) return;  // a stand-in buffer is registered: the harness's bound
  switch (variant) {
    case 0: Session::check(tessera_halo_exchange(s.halo), "tessera_halo_exchange"); break;
    case 1: Session::check(tessera_halo_exchange_adjoint(s.halo), "tessera_halo_exchange_adjoint"); break;
    case 2:
      if (Session::check(tessera_halo_start(s.halo), "tessera_halo_start") == TESSERA_OK) {
        int in_flight = 0;
        Session::check(tessera_halo_in_flight(s.halo, &in_flight), "tessera_halo_in_flight");
        if (!in_flight) finding("no exchange in flight after tessera_halo_start");
        // Registering or clearing now must fail, and leave the exchange intact.
        if (Session::check(tessera_halo_clear_fields(s.halo), "tessera_halo_clear_fields") == TESSERA_OK) {
          finding("tessera_halo_clear_fields succeeded during an exchange");
        }
      }
      Session::check(tessera_halo_finish(s.halo), "tessera_halo_finish");
      break;
    case 3:
      Session::check(tessera_halo_start_adjoint(s.halo), "tessera_halo_start_adjoint");
      Session::check(tessera_halo_finish_adjoint(s.halo), "tessera_halo_finish_adjoint");
      break;
    case 4:  // a second start while one is in flight, then finish
      Session::check(tessera_halo_start(s.halo), "tessera_halo_start");
      Session::check(tessera_halo_start(s.halo), "tessera_halo_start");
      Session::check(tessera_halo_exchange(s.halo), "tessera_halo_exchange");
      Session::check(tessera_halo_finish(s.halo), "tessera_halo_finish");
      break;
    default:  // finish without a start
      Session::check(tessera_halo_finish(s.halo), "tessera_halo_finish");
      Session::check(tessera_halo_finish_adjoint(s.halo), "tessera_halo_finish_adjoint");
      break;
  }
}

void op_clear_fields(Session& s, Input&) {
  if (Session::check(tessera_halo_clear_fields(s.halo), "tessera_halo_clear_fields") == TESSERA_OK) s.fields.clear();
}

// Scatter / gather through the decomposition (local = the box) or the halo (local = a
// padded field); `global` is allocated from the harness's reading of the contract.
void op_scatter_gather(Session& s, Input& in) {
  const int variant = in.byte() % 4;  // bit 0: gather; bit 1: through the halo
  const int dtype = in.enum_value(2), order = in.enum_value(2), ndim = in.ndim();
  const std::vector<std::int64_t> shape = read_dims(in, ndim);
  const int root = in.byte() < 0xf0 ? 0 : in.i32();
  const Span local_span = span_of(shape, nullptr);
  auto local = make_array(local_span, dtype, false);
  std::unique_ptr<Array> global;
  if (valid_dims(ndim) && static_cast<int>(shape.size()) == ndim && ndim >= 2 && s.global_lat >= 0) {
    std::vector<std::int64_t> g = logical(shape, order);
    g[g.size() - 2] = s.global_lat;
    g[g.size() - 1] = s.global_lon;
    global = make_array(span_of(g, nullptr), dtype, false);
  }
  if (!local->valid || (global && !global->valid)) return;  // the harness's size bound
  void* gdata = global ? global->data() : nullptr;
  const auto dt = static_cast<tessera_dtype_t>(dtype);
  const auto ord = static_cast<tessera_order_t>(order);
  const std::int64_t* sh = shape.empty() ? nullptr : shape.data();
  const bool gather = variant & 1;
  if (variant & 2) {
    if (gather) {
      Session::check(tessera_halo_gather(s.halo, local->data(), gdata, dt, ord, ndim, sh, root), "tessera_halo_gather");
    } else {
      Session::check(tessera_halo_scatter(s.halo, gdata, local->data(), dt, ord, ndim, sh, root),
                     "tessera_halo_scatter");
    }
  } else if (gather) {
    Session::check(tessera_decomp_gather(s.decomp, local->data(), gdata, dt, ord, ndim, sh, root),
                   "tessera_decomp_gather");
  } else {
    Session::check(tessera_decomp_scatter(s.decomp, gdata, local->data(), dt, ord, ndim, sh, root),
                   "tessera_decomp_scatter");
  }
}

void op_ckpt_begin(Session& s, Input& in) {
  const bool save = !(in.byte() & 1);
  const int layout = in.enum_value(2);
  const std::int64_t step = in.i64();
  s.drop_ckpt();
  s.ckpt_save = save;
  const std::string root = s.dir + "/ckpt";
  if (save) {
    Session::check(tessera_checkpoint_begin_save(s.mesh, root.c_str(), step, static_cast<tessera_layout_t>(layout),
                                                 &s.ckpt),
                   "tessera_checkpoint_begin_save");
    Session::check(tessera_checkpoint_set_keep_last(s.ckpt, 1), "tessera_checkpoint_set_keep_last");
  } else {
    Session::check(tessera_checkpoint_begin_load(s.mesh, root.c_str(), &s.ckpt), "tessera_checkpoint_begin_load");
    Session::check(tessera_checkpoint_set_strict(s.ckpt, in.byte() & 1), "tessera_checkpoint_set_strict");
  }
}

const char* array_name(Input& in) {
  static const char* const names[] = {"a", "b", "c", "t", "u", "", "x/y", ".", "..", "a b", "\xce\xbb", nullptr};
  return names[in.byte() % std::size(names)];
}

const char* placement(Input& in) {
  static const char* const table[] = {
      nullptr, "", "dp: Replicate, tp: Replicate, domain: Replicate", "domain: Shard(0)", "domain: Shard(1)",
      "tp: Shard(0)", "tp: Shard(1), domain: Shard(0)", "domain: Shard(2)", "domain: Shard(7)", "domain: Shard(-1)",
      "tp: Shard(0), tp: Shard(0)", "dp:Replicate,", ",", "domain: Shard(2147483647)", "domain: Shard(64)",
      "pp: Replicate", "domain: Partial", "tp: Shard(0999)", "domain: Shard()", "domain: Shard(1)) ",
      // fuzz/findings/fuzz_capi_shapes-placement-shard-overflow: an int overflow in
      // Placement::parse (fixed).
      "domain: Shard(99999999999)"};
  return table[in.byte() % std::size(table)];
}

void op_ckpt_add_array(Session& s, Input& in) {
  const char* name = array_name(in);
  const int dtype = in.enum_value(2), order = in.enum_value(2), ndim = in.ndim();
  const std::vector<std::int64_t> global = read_dims(in, ndim), offset = read_dims(in, ndim),
                                  local = read_dims(in, ndim);
  const char* place = placement(in);
  const Span span = span_of(local, nullptr);
  auto array = make_array(span, dtype, false);
  if (Session::check(tessera_checkpoint_add_array(s.ckpt, name, array->data(), static_cast<tessera_dtype_t>(dtype),
                                                  static_cast<tessera_order_t>(order), ndim,
                                                  global.empty() ? nullptr : global.data(),
                                                  offset.empty() ? nullptr : offset.data(),
                                                  local.empty() ? nullptr : local.data(), place),
                     "tessera_checkpoint_add_array") != TESSERA_OK) {
    return;
  }
  if (!valid_dims(ndim)) finding("tessera_checkpoint_add_array accepted ndim " + std::to_string(ndim));
  for (int d = 0; d < ndim; ++d) {
    const __int128 end = static_cast<__int128>(offset[d]) + local[d];
    if (offset[d] < 0 || local[d] < 0 || end > global[d]) {
      finding("tessera_checkpoint_add_array accepted a block outside the global shape (dim " + std::to_string(d) + ")");
    }
  }
  const Span g = span_of(global, nullptr);
  if (overflows_int64_bytes(g, dtype)) finding("tessera_checkpoint_add_array accepted a global shape whose bytes overflow int64");
  if (g.elements * elem_size(dtype) > kMaxBytes) s.ckpt_global_small = false;
  s.arrays.push_back(std::move(array));
}

void op_ckpt_add_halo_field(Session& s, Input& in) {
  const char* name = array_name(in);
  const int dtype = in.enum_value(2), order = in.enum_value(2), ndim = in.ndim();
  const std::vector<std::int64_t> shape = read_dims(in, ndim);
  const Span span = span_of(shape, nullptr);
  auto array = make_array(span, dtype, false);
  if (Session::check(tessera_checkpoint_add_halo_field(s.ckpt, name, s.halo, array->data(),
                                                       static_cast<tessera_dtype_t>(dtype),
                                                       static_cast<tessera_order_t>(order), ndim,
                                                       shape.empty() ? nullptr : shape.data()),
                     "tessera_checkpoint_add_halo_field") != TESSERA_OK) {
    return;
  }
  std::vector<std::int64_t> g = logical(shape, order);
  if (g.size() >= 2) {
    g[g.size() - 2] = s.global_lat;
    g[g.size() - 1] = s.global_lon;
  }
  const Span gs = span_of(g, nullptr);
  if (gs.elements * elem_size(dtype) > kMaxBytes) s.ckpt_global_small = false;
  s.arrays.push_back(std::move(array));
}

void op_ckpt_commit(Session& s, Input&) {
  if (!s.arrays_valid() || !s.ckpt_global_small) return;  // the harness's size bounds
  if (Session::check(tessera_checkpoint_commit(s.ckpt), "tessera_checkpoint_commit") == TESSERA_OK) {
    std::int64_t step = 0;
    const char* metadata = nullptr;
    Session::check(tessera_checkpoint_step(s.ckpt, &step), "tessera_checkpoint_step");
    Session::check(tessera_checkpoint_metadata(s.ckpt, &metadata), "tessera_checkpoint_metadata");
    if (metadata == nullptr) finding("tessera_checkpoint_metadata gave NULL after a commit");
  }
}

void op_destroy(Session& s, Input& in) {
  switch (in.byte() % 4) {
    case 0: Session::check(tessera_mesh_destroy(&s.mesh), "tessera_mesh_destroy"); break;  // handles share ownership
    case 1: Session::check(tessera_decomp_destroy(&s.decomp), "tessera_decomp_destroy"); break;
    case 2: s.drop_ckpt(); s.drop_halo(); break;
    default: s.drop_ckpt(); break;
  }
}

using Op = void (*)(Session&, Input&);
constexpr Op kOps[] = {op_mesh,          op_decomp,           op_halo,           op_add_field,
                       op_add_field_strided, op_exchange,     op_clear_fields,   op_scatter_gather,
                       op_ckpt_begin,    op_ckpt_add_array,   op_ckpt_add_halo_field, op_ckpt_commit,
                       op_destroy,       op_mesh_from_file};

// Never destroyed (the exit handler that removes it runs after static destructors).
const std::string& scratch_dir() {
  static const std::string* const dir = [] {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path d = base / ("tessera-fuzz-capi-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return new std::string(d.string());
  }();
  return *dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided);
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(scratch_dir(), ec);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
  scratch_dir();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  {
    Session s;
    s.dir = scratch_dir();
    std::error_code ec;
    fs::remove_all(s.dir + "/ckpt", ec);
    for (int n = 0; n < kMaxOps && !in.done(); ++n) {
      kOps[in.byte() % std::size(kOps)](s, in);
    }
  }
  return 0;
}
