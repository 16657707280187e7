#include "io/hdf5_handles.hpp"

#include <algorithm>

namespace tessera::io::detail {

H5Space make_space(const Shape& shape) {
  if (shape.empty()) throw UnsupportedError("checkpoint: 0-dimensional tensors are not supported");
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return H5Space(TESSERA_CHECK_HDF5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

void select_block(const H5Space& space, const Shape& offset, const Shape& count) {
  if (std::any_of(count.begin(), count.end(), [](std::int64_t c) { return c == 0; })) {
    TESSERA_CHECK_HDF5(H5Sselect_none(space.get()));
    return;
  }
  std::vector<hsize_t> start(offset.begin(), offset.end()), cnt(count.begin(), count.end());
  TESSERA_CHECK_HDF5(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, cnt.data(), nullptr));
}

Shape dataset_shape(hid_t dataset) {
  H5Space space(TESSERA_CHECK_HDF5(H5Dget_space(dataset)));
  const int rank = TESSERA_CHECK_HDF5(H5Sget_simple_extent_ndims(space.get()));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  TESSERA_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
  return Shape(dims.begin(), dims.end());
}

hid_t file_type_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::f64: return H5T_IEEE_F64LE;
    case DType::bf16: return H5T_STD_U16LE;
    case DType::i64: return H5T_STD_I64LE;
  }
  throw InternalError("checkpoint: unknown dtype");
}

hid_t memory_type_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f64: return H5T_NATIVE_DOUBLE;
    case DType::bf16: return H5T_NATIVE_UINT16;
    case DType::i64: return H5T_NATIVE_INT64;
  }
  throw InternalError("checkpoint: unknown dtype");
}

bool link_exists(hid_t location, const std::string& path) {
  // H5Lexists fails (rather than returning false) when an intermediate group is
  // missing, so walk the path one component at a time.
  std::string prefix;
  std::size_t start = path.front() == '/' ? 1 : 0;
  if (start == 1) prefix = "/";
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    prefix += path.substr(start, end - start);
    if (TESSERA_CHECK_HDF5(H5Lexists(location, prefix.c_str(), H5P_DEFAULT)) <= 0) return false;
    prefix += "/";
    start = end + 1;
  }
  return true;
}

bool attribute_exists(hid_t object, const std::string& name) {
  return TESSERA_CHECK_HDF5(H5Aexists(object, name.c_str())) > 0;
}

