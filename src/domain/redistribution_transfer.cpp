// Redistribution's transfers: each message posted in place (one contiguous piece of one
// host field) or packed row by row; every wait under the wait policy; unpacked what was
// packed. The plan they run is built in redistribution.cpp.

#include "tessera/domain/redistribution.hpp"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <utility>

#include "comm/request_state.hpp"
#include "domain/redistribution_plan.hpp"
#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/check.hpp"

namespace tessera::domain {

namespace {

Shape leading_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

std::string describe(const Tensor& t) { return t.defined() ? t.str() : std::string("undefined"); }

// Bytes of field k's part of a message of `cells` cells, each part 8-byte aligned so
// every element view is aligned whatever the mix of dtypes.
std::size_t part_bytes(const Tensor& t, std::int64_t cells) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(leading_of(t)) * cells) * t.element_size();
  return (bytes + 7) / 8 * 8;
}

}  // namespace

// Checks one transfer's fields (agreed over the code communicator the first time a
// field set is seen, as the halo exchange does) and keeps them alive while in flight.
static void prepare(Redistribution::Plan& p, const std::vector<Tensor>& code_fields,
                    const std::vector<Tensor>& model_fields, const char* op) {
  if (p.mode != Redistribution::Plan::Mode::idle) {
    throw InvalidArgument(std::string("Redistribution::") + op +
                          ": a transfer of this plan is still in flight; call finish() first");
  }
  const Decomposition& code = *p.code;
  const bool model = p.model_rank >= 0;
  auto check = [&] {
    const std::string where = std::string("Redistribution::") + op;
    if (code_fields.empty()) throw InvalidArgument(where + ": no code fields");
    const bool no_model_fields =
        std::all_of(model_fields.begin(), model_fields.end(), [](const Tensor& t) { return !t.defined(); });
    if (!model && !no_model_fields) {
      throw InvalidArgument(where + ": code rank " + std::to_string(code.rank()) +
                            " is not a model rank and must pass no model fields");
    }
    if (model && model_fields.size() != code_fields.size()) {
      throw InvalidArgument(where + ": model rank " + std::to_string(p.model_rank) + " passed " +
                            std::to_string(model_fields.size()) + " model fields for " +
                            std::to_string(code_fields.size()) + " code fields");
    }
    for (std::size_t k = 0; k < code_fields.size(); ++k) {
      const Tensor& c = code_fields[k];
      if (!c.defined() || c.dim() < 2 || c.dim() > 8 || c.shape() != code.local_shape(leading_of(c))) {
        throw ShapeError(where + ": code field " + std::to_string(k) + " " + describe(c) + " on code rank " +
                         std::to_string(code.rank()) + " must be (leading..., " +
                         std::to_string(code.box().lat.length) + ", " + std::to_string(code.box().lon.length) +
                         "): this rank's box " + code.box().str());
      }
      if (!model) continue;
      const Tensor& t = model_fields[k];
      const LocalBox b = p.box_of_model(p.model_rank);
      Shape want = leading_of(c);
      want.push_back(b.lat.length);
      want.push_back(b.lon.length);
      if (!t.defined() || t.shape() != want || t.dtype() != c.dtype()) {
        throw ShapeError(where + ": model field " + std::to_string(k) + " " + describe(t) + " on model rank " +
                         std::to_string(p.model_rank) + " must be " + std::string(dtype_name(c.dtype())) +
                         shape_str(want) + " (the code field's dtype and leading dims over the model box " +
                         b.str() + ")");
      }
    }
  };
  FieldKeys keys = keys_of(code_fields, model_fields);
  if (!p.validated || !(keys == *p.validated)) {
    const MPI_Comm comm = code.comm().mpi_comm();
    agree_on_success(comm, check);
    std::string signature;
    for (const Tensor& c : code_fields) signature += std::string(dtype_name(c.dtype())) + shape_str(leading_of(c)) + ";";
    require_same_on_all_ranks(comm, signature,
                              std::string("Redistribution::") + op +
                                  " (field count, dtypes, leading dims): the ranks of the code's communicator passed "
                                  "different fields");
    p.validated = std::move(keys);
  }
  p.code_fields = code_fields;
  p.model_fields = model_fields;
}

