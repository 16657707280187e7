#include "tessera/pp/pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>

#include "tessera/agree.hpp"
#include "tessera/comm.hpp"
#include "tessera/error.hpp"
#include "tessera/placement.hpp"
#include "tessera/detail/enum_table.hpp"
#include "stage_ties.hpp"

namespace tessera::pp {

namespace {

// The header that precedes an activation: what the receiver must know to post its
// receive (dtype and shape) and what the loss function is told (the rows).
constexpr int kMaxDims = 8;
enum HeaderField { kDType = 0, kDims = 1, kShape = 2, kBegin = kShape + kMaxDims, kEnd, kRows, kHeaderSize };

// Tags of microbatch j's three messages in one step. Messages of consecutive steps
// reuse them; MPI keeps the messages of one pair and tag in order, and every request of
// a step completes before train_step returns.
int header_tag(int j) { return 3 * j; }
int activation_tag(int j) { return 3 * j + 1; }
int gradient_tag(int j) { return 3 * j + 2; }

// The header of an activation `y` that holds microbatch `info`'s rows.
Tensor make_header(const Tensor& y, const Microbatch& info) {
  if (y.dim() > kMaxDims) {
    throw UnsupportedError("Pipeline: an activation of " + std::to_string(y.dim()) +
                           " dims crosses a stage boundary; at most " + std::to_string(kMaxDims) + " are sent");
  }
  std::vector<std::int64_t> h(kHeaderSize, 0);
  h[kDType] = static_cast<std::int64_t>(y.dtype());
  h[kDims] = y.dim();
  for (int d = 0; d < y.dim(); ++d) h[kShape + d] = y.size(d);
  h[kBegin] = info.begin;
  h[kEnd] = info.end;
  h[kRows] = info.batch_rows;
  return Tensor::from_vector(h, {kHeaderSize});
}

// A header whose dtype field holds kRefusedBatch announces no activation: stage 0
// refused the step's batch, and its kRows field holds the batch's rows (-1: no batch
// with a leading dim). Every later stage passes it on, so no stage is left waiting for a
// microbatch that will not come, at no cost to a good step; the raise is agreed
// (refuse_batch).
constexpr std::int64_t kRefusedBatch = -1;

// Why stage 0 refuses a batch of `rows` rows (-1: undefined or 0-dim) for `m`
// microbatches (m = 0 for evaluate, which takes any batch with a row); empty if it
// does not. Stage 0 and the stages its refusal reaches raise the same text.
std::string batch_refusal(std::int64_t rows, int m) {
  if (rows < 0) return "a batch with a leading batch dim, got an undefined or 0-dim tensor";
  if (rows < std::max(m, 1)) {
    return m > 0 ? "a batch of at least " + std::to_string(m) + " rows for " + std::to_string(m) +
                       " microbatches, got " + std::to_string(rows)
                 : "a batch with at least one row along dim 0, got 0 rows";
  }
  return {};
}

// A header that announces no activation: its dtype field holds `kind` (kRefusedBatch,
// or kFailedUpstream below) and its kRows field the batch's rows.
Tensor control_header(std::int64_t kind, std::int64_t rows) {
  std::vector<std::int64_t> h(kHeaderSize, 0);
  h[kDType] = kind;
  h[kRows] = rows;
  return Tensor::from_vector(h, {kHeaderSize});
}

// The batch rows a control header of `kind` carries; nullopt for any other header.
std::optional<std::int64_t> control_rows(const Tensor& header, std::int64_t kind) {
  const auto h = header.to_vector<std::int64_t>();
  if (h[kDType] != kind) return std::nullopt;
  return h[kRows];
}

// A header whose dtype field holds kFailedUpstream announces no activation either: a
// stage before this one raised during the step (a unit's forward or backward, the loss
// function), and its kRows field holds the batch's rows (evaluate's later stages count
// their microbatches from them). Once a stage has failed or received one, it computes
// nothing more in the step but keeps every message its neighbours expect: this header in
// place of each activation it still owes the next stage (which then owes no gradient
// for it), zeros in place of each gradient it owes the previous one. The step's
// messages all complete, and the step ends with an agreement over the mesh that raises
// the failing rank's error on every rank (agree_on_success), so no stage, and no rank
// of another dp replica, is left waiting.
constexpr std::int64_t kFailedUpstream = -2;

// End of a step: the caches a failed step may have left are dropped (the next step
// starts as after a release), and every rank raises the error of the lowest rank that
// failed, or none.
void end_of_step(nn::Module& model, const std::vector<std::string>& units, const Mesh& mesh,
                 const std::exception_ptr& failure, bool failed) {
  if (failed) {
    for (const std::string& path : units) model.at(path).release_activations();
  }
  agree_on_success(mesh.world().mpi_comm(), [&] {
    if (failure) std::rethrow_exception(failure);
  });
}

// Raises stage 0's refusal of a batch of `rows` rows on `stage`, after passing it on to
// the next stage as `headers` refusal headers: one per header receive that stage has
// posted (train_step posts all m at once, evaluate one), so none stays pending. The
// raise is agreed over the mesh, as a failed step's is (end_of_step, below): every rank
// raises the refusal of the lowest refusing rank, and the pipelines of other dp replicas,
// whose stage 0 took its batch, raise it too instead of waiting for these.
[[noreturn]] void refuse_batch(const Mesh& mesh, int stage, int stages, const std::string& who, std::int64_t rows,
                               int microbatches, int headers) {
  if (stage + 1 < stages) {
    const Tensor header = control_header(kRefusedBatch, rows);
    std::vector<CommRequest> sends;
    for (int j = 0; j < headers; ++j) sends.push_back(mesh.pp().isend(header, stage + 1, header_tag(j)));
    for (CommRequest& r : sends) r.wait();
  }
  const InvalidArgument refusal(who + ": stage 0 needs " + batch_refusal(rows, microbatches));
  agree_on_success(mesh.world().mpi_comm(), [&] { throw refusal; });
  throw refusal;  // not reached: the agreement raises on a rank that failed
}

// Stage 0's batch rows for the refusal rule: -1 for an undefined or 0-dim tensor.
std::int64_t batch_rows(const Tensor& batch) { return batch.defined() && batch.dim() >= 1 ? batch.size(0) : -1; }

// What a received header announces: the microbatch (index `j`) and an empty tensor of
// the activation's shape and dtype on `device`, to receive it into.
struct Announced {
  Microbatch info;
  Tensor activation;
};
Announced read_header(const Tensor& header, int j, Device device) {
  const auto h = header.to_vector<std::int64_t>();
  Shape shape(h.begin() + kShape, h.begin() + kShape + h[kDims]);
  return {{j, h[kBegin], h[kEnd], h[kRows]}, Tensor::empty(shape, static_cast<DType>(h[kDType]), device)};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

StageSplit make_split(const nn::Module& model, int stages, const PipelineOptions& options) {
  if (!options.cut_points.empty() && !options.units_per_stage.empty()) {
    throw InvalidArgument("Pipeline: both cut_points and units_per_stage are given; keep one");
  }
  if (!options.cut_points.empty()) return split_at(model, options.cut_points);
  if (!options.units_per_stage.empty()) return split_by_layer_count(model, options.units_per_stage);
  return split_by_layer_count(model, stages);
}

}  // namespace

constexpr tessera::detail::EnumName<StageActivations> kStageActivationsNames[] = {
    {StageActivations::stash, "stash"},
    {StageActivations::recompute, "recompute"},
};

std::string_view stage_activations_name(StageActivations activations) noexcept {
  return tessera::detail::name_of(kStageActivationsNames, activations);
}

StageActivations parse_stage_activations(std::string_view text, std::string_view key) {
  return tessera::detail::parse_enum(kStageActivationsNames, text, key, "pipeline activations");
}

Pipeline::Pipeline(nn::Module& model, const Mesh& mesh, PipelineOptions options)
    : model_(model), mesh_(mesh), options_(std::move(options)) {
  if (options_.microbatches < 1) {
    throw InvalidArgument("Pipeline: microbatches must be >= 1, got " + std::to_string(options_.microbatches));
  }
  split_ = make_split(model_, mesh_.pp_size(), options_);
  if (stages() != mesh_.pp_size()) {
    throw InvalidArgument("Pipeline: the split has " + std::to_string(stages()) + " stages (" + split_.str() +
                          ") but the mesh has pipeline " + std::to_string(mesh_.pp_size()) +
                          "; give one cut point or count per stage boundary or stage");
  }
  stage_ = mesh_.coords().pp;
  // While every unit is still here: the ties' parameters, readers and replicas. Their
  // tags follow the microbatches' three per microbatch.
  ties_ = std::make_unique<detail::StageTies>(model_, split_, stage_, options_.tied, 3 * options_.microbatches);
  keep_stage(model_, split_, stage_);
  // CUDA stage messages take NCCL channels of their own, one per neighbour and
  // direction (Communicator::prepare_point_to_point), opened here, collectively over
  // mesh.pp(), rather than on a first message the neighbour may not be ready for. For
  // host tensors, or ranks sharing a GPU, it opens nothing and messages take MPI.
  std::vector<int> neighbours;
  if (stage_ > 0) neighbours.push_back(stage_ - 1);
  if (stage_ + 1 < stages()) neighbours.push_back(stage_ + 1);
  mesh_.pp().prepare_point_to_point(mesh_.device(), neighbours);
  actions_ = stage_actions(options_.schedule, stage_, stages(), options_.microbatches);
  // A stash that missed one layer's caches would give that layer another microbatch's
  // backward: every stage checks its units before the first step, agreed over the mesh
  // so a stage that refuses does not leave the others waiting for its messages.
  if (options_.activations == StageActivations::stash) {
    agree_on_success(mesh_.world().mpi_comm(), [&] {
      for (const std::string& path : units()) nn::require_stashable(model_.at(path), path);
    });
  }
}

Pipeline::~Pipeline() = default;

TiedReplicaBytes Pipeline::tied_replica_bytes() const { return ties_->replica_bytes(); }

Tensor Pipeline::stage_forward(const Tensor& input) {
  Tensor x = input;
  // Through at() at call time: a unit replaced since (a data-parallel wrapper) is used.
  for (const std::string& path : units()) x = model_.at(path).forward(x);
  return x;
}

Tensor Pipeline::stage_backward(const Tensor& grad_output) {
  Tensor g = grad_output;
  const auto& paths = units();
  for (auto it = paths.rbegin(); it != paths.rend(); ++it) g = model_.at(*it).backward(g);
  return g;
}

namespace detail {

// What train_step and evaluate share: the stage's neighbours, the messages in flight,
// the step's first error, the refusal of a batch, the activations sent on and the end of
// the step. `who` names the call in refusals; a refusal is of `refusal_microbatches`
// (0 for evaluate) and passed on as `refusal_headers` headers (see refuse_batch).
class StepRun {
 public:
  StepRun(Pipeline& pipeline, nn::Module& model, const Mesh& mesh, StageTies& ties, std::string who,
          int refusal_microbatches, int refusal_headers)
      : pipeline_(pipeline),
        model_(model),
        mesh_(mesh),
        ties_(ties),
        pp_(mesh.pp()),
        prev_(pipeline.stage() - 1),
        next_(pipeline.stage() + 1),
        who_(std::move(who)),
        refusal_microbatches_(refusal_microbatches),
        refusal_headers_(refusal_headers) {
    ties_.post_values(pp_, sends_);
  }

