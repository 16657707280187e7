// libFuzzer target: the serial checkpoint reader (include/tessera/io/checkpoint_reader.hpp)
// on hostile files: open (root attributes = the header; the /model and /optimizer index
// of datasets and their dtype/placement/checksum attributes), read every small dataset
// whole and in a block, and verify_checkpoint (checksums; per_rank slice files).
//
// Two input modes:
//  - structured (the default): the bytes describe a checkpoint -- which root attributes
//    exist and with which HDF5 type and value, what the section groups are (groups with or
//    without creation order, missing, datasets, dangling or external links), and each
//    entry (name, dataspace rank and extents, stored type, layout: contiguous, chunked,
//    compact or virtual, data, attributes, optionally a per_rank slice file). The harness
//    writes it with the HDF5 API into checkpoint.h5, so the file is well-formed HDF5 and
//    the fuzzing goes into tessera's reading of it (fuzz/corpus/.../*.bin seeds,
//    fuzz/make_checkpoint_reader_seeds.py).
//  - raw (inputs that start with the HDF5 signature, only when TESSERA_FUZZ_CHECKPOINT_RAW=1):
//    the bytes are the file itself (seeds: real checkpoints written by the library,
//    fuzz/corpus/.../*.h5, from fuzz_make_checkpoint_seeds). This mutates HDF5's own binary
//    structures and mostly exercises HDF5's parser, whose bugs on corrupt files (hangs,
//    crashes) are not tessera's: docs/fuzzing.md lists the ones found. Off by default so
//    that the smoke test is about tessera.
//
// Each structured input also says whether the step directory's MANIFEST lists both
// files (then the reader runs as above), is absent, leaves a file out or was edited
// (then the reader must refuse before HDF5 opens anything, and verify must not pass
// what the reader refuses).
//
// Contract checked: every failure is a tessera::Error (IoError / Hdf5Error / ShapeError
// naming the file or dataset), never a crash, a sanitizer report or another exception
// type; HDF5's automatic error printing is off after the reader ran (tessera turns it
// off, so HDF5 errors surface once, as exceptions); no HDF5 object is left open.
//
// Bound of the harness, not of the library: datasets whose declared size exceeds
// kMaxReadBytes are listed but not read (a legitimate checkpoint may declare any size,
// and reading it allocates that much by design).

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/io/checksum.hpp"

namespace fs = std::filesystem;
using tessera::fuzz::Input;

namespace {

constexpr std::int64_t kMaxReadBytes = std::int64_t{1} << 20;

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_checkpoint_reader: FINDING: %s: %s\n", what, detail.c_str());
  std::abort();
}

// One private directory per process: checkpoint.h5 (the name the reader resolves from a
// step directory) and the per_rank slice file next to it. Never destroyed (the exit
// handler that removes it runs after static destructors).
const std::string& work_dir() {
  static const std::string* const dir = [] {
    const char* shm = "/dev/shm";
    const fs::path base = fs::is_directory(shm) ? fs::path(shm) : fs::temp_directory_path();
    const fs::path d = base / ("tessera-fuzz-ckpt-" + std::to_string(::getpid()));
    fs::create_directories(d);
    auto* s = new std::string(d.string());
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(work_dir(), ec);
    });
    return s;
  }();
  return *dir;
}

// ---- structured mode: write the described checkpoint -----------------------------------
// HDF5 calls here may fail on purpose (a chunk larger than a fixed extent, a compact
// dataset too large): the entry is then simply absent or partial.

const char* const kStrings[] = {"tessera-checkpoint", "shared", "per_rank", "none", "ddp", "fsdp2", "f32", "f64",
                                "bf16", "i64", "", "Replicate", "dp: Replicate, tp: Shard(0), domain: Replicate",
                                "tessera-hashsum64-v1", "AdamW", "SGD", "0.1.0", "tessera-checkpoint\n"};

std::string fuzz_string(Input& in) {
  const std::uint8_t s = in.byte();
  if (s < 0xc0) return kStrings[s % std::size(kStrings)];
  return in.text(40);
}

