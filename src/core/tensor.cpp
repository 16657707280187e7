#include "tessera/tensor.hpp"

#include <cstring>
#include <optional>

#include "tessera/backend.hpp"
#include "tessera/detail/checked_math.hpp"

namespace tessera {

namespace detail {

// Memory behind one or more tensors. Owning storage is returned to the backend that
// allocated it; a view never frees the caller's memory.
struct Storage {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  Device device;
  bool owning = false;

  Storage(void* p, std::size_t b, Device d, bool own) : ptr(p), bytes(b), device(d), owning(own) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (owning && ptr != nullptr) backend_for(device).deallocate(ptr, bytes, device.index);
  }
};

}  // namespace detail

namespace {

// Checks the dim count and the extents, and returns the element count (checked: every
// constructor of a Tensor passes here, so numel() and nbytes() never overflow later).
std::int64_t check_shape(const Shape& shape, const char* what) {
  if (shape.size() > static_cast<std::size_t>(detail::kMaxDims)) {
    throw ShapeError(std::string(what) + ": shape " + shape_str(shape) + " has " +
                     std::to_string(shape.size()) + " dims; tessera supports at most " +
                     std::to_string(detail::kMaxDims));
  }
  return detail::checked_numel(shape, what);
}

// Row-major strides in elements. An empty shape has a count that fits whatever its
// extents, but its strides must fit too. (Messages are built only on failure: this runs
// for every new tensor.)
Shape strides_of(const Shape& shape, const char* what) {
  Shape strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    if (d == 0) break;
    const auto next = detail::try_mul(stride, shape[d]);
    if (!next) throw ShapeError(std::string(what) + ": the strides of shape " + shape_str(shape) + " overflow int64");
    stride = *next;
  }
  return strides;
}

// Elements from the first to the last one a strided view addresses (strides >= 0).
std::int64_t span_of(const Shape& shape, const Shape& strides, std::int64_t numel, const char* what) {
  if (numel == 0) return 0;
  std::optional<std::int64_t> last = 0;
  for (std::size_t d = 0; d < shape.size() && last; ++d) {
    const auto step = detail::try_mul(shape[d] - 1, strides[d]);
    last = step ? detail::try_add(*last, *step) : std::nullopt;
  }
  if (last) last = detail::try_add(*last, std::int64_t{1});
  if (!last) {
    throw ShapeError(std::string(what) + ": shape " + shape_str(shape) + " with strides " + shape_str(strides) +
                     " addresses more elements than int64 can count");
  }
  return *last;
}

void check_concrete_device(Device device, const char* what) {
  if (device.is_cuda() && device.index < 0) {
    throw InvalidArgument(std::string(what) + ": device " + device.str() +
                          " has no concrete index (cuda:auto is resolved by a Mesh; pass "
                          "mesh.device() or Device::cuda(n))");
  }
}

detail::StridedLayout layout_of(const Shape& shape, const Shape& strides) {
  detail::StridedLayout layout;
  layout.ndim = static_cast<int>(shape.size());
  for (int d = 0; d < layout.ndim; ++d) {
    layout.shape[d] = shape[d];
    layout.strides[d] = strides[d];
  }
  return layout;
}

}  // namespace

std::int64_t shape_numel(const Shape& shape) { return detail::checked_numel(shape, "shape_numel"); }

std::string shape_str(const Shape& shape) { return detail::extents_str(shape); }

Shape contiguous_strides(const Shape& shape) { return strides_of(shape, "contiguous_strides"); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  const std::int64_t numel = check_shape(shape, "Tensor::empty");
  check_concrete_device(device, "Tensor::empty");
  Tensor t;
  t.shape_ = shape;
  t.strides_ = strides_of(shape, "Tensor::empty");
  t.dtype_ = dtype;
  t.device_ = device;
  const std::size_t bytes = detail::checked_bytes(numel, t.element_size(), "Tensor::empty");
  void* ptr = bytes ? backend_for(device).allocate(bytes, device.index) : nullptr;
  t.storage_ = std::make_shared<detail::Storage>(ptr, bytes, device, true);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_zero();
  return t;
}

Tensor Tensor::view(void* data, const Shape& shape, DType dtype, Device device,
                    const Shape& strides) {
  const std::int64_t numel = check_shape(shape, "Tensor::view");
  check_concrete_device(device, "Tensor::view");
  if (!strides.empty() && strides.size() != shape.size()) {
    throw ShapeError("Tensor::view: " + std::to_string(strides.size()) + " strides given for shape " +
                     shape_str(shape));
  }
  for (auto s : strides) {
    if (s < 0) throw ShapeError("Tensor::view: negative stride in " + shape_str(strides));
  }
  if (data == nullptr && numel != 0) {
    throw InvalidArgument("Tensor::view: null data pointer for a non-empty " +
                          std::string(dtype_name(dtype)) + shape_str(shape) + " view");
  }
  Tensor t;
  t.shape_ = shape;
  t.strides_ = strides.empty() ? strides_of(shape, "Tensor::view") : strides;
  t.dtype_ = dtype;
  t.device_ = device;
  // The caller's memory must hold every addressed element: the span, not the count, of
  // a strided view (a wrapped span would describe less memory than the view touches).
  const std::size_t bytes =
      detail::checked_bytes(span_of(shape, t.strides_, numel, "Tensor::view"), t.element_size(), "Tensor::view");
  t.storage_ = std::make_shared<detail::Storage>(data, bytes, device, false);
  return t;
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  if (static_cast<std::int64_t>(values.size()) != shape_numel(shape)) {
    throw ShapeError("Tensor::from_vector: " + std::to_string(values.size()) +
                     " values for shape " + shape_str(shape));
  }
  Tensor t = empty(shape, dtype_of<T>);
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * sizeof(T));
  return t;
}