  // Stage 0: the batch's rows, or the agreed refusal of a batch the step cannot take
  // (after receiving the tied values, so nothing is left in flight).
  std::int64_t rows_or_refuse(const Tensor& batch) {
    const std::int64_t rows = batch_rows(batch);
    if (!batch_refusal(rows, refusal_microbatches_).empty()) {
      ties_.receive_values();
      refuse(rows);
    }
    return rows;
  }
  // Raises stage 0's refusal of a batch of `rows` rows, passed on first.
  [[noreturn]] void refuse(std::int64_t rows) {
    refuse_batch(mesh_, pipeline_.stage(), pipeline_.stages(), who_, rows, refusal_microbatches_, refusal_headers_);
  }

  // The stage stops computing for the rest of the step: its own failure (in a catch
  // block; the first error is kept) or a failure header from a stage before it.
  void fail_here() {
    if (!failure_) failure_ = std::current_exception();
    failed_ = true;
  }
  void failed_upstream() { failed_ = true; }
  bool failed() const { return failed_; }

  // Sends microbatch `info`'s activation `y` (made contiguous) to the next stage, or a
  // failure header in its place once the stage has failed. Returns whether `y` went (a
  // gradient then comes back for it).
  bool send_on(int j, Tensor& y, const Microbatch& info) {
    if (failed_) {
      sends_.push_back(pp_.isend(control_header(kFailedUpstream, info.batch_rows), next_, header_tag(j)));
      return false;
    }
    y = y.contiguous();
    sends_.push_back(pp_.isend(make_header(y, info), next_, header_tag(j)));
    sends_.push_back(pp_.isend(y, next_, activation_tag(j)));
    return true;
  }

