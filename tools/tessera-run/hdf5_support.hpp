#pragma once
// The few HDF5 helpers tessera-run's data readers (field_data.cpp, netcdf_input.cpp) and
// its netCDF writer (netcdf_output.cpp) share: handles that close themselves, silencing
// HDF5's own error printing (tessera's errors say what failed, naming the file), and
// attribute reads and writes.

#include <hdf5.h>

#include <string>
#include <vector>

namespace tessera::run {

// RAII for an HDF5 handle and its close function.
struct Handle {
  hid_t id = H5I_INVALID_HID;
  herr_t (*close)(hid_t) = nullptr;
  Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~Handle() {
    if (id >= 0 && close) close(id);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

// Silences HDF5's own error stack printing while alive: our errors say what failed.
struct QuietHdf5 {
  H5E_auto2_t func = nullptr;
  void* data = nullptr;
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func, &data);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func, data); }
};

bool has_attribute(hid_t obj, const char* name);
// Fixed or variable-length string attributes; `what` names the object in IoErrors.
std::string read_string_attribute(hid_t obj, const char* name, const std::string& what);
// Any numeric attribute, converted to double.
std::vector<double> read_double_attribute(hid_t obj, const char* name, const std::string& what);
// The attribute as text when it is a string, "" when it is absent or not a string.
std::string string_attribute_or_empty(hid_t obj, const char* name);

// Fixed-length ASCII string attributes (what netCDF-C calls NC_CHAR text) and numeric
// ones; IoError naming `what` on failure.
void write_string_attribute(hid_t obj, const char* name, const std::string& value, const std::string& what);
void write_double_attribute(hid_t obj, const char* name, const std::vector<double>& values, const std::string& what);
void write_int_attribute(hid_t obj, const char* name, int value, const std::string& what);

}  // namespace tessera::run
