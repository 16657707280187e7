// Redistribution: the plan (box intersections between the code's decomposition and the
// model's layout, one message per rank pair and direction), built once and agreed on
// every rank. The transfers that run it are in redistribution_transfer.cpp, the choice of
// model ranks in model_ranks.cpp.

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

}  // namespace tessera::domain