  void wait_sends() {
    for (CommRequest& r : sends_) r.wait();
  }
  // The error of the lowest failing rank raised on every rank (end_of_step).
  void end() { end_of_step(model_, pipeline_.units(), mesh_, failure_, failed_); }
  // The last stage's loss, on every rank of the pipeline.
  double broadcast_loss(double loss_sum) {
    Tensor loss = Tensor::from_vector<double>({loss_sum}, {1});
    pp_.broadcast(loss, pipeline_.stages() - 1);
    return loss.to_vector<double>()[0];
  }

 protected:
  Pipeline& pipeline_;
  nn::Module& model_;
  const Mesh& mesh_;
  StageTies& ties_;
  Communicator& pp_;
  const int prev_, next_;
  std::vector<CommRequest> sends_;

 private:
  std::string who_;
  int refusal_microbatches_, refusal_headers_;
  std::exception_ptr failure_;
  bool failed_ = false;
};

namespace {

// train_step's schedule run: the microbatches in flight and the actions of the stage's
// schedule, each a forward or a backward with the messages around it.
class TrainStepRun : public StepRun {
 public:
  // The counters of the step (reset by the caller) are the pipeline's.
  struct Counters {
    StepTimes& times;
    int& recomputes;
    int& restores;
  };
  TrainStepRun(Pipeline& pipeline, nn::Module& model, const Mesh& mesh, StageTies& ties, Counters counters)
      : StepRun(pipeline, model, mesh, ties, "Pipeline::train_step", pipeline.options().microbatches,
                pipeline.options().microbatches),
        m_(pipeline.options().microbatches),
        stash_(pipeline.options().activations == StageActivations::stash),
        counters_(counters),
        mb_(static_cast<std::size_t>(m_)) {
    // NCCL matches a peer's messages in the order they are posted (it has no tags), and
    // the next stage sends the gradients in its backward order, which is this stage's:
    // their receives are posted in that order, each once its activation is sent (1F1B:
    // right after it; GPipe: all after the last forward, from the last microbatch down).
    for (const Action& a : pipeline.actions()) {
      if (a.kind == Action::Kind::backward) backward_order_.push_back(a.microbatch);
    }
  }

