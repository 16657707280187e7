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
#include "tessera/detail/enum_table.hpp"

namespace tessera::domain {

constexpr tessera::detail::EnumName<RedistributionRoute> kRedistributionRouteNames[] = {
    {RedistributionRoute::direct, "direct"},
    {RedistributionRoute::node_aware, "node_aware"},
    {RedistributionRoute::automatic, "auto"},
};

std::string_view redistribution_route_name(RedistributionRoute route) noexcept {
  return tessera::detail::name_of(kRedistributionRouteNames, route);
}

namespace {

// The model's domain grid for `layout` on m model ranks ({0, 0}: latitude bands),
// checked: InvalidArgument on every rank naming what does not fit.
ProcessGrid resolve_model_grid(const Decomposition& code, ModelLayout layout, int m) {
  if (layout.replicas < 1 || m % layout.replicas != 0) {
    throw InvalidArgument("Redistribution: replicas = " + std::to_string(layout.replicas) +
                          " must be >= 1 and divide the M = " + std::to_string(m) + " model ranks");
  }
  const int d = m / layout.replicas;
  ProcessGrid g = layout.grid;
  if (g.lat == 0 && g.lon == 0) g = ProcessGrid{d, 1};
  if (g.lat < 1 || g.lon < 1 || static_cast<std::int64_t>(g.lat) * g.lon != d) {
    throw InvalidArgument("Redistribution: the model grid " + g.labelled_str() + " must hold the " + std::to_string(d) +
                          " domain ranks of the model (M = " + std::to_string(m) + " / replicas " +
                          std::to_string(layout.replicas) + ")");
  }
  if (g.lat > code.global_lat() || g.lon > code.global_lon()) {
    throw InvalidArgument("Redistribution: the model grid " + g.labelled_str() + " leaves a model rank without a cell of the " +
                          std::to_string(code.global_lat()) + " x " + std::to_string(code.global_lon()) + " grid");
  }
  return g;
}

// The route options, the same on every rank. Collective over comm.
void check_route_options(Communicator& comm, const RedistributionOptions& options) {
  agree_on_success(comm.mpi_comm(), [&] {
    if (options.node_aware_senders < 2) {
      throw InvalidArgument("Redistribution: RedistributionOptions::node_aware_senders = " +
                            std::to_string(options.node_aware_senders) +
                            " must be >= 2 (a pair with one sender has nothing to gather)");
    }
  });
  require_same_on_all_ranks(comm.mpi_comm(),
                            std::string(redistribution_route_name(options.route)) + " from " +
                                std::to_string(options.node_aware_senders),
                            "Redistribution: the ranks of the code's communicator chose different routes "
                            "(RedistributionOptions::route, node_aware_senders)");
}

}  // namespace

Redistribution::Redistribution(const Decomposition& code, const ModelRanks& ranks, ModelLayout layout,
                               RedistributionOptions options)
    : plan_(std::make_unique<Plan>()) {
  Plan& p = *plan_;
  p.code = &code;
  Communicator& comm = code.comm();
  p.model_ranks = resolve_model_ranks(comm, ranks);
  const int m = static_cast<int>(p.model_ranks.size());
  agree_on_success(comm.mpi_comm(), [&] {
    p.grid = resolve_model_grid(code, layout, m);
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

  // Where every code rank runs, and the route; then the pattern, pure arithmetic.
  check_route_options(comm, options);
  PatternInputs in;
  in.global_lat = code.global_lat();
  in.global_lon = code.global_lon();
  for (int c = 0; c < code.size(); ++c) in.code_boxes.push_back(code.box_of(c));
  in.node_of = code_nodes(comm, /*count_gpus=*/false).node_of;  // the route needs nodes only
  in.model_ranks = p.model_ranks;
  in.grid = p.grid;
  in.options = options;
  in.me = me;
  static_cast<RedistributionPattern&>(p) = make_redistribution_pattern(in);
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
RedistributionRoute Redistribution::route() const { return plan_->route; }
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
