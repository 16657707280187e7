// Redistribution: the plan (box intersections between the code's decomposition and the
// model's layout, one message per rank pair and direction) and its transfers (post in
// place or pack; wait under the wait policy; unpack what was packed), in the shape of
// the halo exchange.

#include "tessera/domain/redistribution.hpp"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <utility>

#include "comm/request_state.hpp"
#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/check.hpp"

namespace tessera::domain {

namespace {

// Tags of the two directions on the code communicator (the halo exchange uses 0x41xx and
// 0x42xx there). Between two ranks there is at most one message per direction.
constexpr int kToModelTag = 0x4301;
constexpr int kToCodeTag = 0x4302;

// A (lat, lon) rectangle in global indices.
struct Rect {
  std::int64_t lat = 0, nlat = 0, lon = 0, nlon = 0;
  std::int64_t cells() const { return nlat * nlon; }
};

Rect intersect(const LocalBox& a, const LocalBox& b) {
  const std::int64_t lat0 = std::max(a.lat.start, b.lat.start), lat1 = std::min(a.lat.end(), b.lat.end());
  const std::int64_t lon0 = std::max(a.lon.start, b.lon.start), lon1 = std::min(a.lon.end(), b.lon.end());
  if (lat1 <= lat0 || lon1 <= lon0) return {};
  return {lat0, lat1 - lat0, lon0, lon1 - lon0};
}

// The part of `field` (leading..., box lat, box lon) covering global `r`.
Tensor rect_view(const Tensor& field, const LocalBox& box, const Rect& r) {
  const int d = field.dim();
  return field.narrow(d - 2, r.lat - box.lat.start, r.nlat).narrow(d - 1, r.lon - box.lon.start, r.nlon);
}

std::string ranks_str(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace

std::string ModelRanks::str() const {
  switch (kind) {
    case Kind::per_node: return "per_node";
    case Kind::count: return "count " + std::to_string(m);
    case Kind::list: return "list " + ranks_str(ranks);
  }
  return "?";
}

namespace {

// per_node: the node's GPU count (the most any of its ranks sees: with --gpus-per-node
// every rank sees them all), one model rank per GPU spread over the node's ranks, or its
// first rank on a node without GPUs. Collective; every wait under the policy.
std::vector<int> per_node_ranks(Communicator& comm) {
  const MPI_Comm c = comm.mpi_comm();
  const WaitOptions& wait = comm.wait_options();
  MPI_Comm node = MPI_COMM_NULL;
  TESSERA_CHECK_MPI(MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &node));
  int local_rank = 0, local_size = 1, gpus = std::max(0, cuda_device_count());
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  int node_gpus = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  const int status = MPI_Iallreduce(&gpus, &node_gpus, 1, MPI_INT, MPI_MAX, node, &request);
  if (status == MPI_SUCCESS) {
    try {
      detail::wait_request(request, wait, {"Redistribution: the node's GPU count (MPI_Iallreduce)", node});
    } catch (...) {
      MPI_Comm_free(&node);
      throw;
    }
  }
  MPI_Comm_free(&node);
  TESSERA_CHECK_MPI(status);
  const int per_node = std::clamp(node_gpus, 1, local_size);
  int mine = 0;
  for (int k = 0; k < per_node; ++k) {
    if (static_cast<int>(static_cast<std::int64_t>(k) * local_size / per_node) == local_rank) mine = 1;
  }
  std::vector<int> flags(static_cast<std::size_t>(comm.size()));
  TESSERA_CHECK_MPI(MPI_Iallgather(&mine, 1, MPI_INT, flags.data(), 1, MPI_INT, c, &request));
  detail::wait_request(request, wait, {"Redistribution: the model ranks of each node (MPI_Iallgather)", c});
  std::vector<int> ranks;
  for (int r = 0; r < comm.size(); ++r) {
    if (flags[static_cast<std::size_t>(r)]) ranks.push_back(r);
  }
  return ranks;
}

// count and list: local arithmetic and checks.
std::vector<int> explicit_ranks(int n, const ModelRanks& spec) {
  if (spec.kind == ModelRanks::Kind::count) {
    if (spec.m < 1) {
      throw InvalidArgument("Redistribution: model rank count M = " + std::to_string(spec.m) + " must be >= 1");
    }
    if (spec.m > n) {
      throw InvalidArgument("Redistribution: model rank count M = " + std::to_string(spec.m) + " exceeds the N = " +
                            std::to_string(n) + " ranks of the code's communicator (M > N)");
    }
    std::vector<int> ranks;
    for (int i = 0; i < spec.m; ++i) ranks.push_back(static_cast<int>(static_cast<std::int64_t>(i) * n / spec.m));
    return ranks;
  }
  const std::vector<int>& ranks = spec.ranks;
  if (ranks.empty()) throw InvalidArgument("Redistribution: the model rank list is empty");
  if (ranks.size() > static_cast<std::size_t>(n)) {
    throw InvalidArgument("Redistribution: the model rank list " + ranks_str(ranks) + " holds M = " +
                          std::to_string(ranks.size()) + " ranks, more than the N = " + std::to_string(n) +
                          " ranks of the code's communicator (M > N)");
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= n) {
      throw InvalidArgument("Redistribution: the model rank list " + ranks_str(ranks) + " names rank " +
                            std::to_string(ranks[i]) + ", outside the code communicator's [0, " + std::to_string(n) +
                            ")");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (ranks[j] == ranks[i]) {
        throw InvalidArgument("Redistribution: the model rank list " + ranks_str(ranks) + " names rank " +
                              std::to_string(ranks[i]) + " twice (positions " + std::to_string(j) + " and " +
                              std::to_string(i) + "); each model rank is a distinct code rank");
      }
    }
  }
  return ranks;
}

}  // namespace

std::vector<int> resolve_model_ranks(Communicator& comm, const ModelRanks& spec) {
  std::vector<int> ranks;
  // The kind must agree before per_node's collectives, or the ranks would not meet.
  require_same_on_all_ranks(comm.mpi_comm(), spec.kind == ModelRanks::Kind::per_node ? "per_node" : "explicit",
                            "Redistribution: the ranks of the code's communicator chose the model ranks "
                            "differently (per_node on some, a count or list on others)");
  if (spec.kind == ModelRanks::Kind::per_node) {
    ranks = per_node_ranks(comm);
  } else {
    agree_on_success(comm.mpi_comm(), [&] { ranks = explicit_ranks(comm.size(), spec); });
  }
  require_same_on_all_ranks(comm.mpi_comm(), ranks_str(ranks),
                            "Redistribution: the ranks of the code's communicator passed different model ranks");
  return ranks;
}

namespace {

// One message: a rectangle exchanged with one peer, every field's part packed in turn.
struct Transfer {
  int peer = 0;
  Rect rect;
  std::vector<std::byte> buffer;   // the packed message, when not direct
  bool direct = false;             // the last transfer moved it in place (in_place_part)
};

// What validation of a transfer's fields depends on: a field set with the keys of one
// already validated needs no new (collective) check.
struct FieldKey {
  bool defined = false;
  DType dtype = DType::f32;
  Device device;
  Shape shape;
  bool operator==(const FieldKey&) const = default;
};

struct FieldKeys {
  std::vector<FieldKey> code, model;
  bool operator==(const FieldKeys&) const = default;
};

FieldKeys keys_of(const std::vector<Tensor>& code_fields, const std::vector<Tensor>& model_fields) {
  FieldKeys keys;
  for (const auto* list : {&code_fields, &model_fields}) {
    for (const Tensor& t : *list) {
      (list == &code_fields ? keys.code : keys.model)
          .push_back(t.defined() ? FieldKey{true, t.dtype(), t.device(), t.shape()} : FieldKey{});
    }
  }
  return keys;
}

}  // namespace

struct Redistribution::Plan {
  const Decomposition* code = nullptr;
  std::vector<int> model_ranks;
  ProcessGrid grid;
  int replicas = 1;
  int model_rank = -1;
  std::optional<Communicator> model_comm;
  RedistributionStats stats;