namespace {

// Copies `from` into `to` (host views of one shape whose longitude stride is 1), one
// memcpy per (leading index, latitude row): the element-by-element strided copy of
// Tensor::copy_from was 30 times slower than MPI_Alltoallv of the same bytes on a
// 720 x 1440 field. Packing is this copy with a contiguous view of the buffer.
void copy_by_rows(const Tensor& to, const Tensor& from) {
  const int d = to.dim();
  const std::size_t esize = to.element_size();
  const std::size_t row = static_cast<std::size_t>(to.size(d - 1)) * esize;
  const std::int64_t rows = to.size(d - 2);
  const std::int64_t to_lat = to.strides()[static_cast<std::size_t>(d - 2)];
  const std::int64_t from_lat = from.strides()[static_cast<std::size_t>(d - 2)];
  auto* to_base = static_cast<std::byte*>(to.data());
  const auto* from_base = static_cast<const std::byte*>(from.data());
  std::vector<std::int64_t> index(static_cast<std::size_t>(d - 2), 0);
  const std::int64_t leading = shape_numel(Shape(to.shape().begin(), to.shape().end() - 2));
  for (std::int64_t l = 0; l < leading; ++l) {
    std::int64_t to_offset = 0, from_offset = 0;
    for (std::size_t k = 0; k < index.size(); ++k) {
      to_offset += index[k] * to.strides()[k];
      from_offset += index[k] * from.strides()[k];
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      std::memcpy(to_base + static_cast<std::size_t>(to_offset + i * to_lat) * esize,
                  from_base + static_cast<std::size_t>(from_offset + i * from_lat) * esize, row);
    }
    for (int k = d - 3; k >= 0; --k) {  // the next leading index, last fastest
      if (++index[static_cast<std::size_t>(k)] < to.size(k)) break;
      index[static_cast<std::size_t>(k)] = 0;
    }
  }
}

bool host_rows(const Tensor& t) { return t.device().type == DeviceType::host && t.strides().back() == 1; }

// One part from a field to another, a buffer view or a field (a self copy).
void copy_part(Tensor to, const Tensor& from) {
  if (to.numel() == 0) return;
  if (host_rows(to) && host_rows(from)) {
    copy_by_rows(to, from);
  } else {
    to.copy_from(from);  // device fields: staged through the host buffer
  }
}

// Packs every field's part of `r` (each field's (leading..., box) tensor) at `data`, or
// unpacks it from there.
void pack_at(const std::vector<Tensor>& fields, const LocalBox& box, const Rect& r, std::byte* data, bool unpack) {
  std::size_t offset = 0;
  for (const Tensor& t : fields) {
    Tensor part = rect_view(t, box, r);
    Tensor flat = Tensor::view(data + offset, part.shape(), t.dtype());
    if (unpack) {
      copy_part(part, flat);
    } else {
      copy_part(flat, part);
    }
    offset += part_bytes(t, r.cells());
  }
}

void pack(const std::vector<Tensor>& fields, const LocalBox& box, const Rect& r, std::vector<std::byte>& buffer,
          bool unpack) {
  if (!unpack) {
    std::size_t total = 0;
    for (const Tensor& t : fields) total += part_bytes(t, r.cells());
    buffer.resize(total);
  }
  pack_at(fields, box, r, buffer.data(), unpack);
}

// The part of the one field a message carries when that part is a single contiguous run
// of the field's memory (a host field whose part spans the box's longitudes, or the whole
// box: at M = 1 every code rank's box goes whole to the model rank and comes back whole),
// so MPI reads or writes the caller's array in place; undefined otherwise. Everything
// else is packed row by row: on MPICH 4.0.2 (ch4:ucx) a derived datatype over the
// fields' rows (the halo exchange's direct path) moved a 720 x 1440 x 8 field at 0.53
// of MPI_Alltoallv's bandwidth against 0.70-0.84 for packing (MPICH hands UCX a
// non-contiguous type as pack callbacks, a copy per pipeline fragment); the two were on
// a par at 180 x 360 (docs/coupling.md).
Tensor in_place_part(const std::vector<Tensor>& fields, const LocalBox& box, const Rect& r) {
  if (fields.size() != 1 || fields[0].device().type != DeviceType::host) return {};
  Tensor part = rect_view(fields[0], box, r);
  const std::size_t bytes = static_cast<std::size_t>(part.numel()) * part.element_size();
  if (!part.is_contiguous() || bytes != part_bytes(fields[0], r.cells())) return {};  // padded: packed
  return part;
}

std::size_t message_bytes(const std::vector<Tensor>& fields, const Rect& r) {
  std::size_t total = 0;
  for (const Tensor& t : fields) total += part_bytes(t, r.cells());
  if (total > static_cast<std::size_t>(INT_MAX)) {
    throw UnsupportedError("Redistribution: a message of " + std::to_string(total) +
                           " bytes exceeds MPI's int count limit; move the fields in several calls");
  }
  return total;
}

// Sizes a relayed message's buffer for this transfer's fields: its pieces' offsets.
void lay_out(Relayed& x, const std::vector<Tensor>& sizing) {
  x.offsets.assign(1, 0);
  for (const Rect& r : x.rects) x.offsets.push_back(x.offsets.back() + message_bytes(sizing, r));
  if (x.offsets.back() > static_cast<std::size_t>(INT_MAX)) {
    throw UnsupportedError("Redistribution: a relayed message of " + std::to_string(x.offsets.back()) +
                           " bytes exceeds MPI's int count limit; move the fields in several calls");
  }
  x.buffer.resize(x.offsets.back());
}

// One piece of a relayed message, between its buffer and MPI.
void post_piece(Relayed& x, std::size_t j, bool sending, int peer, int tag, MPI_Comm comm, MPI_Request& r) {
  std::byte* data = x.buffer.data() + x.offsets[j];
  const int bytes = static_cast<int>(x.offsets[j + 1] - x.offsets[j]);
  TESSERA_CHECK_MPI(sending ? MPI_Isend(data, bytes, MPI_BYTE, peer, tag, comm, &r)
                            : MPI_Irecv(data, bytes, MPI_BYTE, peer, tag, comm, &r));
}

void post_whole(Relayed& x, bool sending, int tag, MPI_Comm comm, MPI_Request& r) {
  const int bytes = static_cast<int>(x.buffer.size());
  TESSERA_CHECK_MPI(sending ? MPI_Isend(x.buffer.data(), bytes, MPI_BYTE, x.peer, tag, comm, &r)
                            : MPI_Irecv(x.buffer.data(), bytes, MPI_BYTE, x.peer, tag, comm, &r));
}

}  // namespace

