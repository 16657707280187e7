// The forward exchange's direct path on the host: an MPI datatype per message over the
// fields' own memory, so MPI reads the interior rects and writes the halo rects itself
// and tessera packs nothing. Built once per field set (the datatypes hold absolute
// addresses), for the messages where it pays (Plan::kDirectRowBytes, kDirectMaxBytes);
// the others stay packed (halo_buffers.cpp).

#include <algorithm>
#include <vector>

#include "domain/halo_plan.hpp"
#include "tessera/check.hpp"

namespace tessera::domain {

namespace {

using halo::align8;
using halo::FieldView;
using halo::HaloRect;

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

namespace {

// Transfer `t`'s message as one struct datatype in the packed layout (for_each_slot in
// halo_buffers.cpp): per field, padding to 8 bytes, then its rects. A sent message's
// padding comes from zeros, a received one's lands in t.padding.
MPI_Datatype message_type(const std::vector<FieldView>& views, halo::Transfer& t, bool sending) {
  static const std::byte kZeros[8] = {};
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
  return message;
}

}  // namespace

void HaloExchange::Plan::prepare_direct() {
  if (direct_built && views.size() == direct_views.size() &&
      std::equal(views.begin(), views.end(), direct_views.begin(), same_view)) {
    return;  // the same fields as the last exchange: the datatypes stand
  }
  free_direct();
  if (device.type != DeviceType::host || views.empty()) return;
  for (std::vector<halo::Transfer>* list : {&sends, &recvs}) {
    for (halo::Transfer& t : *list) {
      bool eligible = !t.via_node && message_bytes(t.cells) <= kDirectMaxBytes;
      for (const FieldView& f : views)
        for (const HaloRect& rect : t.rects) eligible = eligible && long_rows(f, rect, kDirectRowBytes);
      if (eligible) t.direct = message_type(views, t, list == &sends);
    }
  }
  direct_views = views;
  direct_built = true;
  stats.direct_messages = static_cast<int>(
      std::count_if(sends.begin(), sends.end(), [](const halo::Transfer& t) { return t.direct != MPI_DATATYPE_NULL; }));
}

}  // namespace tessera::domain
