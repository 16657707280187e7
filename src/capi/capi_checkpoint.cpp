// C API: checkpoints of caller-owned named arrays (a climate code's restart).
//
// Each added array becomes a Parameter whose value is a view of the caller's memory
// (no copy, and no gradient is allocated); commit hands the list to save_checkpoint or
// load_checkpoint, so the file format, atomic commit, checksums and resharding are the
// library's own.

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>

#include "capi/capi_internal.hpp"
#include "tessera/agree.hpp"
#include "tessera/detail/checked_math.hpp"

using namespace tessera;
using tessera::capi::guarded;
using tessera::capi::require;

namespace {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// "dp: Replicate, tp: Shard(0), domain: Shard(1)"; Shard(d) counts declared dims (from 0
// for C order, from 1 for Fortran order) and comes back as a dim of the C-order view.
MeshPlacement parse_placement(const char* text, int order, int ndim, const std::string& what) {
  MeshPlacement placement;
  if (text == nullptr) return placement;
  const std::string all = text;
  std::set<std::string> seen;
  std::size_t begin = 0;
  while (begin <= all.size()) {
    std::size_t end = all.find(',', begin);
    if (end == std::string::npos) end = all.size();
    const std::string item = trim(all.substr(begin, end - begin));
    begin = end + 1;
    if (item.empty()) {
      if (end == all.size()) break;
      throw InvalidArgument(what + ": placement '" + all + "' has an empty item");
    }
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      throw InvalidArgument(what + ": placement item '" + item + "' is not '<dp|tp|domain>: <Replicate|Shard(d)>'");
    }
    const std::string key = trim(item.substr(0, colon));
    MeshDim dim;
    if (key == "dp") {
      dim = MeshDim::dp;
    } else if (key == "tp") {
      dim = MeshDim::tp;
    } else if (key == "domain") {
      dim = MeshDim::domain;
    } else {
      throw InvalidArgument(what + ": placement key '" + key + "' is not dp, tp or domain");
    }
    if (!seen.insert(key).second) throw InvalidArgument(what + ": placement names '" + key + "' twice");
    Placement p = Placement::parse(trim(item.substr(colon + 1)), what + ": placement of " + key);
    if (p.is_shard()) {
      const int first = order == TESSERA_ORDER_FORTRAN ? 1 : 0;
      if (p.dim < first || p.dim >= ndim + first) {
        throw InvalidArgument(what + ": placement " + key + ": Shard(" + std::to_string(p.dim) +
                              ") names no dim of a " + std::to_string(ndim) + "-d array (dims count from " +
                              std::to_string(first) + " in this order)");
      }
      if (order == TESSERA_ORDER_FORTRAN) p.dim = ndim - p.dim;
    }
    placement[dim] = p;
  }
  return placement;
}

tessera_checkpoint_t& checkpoint_of(tessera_checkpoint_t* c) {
  require(c, "the checkpoint handle");
  if (!c->mesh) throw InvalidArgument("the checkpoint handle is not initialised");
  return *c;
}

const tessera_checkpoint_t& checkpoint_of(const tessera_checkpoint_t* c) {
  return checkpoint_of(const_cast<tessera_checkpoint_t*>(c));
}

std::string check_name(tessera_checkpoint_t& c, const char* name) {
  require(name, "the array name");
  const std::string n = name;
  if (n.empty() || n.find('/') != std::string::npos || n == "." || n == "..") {
    throw InvalidArgument("array name '" + n + "' is empty or not a valid HDF5 link name (no '/')");
  }
  for (const auto& [existing, p] : c.named) {
    if (existing == n) throw InvalidArgument("array '" + n + "' was already added to this checkpoint");
  }
  if (c.committed) throw InvalidArgument("array '" + n + "': the checkpoint was already committed");
  return n;
}

