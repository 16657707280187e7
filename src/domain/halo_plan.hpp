#pragma once
// Private: the state of one HaloExchange. Built once from the planner's pieces
// (halo_planner.hpp) by the HaloExchange constructor (halo_plan.cpp); the fields of an
// exchange checked and agreed in halo_fields.cpp; its message buffers and the pack /
// unpack / zero passes over the fields in halo_buffers.cpp; the MPI datatypes over the
// fields in halo_direct.cpp; the node-memory path in halo_node_memory.cpp; the exchange
// state machine that posts and waits in halo_exchange.cpp.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/node_window.hpp"
#include "tessera/detail/halo_rect.hpp"
#include "tessera/detail/strided_index.hpp"
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/wait_policy.hpp"

namespace tessera::domain {

namespace halo {

using tessera::detail::HaloRect;

// Tags: forward messages carry kForwardTag + direction, adjoint ones kAdjointTag +
// direction, where direction = 3 * lat_side + lon_side of the halo slot on the rank
// that receives the forward message (side: 0 before, 1 inside, 2 after). Two messages
// between the same pair of ranks (east and west with 2 ranks on a periodic circle)
// therefore never share a tag.
constexpr int kForwardTag = 0x4100;
constexpr int kAdjointTag = 0x4200;
// The empty answer of a message read from node memory goes back under its own tag (on
// the plan's node communicator, where the offsets travel under the tags above).
constexpr int kForwardReadTag = 0x4300;
constexpr int kAdjointReadTag = 0x4400;

// Each field's part of a packed message starts on an 8-byte boundary.
constexpr std::size_t align8(std::size_t n) { return (n + 7) & ~std::size_t{7}; }

// Whether any of the spec's four edges has `policy` (halo_spec.cpp).
bool has_edge(const HaloSpec& spec, EdgePolicy policy);

// The memory of one message. `packed` lives on the fields' device: the pack and unpack
// kernels of that device's backend read and write it. When MPI cannot address that
// memory (a CUDA device without CUDA-aware MPI), `staging` is a pinned host copy that
// MPI reads and writes, and the packed bytes cross to it and back; otherwise the packed
// bytes are the message (always so on the host: no extra copy).
class MessageBuffer {
 public:
  MessageBuffer() = default;
  ~MessageBuffer() { release(); }
  MessageBuffer(MessageBuffer&& other) noexcept { *this = std::move(other); }
  MessageBuffer& operator=(MessageBuffer&& other) noexcept;

  // Makes room for `bytes` on `device` (reusing the memory of earlier exchanges).
  void reserve(std::size_t bytes, Device device, bool staged);

  std::byte* packed() const { return static_cast<std::byte*>(packed_); }
  void* message() const { return staged_ ? staging_ : packed_; }
  std::size_t bytes() const { return bytes_; }
  // Packed bytes to the message (after packing) and back (before unpacking).
  void packed_to_message() const;
  void message_to_packed() const;

 private:
  void release() noexcept;

  Device device_ = Device::host();
  bool staged_ = false;
  std::size_t bytes_ = 0, capacity_ = 0;
  void* packed_ = nullptr;
  void* staging_ = nullptr;
};

// One message: its peer, direction, rectangles (in this rank's field) and buffer.
struct Transfer {
  int peer = 0;
  int direction = 0;
  std::vector<HaloRect> rects;
  std::int64_t cells = 0;  // sum of rect areas
  MessageBuffer buffer;
  // The forward message as an MPI datatype over the fields' own memory (absolute
  // addresses: sent from / received into MPI_BOTTOM), when Plan::prepare_direct built
  // one: MPI then reads the interior rects and writes the halo rects itself, and the
  // exchange copies nothing through `buffer`. It describes the same bytes in the same
  // order as the packed buffer (padding included), so the other end may pack instead.
  MPI_Datatype direct = MPI_DATATYPE_NULL;
  std::vector<std::byte> padding;  // where a received message's padding bytes land
  // Through node memory (Plan::prepare_node_memory; both ends decide alike): the sending
  // end packs into its NodeWindow segment at `window_offset` and sends only that offset,
  // the receiving end reads it into `notice`, unpacks straight from the sender's segment
  // and answers with an empty message, which the sender awaits before it packs again.
  bool via_node = false;
  std::int64_t window_offset = 0;
  std::int64_t notice = 0;
};

// A field as the pack entries see it.
struct FieldView {
  void* base = nullptr;
  DType dtype = DType::f32;
  std::size_t element = 0;
  tessera::detail::StridedLayout layout;
  std::int64_t leading = 1;  // product of leading extents
};

}  // namespace halo

struct HaloExchange::Plan {
  using HaloRect = halo::HaloRect;
  using MessageBuffer = halo::MessageBuffer;

  Decomposition decomposition;
  HaloSpec spec;
  HaloPlanStats stats;
  WaitOptions wait;  // the domain communicator's policy and sleep interval
  std::vector<halo::Transfer> sends;  // forward: this rank's interior rects, to peers
  std::vector<halo::Transfer> recvs;  // forward: this rank's halo rects, from peers
  std::vector<HaloRect> self_from, self_to;  // pieces whose source is this rank: interior -> halo
  MessageBuffer self_buffer;                  // their packed cells (never sent)
  std::vector<HaloRect> zeros;  // halo rects filled with zeros
  std::vector<HaloRect> frame;  // the whole halo frame (the cells pieces write), zeroed by the adjoint
  std::vector<HaloRect> negated;  // halo rects copied across a mirror_odd edge (negated)
  std::int64_t padded_lat = 0, padded_lon = 0;