void set_auto_print(bool on) {
  if (on) {
    H5Eset_auto2(H5E_DEFAULT, reinterpret_cast<H5E_auto2_t>(H5Eprint2), stderr);
  } else {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
}

void attr_write(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, hid_t space, const void* data) {
  const hid_t a = H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (a < 0) return;
  if (data != nullptr) H5Awrite(a, mem_type, data);
  H5Aclose(a);
}

void attr_vlen_string(hid_t obj, const char* name, const std::string& value, bool null_space = false) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  const hid_t space = H5Screate(null_space ? H5S_NULL : H5S_SCALAR);
  const char* p = value.c_str();
  attr_write(obj, name, t, t, space, null_space ? nullptr : &p);
  H5Sclose(space);
  H5Tclose(t);
}

void attr_fixed_string(hid_t obj, const char* name, const std::string& value, std::size_t size) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, size == 0 ? 1 : size);
  const hid_t space = H5Screate(H5S_SCALAR);
  std::string buffer = value;
  buffer.resize(size == 0 ? 1 : size, '\0');
  attr_write(obj, name, t, t, space, buffer.data());
  H5Sclose(space);
  H5Tclose(t);
}

template <class T>
void attr_scalar(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, T value) {
  const hid_t space = H5Screate(H5S_SCALAR);
  attr_write(obj, name, file_type, mem_type, space, &value);
  H5Sclose(space);
}

void attr_int_array(hid_t obj, const char* name, const std::vector<std::int64_t>& values, int rank = 1) {
  hsize_t dims[2] = {values.size(), 1};
  const hid_t space = values.empty() ? H5Screate(H5S_NULL) : H5Screate_simple(rank, dims, nullptr);
  attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, space, values.empty() ? nullptr : values.data());
  H5Sclose(space);
}

enum class AttrKind { string, int64, int_array, uint64 };

// The attribute as the format has it (`good`), most of the time; otherwise a wrong type,
// a wrong value, a null dataspace, or nothing.
void fuzz_attribute(hid_t obj, const char* name, AttrKind kind, const std::string& good_string,
                    std::int64_t good_int, const std::vector<std::int64_t>& good_array, Input& in) {
  const std::uint8_t sel = in.byte();
  if (sel < 0x90) {
    switch (kind) {
      case AttrKind::string: attr_vlen_string(obj, name, good_string); break;
      case AttrKind::int64: attr_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, good_int); break;
      case AttrKind::uint64:
        attr_scalar(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, static_cast<std::uint64_t>(good_int));
        break;
      case AttrKind::int_array: attr_int_array(obj, name, good_array); break;
    }
    return;
  }
  switch (sel % 11) {
    case 0: attr_vlen_string(obj, name, fuzz_string(in)); break;
    case 1: {
      const std::string v = fuzz_string(in);
      attr_fixed_string(obj, name, v, in.byte() % 70);
      break;
    }
    case 2: attr_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, in.i64()); break;
    case 3: attr_scalar(obj, name, H5T_STD_U64BE, H5T_NATIVE_UINT64, static_cast<std::uint64_t>(in.i64())); break;
    case 4: attr_scalar(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, static_cast<double>(in.i64()) / 3.0); break;
    case 5: attr_scalar(obj, name, H5T_STD_I8LE, H5T_NATIVE_INT8, static_cast<std::int8_t>(in.byte())); break;
    case 6: {
      std::vector<std::int64_t> v(in.byte() % 9);
      for (auto& x : v) x = in.i64();
      // Also where the format has a scalar: fuzz/findings/...-int-attribute-array and
      // -uint-attribute-array were stack overflows there (fixed).
      attr_int_array(obj, name, v, (in.byte() & 1) + 1);
      break;
    }
    case 7: break;  // absent
    case 8: attr_vlen_string(obj, name, "", /*null_space=*/true); break;
    case 9: {  // a string array of two
      // fuzz/findings/...-string-attribute-array and -fixed-string-attribute-array were a
      // stack and a heap overflow in read_string_attribute (fixed).
      if (in.byte() & 1) {
        const hid_t ft = H5Tcopy(H5T_C_S1);
        H5Tset_size(ft, 32);  // past std::string's small-buffer size: the buffer is on the heap
        hsize_t two = 2;
        const hid_t space = H5Screate_simple(1, &two, nullptr);
        char text[64] = {};
        std::memcpy(text, "tessera-checkpoint", 18);
        std::memcpy(text + 32, "shared", 6);
        attr_write(obj, name, ft, ft, space, text);
        H5Sclose(space);
        H5Tclose(ft);
        break;
      }
      const hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, H5T_VARIABLE);
      H5Tset_cset(t, H5T_CSET_UTF8);
      hsize_t two = 2;
      const hid_t space = H5Screate_simple(1, &two, nullptr);
      const std::string a = fuzz_string(in), b = fuzz_string(in);
      const char* p[2] = {a.c_str(), b.c_str()};
      attr_write(obj, name, t, t, space, p);
      H5Sclose(space);
      H5Tclose(t);
      break;
    }
    default: attr_scalar(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, static_cast<std::uint64_t>(in.i64())); break;
  }
}

