#include "stage_ties.hpp"

#include "tessera/error.hpp"
#include "tessera/ops.hpp"

namespace tessera::pp::detail {

namespace {

// The stage whose units hold `path`: the unit itself or a unit it lies under
// ("embed" for "embed.weight"); -1 when no unit does.
int stage_of(const StageSplit& split, const std::string& path) {
  for (std::size_t s = 0; s < split.stages.size(); ++s) {
    for (const std::string& unit : split.stages[s]) {
      if (path == unit || path.rfind(unit + ".", 0) == 0) return static_cast<int>(s);
    }
  }
  return -1;
}

// What travels: a host tensor over MPI (see tied_parameters.hpp for why).
Tensor on_host(const Tensor& t) { return t.device().is_host() ? t.contiguous() : t.to(Device::host()); }

}  // namespace

StageTies::StageTies(nn::Module& model, const StageSplit& split, int stage, const std::vector<TiedParameter>& tied,
                     int first_tag)
    : stage_(stage) {
  int tag = first_tag;
  for (const TiedParameter& t : tied) {
    const std::string what = "Pipeline: tied parameter '" + t.parameter + "' read by '" + t.reader + "'";
    Tie tie;
    tie.owner_stage = stage_of(split, t.parameter);
    if (tie.owner_stage < 0) throw InvalidArgument(what + ": no unit of the split (" + split.str() + ") holds it");
    tie.reader_stage = -1;
    for (std::size_t s = 0; s < split.stages.size(); ++s) {
      for (const std::string& unit : split.stages[s]) {
        if (unit == t.reader) tie.reader_stage = static_cast<int>(s);
      }
    }
    if (tie.reader_stage < 0) {
      throw InvalidArgument(what + ": the reader is not a unit of the split (" + split.str() + ")");
    }
    Parameter* owned = nullptr;
    for (const auto& [name, p] : model.named_parameters()) {
      if (name == t.parameter) owned = p;
    }
    if (owned == nullptr) throw InvalidArgument(what + ": the model has no parameter of that name");
    auto* reader = dynamic_cast<ParameterReader*>(&model.at(t.reader));
    if (reader == nullptr) {
      throw InvalidArgument(what + ": the reader is a " + model.at(t.reader).type_name() +
                            ", not a pp::ParameterReader");
    }
    tie.value_tag = tag++;
    tie.gradient_tag = tag++;
    tie.trainable = owned->trainable;
    if (stage == tie.owner_stage) {
      tie.owned = owned;
      if (tie.reader_stage == stage) reader->read_from(*owned);
    } else if (stage == tie.reader_stage) {
      const Tensor& v = owned->value;
      tie.replica = std::make_unique<Parameter>(Tensor::zeros(v.shape(), v.dtype(), v.device()), owned->global_shape,
                                                owned->placement, owned->local_offset, owned->init);
      tie.replica->trainable = owned->trainable;
      reader->read_from(*tie.replica);
    }
    ties_.push_back(std::move(tie));
  }
}

void StageTies::post_values(Communicator& pp, std::vector<CommRequest>& sends) {
  for (Tie& t : ties_) {
    if (t.owner_stage == t.reader_stage) continue;
    if (stage_ == t.owner_stage) {
      sends.push_back(pp.isend(on_host(t.owned->value), t.reader_stage, t.value_tag));
    } else if (stage_ == t.reader_stage) {
      t.incoming = Tensor::empty(t.replica->value.shape(), t.replica->value.dtype());
      t.value_request = pp.irecv(t.incoming, t.owner_stage, t.value_tag);
    }
  }
}

void StageTies::receive_values() {
  for (Tie& t : ties_) {
    if (!t.replica || !t.incoming.defined()) continue;
    t.value_request.wait();
    t.replica->value.copy_from(t.incoming);
    t.incoming = Tensor();
  }
}

void StageTies::reduce_gradients(Communicator& pp) {
  for (Tie& t : ties_) {
    if (t.owner_stage == t.reader_stage || !t.trainable) continue;
    if (stage_ == t.reader_stage) {
      pp.send(on_host(t.replica->grad), t.owner_stage, t.gradient_tag);
      t.replica->zero_grad();
    } else if (stage_ == t.owner_stage) {
      Tensor share = Tensor::empty(t.owned->grad.shape(), t.owned->grad.dtype());
      pp.recv(share, t.reader_stage, t.gradient_tag);
      // In place: under data parallelism the gradient is a view into its bucket.
      ops::axpy(1.0, t.owned->grad.device().is_host() ? share : share.to(t.owned->grad.device()), t.owned->grad);
    }
  }
}

TiedReplicaBytes StageTies::replica_bytes() const {
  TiedReplicaBytes bytes;
  for (const Tie& t : ties_) {
    if (!t.replica) continue;
    bytes.values += static_cast<std::int64_t>(t.replica->value.nbytes());
    if (t.replica->grad.defined()) bytes.gradients += static_cast<std::int64_t>(t.replica->grad.nbytes());
  }
  return bytes;
}

}  // namespace tessera::pp::detail