static void start_transfer(Redistribution::Plan& p, bool to_model) {
  const Decomposition& code = *p.code;
  const MPI_Comm comm = code.comm().mpi_comm();
  const int me = code.rank();
  const LocalBox code_box = code.box();
  const LocalBox model_box = p.model_rank >= 0 ? p.box_of_model(p.model_rank) : LocalBox{};
  // Sources and destinations of this direction.
  const std::vector<Tensor>& src = to_model ? p.code_fields : p.model_fields;
  const std::vector<Tensor>& dst = to_model ? p.model_fields : p.code_fields;
  const LocalBox& src_box = to_model ? code_box : model_box;
  const LocalBox& dst_box = to_model ? model_box : code_box;
  std::vector<Transfer>& sends = to_model ? p.to_model_sends : p.to_code_sends;
  std::vector<Transfer>& recvs = to_model ? p.to_model_recvs : p.to_code_recvs;
  const int tag = to_model ? kToModelTag : kToCodeTag;
  // The fields of one direction are the code fields' signatures on every rank, so both
  // ends size a message alike (a non-model rank sizes its receives from its code fields).
  const std::vector<Tensor>& sizing = p.code_fields;

  p.requests.clear();
  p.relay_requests.clear();
  p.stats.direct_messages = p.stats.packed_messages = 0;
  // Posts one message of this rank's own piece, from or into the field in place or
  // through its packed buffer.
  auto post = [&](Transfer& t, bool sending, int message_tag) {
    const std::vector<Tensor>& fields = sending ? src : dst;
    const LocalBox& box = sending ? src_box : dst_box;
    const std::size_t bytes = message_bytes(sizing, t.rect);
    const Tensor part = in_place_part(fields, box, t.rect);
    t.direct = part.defined();
    if (!t.direct && sending) pack(fields, box, t.rect, t.buffer, false);
    if (!t.direct && !sending) t.buffer.resize(bytes);
    ++(t.direct ? p.stats.direct_messages : p.stats.packed_messages);
    void* data = t.direct ? part.data() : t.buffer.data();
    const int count = static_cast<int>(t.direct ? static_cast<std::size_t>(part.numel()) * part.element_size()
                                                : t.buffer.size());
    MPI_Request r = MPI_REQUEST_NULL;
    TESSERA_CHECK_MPI(sending ? MPI_Isend(data, count, MPI_BYTE, t.peer, message_tag, comm, &r)
                              : MPI_Irecv(data, count, MPI_BYTE, t.peer, message_tag, comm, &r));
    p.requests.push_back(r);
  };
  // Receives first: an early message lands in place.
  for (Transfer& t : recvs) post(t, false, tag);
  if (!to_model) {
    for (Transfer& t : p.scatter_recvs) post(t, false, kScatterTag);
  }
  for (Relayed& x : to_model ? p.relayed_to_model_recvs : p.relay_to_code) {
    // The model rank's combined messages (to_model), or the relay's first stage (to_code).
    lay_out(x, sizing);
    ++p.stats.packed_messages;
    post_whole(x, false, tag, comm, (to_model ? p.requests : p.relay_requests).emplace_back(MPI_REQUEST_NULL));
  }
  if (to_model) {
    // The relay's first stage: each member's piece straight into its place in the
    // combined message, the relay's own packed there.
    for (Relayed& x : p.relay_to_model) {
      lay_out(x, sizing);
      for (std::size_t j = 0; j < x.members.size(); ++j) {
        if (x.members[j] == me) {
          pack_at(src, src_box, x.rects[j], x.buffer.data() + x.offsets[j], false);
        } else {
          ++p.stats.packed_messages;
          post_piece(x, j, false, x.members[j], kGatherTag, comm, p.relay_requests.emplace_back(MPI_REQUEST_NULL));
        }
      }
    }
    for (Transfer& t : p.gather_sends) post(t, true, kGatherTag);
  } else {
    for (Relayed& x : p.relayed_to_code_sends) {
      lay_out(x, sizing);
      for (std::size_t j = 0; j < x.rects.size(); ++j) pack_at(src, src_box, x.rects[j], x.buffer.data() + x.offsets[j], false);
      ++p.stats.packed_messages;
      post_whole(x, true, tag, comm, p.requests.emplace_back(MPI_REQUEST_NULL));
    }
  }
  for (Transfer& t : sends) post(t, true, tag);
  // This rank's own part, copied while the messages travel.
  for (const Rect& r : to_model ? p.to_model_self : p.to_code_self) {
    for (std::size_t k = 0; k < src.size(); ++k) copy_part(rect_view(dst[k], dst_box, r), rect_view(src[k], src_box, r));
  }
  p.mode = to_model ? Redistribution::Plan::Mode::to_model : Redistribution::Plan::Mode::to_code;
}

