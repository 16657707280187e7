#include "hdf5_support.hpp"

#include <algorithm>
#include <array>

#include "tessera/error.hpp"

namespace tessera::run {
namespace {

// What HDF5's dimension-scale library and netCDF-4 store about the file's own structure:
// a copy would point at the input's objects (REFERENCE_LIST, DIMENSION_LIST) or restate
// what the writer sets itself (CLASS, NAME, _Netcdf4Dimid).
bool structural_attribute(const std::string& name) {
  static const std::array<const char*, 9> names{"CLASS", "NAME", "REFERENCE_LIST", "DIMENSION_LIST", "_Netcdf4Dimid",
                                                "_Netcdf4Coordinates", "_nc3_strict", "_NCProperties", "_IsNetcdf4"};
  return std::find(names.begin(), names.end(), name) != names.end();
}

struct AttributeVisit {
  CoordinateVariable* axis;
  const std::string* what;
  std::string error;  // (no exception may cross HDF5's C frames: kept, thrown after)
};

void copy_attribute(hid_t obj, const char* name, AttributeVisit& visit) {
  if (structural_attribute(name)) return;
  H5Attribute attr(H5Aopen(obj, name, H5P_DEFAULT));
  if (!attr) throw IoError(*visit.what + ": cannot open attribute '" + name + "'");
  H5Type type(H5Aget_type(attr.get()));
  H5Space space(H5Aget_space(attr.get()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  AxisAttribute a;
  a.name = name;
  if (H5Tget_class(type.get()) == H5T_STRING && n == 1) {
    a.is_text = true;
    a.text = read_string_attribute(obj, name, *visit.what);
  } else if (n >= 1 && number_type_of(type.get(), a.type)) {
    H5Type mem(H5Tcopy(standard_type(a.type)));
    a.bytes.resize(static_cast<std::size_t>(n) * H5Tget_size(mem.get()));
    if (H5Aread(attr.get(), mem.get(), a.bytes.data()) < 0) {
      throw IoError(*visit.what + ": cannot read attribute '" + name + "'");
    }
  } else {
    visit.axis->not_copied.push_back(name);
    return;
  }
  visit.axis->attributes.push_back(std::move(a));
}

herr_t copy_attribute_visitor(hid_t obj, const char* name, const H5A_info_t*, void* data) {
  auto& visit = *static_cast<AttributeVisit*>(data);
  try {
    copy_attribute(obj, name, visit);
    return 0;
  } catch (const std::exception& e) {
    visit.error = e.what();
    return -1;
  }
}

}  // namespace

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


hid_t standard_type(NumberType type) {
  switch (type) {
    case NumberType::i8: return H5T_STD_I8LE;
    case NumberType::u8: return H5T_STD_U8LE;
    case NumberType::i16: return H5T_STD_I16LE;
    case NumberType::u16: return H5T_STD_U16LE;
    case NumberType::i32: return H5T_STD_I32LE;
    case NumberType::u32: return H5T_STD_U32LE;
    case NumberType::i64: return H5T_STD_I64LE;
    case NumberType::u64: return H5T_STD_U64LE;
    case NumberType::f32: return H5T_IEEE_F32LE;
    case NumberType::f64: return H5T_IEEE_F64LE;
  }
  return H5T_IEEE_F64LE;
}

bool number_type_of(hid_t type, NumberType& out) {
  const std::size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: {
      const bool sign = H5Tget_sign(type) == H5T_SGN_2;
      switch (size) {
        case 1: out = sign ? NumberType::i8 : NumberType::u8; return true;
        case 2: out = sign ? NumberType::i16 : NumberType::u16; return true;
        case 4: out = sign ? NumberType::i32 : NumberType::u32; return true;
        case 8: out = sign ? NumberType::i64 : NumberType::u64; return true;
        default: return false;
      }
    }
    case H5T_FLOAT:
      if (size != 4 && size != 8) return false;
      out = size == 4 ? NumberType::f32 : NumberType::f64;
      return true;
    default:
      return false;
  }
}

void read_axis_metadata(hid_t dset, CoordinateVariable& axis, const std::string& what) {
  H5Type type(H5Dget_type(dset));
  if (!number_type_of(type.get(), axis.type)) throw IoError(what + ": a coordinate must hold numbers");
  AttributeVisit visit{&axis, &what, {}};
  hsize_t at = 0;
  // Creation order is what ncdump and xarray show; a file that does not track it
  // (HDF5's default) lists its attributes by name.
  H5Plist ocpl(H5Dget_create_plist(dset));
  unsigned flags = 0;
  const bool tracked = H5Pget_attr_creation_order(ocpl.get(), &flags) >= 0 && (flags & H5P_CRT_ORDER_TRACKED) != 0;
  if (H5Aiterate2(dset, tracked ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME, H5_ITER_INC, &at, copy_attribute_visitor,
                  &visit) < 0) {
    throw IoError(visit.error.empty() ? what + ": cannot list its attributes" : visit.error);
  }
}

void write_axis_attribute(hid_t obj, const AxisAttribute& a, const std::string& what) {
  if (a.is_text) {
    write_string_attribute(obj, a.name.c_str(), a.text, what);
    return;
  }
  const hid_t type = standard_type(a.type);
  const hsize_t n = a.bytes.size() / H5Tget_size(type);
  H5Space space(H5Screate_simple(1, &n, nullptr));
  H5Attribute attr(H5Acreate2(obj, a.name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr || H5Awrite(attr.get(), type, a.bytes.data()) < 0) {
    throw IoError(what + ": cannot write attribute '" + a.name + "'");
  }
}

}  // namespace tessera::run