void add(tessera_checkpoint_t& c, const std::string& name, Tensor value, Shape global, Shape offset,
         MeshPlacement placement) {
  const std::string what = "array '" + name + "'";
  const Shape& local = value.shape();
  if (global.size() != local.size() || offset.size() != local.size()) {
    throw ShapeError(what + ": global shape, local offset and local shape differ in rank");
  }
  for (std::size_t d = 0; d < local.size(); ++d) {
    if (global[d] < 0 || offset[d] < 0 ||
        detail::checked_add(offset[d], local[d], what + ": local offset + local extent of dim " + std::to_string(d)) >
            global[d]) {
      throw ShapeError(what + ": local block " + capi::caller_shape(local) + " at " +
                       (capi::caller_is_fortran() ? "first index " : "offset ") + capi::caller_offset(offset) +
                       " lies outside the global shape " + capi::caller_shape(global));
    }
  }
  // The file holds the global array: its element and byte counts must fit as well.
  detail::checked_bytes(detail::checked_numel(global, what + ": global shape"), value.element_size(),
                        what + ": global shape " + capi::caller_shape(global));
  // Members set directly: the Parameter constructor would allocate a gradient as large
  // as the array, which a restart never needs.
  auto p = std::make_unique<Parameter>();
  p->value = std::move(value);
  p->global_shape = std::move(global);
  p->placement = placement;
  p->local_offset = std::move(offset);
  c.named.emplace_back(name, p.get());
  c.arrays.push_back(std::move(p));
}

// The interior of a padded halo field (tessera's view, any strides) as a block of the
// global field: global shape (leading..., nlat, nlon), offset and placement (domain:
// Shard(lat)) come from the decomposition of the plan `ex`: the cells' or, for a field
// on faces, the faces' (global nlat + 1 latitude faces, each rank's owned ones), so the
// file holds the global face array whatever the decomposition that wrote it.
void add_halo_field(tessera_checkpoint_t& c, const std::string& name, const domain::HaloExchange& ex, const Tensor& padded) {
  capi::check_padded(ex, padded, "array '" + name + "'");
  const domain::Decomposition& d = ex.decomposition();
  const domain::LocalBox box = d.box();
  Shape global = padded.shape(), offset(padded.shape().size(), 0);
  global[global.size() - 2] = d.global_lat();
  global[global.size() - 1] = d.global_lon();
  offset[offset.size() - 2] = box.lat.start;
  offset[offset.size() - 1] = box.lon.start;
  MeshPlacement placement;
  placement.domain = Placement::shard(static_cast<int>(global.size()) - 2);
  add(c, name, ex.interior(padded), std::move(global), std::move(offset), placement);
}

// guarded() for an add call: a failure is also counted on the checkpoint, so that a
// commit refusing an empty checkpoint can say why it is empty.
template <class Body>
int guarded_add(const char* function, tessera_checkpoint_t* checkpoint, const char* name, Body&& body) {
  return guarded(function, [&] {
    try {
      body();
    } catch (const Error& e) {
      if (checkpoint != nullptr && checkpoint->mesh && checkpoint->failed_adds++ == 0) {
        checkpoint->first_failed_add = "'" + std::string(name != nullptr ? name : "(null)") + "': " + e.what();
      }
      throw;
    }
  });
}

// The body of the four tessera_checkpoint_add_halo_field* entries: the plan is the
// cells' or, given a stagger, that stagger's; `view(what)` wraps the caller's padded array.
template <class View>
int add_halo_field_entry(const char* function, tessera_checkpoint_t* checkpoint, const char* name,
                         const tessera_halo_t* halo, std::optional<tessera_stagger_t> stagger, View&& view) {
  return guarded_add(function, checkpoint, name, [&] {
    tessera_checkpoint_t& c = checkpoint_of(checkpoint);
    const std::string n = check_name(c, name);
    add_halo_field(c, n, stagger ? capi::staggered_exchange_of(halo, *stagger) : capi::exchange_of(halo),
                   view("array '" + n + "'"));
  });
}

void begin(const tessera_mesh_t* mesh, tessera_checkpoint_t** out, bool save, const char* path) {
  require(out, "the output handle pointer");
  *out = nullptr;
  require(mesh, "the mesh handle");
  if (!mesh->mesh) throw InvalidArgument("the mesh handle is not initialised");
  require(path, save ? "the root directory" : "the checkpoint path");
  if (*path == '\0') throw InvalidArgument(save ? "the root directory is empty" : "the checkpoint path is empty");
  auto handle = std::make_unique<tessera_checkpoint>();
  handle->mesh = mesh->mesh;
  handle->save = save;
  handle->path = path;
  *out = handle.release();
}

}  // namespace