namespace {

H5Type string_type() {
  H5Type type(TESSERA_CHECK_HDF5(H5Tcopy(H5T_C_S1)));
  TESSERA_CHECK_HDF5(H5Tset_size(type.get(), H5T_VARIABLE));
  TESSERA_CHECK_HDF5(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  return type;
}

void write_scalar(hid_t object, const std::string& name, hid_t file_type, hid_t mem_type, const void* value) {
  if (attribute_exists(object, name)) TESSERA_CHECK_HDF5(H5Adelete(object, name.c_str()));
  H5Space space(TESSERA_CHECK_HDF5(H5Screate(H5S_SCALAR)));
  H5Attribute attr(
      TESSERA_CHECK_HDF5(H5Acreate2(object, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT)));
  TESSERA_CHECK_HDF5(H5Awrite(attr.get(), mem_type, value));
}

H5Attribute open_attribute(hid_t object, const std::string& name) {
  if (!attribute_exists(object, name)) throw Hdf5Error("checkpoint: attribute '" + name + "' is missing");
  return H5Attribute(TESSERA_CHECK_HDF5(H5Aopen(object, name.c_str(), H5P_DEFAULT)));
}

}  // namespace

void write_string_attribute(hid_t object, const std::string& name, const std::string& value) {
  const H5Type type = string_type();
  const char* text = value.c_str();
  write_scalar(object, name, type.get(), type.get(), &text);
}

void write_int_attribute(hid_t object, const std::string& name, std::int64_t value) {
  write_scalar(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void write_uint_attribute(hid_t object, const std::string& name, std::uint64_t value) {
  write_scalar(object, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}

void write_int_array_attribute(hid_t object, const std::string& name, const std::vector<std::int64_t>& values) {
  if (attribute_exists(object, name)) TESSERA_CHECK_HDF5(H5Adelete(object, name.c_str()));
  const hsize_t n = values.size();
  H5Space space(TESSERA_CHECK_HDF5(n == 0 ? H5Screate(H5S_NULL) : H5Screate_simple(1, &n, nullptr)));
  H5Attribute attr(
      TESSERA_CHECK_HDF5(H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT)));
  if (n > 0) TESSERA_CHECK_HDF5(H5Awrite(attr.get(), H5T_NATIVE_INT64, values.data()));
}

namespace {

// An attribute read as one value must hold one: HDF5 writes every element of the
// attribute into the caller's buffer, so an array (a damaged or crafted file) would
// write past it. Found by fuzz_checkpoint_reader.
void require_scalar(const H5Attribute& attr, const std::string& name) {
  const H5Space space(TESSERA_CHECK_HDF5(H5Aget_space(attr.get())));
  const hssize_t n = TESSERA_CHECK_HDF5(H5Sget_simple_extent_npoints(space.get()));
  if (n != 1) {
    throw Hdf5Error("checkpoint: attribute '" + name + "' holds " + std::to_string(n) +
                    " values where one is expected (a damaged or foreign file)");
  }
}

// One integer attribute, converted by HDF5 to `T`, whose memory type is `memory`.
template <class T>
T read_scalar_attribute(hid_t object, const std::string& name, hid_t memory) {
  const H5Attribute attr = open_attribute(object, name);
  require_scalar(attr, name);
  T value = 0;
  TESSERA_CHECK_HDF5(H5Aread(attr.get(), memory, &value));
  return value;
}

}  // namespace

std::string read_string_attribute(hid_t object, const std::string& name) {
  const H5Attribute attr = open_attribute(object, name);
  require_scalar(attr, name);
  const H5Type stored(TESSERA_CHECK_HDF5(H5Aget_type(attr.get())));
  if (H5Tget_class(stored.get()) != H5T_STRING) throw Hdf5Error("checkpoint: attribute '" + name + "' is not a string");
  if (TESSERA_CHECK_HDF5(H5Tis_variable_str(stored.get())) > 0) {
    const H5Type type = string_type();
    char* text = nullptr;
    TESSERA_CHECK_HDF5(H5Aread(attr.get(), type.get(), &text));
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  // Fixed-length strings (e.g. written by h5py with np.bytes_) are read as they are.
  const std::size_t size = H5Tget_size(stored.get());
  std::string value(size, '\0');
  H5Type type(TESSERA_CHECK_HDF5(H5Tcopy(H5T_C_S1)));
  TESSERA_CHECK_HDF5(H5Tset_size(type.get(), size));
  TESSERA_CHECK_HDF5(H5Aread(attr.get(), type.get(), value.data()));
  value.resize(value.find('\0') == std::string::npos ? size : value.find('\0'));
  return value;
}

std::int64_t read_int_attribute(hid_t object, const std::string& name) {
  return read_scalar_attribute<std::int64_t>(object, name, H5T_NATIVE_INT64);
}

std::uint64_t read_uint_attribute(hid_t object, const std::string& name) {
  return read_scalar_attribute<std::uint64_t>(object, name, H5T_NATIVE_UINT64);
}

std::vector<std::int64_t> read_int_array_attribute(hid_t object, const std::string& name) {
  const H5Attribute attr = open_attribute(object, name);
  const H5Space space(TESSERA_CHECK_HDF5(H5Aget_space(attr.get())));
  const hssize_t n = TESSERA_CHECK_HDF5(H5Sget_simple_extent_npoints(space.get()));
  std::vector<std::int64_t> values(static_cast<std::size_t>(n));
  if (n > 0) TESSERA_CHECK_HDF5(H5Aread(attr.get(), H5T_NATIVE_INT64, values.data()));
  return values;
}

namespace {

herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}

}  // namespace

std::vector<std::string> list_links(hid_t file, const std::string& path) {
  std::vector<std::string> names;
  if (!link_exists(file, path)) return names;
  H5Group group(TESSERA_CHECK_HDF5(H5Gopen2(file, path.c_str(), H5P_DEFAULT)));
  H5Plist gcpl(TESSERA_CHECK_HDF5(H5Gget_create_plist(group.get())));
  unsigned flags = 0;
  TESSERA_CHECK_HDF5(H5Pget_link_creation_order(gcpl.get(), &flags));
  const H5_index_t index = (flags & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
  TESSERA_CHECK_HDF5(H5Literate(group.get(), index, H5_ITER_INC, nullptr, &collect_link, &names));
  return names;
}

H5File open_read_only(const std::string& path) {
  ::tessera::detail::hdf5_errors_as_exceptions();
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) {
    H5Eclear2(H5E_DEFAULT);
    throw IoError("checkpoint: cannot open '" + path + "' as an HDF5 file for reading");
  }
  return H5File(id);
}

}  // namespace tessera::io::detail