  // Stage 0 cuts the batch into the microbatches; every later stage posts the receives
  // of their headers.
  void start(const Tensor& batch) {
    if (pipeline_.is_first()) {
      const std::int64_t rows = rows_or_refuse(batch);
      for (int j = 0; j < m_; ++j) {
        const ShardRange r = shard_range(rows, m_, j);
        mb_[static_cast<std::size_t>(j)].info = {j, r.start, r.end(), rows};
      }
      return;
    }
    for (int j = 0; j < m_; ++j) {
      auto& f = mb_[static_cast<std::size_t>(j)];
      f.header = Tensor::empty({kHeaderSize}, DType::i64);
      f.header_request = pp_.irecv(f.header, prev_, header_tag(j));
    }
  }

  // Runs the stage's actions; returns this stage's share of the loss (the last stage's).
  double run(const Tensor& batch, const LossFunction& loss_fn) {
    for (const Action& action : pipeline_.actions()) {
      progress_sends();
      post_ready_inputs();
      if (action.kind == Action::Kind::forward) {
        forward(action.microbatch, batch, loss_fn);
      } else {
        backward(action.microbatch);
      }
    }
    return loss_sum_;
  }

 private:
  struct InFlight {
    Microbatch info;
    Tensor input;                            // the stage's input (recompute: kept for the forward before backward)
    std::vector<nn::ActivationStash> stash;  // per unit: the caches of its forward (stash)
    Tensor header;                           // received header (stages after the first)
    CommRequest header_request, input_request, grad_request;
    bool input_posted = false;
    bool failed_upstream = false;  // a failure header came instead: no activation, no gradient
    bool forward_done = false;
    bool activation_sent = false;  // so a gradient comes back for it
    Shape input_shape;             // of a received activation: the gradient owed for it
    DType input_dtype = DType::f32;
    Tensor grad_output;  // received gradient, or the loss function's on the last stage
  };

