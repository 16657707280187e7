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

using halo::FieldView;
using halo::HaloRect;

std::size_t align8(std::size_t n) { return (n + 7) & ~std::size_t{7}; }

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

void HaloExchange::Plan::prepare_node_memory(bool all_host) {
  std::size_t bytes = 0;
  for (std::vector<halo::Transfer>* list : {&sends, &recvs}) {
    std::size_t offset = 0;  // outgoing regions of one direction (forward: sends; adjoint: recvs)
    for (halo::Transfer& t : *list) {
      const std::size_t message = message_bytes(t.cells);
      t.via_node = all_host && node.on_node(t.peer) && message >= kNodeMemoryMinBytes;
      if (!t.via_node) continue;
      t.window_offset = static_cast<std::int64_t>(offset);
      offset += (message + 63) & ~std::size_t{63};  // each region on its own cache lines
    }
    bytes = std::max(bytes, offset);
  }
  stats.node_memory_messages =
      static_cast<int>(std::count_if(sends.begin(), sends.end(), [](const halo::Transfer& t) { return t.via_node; }));
  node.allocate(bytes);  // every node rank, together (prepare's agreement reaches all of them)
}

namespace {

bool same_view(const FieldView& a, const FieldView& b) {
  if (a.base != b.base || a.dtype != b.dtype || a.layout.ndim != b.layout.ndim) return false;
  for (int d = 0; d < a.layout.ndim; ++d) {
    if (a.layout.shape[d] != b.layout.shape[d] || a.layout.strides[d] != b.layout.strides[d]) return false;
  }
  return true;
}

// Whether MPI walks `rect` of `f` in rows of at least `min_bytes` contiguous bytes.
bool long_rows(const FieldView& f, const HaloRect& rect, std::size_t min_bytes) {
  const std::int64_t lon_stride = f.layout.strides[f.layout.ndim - 1];
  return rect.rows == 0 || rect.cols == 0 ||
         (lon_stride == 1 && static_cast<std::size_t>(rect.cols) * f.element >= min_bytes);
}

// `rect` of field `f`, every leading index, in the packed order (leading..., row, col):
// a row of contiguous bytes, an hvector of rows (lat_step may be -1), one hvector per
// leading dim, innermost last. Displacements are relative to the rect's first cell.
MPI_Datatype rect_type(const FieldView& f, const HaloRect& rect) {
  const auto elem = static_cast<MPI_Aint>(f.element);
  const int lat_dim = f.layout.ndim - 2;
  MPI_Datatype current = MPI_DATATYPE_NULL, next = MPI_DATATYPE_NULL;
  TESSERA_CHECK_MPI(MPI_Type_contiguous(static_cast<int>(rect.cols * f.element), MPI_BYTE, &current));
  TESSERA_CHECK_MPI(MPI_Type_create_hvector(static_cast<int>(rect.rows), 1,
                                            rect.lat_step * f.layout.strides[lat_dim] * elem, current, &next));
  MPI_Type_free(&current);
  current = next;
  for (int d = lat_dim - 1; d >= 0; --d) {
    TESSERA_CHECK_MPI(MPI_Type_create_hvector(static_cast<int>(f.layout.shape[d]), 1, f.layout.strides[d] * elem,
                                              current, &next));
    MPI_Type_free(&current);
    current = next;
  }
  return current;
}

}  // namespace

HaloExchange::Plan::~Plan() {
  settle_node_answers();
  free_direct();
}

void HaloExchange::Plan::free_direct() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  for (std::vector<halo::Transfer>* list : {&sends, &recvs}) {
    for (halo::Transfer& t : *list) {
      if (t.direct != MPI_DATATYPE_NULL && !finalized) MPI_Type_free(&t.direct);
      t.direct = MPI_DATATYPE_NULL;
    }
  }
  direct_views.clear();
  direct_built = false;
  stats.direct_messages = 0;
}

void HaloExchange::Plan::prepare_direct() {
  if (direct_built && views.size() == direct_views.size() &&
      std::equal(views.begin(), views.end(), direct_views.begin(), same_view)) {
    return;  // the same fields as the last exchange: the datatypes stand
  }
  free_direct();
  if (device.type != DeviceType::host || views.empty()) return;
  static const std::byte kZeros[8] = {};
  for (std::vector<halo::Transfer>* list : {&sends, &recvs}) {
    const bool sending = list == &sends;
    for (halo::Transfer& t : *list) {
      bool eligible = !t.via_node && message_bytes(t.cells) <= kDirectMaxBytes;
      for (const FieldView& f : views)
        for (const HaloRect& rect : t.rects) eligible = eligible && long_rows(f, rect, kDirectRowBytes);
      if (!eligible) continue;
      // The packed layout (for_each_slot): per field, padding to 8 bytes, then its rects.
      t.padding.assign(8 * views.size(), std::byte{0});
      std::vector<int> lengths;
      std::vector<MPI_Aint> displacements;
      std::vector<MPI_Datatype> types;
      std::size_t offset = 0;
      for (std::size_t k = 0; k < views.size(); ++k) {
        const FieldView& f = views[k];
        const std::size_t pad = align8(offset) - offset;
        if (pad > 0) {
          MPI_Aint where = 0;
          MPI_Get_address(sending ? static_cast<const void*>(kZeros) : static_cast<void*>(&t.padding[8 * k]), &where);
          lengths.push_back(static_cast<int>(pad));
          displacements.push_back(where);
          types.push_back(MPI_BYTE);
        }
        offset += pad;
        for (const HaloRect& rect : t.rects) {
          const std::int64_t cells = f.leading * tessera::detail::halo_rect_area(rect);
          if (cells == 0) continue;
          const int lat_dim = f.layout.ndim - 2;
          const std::int64_t first = rect.lat0 * f.layout.strides[lat_dim] + rect.lon0 * f.layout.strides[lat_dim + 1];
          MPI_Aint where = 0;
          MPI_Get_address(static_cast<std::byte*>(f.base) + first * static_cast<std::int64_t>(f.element), &where);
          lengths.push_back(1);
          displacements.push_back(where);
          types.push_back(rect_type(f, rect));
          offset += static_cast<std::size_t>(cells) * f.element;
        }
      }
      MPI_Datatype message = MPI_DATATYPE_NULL;
      const int status = MPI_Type_create_struct(static_cast<int>(types.size()), lengths.data(), displacements.data(),
                                                types.data(), &message);
      for (MPI_Datatype& type : types)
        if (type != MPI_BYTE) MPI_Type_free(&type);
      TESSERA_CHECK_MPI(status);
      TESSERA_CHECK_MPI(MPI_Type_commit(&message));
      t.direct = message;
    }
  }
  direct_views = views;
  direct_built = true;
  stats.direct_messages = static_cast<int>(
      std::count_if(sends.begin(), sends.end(), [](const halo::Transfer& t) { return t.direct != MPI_DATATYPE_NULL; }));
}

void HaloExchange::Plan::zero(const std::vector<HaloRect>& rects) const {
  auto& compute = tessera::detail::compute_for(device);
  for (const FieldView& f : views) {
    for (const HaloRect& rect : rects) compute.halo_zero(f.dtype, f.base, f.layout, rect, device.index);
  }
}

}  // namespace tessera::domain
