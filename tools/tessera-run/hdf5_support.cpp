#include "hdf5_support.hpp"

#include "tessera/error.hpp"

namespace tessera::run {

std::string read_string_attribute(hid_t obj, const char* name, const std::string& what) {
  H5Attribute attr(H5Aopen(obj, name, H5P_DEFAULT));
  if (!attr) throw IoError(what + ": cannot open attribute '" + name + "'");
  H5Type type(H5Aget_type(attr.get()));
  if (H5Tget_class(type.get()) != H5T_STRING) throw IoError(what + ": attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(type.get()) > 0) {
    H5Type mem(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    char* text = nullptr;
    if (H5Aread(attr.get(), mem.get(), &text) < 0) throw IoError(what + ": cannot read attribute '" + name + "'");
    std::string s = text ? text : "";
    H5free_memory(text);
    return s;
  }
  const std::size_t n = H5Tget_size(type.get());
  std::string s(n, '\0');
  if (H5Aread(attr.get(), type.get(), s.data()) < 0) throw IoError(what + ": cannot read attribute '" + name + "'");
  return std::string(s.c_str());
}

std::vector<double> read_double_attribute(hid_t obj, const char* name, const std::string& what) {
  H5Attribute attr(H5Aopen(obj, name, H5P_DEFAULT));
  if (!attr) throw IoError(what + ": cannot open attribute '" + name + "'");
  H5Space space(H5Aget_space(attr.get()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 1) throw IoError(what + ": attribute '" + name + "' is empty");
  std::vector<double> values(static_cast<std::size_t>(n));
  if (H5Aread(attr.get(), H5T_NATIVE_DOUBLE, values.data()) < 0) {
    throw IoError(what + ": attribute '" + name + "' is not numeric");
  }
  return values;
}

std::string string_attribute_or_empty(hid_t obj, const char* name) {
  if (!attribute_exists(obj, name)) return "";
  try {
    return read_string_attribute(obj, name, "");
  } catch (const IoError&) {
    return "";
  }
}

void write_string_attribute(hid_t obj, const char* name, const std::string& value, const std::string& what) {
  // netCDF-C stores text attributes as fixed-length strings of exactly their length;
  // HDF5 needs a size of at least 1, so an empty text is one NUL.
  H5Type type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), value.empty() ? 1 : value.size());
  H5Tset_strpad(type.get(), H5T_STR_NULLTERM);
  H5Tset_cset(type.get(), H5T_CSET_ASCII);
  H5Space space(H5Screate(H5S_SCALAR));
  H5Attribute attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  if (!attr || H5Awrite(attr.get(), type.get(), padded.data()) < 0) {
    throw IoError(what + ": cannot write attribute '" + name + "'");
  }
}

void write_double_attribute(hid_t obj, const char* name, const std::vector<double>& values, const std::string& what) {
  const hsize_t n = values.size();
  H5Space space(H5Screate_simple(1, &n, nullptr));
  H5Attribute attr(H5Acreate2(obj, name, H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr || H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, values.data()) < 0) {
    throw IoError(what + ": cannot write attribute '" + name + "'");
  }
}

void write_int_attribute(hid_t obj, const char* name, int value, const std::string& what) {
  H5Space space(H5Screate(H5S_SCALAR));
  H5Attribute attr(H5Acreate2(obj, name, H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr || H5Awrite(attr.get(), H5T_NATIVE_INT, &value) < 0) {
    throw IoError(what + ": cannot write attribute '" + name + "'");
  }
}

}  // namespace tessera::run
