// The message buffers of a HaloExchange and the passes that move halo cells between
// the fields and them: every entry runs on the fields' device through its compute
// backend (backend/compute.hpp: halo_pack, halo_unpack, halo_zero), so this file never
// asks which device that is. Only MessageBuffer decides, through mpi_can_address,
// whether MPI reads the packed bytes directly or a pinned host copy of them.

#include <algorithm>
#include <utility>

#include "backend/compute.hpp"
#include "domain/halo_plan.hpp"
#include "tessera/check.hpp"
#include "tessera/comm.hpp"

namespace tessera::domain {

namespace halo {

MessageBuffer& MessageBuffer::operator=(MessageBuffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    staged_ = other.staged_;
    bytes_ = std::exchange(other.bytes_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    packed_ = std::exchange(other.packed_, nullptr);
    staging_ = std::exchange(other.staging_, nullptr);
  }
  return *this;
}

void MessageBuffer::reserve(std::size_t bytes, Device device, bool staged) {
  if (!(device == device_) || staged != staged_ || bytes > capacity_) {
    release();
    device_ = device;
    staged_ = staged;
    capacity_ = bytes;
    packed_ = backend_for(device).allocate(bytes, device.index);
    if (staged) staging_ = tessera::detail::compute_for(device).allocate_pinned(bytes);
  }
  bytes_ = bytes;
}

void MessageBuffer::packed_to_message() const {
  if (staged_) backend_for(device_).copy_to_host(staging_, packed_, bytes_, device_.index);
}

void MessageBuffer::message_to_packed() const {
  if (staged_) backend_for(device_).copy_from_host(packed_, staging_, bytes_, device_.index);
}

void MessageBuffer::release() noexcept {
  if (packed_ != nullptr) backend_for(device_).deallocate(packed_, capacity_, device_.index);
  if (staging_ != nullptr) tessera::detail::compute_for(device_).free_pinned(staging_);
  packed_ = staging_ = nullptr;
  capacity_ = bytes_ = 0;
}

}  // namespace halo

namespace {

using halo::align8;
using halo::FieldView;
using halo::HaloRect;

// Calls fn(field, rect, offset) for each field and rect in buffer order.
template <class Fn>
void for_each_slot(const std::vector<FieldView>& views, const std::vector<HaloRect>& rects, Fn&& fn) {
  std::size_t offset = 0;
  for (const FieldView& f : views) {
    offset = align8(offset);
    for (const HaloRect& rect : rects) {
      fn(f, rect, offset);
      offset += static_cast<std::size_t>(f.leading * tessera::detail::halo_rect_area(rect)) * f.element;
    }
  }
}

}  // namespace

std::size_t HaloExchange::Plan::message_bytes(std::int64_t cells) const {
  std::size_t bytes = 0;
  for (const FieldView& f : views) bytes = align8(bytes) + static_cast<std::size_t>(f.leading * cells) * f.element;
  return bytes;
}

void HaloExchange::Plan::reserve(MessageBuffer& buffer, std::int64_t cells, bool for_mpi) const {
  buffer.reserve(message_bytes(cells), device, for_mpi && !mpi_can_address(device));
}

void HaloExchange::Plan::pack(const std::vector<HaloRect>& rects, std::byte* packed) const {
  auto& compute = tessera::detail::compute_for(device);
  for_each_slot(views, rects, [&](const FieldView& f, const HaloRect& rect, std::size_t offset) {
    compute.halo_pack(f.dtype, f.base, f.layout, rect, packed + offset, device.index);
  });
}

void HaloExchange::Plan::unpack(const std::vector<HaloRect>& rects, const std::byte* packed, bool accumulate) const {
  auto& compute = tessera::detail::compute_for(device);
  for_each_slot(views, rects, [&](const FieldView& f, const HaloRect& rect, std::size_t offset) {
    compute.halo_unpack(f.dtype, f.base, f.layout, rect, packed + offset, accumulate, device.index);
  });
}

void HaloExchange::Plan::zero(const std::vector<HaloRect>& rects) const {
  auto& compute = tessera::detail::compute_for(device);
  for (const FieldView& f : views) {
    for (const HaloRect& rect : rects) compute.halo_zero(f.dtype, f.base, f.layout, rect, device.index);
  }
}

}  // namespace tessera::domain