struct StoredType {
  hid_t file, memory;       // predefined types, or -1 for a type built (and closed) by the caller
  const char* dtype_name;   // the matching "dtype" attribute, nullptr when none matches
  tessera::DType dtype;
  std::size_t size;         // bytes per element in memory (0: not written)
};

StoredType stored_type(std::uint8_t sel) {
  using tessera::DType;
  switch (sel % 10) {
    case 0: case 1: return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, "f32", DType::f32, 4};
    case 2: return {H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, "f64", DType::f64, 8};
    case 3: return {H5T_STD_U16LE, H5T_NATIVE_UINT16, "bf16", DType::bf16, 2};
    case 4: return {H5T_STD_I64LE, H5T_NATIVE_INT64, "i64", DType::i64, 8};
    case 5: return {H5T_IEEE_F32BE, H5T_NATIVE_FLOAT, "f32", DType::f32, 4};
    case 6: return {H5T_STD_I32LE, H5T_NATIVE_INT32, nullptr, DType::f32, 4};
    case 7: return {H5T_STD_U8LE, H5T_NATIVE_UINT8, nullptr, DType::f32, 1};
    case 8: return {H5T_IEEE_F64BE, H5T_NATIVE_DOUBLE, "f64", DType::f64, 8};
    default: return {-1, -1, nullptr, DType::f32, 0};  // a variable-length string dataset
  }
}

const char* const kNames[] = {"fc.weight", "fc.bias",     "w",  "layers.0.weight.exp_avg", "a b", "\xce\xbb",
                              "0",         "fc.weight.x", "..", "x:y"};