  // Posts the receive of microbatch j's activation once its header is in (waiting for
  // the header when `wait`). Returns whether it is posted.
  bool post_input(int j, bool wait) {
    auto& f = mb_[static_cast<std::size_t>(j)];
    if (f.input_posted) return true;
    if (wait) {
      f.header_request.wait();
    } else if (!f.header_request.test()) {
      return false;
    }
    if (const auto refused = control_rows(f.header, kRefusedBatch)) {
      for (InFlight& other : mb_) other.header_request.wait();  // stage 0 sent all m headers
      ties_.receive_values();
      refuse(*refused);
    }
    f.input_posted = true;
    if (control_rows(f.header, kFailedUpstream)) {
      f.failed_upstream = true;
      failed_upstream();
      return true;
    }
    Announced announced = read_header(f.header, j, mesh_.device());
    f.info = announced.info;
    f.input = std::move(announced.activation);
    f.input_shape = f.input.shape();
    f.input_dtype = f.input.dtype();
    f.input_request = pp_.irecv(f.input, prev_, activation_tag(j));
    return true;
  }
  // Posts every activation receive whose header has arrived, in order.
  void post_ready_inputs() {
    if (pipeline_.is_first()) return;
    for (int j = 0; j < m_ && post_input(j, false); ++j) {
    }
  }
  // Posts the gradient receives, in backward order, up to the first microbatch whose
  // activation is not sent yet. A microbatch whose activation was replaced by a failure
  // header gets no gradient.
  void post_gradients() {
    for (; gradients_posted_ < backward_order_.size(); ++gradients_posted_) {
      const int k = backward_order_[gradients_posted_];
      auto& g = mb_[static_cast<std::size_t>(k)];
      if (!g.forward_done) return;  // its activation is not sent yet
      if (g.activation_sent) g.grad_request = pp_.irecv(g.grad_output, next_, gradient_tag(k));
    }
  }
  // stash: moves the caches of the microbatch they hold aside before another forward or
  // a restore would overwrite them.
  void set_aside() {
    if (!stash_ || cached_ < 0) return;
    auto& held = mb_[static_cast<std::size_t>(cached_)].stash;
    for (const std::string& path : pipeline_.units()) held.push_back(model_.at(path).stash_activations());
    cached_ = -1;
  }
  void restore(InFlight& f) {
    const auto& paths = pipeline_.units();
    for (std::size_t u = 0; u < paths.size(); ++u) model_.at(paths[u]).restore_activations(std::move(f.stash[u]));
    f.stash.clear();
    ++counters_.restores;
  }
  // Drives the sends still in flight: a large message moves in MPI's rendezvous
  // protocol, which advances only inside MPI calls on both sides; a stage that went on
  // computing would otherwise hold its neighbour's next input back until its next wait.
  void progress_sends() {
    for (CommRequest& r : sends_) {
      if (!r.done()) (void)r.test();
    }
  }

