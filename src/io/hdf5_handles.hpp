#pragma once
// Private: RAII ownership of HDF5 identifiers, and the few attribute and type helpers
// the checkpoint code shares. Every hid_t the I/O code creates lives in an H5Handle,
// so an exception on any path closes files, datasets, dataspaces, property lists,
// attributes and types (HDF5 keeps a file open as long as any object in it is).

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/hdf5_check.hpp"
#include "tessera/dtype.hpp"
#include "tessera/tensor.hpp"

namespace tessera::io::detail {

// The close function that matches each kind of identifier.
enum class H5Kind { file, group, dataset, dataspace, plist, attribute, datatype };

template <H5Kind K>
class H5Handle {
 public:
  H5Handle() = default;
  // Takes ownership of `id`. A negative id (a failed call) is held as empty: callers
  // either check the call first (TESSERA_CHECK_HDF5) or test the handle (operator bool).
  explicit H5Handle(hid_t id) : id_(id) {}
  H5Handle(H5Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
  H5Handle& operator=(H5Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() { reset(); }

  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }

  // Closes now and reports a failure (a file close is where buffered writes reach the
  // disk, so its error matters); the destructor closes silently.
  void close() {
    if (id_ < 0) return;
    const hid_t id = std::exchange(id_, H5I_INVALID_HID);
    TESSERA_CHECK_HDF5(close_id(id));
  }
  void reset() noexcept {
    if (id_ >= 0) (void)close_id(std::exchange(id_, H5I_INVALID_HID));
  }

 private:
  static herr_t close_id(hid_t id) {
    if constexpr (K == H5Kind::file) return H5Fclose(id);
    if constexpr (K == H5Kind::group) return H5Gclose(id);
    if constexpr (K == H5Kind::dataset) return H5Dclose(id);
    if constexpr (K == H5Kind::dataspace) return H5Sclose(id);
    if constexpr (K == H5Kind::plist) return H5Pclose(id);
    if constexpr (K == H5Kind::attribute) return H5Aclose(id);
    if constexpr (K == H5Kind::datatype) return H5Tclose(id);
  }

  hid_t id_ = H5I_INVALID_HID;
};

using H5File = H5Handle<H5Kind::file>;
using H5Group = H5Handle<H5Kind::group>;
using H5Dataset = H5Handle<H5Kind::dataset>;
using H5Space = H5Handle<H5Kind::dataspace>;
using H5Plist = H5Handle<H5Kind::plist>;
using H5Attribute = H5Handle<H5Kind::attribute>;
using H5Type = H5Handle<H5Kind::datatype>;

// A simple dataspace of `shape` (at least one dim).
H5Space make_space(const Shape& shape);
// Selects the block [offset, offset + count) of `space` (nothing when any count is 0).
void select_block(const H5Space& space, const Shape& offset, const Shape& count);
// The dims of a dataset's dataspace.
Shape dataset_shape(hid_t dataset);

// File (little-endian, fixed) and memory (native) types of a tessera dtype. bf16 is
// stored as its 16-bit pattern (unsigned 16-bit) and named by the `dtype` attribute.
hid_t file_type_of(DType dtype);
hid_t memory_type_of(DType dtype);

bool link_exists(hid_t location, const std::string& path);
bool attribute_exists(hid_t object, const std::string& name);

// Attributes on any object (file root, group, dataset). Strings are variable-length
// UTF-8 scalars, so h5py reads them as str.
void write_string_attribute(hid_t object, const std::string& name, const std::string& value);
void write_int_attribute(hid_t object, const std::string& name, std::int64_t value);
void write_uint_attribute(hid_t object, const std::string& name, std::uint64_t value);
void write_int_array_attribute(hid_t object, const std::string& name, const std::vector<std::int64_t>& values);
std::string read_string_attribute(hid_t object, const std::string& name);
std::int64_t read_int_attribute(hid_t object, const std::string& name);
std::uint64_t read_uint_attribute(hid_t object, const std::string& name);
std::vector<std::int64_t> read_int_array_attribute(hid_t object, const std::string& name);

// Names of the links directly inside the group at `path` (empty when it is absent), in
// creation order when the group tracks it, otherwise by name.
std::vector<std::string> list_links(hid_t file, const std::string& path);

// Opens a file read-only with the default (POSIX) driver; the error names `path`.
H5File open_read_only(const std::string& path);

}  // namespace tessera::io::detail