std::int64_t Tensor::size(int d) const {
  if (d < 0 || d >= dim()) {
    throw InvalidArgument("Tensor::size: dim " + std::to_string(d) + " out of range for " + str());
  }
  return shape_[d];
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t d = shape_.size(); d-- > 0;) {
    // The stride of an extent-1 dim never matters, so narrow() to one index stays
    // contiguous.
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

bool Tensor::owns_storage() const { return storage_ && storage_->owning; }

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  std::string s = std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device_.str();
  if (!is_contiguous()) s += " (strided)";
  return s;
}

void* Tensor::data() const {
  if (!defined()) throw InvalidArgument("Tensor::data: the tensor is undefined");
  if (storage_->ptr == nullptr) return nullptr;
  return static_cast<unsigned char*>(storage_->ptr) + offset_ * static_cast<std::int64_t>(element_size());
}

void Tensor::check_dtype(DType expected, const char* what) const {
  if (dtype_ != expected) {
    throw ShapeError(std::string(what) + ": expected dtype " + std::string(dtype_name(expected)) +
                     ", tensor is " + str());
  }
}

Tensor Tensor::narrow(int d, std::int64_t start, std::int64_t length) const {
  if (d < 0 || d >= dim()) {
    throw InvalidArgument("Tensor::narrow: dim " + std::to_string(d) + " out of range for " + str());
  }
  // Written so that nothing overflows: start + length may not fit in int64.
  if (start < 0 || length < 0 || start > shape_[d] || length > shape_[d] - start) {
    throw InvalidArgument("Tensor::narrow: " + std::to_string(length) + " indices from " + std::to_string(start) +
                          " out of range for dim " + std::to_string(d) + " of " + str());
  }
  Tensor t = *this;
  t.shape_[d] = length;
  t.offset_ += start * strides_[d];
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (check_shape(shape, "Tensor::reshape") != numel()) {
    throw ShapeError("Tensor::reshape: cannot view " + str() + " as " + shape_str(shape) +
                     " (element counts differ)");
  }
  if (!is_contiguous()) {
    throw ShapeError("Tensor::reshape: " + str() + " is not contiguous; call contiguous() first");
  }
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = strides_of(shape, "Tensor::reshape");
  return t;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (!defined() || !src.defined()) {
    throw InvalidArgument("Tensor::copy_from: source or destination is undefined");
  }
  if (src.shape_ != shape_ || src.dtype_ != dtype_) {
    throw ShapeError("Tensor::copy_from: destination " + str() + " and source " + src.str() +
                     " differ in shape or dtype");
  }
  if (numel() == 0) return;

  if (src.device_ == device_) {
    Backend& backend = backend_for(device_);
    if (device_.is_host() && is_contiguous() && src.is_contiguous()) {
      backend.copy_to_host(data(), src.data(), nbytes(), 0);
    } else {
      backend.copy_strided(data(), layout_of(shape_, strides_), src.data(),
                           layout_of(src.shape_, src.strides_), element_size(), device_.index);
    }
    return;
  }

  // Across devices: bytes move contiguously; strides are handled on one side.
  if (!is_contiguous()) {
    Tensor staging = empty(shape_, dtype_, device_);
    staging.copy_from(src);
    copy_from(staging);
    return;
  }
  const Tensor packed = src.contiguous();
  if (packed.device_.is_host()) {
    backend_for(device_).copy_from_host(data(), packed.data(), nbytes(), device_.index);
  } else if (device_.is_host()) {
    backend_for(packed.device_).copy_to_host(data(), packed.data(), nbytes(), packed.device_.index);
  } else {  // between two GPUs, through the host
    Tensor host = packed.to(Device::host());
    copy_from(host);
  }
}

void Tensor::fill_zero() {
  if (!defined()) throw InvalidArgument("Tensor::fill_zero: the tensor is undefined");
  if (numel() == 0) return;
  if (is_contiguous()) {
    backend_for(device_).fill_zero(data(), nbytes(), device_.index);
  } else {
    copy_from(zeros(shape_, dtype_, device_));
  }
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  check_dtype(dtype_of<T>, "Tensor::to_vector");
  const Tensor host = to(Device::host()).contiguous();
  std::vector<T> out(static_cast<std::size_t>(numel()));
  if (!out.empty()) std::memcpy(out.data(), host.data(), out.size() * sizeof(T));
  return out;
}

template Tensor Tensor::from_vector<float>(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector<double>(const std::vector<double>&, const Shape&);
template Tensor Tensor::from_vector<bfloat16>(const std::vector<bfloat16>&, const Shape&);
template Tensor Tensor::from_vector<std::int64_t>(const std::vector<std::int64_t>&, const Shape&);
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<bfloat16> Tensor::to_vector<bfloat16>() const;
template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;

}  // namespace tessera
