// The fields of an exchange: checked and described for the pack loops on every
// exchange (cheap, local), and agreed over the ranks only when the field set changes
// (a collective: the checks that may fail on one rank only, the dtypes and leading dims
// the messages' sizes depend on, and the node-memory decision sized by them).

#include <algorithm>
#include <string>

#include "domain/halo_plan.hpp"
#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/check.hpp"
#include "tessera/comm.hpp"

namespace tessera::domain {

namespace {

using halo::FieldView;

// Validates the fields of one exchange and describes them for the pack loops, into
// `views` (whose capacity is kept from one exchange to the next).
void describe_fields(const std::vector<Tensor>& fields, std::int64_t padded_lat, std::int64_t padded_lon, int rank,
                     const char* op, std::vector<FieldView>& views) {
  views.clear();
  for (std::size_t k = 0; k < fields.size(); ++k) {
    const Tensor& t = fields[k];
    auto name = [&] { return std::string("HaloExchange::") + op + ": field " + std::to_string(k); };
    if (!t.defined()) throw InvalidArgument(name() + " is undefined");
    // (The host backend accepts every tensor: no name to build for it on every exchange.)
    if (t.device().type != DeviceType::host) backend_for(t.device()).require_usable(t, name());
    if (!(t.device() == fields[0].device())) {
      throw InvalidArgument(name() + " " + t.str() + " is not on the device of field 0 " + fields[0].str() +
                            "; the fields of one exchange live on one device");
    }
    if (t.dim() < 2 || t.dim() > tessera::detail::kMaxDims) {
      throw ShapeError(name() + " " + t.str() + " must have 2 to " + std::to_string(tessera::detail::kMaxDims) +
                       " dims (leading..., lat, lon)");
    }
    if (t.size(t.dim() - 2) != padded_lat || t.size(t.dim() - 1) != padded_lon) {
      throw ShapeError(name() + " " + t.str() + " on domain rank " + std::to_string(rank) +
                       " must end in the padded extents (" + std::to_string(padded_lat) + ", " +
                       std::to_string(padded_lon) + ") (see HaloExchange::padded_shape)");
    }
    FieldView v;
    v.base = t.data();
    v.dtype = t.dtype();
    v.element = t.element_size();
    v.layout.ndim = t.dim();
    for (int d = 0; d < t.dim(); ++d) {
      v.layout.shape[d] = t.shape()[d];
      v.layout.strides[d] = t.strides()[d];
      if (d < t.dim() - 2) v.leading *= t.shape()[d];
    }
    views.push_back(v);
  }
}

using FieldKey = HaloExchange::Plan::FieldKey;

FieldKey key_of(const Tensor& t) {
  if (!t.defined()) return {};
  return {true, t.dtype(), t.device(), t.is_contiguous(), t.shape()};
}

bool same_fields(const std::vector<FieldKey>& keys, const std::vector<Tensor>& fields) {
  if (keys.size() != fields.size()) return false;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const Tensor& t = fields[k];
    const FieldKey& key = keys[k];
    if (key.defined != t.defined()) return false;
    if (!t.defined()) continue;
    if (key.dtype != t.dtype() || !(key.device == t.device()) || key.contiguous != t.is_contiguous() ||
        !std::equal(key.shape.begin(), key.shape.end(), t.shape().begin(), t.shape().end())) {
      return false;
    }
  }
  return true;
}

// What every rank must agree on for messages to match: dtypes and leading dims.
std::string shared_signature_of(const std::vector<Tensor>& fields) {
  std::string s;
  for (const Tensor& t : fields) {
    if (!t.defined() || t.dim() < 2) {
      s += "?;";
      continue;
    }
    s += std::string(dtype_name(t.dtype())) + shape_str(Shape(t.shape().begin(), t.shape().end() - 2)) + ";";
  }
  return s;
}

}  // namespace

// Validation that may fail on one rank only (a field allocated with another rank's
// extents) is agreed collectively the first time a plan sees a field set, and again
// whenever the set changes; repeated exchanges of the same set cost no collective.
void HaloExchange::Plan::prepare_fields(const std::vector<Tensor>& fields, const char* op) {
  if (mode != Mode::idle) {
    throw InvalidArgument(std::string("HaloExchange::") + op +
                          ": an exchange of this plan is still in flight; call finish() first");
  }
  await_node_answers();  // before this rank packs into (or frees) its node memory again
  auto describe = [&] { describe_fields(fields, padded_lat, padded_lon, decomposition.rank(), op, views); };
  if (validated_fields && same_fields(*validated_fields, fields)) {
    describe();
    return;
  }
  const MPI_Comm comm = decomposition.comm().mpi_comm();
  agree_on_success(comm, describe);
  require_same_on_all_ranks(comm, shared_signature_of(fields),
      std::string("HaloExchange::") + op +
          " (field count, dtypes, leading dims): the ranks of the domain communicator passed different arguments");
  // Node memory needs every rank's fields on the host: a device rank's packed bytes are
  // not where its node peers could load them.
  int all_host = std::all_of(fields.begin(), fields.end(), [](const Tensor& t) { return t.device().is_host(); }) ? 1 : 0;
  TESSERA_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &all_host, 1, MPI_INT, MPI_LAND, comm));
  prepare_node_memory(all_host != 0);
  // Agreed only once the node memory is in place: a failure above leaves the next
  // exchange to agree (and size the segments) again instead of using half a plan.
  std::vector<FieldKey> keys;
  for (const Tensor& t : fields) keys.push_back(key_of(t));
  validated_fields = std::move(keys);
}

}  // namespace tessera::domain