  void forward(int j, const Tensor& batch, const LossFunction& loss_fn) {
    auto& f = mb_[static_cast<std::size_t>(j)];
    if (pipeline_.is_first()) {
      f.input = batch.narrow(0, f.info.begin, f.info.end - f.info.begin).contiguous();
    } else {
      post_input(j, true);
      if (!f.failed_upstream) f.input_request.wait();
    }
    if (!values_received_) {
      ties_.receive_values();  // the tied parameters' replicas, before they are read
      values_received_ = true;
    }
    const auto compute_start = std::chrono::steady_clock::now();
    Tensor y;
    if (!failed()) {
      try {
        set_aside();
        y = pipeline_.stage_forward(f.input);
        cached_ = j;
        if (stash_) f.input = Tensor();  // the units keep what they need
        if (pipeline_.is_last()) f.grad_output = loss_gradient(y, f.info, loss_fn);
      } catch (...) {
        fail_here();
      }
    }
    counters_.times.compute_seconds += seconds_since(compute_start);
    if (pipeline_.is_last()) return;
    if (send_on(j, y, f.info)) {
      f.grad_output = Tensor::empty(y.shape(), y.dtype(), y.device());
      f.activation_sent = true;
    }
    f.forward_done = true;
    post_gradients();
  }

  // The last stage: the loss function's share (added up) and its gradient, checked.
  Tensor loss_gradient(const Tensor& y, const Microbatch& info, const LossFunction& loss_fn) {
    Tensor grad;
    loss_sum_ += loss_fn(y, info, grad);
    if (!grad.defined() || grad.shape() != y.shape()) {
      throw InvalidArgument("Pipeline::train_step: the loss function must set the gradient to the output's shape " +
                            shape_str(y.shape()) + ", got " +
                            (grad.defined() ? shape_str(grad.shape()) : std::string("an undefined tensor")));
    }
    return grad;
  }

  void backward(int j) {
    auto& f = mb_[static_cast<std::size_t>(j)];
    if (f.activation_sent) f.grad_request.wait();
    const auto compute_start = std::chrono::steady_clock::now();
    Tensor dx;
    if (!failed()) {
      try {
        if (cached_ != j) {
          if (stash_) {
            set_aside();
            restore(f);
          } else {
            (void)pipeline_.stage_forward(f.input);  // bitwise the first forward: refills the caches
            ++counters_.recomputes;
          }
        }
        dx = pipeline_.stage_backward(f.grad_output);
        for (const std::string& path : pipeline_.units()) model_.at(path).release_activations();  // spent
        cached_ = -1;
      } catch (...) {
        fail_here();
      }
    }
    counters_.times.compute_seconds += seconds_since(compute_start);
    // The previous stage waits for the gradient of every activation it sent.
    if (!pipeline_.is_first() && !f.failed_upstream) {
      sends_.push_back(pp_.isend(failed() ? Tensor::zeros(f.input_shape, f.input_dtype, mesh_.device()) : dx.contiguous(),
                                 prev_, gradient_tag(j)));
    }
    f.input = Tensor();
    f.grad_output = Tensor();
    f.stash.clear();
  }

