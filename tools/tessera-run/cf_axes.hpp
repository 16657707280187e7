#pragma once
// The coordinate variables of a CF dataset as its file holds them, and where tessera's
// internal grid lies in that file. The netCDF reader records both (netcdf_input.cpp) and
// predict's writer writes them back (netcdf_output.cpp), so a forecast keeps its input's
// conventions: the coordinate and dimension names, the latitude order, the longitude
// origin, the coordinates' element types and attributes. `forecast - input` in xarray
// then aligns on identical coordinates instead of broadcasting over two sets of them.

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::run {

// The numeric element types of netCDF-4 (what CF coordinates and their attributes use).
enum class NumberType { i8, u8, i16, u16, i32, u32, i64, u64, f32, f64 };

const char* number_type_name(NumberType type);
// Whether every one of `values` survives a round trip through `type` unchanged (an
// integer type holds only integers in its range; f32 only values f32 represents).
bool holds_exactly(NumberType type, const std::vector<double>& values);

// An attribute of a coordinate variable: text, or `count` numbers of `type` kept as
// their little-endian bytes, so that the copy is bit for bit the input's.
struct AxisAttribute {
  std::string name;
  bool is_text = false;
  std::string text;
  NumberType type = NumberType::f64;
  std::vector<unsigned char> bytes;
};

// A coordinate variable: its name (in netCDF-4 also its dimension's), its element
// type, its values in the file's order and its attributes in the file's order.
struct CoordinateVariable {
  std::string name;
  NumberType type = NumberType::f64;
  std::vector<double> values;
  std::vector<AxisAttribute> attributes;
  // Attributes a copy cannot keep (string arrays, compound or enum values): predict
  // names them in a warning rather than dropping them without a word.
  std::vector<std::string> not_copied;
};

// The axes of a dataset as a CF writer should write them back. `level.name` is empty
// when no selected variable has a level dimension.
struct FileAxes {
  CoordinateVariable time, level, lat, lon;
};

// Where a point of tessera's internal grid (row r counted from the north, column j
// eastward from the smallest longitude in [0, 360)) lies in the data file. The reader
// reads through this mapping and the writer writes back through the same one, so a
// value lands at the coordinates it was read from.
struct GridOrientation {
  std::int64_t nlat = 0, nlon = 0;
  bool south_first = false;     // the file's latitudes run south to north
  std::int64_t lon_offset = 0;  // internal column j is the file's column (j + lon_offset) % nlon

  std::int64_t file_row(std::int64_t r) const { return south_first ? nlat - 1 - r : r; }
  std::int64_t file_column(std::int64_t j) const { return (j + lon_offset) % nlon; }
  // Internal rows [start, start + count) are file rows [first, first + count), in
  // reverse order when the file runs south to north.
  std::int64_t first_file_row(std::int64_t start, std::int64_t count) const {
    return south_first ? nlat - start - count : start;
  }
};

}  // namespace tessera::run