extern "C" {

int tessera_checkpoint_begin_save(const tessera_mesh_t* mesh, const char* root_dir, int64_t step,
                                  tessera_layout_t layout, tessera_checkpoint_t** checkpoint) {
  return guarded("tessera_checkpoint_begin_save", [&] {
    if (step < 0) throw InvalidArgument("step " + std::to_string(step) + " is negative");
    if (layout != TESSERA_LAYOUT_SHARED && layout != TESSERA_LAYOUT_PER_RANK) {
      throw InvalidArgument("layout " + std::to_string(layout) +
                            " is not TESSERA_LAYOUT_SHARED (0) or TESSERA_LAYOUT_PER_RANK (1)");
    }
    begin(mesh, checkpoint, true, root_dir);
    (*checkpoint)->save_options.step = step;
    (*checkpoint)->save_options.layout =
        layout == TESSERA_LAYOUT_PER_RANK ? io::CheckpointLayout::per_rank : io::CheckpointLayout::shared;
  });
}

int tessera_checkpoint_begin_load(const tessera_mesh_t* mesh, const char* path, tessera_checkpoint_t** checkpoint) {
  return guarded("tessera_checkpoint_begin_load", [&] { begin(mesh, checkpoint, false, path); });
}

int tessera_checkpoint_set_metadata(tessera_checkpoint_t* checkpoint, const char* metadata) {
  return guarded("tessera_checkpoint_set_metadata", [&] {
    checkpoint_of(checkpoint).save_options.metadata = require(metadata, "metadata");
  });
}

int tessera_checkpoint_set_keep_last(tessera_checkpoint_t* checkpoint, int keep_last) {
  return guarded("tessera_checkpoint_set_keep_last", [&] {
    tessera_checkpoint_t& c = checkpoint_of(checkpoint);
    if (keep_last < 0) throw InvalidArgument("keep_last " + std::to_string(keep_last) + " is negative");
    c.save_options.keep_last = keep_last;
  });
}

int tessera_checkpoint_set_strict(tessera_checkpoint_t* checkpoint, int strict) {
  return guarded("tessera_checkpoint_set_strict",
                 [&] { checkpoint_of(checkpoint).load_options.strict = strict != 0; });
}

int tessera_checkpoint_add_array(tessera_checkpoint_t* checkpoint, const char* name, void* data,
                                 tessera_dtype_t dtype, tessera_order_t order, int ndim, const int64_t* global_shape,
                                 const int64_t* local_offset, const int64_t* local_shape, const char* placement) {
  return guarded_add("tessera_checkpoint_add_array", checkpoint, name, [&] {
    tessera_checkpoint_t& c = checkpoint_of(checkpoint);
    const std::string n = check_name(c, name);
    const std::string what = "array '" + n + "'";
    Tensor value = capi::array_view(data, dtype, order, ndim, local_shape, what);
    require(global_shape, "the global shape pointer");
    require(local_offset, "the local offset pointer");
    Shape global(global_shape, global_shape + ndim), offset(local_offset, local_offset + ndim);
    if (order == TESSERA_ORDER_FORTRAN) {
      std::reverse(global.begin(), global.end());
      std::reverse(offset.begin(), offset.end());
    }
    add(c, n, std::move(value), std::move(global), std::move(offset), parse_placement(placement, order, ndim, what));
  });
}

int tessera_checkpoint_add_halo_field(tessera_checkpoint_t* checkpoint, const char* name, const tessera_halo_t* halo,
                                      void* field, tessera_dtype_t dtype, tessera_order_t order, int ndim,
                                      const int64_t* shape) {
  return add_halo_field_entry("tessera_checkpoint_add_halo_field", checkpoint, name, halo, std::nullopt,
                              [&](const std::string& what) {
                                return capi::array_view(field, dtype, order, ndim, shape, what);
                              });
}

int tessera_checkpoint_add_halo_field_strided(tessera_checkpoint_t* checkpoint, const char* name,
                                              const tessera_halo_t* halo, void* field, tessera_dtype_t dtype,
                                              int ndim, const int64_t* shape, const int64_t* strides) {
  return add_halo_field_entry("tessera_checkpoint_add_halo_field_strided", checkpoint, name, halo, std::nullopt,
                              [&](const std::string& what) {
                                return capi::strided_view(field, dtype, ndim, shape, strides, what);
                              });
}

int tessera_checkpoint_add_halo_field_staggered(tessera_checkpoint_t* checkpoint, const char* name,
                                                const tessera_halo_t* halo, void* field, tessera_dtype_t dtype,
                                                tessera_order_t order, int ndim, const int64_t* shape,
                                                tessera_stagger_t stagger) {
  return add_halo_field_entry("tessera_checkpoint_add_halo_field_staggered", checkpoint, name, halo, stagger,
                              [&](const std::string& what) {
                                return capi::array_view(field, dtype, order, ndim, shape, what);
                              });
}

int tessera_checkpoint_add_halo_field_staggered_strided(tessera_checkpoint_t* checkpoint, const char* name,
                                                        const tessera_halo_t* halo, void* field,
                                                        tessera_dtype_t dtype, int ndim, const int64_t* shape,
                                                        const int64_t* strides, tessera_stagger_t stagger) {
  return add_halo_field_entry("tessera_checkpoint_add_halo_field_staggered_strided", checkpoint, name, halo, stagger,
                              [&](const std::string& what) {
                                return capi::strided_view(field, dtype, ndim, shape, strides, what);
                              });
}

int tessera_checkpoint_commit(tessera_checkpoint_t* checkpoint) {
  return guarded("tessera_checkpoint_commit", [&] {
    tessera_checkpoint_t& c = checkpoint_of(checkpoint);
    if (c.committed) throw InvalidArgument("the checkpoint was already committed");
    // A saved checkpoint without a single array (every add failed, or none was made)
    // would still be committed and move `latest` over the previous step: every rank
    // refuses, before anything is written. (A failed add returned its own error.)
    agree_on_success(c.mesh->world().mpi_comm(), [&] {
      if (c.save && c.named.empty()) {
        throw InvalidArgument(std::string("no array was added to this checkpoint") +
                              (c.failed_adds > 0 ? " (" + std::to_string(c.failed_adds) +
                                                       " add call(s) failed; the first: " + c.first_failed_add + ")"
                                                 : std::string()) +
                              "; nothing was written");
      }
    });
    if (c.save) {
      io::save_checkpoint(c.path, *c.mesh, c.named, nullptr, c.save_options);
    } else {
      io::LoadOptions options = c.load_options;
      // A Fortran caller reads the shapes in the load's messages as it declared its
      // arrays: (lon, lat, ...), the reverse of tessera's view.
      if (capi::caller_is_fortran()) options.describe_shape = capi::caller_shape;
      const io::LoadResult r = io::load_checkpoint(c.path, *c.mesh, c.named, nullptr, options);
      c.loaded_step = r.step;
      c.loaded_metadata = r.metadata;
    }
    c.committed = true;
  });
}

int tessera_checkpoint_step(const tessera_checkpoint_t* checkpoint, int64_t* step) {
  return guarded("tessera_checkpoint_step", [&] {
    const tessera_checkpoint_t& c = checkpoint_of(checkpoint);
    require(step, "step");
    if (!c.save && !c.committed) throw InvalidArgument("the step of a load is known only after commit");
    *step = c.save ? c.save_options.step : c.loaded_step;
  });
}

int tessera_checkpoint_metadata(const tessera_checkpoint_t* checkpoint, const char** metadata) {
  return guarded("tessera_checkpoint_metadata", [&] {
    const tessera_checkpoint_t& c = checkpoint_of(checkpoint);
    require(metadata, "metadata");
    *metadata = c.save ? c.save_options.metadata.c_str() : c.loaded_metadata.c_str();
  });
}

int tessera_checkpoint_destroy(tessera_checkpoint_t** checkpoint) {
  return guarded("tessera_checkpoint_destroy", [&] {
    require(checkpoint, "the pointer to the checkpoint handle");
    std::unique_ptr<tessera_checkpoint> owned(*checkpoint);
    *checkpoint = nullptr;
  });
}

}  // extern "C"