  // Code -> model: sends as a code rank, receives as a model rank; self rects (both).
  std::vector<Transfer> to_model_sends, to_model_recvs;
  std::vector<Rect> to_model_self;
  // Model -> code (replica 0 sends).
  std::vector<Transfer> to_code_sends, to_code_recvs;
  std::vector<Rect> to_code_self;

  enum class Mode { idle, to_model, to_code } mode = Mode::idle;
  std::vector<Tensor> code_fields, model_fields;  // alive while in flight
  std::vector<MPI_Request> requests;
  std::optional<FieldKeys> validated;

  int domain_ranks() const { return grid.lat * grid.lon; }
  LocalBox box_of_model(int m) const {
    const int d = m % domain_ranks();
    return {shard_range(code->global_lat(), grid.lat, d / grid.lon), shard_range(code->global_lon(), grid.lon, d % grid.lon)};
  }
  std::string str() const {
    return shape_str(code->global_shape()) + " over " + code->grid().str() + " -> " +
           std::to_string(model_ranks.size()) + " model ranks " + ranks_str(model_ranks) + " on " + grid.str() +
           " x " + std::to_string(replicas);
  }
};

Redistribution::Redistribution(const Decomposition& code, const ModelRanks& ranks, ModelLayout layout)
    : plan_(std::make_unique<Plan>()) {
  Plan& p = *plan_;
  p.code = &code;
  Communicator& comm = code.comm();
  p.model_ranks = resolve_model_ranks(comm, ranks);
  const int m = static_cast<int>(p.model_ranks.size());
  agree_on_success(comm.mpi_comm(), [&] {
    if (layout.replicas < 1 || m % layout.replicas != 0) {
      throw InvalidArgument("Redistribution: replicas = " + std::to_string(layout.replicas) +
                            " must be >= 1 and divide the M = " + std::to_string(m) + " model ranks");
    }
    const int d = m / layout.replicas;
    ProcessGrid g = layout.grid;
    if (g.lat == 0 && g.lon == 0) g = ProcessGrid{d, 1};
    if (g.lat < 1 || g.lon < 1 || static_cast<std::int64_t>(g.lat) * g.lon != d) {
      throw InvalidArgument("Redistribution: the model grid " + g.str() + " must hold the " + std::to_string(d) +
                            " domain ranks of the model (M = " + std::to_string(m) + " / replicas " +
                            std::to_string(layout.replicas) + ")");
    }
    if (g.lat > code.global_lat() || g.lon > code.global_lon()) {
      throw InvalidArgument("Redistribution: the model grid " + g.str() + " leaves a model rank without a cell of the " +
                            std::to_string(code.global_lat()) + " x " + std::to_string(code.global_lon()) + " grid");
    }
    p.grid = g;
    p.replicas = layout.replicas;
  });
  require_same_on_all_ranks(comm.mpi_comm(), p.str(),
                            "Redistribution: the ranks of the code's communicator passed different model layouts");

  const int me = comm.rank();
  for (int i = 0; i < m; ++i) {
    if (p.model_ranks[static_cast<std::size_t>(i)] == me) p.model_rank = i;
  }
  // The model's communicator, in model-rank order.
  MPI_Comm split = MPI_COMM_NULL;
  TESSERA_CHECK_MPI(MPI_Comm_split(comm.mpi_comm(), p.model_rank >= 0 ? 0 : MPI_UNDEFINED,
                                   std::max(p.model_rank, 0), &split));
  if (split != MPI_COMM_NULL) p.model_comm.emplace(Communicator::adopt(split, comm.wait_options()));

  // Every piece, in ascending peer order on both ends (the pack order of a message is
  // fixed by the fields, so one rect per message is all the ends must agree on).
  const LocalBox mine = code.box();
  for (int i = 0; i < m; ++i) {  // as a code rank: what each model rank needs of my box
    const int peer = p.model_ranks[static_cast<std::size_t>(i)];
    const Rect r = intersect(mine, p.box_of_model(i));
    if (r.cells() == 0) continue;
    if (peer == me) {
      p.to_model_self.push_back(r);
      p.stats.self_cells += r.cells();
    } else {
      p.to_model_sends.push_back({peer, r, {}, false});
    }
    if (i < p.domain_ranks()) {  // replica 0 sends it back
      if (peer == me) {
        p.to_code_self.push_back(r);
      } else {
        p.to_code_recvs.push_back({peer, r, {}, false});
      }
    }
  }
  if (p.model_rank >= 0) {  // as a model rank: what each code rank holds of my box
    const LocalBox model_box = p.box_of_model(p.model_rank);
    for (int c = 0; c < code.size(); ++c) {
      if (c == me) continue;
      const Rect r = intersect(code.box_of(c), model_box);
      if (r.cells() == 0) continue;
      p.to_model_recvs.push_back({c, r, {}, false});
      if (p.model_rank < p.domain_ranks()) p.to_code_sends.push_back({c, r, {}, false});
    }
  }
  auto by_peer = [](const Transfer& a, const Transfer& b) { return a.peer < b.peer; };
  for (auto* list : {&p.to_model_sends, &p.to_model_recvs, &p.to_code_sends, &p.to_code_recvs}) {
    std::sort(list->begin(), list->end(), by_peer);
  }
  p.stats.to_model_sends = static_cast<int>(p.to_model_sends.size());
  p.stats.to_model_recvs = static_cast<int>(p.to_model_recvs.size());
  p.stats.to_code_sends = static_cast<int>(p.to_code_sends.size());
  p.stats.to_code_recvs = static_cast<int>(p.to_code_recvs.size());
}

Redistribution::~Redistribution() {
  if (plan_ && plan_->mode != Plan::Mode::idle) {
    // A destructor cannot throw; completing keeps MPI from touching freed buffers.
    try {
      finish();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: redistribution in flight failed in ~Redistribution: %s\n", e.what());
    }
  }
}

Redistribution::Redistribution(Redistribution&&) noexcept = default;
Redistribution& Redistribution::operator=(Redistribution&& other) noexcept {
  if (this != &other) {
    Redistribution dying(std::move(*this));  // completes anything in flight
    plan_ = std::move(other.plan_);
  }
  return *this;
}

const Decomposition& Redistribution::code() const { return *plan_->code; }
const std::vector<int>& Redistribution::model_ranks() const { return plan_->model_ranks; }
int Redistribution::model_size() const { return static_cast<int>(plan_->model_ranks.size()); }
const ProcessGrid& Redistribution::model_grid() const { return plan_->grid; }
int Redistribution::replicas() const { return plan_->replicas; }
bool Redistribution::is_model_rank() const { return plan_->model_rank >= 0; }
int Redistribution::model_rank() const { return plan_->model_rank; }
const RedistributionStats& Redistribution::stats() const { return plan_->stats; }
bool Redistribution::in_flight() const { return plan_->mode != Plan::Mode::idle; }
void Redistribution::forget_fields() { plan_->validated.reset(); }
std::string Redistribution::str() const { return plan_->str(); }

Communicator& Redistribution::model_comm() const {
  if (!plan_->model_comm) {
    throw InvalidArgument("Redistribution::model_comm: code rank " + std::to_string(plan_->code->rank()) +
                          " is not a model rank " + ranks_str(plan_->model_ranks));
  }
  return *plan_->model_comm;
}

LocalBox Redistribution::model_box_of(int m) const {
  if (m < 0 || m >= model_size()) {
    throw InvalidArgument("Redistribution::model_box_of: model rank " + std::to_string(m) + " is outside [0, " +
                          std::to_string(model_size()) + ")");
  }
  return plan_->box_of_model(m);
}

LocalBox Redistribution::model_box() const {
  if (!is_model_rank()) {
    throw InvalidArgument("Redistribution::model_box: code rank " + std::to_string(plan_->code->rank()) +
                          " is not a model rank " + ranks_str(plan_->model_ranks));
  }
  return plan_->box_of_model(plan_->model_rank);
}

Shape Redistribution::model_shape(const Shape& leading) const {
  const LocalBox b = model_box();
  Shape s = leading;
  s.push_back(b.lat.length);
  s.push_back(b.lon.length);
  return s;
}

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

// Packs every field's part of `r` (each field's (leading..., box) tensor) into `buffer`,
// or unpacks it from there.
void pack(const std::vector<Tensor>& fields, const LocalBox& box, const Rect& r, std::vector<std::byte>& buffer,
          bool unpack) {
  std::size_t total = 0;
  for (const Tensor& t : fields) total += part_bytes(t, r.cells());
  if (!unpack) buffer.resize(total);
  std::size_t offset = 0;
  for (const Tensor& t : fields) {
    Tensor part = rect_view(t, box, r);
    Tensor flat = Tensor::view(buffer.data() + offset, part.shape(), t.dtype());
    if (unpack) {
      copy_part(part, flat);
    } else {
      copy_part(flat, part);
    }
    offset += part_bytes(t, r.cells());
  }
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

}  // namespace

static void start_transfer(Redistribution::Plan& p, bool to_model) {
  const Decomposition& code = *p.code;
  const MPI_Comm comm = code.comm().mpi_comm();
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

  // Posts one message, from or into the field in place or through its packed buffer.
  auto post = [&](Transfer& t, bool sending, MPI_Request& r) {
    void* data = t.buffer.data();
    int bytes = static_cast<int>(t.buffer.size());
    if (t.direct) {
      const Tensor part = in_place_part(sending ? src : dst, sending ? src_box : dst_box, t.rect);
      data = part.data();
      bytes = static_cast<int>(static_cast<std::size_t>(part.numel()) * part.element_size());
    }
    TESSERA_CHECK_MPI(sending ? MPI_Isend(data, bytes, MPI_BYTE, t.peer, tag, comm, &r)
                              : MPI_Irecv(data, bytes, MPI_BYTE, t.peer, tag, comm, &r));
  };
  p.requests.clear();
  p.stats.direct_messages = p.stats.packed_messages = 0;
  for (Transfer& t : recvs) {  // receives first: an early message lands in place
    const std::size_t bytes = message_bytes(sizing, t.rect);
    t.direct = in_place_part(dst, dst_box, t.rect).defined();
    if (!t.direct) t.buffer.resize(bytes);
    ++(t.direct ? p.stats.direct_messages : p.stats.packed_messages);
    MPI_Request r = MPI_REQUEST_NULL;
    post(t, false, r);
    p.requests.push_back(r);
  }
  for (Transfer& t : sends) {
    (void)message_bytes(sizing, t.rect);
    t.direct = in_place_part(src, src_box, t.rect).defined();
    if (!t.direct) pack(src, src_box, t.rect, t.buffer, false);
    ++(t.direct ? p.stats.direct_messages : p.stats.packed_messages);
    MPI_Request r = MPI_REQUEST_NULL;
    post(t, true, r);
    p.requests.push_back(r);
  }
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
  detail::wait_all(p.requests, p.code->comm().wait_options(),
                   {to_model ? "the redistribution's code -> model messages" : "the redistribution's model -> code messages",
                    p.code->comm().mpi_comm()});
  const LocalBox box = to_model ? p.box_of_model(std::max(p.model_rank, 0)) : p.code->box();
  for (Transfer& t : to_model ? p.to_model_recvs : p.to_code_recvs) {
    if (t.direct) continue;  // MPI wrote the fields itself
    pack(to_model ? p.model_fields : p.code_fields, box, t.rect, t.buffer, true);
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
