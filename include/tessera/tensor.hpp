#pragma once
// Tensor: dtype, shape, strides, device and storage. Small and explicit: no autograd,
// no expression templates. Storage is either owned (allocated through the backend of
// the tensor's device) or a non-owning view of caller memory, e.g. a Fortran array,
// wrapped without a copy.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/device.hpp"
#include "tessera/dtype.hpp"
#include "tessera/error.hpp"

namespace tessera {

using Shape = std::vector<std::int64_t>;

// Element count and row-major strides; ShapeError on a negative extent or a count or
// stride that overflows int64 (detail/checked_math.hpp).
std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
Shape contiguous_strides(const Shape& shape);

namespace detail {
struct Storage;
}

class Tensor {
 public:
  Tensor() = default;  // undefined tensor: defined() == false

  // Every way of making a tensor checks its sizes: an element count, stride, span or
  // byte size that overflows is a ShapeError naming the function, so numel() and
  // nbytes() of an existing tensor never overflow.
  // Uninitialised / zero-filled owning tensors, allocated on `device`.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::host());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::host());
  // Non-owning view of caller memory (row-major unless `strides` are given, in
  // elements). The caller keeps the memory alive for the tensor's lifetime.
  static Tensor view(void* data, const Shape& shape, DType dtype,
                     Device device = Device::host(), const Shape& strides = {});
  // Host tensor holding a copy of `values` (numel must equal values.size()).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  std::int64_t size(int dim) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t element_size() const { return dtype_size(dtype_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  bool owns_storage() const;
  std::string str() const;  // "f32[2, 3] on host"

  // Pointer to the first element (storage + offset).
  void* data() const;
  template <class T>
  T* data() const {
    check_dtype(dtype_of<T>, "data<T>()");
    return static_cast<T*>(data());
  }

  // A view of `length` indices starting at `start` along `dim`; shares storage.
  Tensor narrow(int dim, std::int64_t start, std::int64_t length) const;
  // Same storage, new shape; requires a contiguous tensor with the same numel.
  Tensor reshape(const Shape& shape) const;
  // A contiguous owning copy on the same device (a cheap alias when already contiguous).
  Tensor contiguous() const;
  // A contiguous owning copy on the same device, always a new storage.
  Tensor clone() const;
  // A contiguous copy on `device` (returns *this when it already lives there).
  Tensor to(Device device) const;
  // Copies `src` elementwise into this tensor: same shape and dtype, any devices,
  // any strides on either side.
  void copy_from(const Tensor& src);
  void fill_zero();

  // Host-only element access for tests and small bookkeeping.
  template <class T>
  std::vector<T> to_vector() const;

  void check_dtype(DType expected, const char* what) const;

 private:
  std::shared_ptr<detail::Storage> storage_;
  std::int64_t offset_ = 0;  // in elements
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::f32;
  Device device_;
};

extern template Tensor Tensor::from_vector<float>(const std::vector<float>&, const Shape&);
extern template Tensor Tensor::from_vector<double>(const std::vector<double>&, const Shape&);
extern template Tensor Tensor::from_vector<bfloat16>(const std::vector<bfloat16>&, const Shape&);
extern template Tensor Tensor::from_vector<std::int64_t>(const std::vector<std::int64_t>&,
                                                          const Shape&);
extern template std::vector<float> Tensor::to_vector<float>() const;
extern template std::vector<double> Tensor::to_vector<double>() const;
extern template std::vector<bfloat16> Tensor::to_vector<bfloat16>() const;
extern template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;

}  // namespace tessera