  const int m_;
  const bool stash_;
  Counters counters_;
  std::vector<InFlight> mb_;
  std::vector<int> backward_order_;
  std::size_t gradients_posted_ = 0;
  double loss_sum_ = 0;
  int cached_ = -1;  // the microbatch whose forward the units' caches hold
  bool values_received_ = false;
};

// evaluate, a stage after the first: microbatch j's input from the previous stage, or
// none after a failure header (the run then fails too); raises stage 0's refusal.
Tensor receive_evaluation_input(StepRun& run, Communicator& pp, int prev, int j, Device device, Microbatch& info) {
  Tensor header = Tensor::empty({kHeaderSize}, DType::i64);
  pp.recv(header, prev, header_tag(j));
  if (const auto refused = control_rows(header, kRefusedBatch)) run.refuse(*refused);
  if (const auto rows = control_rows(header, kFailedUpstream)) {
    run.failed_upstream();
    info.batch_rows = *rows;
    return Tensor();
  }
  Announced announced = read_header(header, j, device);
  info = announced.info;
  Tensor x = std::move(announced.activation);
  pp.recv(x, prev, activation_tag(j));
  return x;
}

}  // namespace
}  // namespace detail

double Pipeline::train_step(const Tensor& batch, const LossFunction& loss_fn) {
  const auto step_start = std::chrono::steady_clock::now();
  times_ = {};
  recomputes_ = 0;
  restores_ = 0;
  detail::TrainStepRun run(*this, model_, mesh_, *ties_, {times_, recomputes_, restores_});
  run.start(batch);
  const double loss_sum = run.run(batch, loss_fn);
  run.wait_sends();
  ties_->reduce_gradients(mesh_.pp());  // the readers' shares into the owners' gradients
  run.end();
  times_.total_seconds = seconds_since(step_start);
  return run.broadcast_loss(loss_sum);
}

double Pipeline::evaluate(const Tensor& batch, const EvaluationLoss& loss_fn) {
  // As in train_step: after a failure here or before, failure headers replace the
  // activations still owed, and the end of the step agrees on the error.
  detail::StepRun run(*this, model_, mesh_, *ties_, "Pipeline::evaluate", 0, 1);
  // min(microbatches, rows) microbatches: a validation set's last batch may be short.
  // Stage 0 knows the rows; the other stages read them from the first header.
  auto microbatch_count = [&](std::int64_t rows) {
    return static_cast<int>(std::min<std::int64_t>(options_.microbatches, rows));
  };
  int m = 1;
  if (is_first()) m = microbatch_count(run.rows_or_refuse(batch));
  ties_->receive_values();
  double loss_sum = 0;
  for (int j = 0; j < m; ++j) {
    Microbatch info;
    Tensor x;
    if (is_first()) {
      const ShardRange r = shard_range(batch.size(0), m, j);
      info = {j, r.start, r.end(), batch.size(0)};
      x = batch.narrow(0, r.start, r.length).contiguous();
    } else {
      x = detail::receive_evaluation_input(run, mesh_.pp(), stage_ - 1, j, mesh_.device(), info);
      if (j == 0) m = microbatch_count(info.batch_rows);
    }
    Tensor y;
    if (!run.failed()) {
      try {
        y = stage_forward(x);
        // No backward follows: the caches the forward left are dropped at once.
        for (const std::string& path : units()) model_.at(path).release_activations();
        if (is_last()) loss_sum += loss_fn(y, info);
      } catch (...) {
        run.fail_here();
      }
    }
    if (!is_last()) (void)run.send_on(j, y, info);
  }
  run.wait_sends();
  run.end();
  return run.broadcast_loss(loss_sum);
}

}  // namespace tessera::pp