// One entry of a section group: usually a dataset, sometimes another kind of link.
void fuzz_entry(hid_t group, const char* section, int index, Input& in, bool rank_file, hid_t slice_group) {
  std::string name = kNames[in.byte() % std::size(kNames)];
  if (index > 0) name += "_" + std::to_string(index);
  const std::uint8_t kind = in.byte();
  if (kind >= 0xe0) {
    switch (kind % 5) {
      case 0: H5Gclose(H5Gcreate2(group, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)); break;
      case 1: H5Lcreate_soft("/nowhere/at/all", group, name.c_str(), H5P_DEFAULT, H5P_DEFAULT); break;
      case 2: H5Lcreate_external("checkpoint.rank00000.h5", "/model/w", group, name.c_str(), H5P_DEFAULT,
                                 H5P_DEFAULT);
        break;
      case 3: H5Lcreate_soft("/", group, name.c_str(), H5P_DEFAULT, H5P_DEFAULT); break;  // a cycle
      default: {
        const hid_t t = H5Tcopy(H5T_NATIVE_INT);
        H5Tcommit2(group, name.c_str(), t, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Tclose(t);
        break;
      }
    }
    return;
  }

  // Dataspace: scalar, rank 1..4, or null.
  const int rank_sel = in.byte() % 8;
  std::vector<hsize_t> dims;
  hid_t space = -1;
  bool huge = false;
  if (rank_sel == 0) {
    space = H5Screate(H5S_SCALAR);
  } else if (rank_sel == 7) {
    space = H5Screate(H5S_NULL);
  } else {
    const int rank = 1 + (rank_sel - 1) % 4;
    for (int d = 0; d < rank; ++d) {
      const std::uint8_t e = in.byte();
      if (e < 0xf0) {
        dims.push_back(e % 7);
      } else {
        dims.push_back(static_cast<hsize_t>(in.i64()) & ((hsize_t{1} << 40) - 1));
        huge = true;
      }
    }
    space = H5Screate_simple(rank, dims.data(), nullptr);
  }
  hsize_t numel = 1;
  for (hsize_t e : dims) numel *= e;
  if (rank_sel == 7) numel = 0;

  StoredType type = stored_type(in.byte());
  hid_t string_type = -1;
  if (type.file < 0) {
    string_type = H5Tcopy(H5T_C_S1);
    H5Tset_size(string_type, H5T_VARIABLE);
    type.file = type.memory = string_type;
  }

  // Layout: contiguous, chunked, compact, or virtual (mapping a slice file, as per_rank).
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  const std::uint8_t layout = in.byte() % 6;
  bool is_virtual = false;
  if (layout == 1 || layout == 2 || huge) {
    if (!dims.empty()) {
      std::vector<hsize_t> chunk(dims.size());
      for (std::size_t d = 0; d < dims.size(); ++d) chunk[d] = dims[d] == 0 ? 1 : std::min<hsize_t>(dims[d], 1 + layout);
      H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    }
  } else if (layout == 3) {
    H5Pset_layout(dcpl, H5D_COMPACT);
  } else if (layout == 4 && !dims.empty()) {
    is_virtual = true;
    const hid_t source = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const std::string source_dataset = std::string("/") + section + "/" + name;
    H5Pset_virtual(dcpl, space, (in.byte() & 1) ? "checkpoint.rank00000.h5" : "missing.h5", source_dataset.c_str(),
                   source);
    H5Sclose(source);
  }
  const hid_t dataset = H5Dcreate2(group, name.c_str(), type.file, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);

  // Data from the input (a short pattern repeated), for small numeric datasets; a
  // virtual dataset's data is its slice's (when there is a rank file).
  std::vector<unsigned char> data;
  bool written = false;
  if (dataset >= 0 && !huge && type.size > 0 && numel > 0 && numel <= 4096 && rank_sel != 0) {
    data.resize(numel * type.size);
    unsigned char pattern[8];
    for (auto& b : pattern) b = in.byte();
    for (std::size_t k = 0; k < data.size(); ++k) data[k] = pattern[k % 8];
    written = is_virtual || H5Dwrite(dataset, type.memory, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) >= 0;
  }

  std::uint64_t checksum = 0;
  if (dataset >= 0) {
    checksum = static_cast<std::uint64_t>(in.i64());
    if (written && type.dtype_name != nullptr && (in.byte() & 3) != 0) {
      // The right checksum most of the time, so verify gets past it.
      try {
        tessera::Shape shape(dims.begin(), dims.end());
        checksum = tessera::io::block_checksum(tessera::Tensor::view(data.data(), shape, type.dtype), shape,
                                               tessera::Shape(shape.size(), 0));
      } catch (const tessera::Error&) {
      }
    }
    fuzz_attribute(dataset, "dtype", AttrKind::string, type.dtype_name ? type.dtype_name : "f32", 0, {}, in);
    fuzz_attribute(dataset, "placement", AttrKind::string, "dp: Replicate, tp: Replicate, domain: Replicate", 0, {},
                   in);
    fuzz_attribute(dataset, "checksum", AttrKind::uint64, "", static_cast<std::int64_t>(checksum), {}, in);
    H5Dclose(dataset);
  }

  // The slice in the per_rank rank file: the block with its global shape and offset.
  if (rank_file && slice_group >= 0 && !dims.empty() && !huge) {
    const hid_t slice = H5Dcreate2(slice_group, name.c_str(), type.file, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (slice >= 0) {
      if (!data.empty()) H5Dwrite(slice, type.memory, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
      std::vector<std::int64_t> global(dims.begin(), dims.end()), offset(dims.size(), 0);
      fuzz_attribute(slice, "dtype", AttrKind::string, type.dtype_name ? type.dtype_name : "f32", 0, {}, in);
      fuzz_attribute(slice, "global_shape", AttrKind::int_array, "", 0, global, in);
      fuzz_attribute(slice, "offset", AttrKind::int_array, "", 0, offset, in);
      fuzz_attribute(slice, "checksum", AttrKind::uint64, "", static_cast<std::int64_t>(checksum), {}, in);
      H5Dclose(slice);
    }
  }
  if (string_type >= 0) H5Tclose(string_type);
  H5Sclose(space);
}

// A section (/model, /optimizer): a group with link creation order tracked and indexed
// (as the library writes it), a plain group, missing, or another kind of object.
void fuzz_section(hid_t file, const char* section, Input& in, bool rank_file, hid_t slice_file) {
  const std::uint8_t kind = in.byte();
  hid_t group = -1;
  if (kind < 0xc0) {
    const hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    if (kind < 0xa0) H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    group = H5Gcreate2(file, section, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
  } else {
    switch (kind % 4) {
      case 0: return;  // no such section
      case 1: {
        const hid_t space = H5Screate(H5S_SCALAR);
        H5Dclose(H5Dcreate2(file, section, H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5Sclose(space);
        return;
      }
      case 2: H5Lcreate_soft("/missing", file, section, H5P_DEFAULT, H5P_DEFAULT); return;
      default: H5Lcreate_external("missing.h5", "/model", file, section, H5P_DEFAULT, H5P_DEFAULT); return;
    }
  }
  if (group < 0) return;
  if (std::strcmp(section, "optimizer") == 0) {
    fuzz_attribute(group, "type", AttrKind::string, "AdamW", 0, {}, in);
    fuzz_attribute(group, "step_count", AttrKind::int64, "", 1, {}, in);
  }
  hid_t slice_group = -1;
  if (rank_file && slice_file >= 0) slice_group = H5Gcreate2(slice_file, section, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const int entries = in.byte() % 5;
  for (int k = 0; k < entries; ++k) fuzz_entry(group, section, k, in, rank_file, slice_group);
  if (slice_group >= 0) H5Gclose(slice_group);
  H5Gclose(group);
}

void write_structured(const std::string& path, const std::string& slice_path, Input& in) {
  set_auto_print(false);
  std::error_code ec;
  fs::remove(slice_path, ec);
  const bool per_rank = in.byte() & 1;
  const bool rank_file = per_rank && (in.byte() & 1);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) finding("harness", "cannot create " + path);
  const hid_t slice_file =
      rank_file ? H5Fcreate(slice_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT) : hid_t{-1};

  using K = AttrKind;
  fuzz_attribute(file, "format", K::string, "tessera-checkpoint", 0, {}, in);
  fuzz_attribute(file, "format_version", K::int64, "", 1, {}, in);
  fuzz_attribute(file, "tessera_version", K::string, "0.1.0", 0, {}, in);
  fuzz_attribute(file, "layout", K::string, per_rank ? "per_rank" : "shared", 0, {}, in);
  fuzz_attribute(file, "mesh_data", K::string, "none", 0, {}, in);
  fuzz_attribute(file, "mesh_dp", K::int64, "", 1, {}, in);
  fuzz_attribute(file, "mesh_tp", K::int64, "", 1, {}, in);
  fuzz_attribute(file, "mesh_domain", K::int64, "", 1, {}, in);
  fuzz_attribute(file, "world_size", K::int64, "", 1, {}, in);
  fuzz_attribute(file, "step", K::int64, "", 3, {}, in);
  fuzz_attribute(file, "metadata", K::string, "model: {layers: 2}", 0, {}, in);
  fuzz_attribute(file, "checksum_algorithm", K::string, tessera::io::checksum_algorithm, 0, {}, in);
  if (per_rank) fuzz_attribute(file, "writer_ranks", K::int_array, "", 0, {0}, in);

  fuzz_section(file, "model", in, rank_file, slice_file);
  fuzz_section(file, "optimizer", in, rank_file, slice_file);
  if (slice_file >= 0) H5Fclose(slice_file);
  H5Fclose(file);
  if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) > 0) finding("harness", "the writer left HDF5 objects open");
}

bool debug_enabled();

// ---- the reader under test -------------------------------------------------------------
std::int64_t declared_bytes(const tessera::io::DatasetInfo& d) {
  std::int64_t n = static_cast<std::int64_t>(tessera::dtype_size(d.dtype));
  for (std::int64_t e : d.shape) {
    if (e < 0) return -1;
    if (e != 0 && n > kMaxReadBytes / e) return kMaxReadBytes + 1;
    n *= e;
  }
  return n;
}

void exercise(const std::string& path) {
  const tessera::io::CheckpointReader reader(path);
  const tessera::io::CheckpointHeader& h = reader.header();
  // Touch every header field (the strings are the file's).
  std::size_t sink = h.format.size() + h.tessera_version.size() + h.metadata.size() + h.checksum_algorithm.size() +
                     h.optimizer_type.size() + h.writer_ranks.size();
  for (std::int64_t v : {h.step, h.dp, h.world_size, h.optimizer_step_count}) sink += static_cast<std::size_t>(v);
  sink += h.mesh.str().size();

  bool all_small = true;
  for (const tessera::io::DatasetInfo& d : reader.datasets()) {
    sink += d.path.size() + d.placement.size() + d.shape.size();
    if (reader.find(d.path) == nullptr) finding("find() misses a listed dataset", d.path);
    const std::int64_t bytes = declared_bytes(d);
    if (bytes < 0 || bytes > kMaxReadBytes) {
      all_small = false;
      continue;
    }
    try {
      const tessera::Tensor whole = reader.read(d);
      if (whole.shape() != d.shape) finding("read() returned another shape", d.path);
      if (!d.shape.empty()) {
        // The trailing half of the first dim: a hyperslab that is not the whole dataset.
        tessera::Shape offset(d.shape.size(), 0), count = d.shape;
        offset[0] = d.shape[0] / 2;
        count[0] = d.shape[0] - offset[0];
        const tessera::Tensor block = reader.read(d, offset, count);
        if (block.shape() != count) finding("read(offset, count) returned another shape", d.path);
      }
    } catch (const tessera::Error&) {
      // A damaged dataset is reported; keep going with the others.
    }
  }
  if (debug_enabled()) {
    std::fprintf(stderr, "reader: layout %s, step %lld, %zu dataset(s)\n",
                 std::string(tessera::io::checkpoint_layout_name(h.layout)).c_str(), static_cast<long long>(h.step),
                 reader.datasets().size());
  }
  if (all_small) {
    const tessera::io::VerifyReport report = tessera::io::verify_checkpoint(path);
    sink += report.passed.size() + report.failed.size();
    if (debug_enabled()) {
      for (const auto& p : report.passed) std::fprintf(stderr, "verify: passed %s\n", p.c_str());
      for (const auto& f : report.failed) std::fprintf(stderr, "verify: FAILED %s\n", f.c_str());
    }
  }
  if (sink == 0x5eed) std::fputc('\0', stderr);  // keep the reads observable
}

// ---- the MANIFEST beside the files ----------------------------------------------------
// What the input says about the step directory's MANIFEST (one byte after the structured
// description; a missing byte reads 0, so older seeds keep a correct one).
enum class ManifestCase { listed, absent, omits_a_file, edited };

std::string digest_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  char line[64];
  std::snprintf(line, sizeof line, "%08x %zu ", tessera::io::crc32c(bytes.data(), bytes.size()), bytes.size());
  return line + fs::path(path).filename().string() + "\n";
}

// Writes (or removes) the MANIFEST of the harness's step directory. Returns the case.
ManifestCase write_manifest(const std::vector<std::string>& files, Input* in) {
  const std::string path = work_dir() + "/MANIFEST";
  const auto which = in == nullptr ? ManifestCase::listed : static_cast<ManifestCase>(in->byte() % 4);
  std::error_code ec;
  fs::remove(path, ec);
  if (which == ManifestCase::absent) return which;
  std::string text = "tessera-checkpoint-manifest 1\n";
  const std::size_t left_out = which == ManifestCase::omits_a_file ? in->byte() % files.size() : files.size();
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (i != left_out) text += digest_line(files[i]);
  }
  if (which == ManifestCase::edited) {
    // A byte replaced (often by a whitespace byte that is not a newline) or a cut.
    const std::size_t low = in->byte();
    const std::size_t at = (low | (std::size_t{in->byte()} << 8)) % text.size();
    const std::uint8_t op = in->byte();
    if (op < 0x40) {
      text.resize(at);
    } else {
      text[at] = op < 0x80 ? "\v\t\f\r \n"[op % 6] : static_cast<char>(in->byte());
    }
  }
  std::ofstream(path, std::ios::binary) << text;
  return which;
}

bool auto_print_is_on() {
  H5E_auto2_t func = nullptr;
  void* client = nullptr;
  return H5Eget_auto2(H5E_DEFAULT, &func, &client) >= 0 && func != nullptr;
}

// The contract for a MANIFEST that is missing, leaves a file out or was edited: the
// reader refuses it before HDF5 opens anything, and verify never passes a step that the
// reader refuses (one rule for both). Before any HDF5 call tessera turns HDF5's error
// printing off, so printing still on after a refusal shows HDF5 was not reached.
// Returns whether the step was refused.
bool check_refused(const std::string& path, ManifestCase which) {
  bool reader_refused = false;
  std::string why;
  try {
    const tessera::io::CheckpointReader reader(path);
  } catch (const tessera::Error& e) {
    why = e.what();
    reader_refused = why.find("MANIFEST") != std::string::npos;
  }
  if (which != ManifestCase::edited && !reader_refused) {
    finding("a step whose MANIFEST is missing or leaves a file out was opened", why.empty() ? path : why);
  }
  if (debug_enabled()) std::fprintf(stderr, "manifest case %d: %s\n", static_cast<int>(which), why.c_str());
  if (!reader_refused) return false;
  // Only then: verify on an accepted step reads every dataset whole, whatever its size.
  if (tessera::io::verify_checkpoint(path).ok()) finding("verify passed a step the reader refuses", why);
  if (!auto_print_is_on()) finding("HDF5 was called before the MANIFEST refused the step", why);
  return true;
}

bool env_is_1(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// TESSERA_FUZZ_CHECKPOINT_DEBUG=1: say what the reader made of each input (for writing
// seeds: run the fuzzer on one file).
bool debug_enabled() {
  static const bool on = env_is_1("TESSERA_FUZZ_CHECKPOINT_DEBUG");
  return on;
}

bool raw_enabled() {
  static const bool on = env_is_1("TESSERA_FUZZ_CHECKPOINT_RAW");
  return on;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const char kSignature[] = "\x89HDF\r\n\x1a\n";
  const std::string path = work_dir() + "/checkpoint.h5";
  const std::string slice_path = work_dir() + "/checkpoint.rank00000.h5";
  ManifestCase manifest = ManifestCase::listed;
  if (size >= 8 && std::memcmp(data, kSignature, 8) == 0) {
    if (!raw_enabled()) return 0;
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
      if (!out) finding("harness", "cannot write " + path);
    }
    std::error_code ec;
    fs::remove(slice_path, ec);
    // Listed as if trusted: the raw mode is about what HDF5 does with the bytes.
    write_manifest({path}, nullptr);
  } else {
    Input in(data, size);
    write_structured(path, slice_path, in);
    std::vector<std::string> files{path};
    if (fs::exists(slice_path)) files.push_back(slice_path);
    manifest = write_manifest(files, &in);
  }

  // HDF5's default: print every error stack. The reader must turn that off itself.
  set_auto_print(true);
  bool refused = false;
  try {
    if (manifest == ManifestCase::listed) {
      exercise(path);
    } else {
      refused = check_refused(path, manifest);
    }
  } catch (const tessera::Error& e) {
    // Rejected: the expected outcome for a damaged file.
    if (debug_enabled()) std::fprintf(stderr, "reader: rejected: %s\n", e.what());
  } catch (const std::exception& e) {
    finding("non-tessera exception from the checkpoint reader", e.what());
  } catch (...) {
    finding("non-std exception from the checkpoint reader", "(unknown type)");
  }

  if (!refused && auto_print_is_on()) {
    finding("HDF5 automatic error printing is on after the reader ran", "H5Eget_auto2 returned a handler");
  }
  const ssize_t open_ids = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (open_ids > 0) finding("HDF5 objects left open", std::to_string(open_ids) + " open id(s)");
  return 0;
}