void Redistribution::start_to_model(const std::vector<Tensor>& code_fields, const std::vector<Tensor>& model_fields) {
  prepare(*plan_, code_fields, model_fields, "start_to_model");
  try {
    start_transfer(*plan_, true);
  } catch (...) {
    plan_->mode = Plan::Mode::idle;
    throw;
  }
}

void Redistribution::start_to_code(const std::vector<Tensor>& model_fields, const std::vector<Tensor>& code_fields) {
  prepare(*plan_, code_fields, model_fields, "start_to_code");
  try {
    start_transfer(*plan_, false);
  } catch (...) {
    plan_->mode = Plan::Mode::idle;
    throw;
  }
}

void Redistribution::finish() {
  Plan& p = *plan_;
  if (p.mode == Plan::Mode::idle) {
    throw InvalidArgument("Redistribution::finish: no transfer is in flight (call start_to_model() or "
                          "start_to_code() first)");
  }
  const bool to_model = p.mode == Plan::Mode::to_model;
  // Whatever happens, the plan is idle afterwards: a failed wait leaves nothing to finish.
  p.mode = Plan::Mode::idle;
  const MPI_Comm comm = p.code->comm().mpi_comm();
  const WaitOptions& wait = p.code->comm().wait_options();
  const LocalBox code_box = p.code->box();
  const LocalBox model_box = p.box_of_model(std::max(p.model_rank, 0));
  if (!p.relay_requests.empty()) {
    // node_aware: a relay's second stage starts when its first has arrived. A rank that
    // only relays waits here, under the wait policy like every other wait of the plan.
    detail::wait_all(p.relay_requests, wait,
                     {to_model ? "the redistribution's pieces gathered on the node's relay"
                               : "the redistribution's combined messages to the node's relay",
                      comm});
    if (to_model) {
      for (Relayed& x : p.relay_to_model) post_whole(x, true, kToModelTag, comm, p.requests.emplace_back(MPI_REQUEST_NULL));
    } else {
      for (Relayed& x : p.relay_to_code) {
        for (std::size_t j = 0; j < x.members.size(); ++j) {
          if (x.members[j] == p.code->rank()) {
            pack_at(p.code_fields, code_box, x.rects[j], x.buffer.data() + x.offsets[j], true);
          } else {
            post_piece(x, j, true, x.members[j], kScatterTag, comm, p.requests.emplace_back(MPI_REQUEST_NULL));
          }
        }
      }
    }
  }  // (a relay always has a first stage: two or more pieces, at most one its own)
  detail::wait_all(p.requests, wait,
                   {to_model ? "the redistribution's code -> model messages" : "the redistribution's model -> code messages",
                    comm});
  const LocalBox& box = to_model ? model_box : code_box;
  const std::vector<Tensor>& fields = to_model ? p.model_fields : p.code_fields;
  auto unpack = [&](std::vector<Transfer>& list) {
    for (Transfer& t : list) {
      if (!t.direct) pack(fields, box, t.rect, t.buffer, true);  // else MPI wrote the fields itself
    }
  };
  unpack(to_model ? p.to_model_recvs : p.to_code_recvs);
  if (!to_model) {
    unpack(p.scatter_recvs);
  } else {
    for (Relayed& x : p.relayed_to_model_recvs) {
      for (std::size_t j = 0; j < x.rects.size(); ++j) pack_at(fields, box, x.rects[j], x.buffer.data() + x.offsets[j], true);
    }
  }
  p.code_fields.clear();
  p.model_fields.clear();
}

void Redistribution::to_model(const std::vector<Tensor>& code_fields, const std::vector<Tensor>& model_fields) {
  start_to_model(code_fields, model_fields);
  finish();
}

void Redistribution::to_code(const std::vector<Tensor>& model_fields, const std::vector<Tensor>& code_fields) {
  start_to_code(model_fields, code_fields);
  finish();
}

}  // namespace tessera::domain