#pragma once
// The netCDF attribute helpers tessera-run's data readers (field_data.cpp,
// netcdf_input.cpp) and its netCDF writer (netcdf_output.cpp) share. Handles and the
// silencing of HDF5's own error printing are the library's (io/hdf5_handles.hpp): the
// tool's errors say what failed, naming the file. These helpers throw IoError naming the
// object, where the library's checkpoint attribute helpers throw Hdf5Error.

#include <hdf5.h>

#include <string>
#include <vector>

#include "cf_axes.hpp"
#include "io/hdf5_handles.hpp"

namespace tessera::run {

using io::detail::attribute_exists;
using io::detail::H5Attribute;
using io::detail::H5Dataset;
using io::detail::H5File;
using io::detail::H5Plist;
using io::detail::H5Space;
using io::detail::H5Type;

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

// The little-endian HDF5 type of a netCDF number type, and the number type of an HDF5
// type (false for anything else: strings, compounds, 16-bit floats ...).
hid_t standard_type(NumberType type);
bool number_type_of(hid_t type, NumberType& out);
// `axis.type` and `axis.attributes` from the coordinate variable `dset` (attributes in
// creation order where the file tracks it, else by name), leaving out the ones that
// describe the file's own structure (dimension-scale links, netCDF-4's hidden ones);
// attributes of other shapes or types are named in `axis.not_copied`.
void read_axis_metadata(hid_t dset, CoordinateVariable& axis, const std::string& what);
void write_axis_attribute(hid_t obj, const AxisAttribute& attribute, const std::string& what);

}  // namespace tessera::run