  // In flight.
  enum class Mode { idle, forward, adjoint } mode = Mode::idle;
  std::vector<Tensor> fields;  // kept alive until finish
  std::vector<halo::FieldView> views;
  Device device = Device::host();  // where this exchange's fields live
  std::vector<MPI_Request> requests;
  // The last exchange's node-memory "read" answers, sent and awaited (halo_node_memory.cpp).
  std::vector<MPI_Request> done_requests;
  // The field set last agreed on collectively: per field what Tensor::str() shows (dtype,
  // shape, device, contiguity), compared field by field so that a repeated exchange
  // allocates nothing. None before the first exchange, so even an empty field set on one
  // rank is agreed (never mistaken for "already agreed").
  struct FieldKey {
    bool defined = false;
    DType dtype = DType::f32;
    Device device = Device::host();
    bool contiguous = true;
    Shape shape;
  };
  std::optional<std::vector<FieldKey>> validated_fields;

  // The fields the transfers' direct datatypes describe (none built: empty and false).
  std::vector<halo::FieldView> direct_views;
  bool direct_built = false;

  Plan(const Decomposition& d, HaloSpec s) : decomposition(d), spec(s) {}
  // Checks `fields` for an exchange (`op` names it in messages) and describes them into
  // `views`; agreed over the ranks, with the node memory sized, only when the field set
  // differs from the last agreed one. Throws when an exchange is in flight.
  void prepare_fields(const std::vector<Tensor>& fields, const char* op);
  ~Plan();
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // The bytes of a message of `cells` per field of `views` (each field's part 8-byte
  // aligned, as pack lays them out).
  std::size_t message_bytes(std::int64_t cells) const;
  // Sizes `buffer` for `cells` per field of `views`, staged through pinned host memory
  // when MPI cannot address the fields' device (never for the self buffer, which MPI
  // never sees).
  void reserve(MessageBuffer& buffer, std::int64_t cells, bool for_mpi) const;
  // Every field's `rects` into / out of `buffer` on the fields' device, field by field
  // (each field's part 8-byte aligned), in the order both ends of a message agree on.
  void pack(const std::vector<HaloRect>& rects, std::byte* packed) const;
  void unpack(const std::vector<HaloRect>& rects, const std::byte* packed, bool accumulate) const;
  void zero(const std::vector<HaloRect>& rects) const;
  // Builds (or keeps, for the same fields) the direct datatype of every forward transfer
  // whose rects MPI can walk cheaply: host fields, rows of at least kDirectRowBytes
  // contiguous bytes, and at most kDirectMaxBytes in the message. Transfers left without
  // one are packed as before. Why the size limit: a small message travels eagerly, and
  // MPI copies it into its own buffer either way, so the datatype saves tessera's pack;
  // a large one travels by rendezvous, where a contiguous buffer is copied once, straight
  // between the processes, while a datatype goes through MPI's own packing. Measured on
  // 2 ranks (MPICH 4.0.2, UCX shared memory; docs/performance.md): the datatype won at
  // 11.5 KiB, tied at 46 KiB and lost from 92 KiB (1440 x 2880, width 3, 4 fields: 65 %
  // of a contiguous Sendrecv against 80 % packed).
  static constexpr std::size_t kDirectRowBytes = 256;
  static constexpr std::size_t kDirectMaxBytes = 64 * 1024;
  void prepare_direct();
  void free_direct() noexcept;

  // The ranks of the domain communicator that share this rank's node, and this rank's
  // segment of node memory (sized by prepare_node_memory).
  tessera::detail::NodeWindow node;
  // Decides, for the agreed field set, which messages travel through node memory: both
  // ends on one node, every rank's fields on the host (`all_host`, agreed), and at least
  // kNodeMemoryMinBytes in the message. Sizes this rank's segment for the larger of its
  // forward and adjoint outgoing sets (one exchange is in flight at a time). Collective
  // over the node's ranks. Why: on one node a message sent by MPI is copied out of the
  // packed buffer into the receiver's, then unpacked; through node memory the receiver
  // unpacks from the sender's packed bytes, one copy fewer. Measured on 2 ranks (MPICH
  // 4.0.2, UCX shared memory; docs/performance.md): a 1.1 MiB message in 98 us instead of
  // 181 us, 34 KiB in 21 us instead of 41 us; below about 8 KiB the two extra small
  // messages (offset and answer) cost more than the copy saves (2.9 KiB: 2.9 against 1.6 us).
  static constexpr std::size_t kNodeMemoryMinBytes = 8 * 1024;
  void prepare_node_memory(bool all_host);
  // Completes done_requests: every segment this rank packed last time has been read
  // (before it packs again or frees them). settle_node_answers is the destructor's:
  // while an exception unwinds it withdraws them instead of waiting.
  void await_node_answers();
  void settle_node_answers() noexcept;
  // After the forward (or adjoint) exchange's messages: the "read" answers of the
  // messages this rank took from node memory sent, those of the messages it left there
  // posted, into done_requests.
  void post_node_answers(bool adjoint);
};

}  // namespace tessera::domain
