#pragma once
// Optimizers on local shards: SGD (with momentum) and AdamW, with PyTorch's semantics
// (torch.optim.SGD, torch.optim.AdamW).
//
// Both update rules are element-wise, so a rank steps its own block of every parameter
// with no communication: the parallel run tracks the serial one as long as the
// gradients agree (sync replicated gradients and clip *before* step()). Every state
// tensor has its parameter's local shape, dtype and device and follows its placement
// (same global shape, placement and local offset), so a checkpoint stores and reshards
// optimizer state exactly like the parameter itself (named_state()).
//
// The parameters are referenced, not owned: they must outlive the optimizer (a Module
// and its optimizer are created and destroyed together). Host tensors of f32 or f64; state is kept in the parameter's dtype, each element is
// computed in double. Options are validated at construction (and set_learning_rate):
// the error names the optimizer, the option and the value.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/parameter.hpp"
#include "tessera/placement.hpp"
#include "tessera/tensor.hpp"

namespace tessera {

// What Module::named_parameters() returns.
using NamedParameters = std::vector<std::pair<std::string, Parameter*>>;

// One state tensor of one parameter, placed like the parameter.
struct OptimizerState {
  std::string name;          // "<parameter FQN>.<state>", e.g. "layers.0.weight.exp_avg"
  Tensor tensor;             // this rank's block; aliases the optimizer's storage, so
                             // copying into it restores the state (checkpoint load)
  Shape global_shape;        // the parameter's
  MeshPlacement placement;   // the parameter's
  Shape local_offset;        // the parameter's
};

class Optimizer {
 public:
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  virtual ~Optimizer() = default;

  // One update of every parameter from its current gradient; increments step_count().
  virtual void step() = 0;
  // Zeroes every parameter's gradient (gradients accumulate across backward calls).
  void zero_grad();

  double learning_rate() const { return lr_; }
  // For schedules; throws InvalidArgument for a negative or non-finite value.
  void set_learning_rate(double lr);

  // Steps taken so far: AdamW's bias-correction t; SGD's momentum buffers are taken to
  // hold history once it is > 0. A checkpoint stores it beside named_state().
  std::int64_t step_count() const { return step_count_; }
  void set_step_count(std::int64_t steps);

  // The state tensors, parameter by parameter in construction order (SGD:
  // "<fqn>.momentum_buffer" when momentum != 0; AdamW: "<fqn>.exp_avg",
  // "<fqn>.exp_avg_sq"). The state exists from construction (zeros), so a checkpoint
  // can be loaded into it before the first step.
  virtual std::vector<OptimizerState> named_state() = 0;

  const NamedParameters& parameters() const { return params_; }
  const std::string& type_name() const { return type_; }

 protected:
  // Validates the parameters (non-null, unique, defined host f32/f64 contiguous values
  // with matching gradients) and lr; errors name the parameter FQN. Frozen parameters
  // (Parameter::trainable false, e.g. a LoRA base) are dropped here: no state, no update;
  // a list of frozen parameters only is an InvalidArgument.
  Optimizer(NamedParameters params, double lr, std::string type);

  // Checks a gradient before an update (it may have been replaced since construction).
  void check_grad(const std::string& name, const Parameter& p) const;
  // A zero tensor shaped, typed and placed like parameter `p` (`suffix` names it).
  OptimizerState make_state(const std::string& fqn, const Parameter& p, const std::string& suffix) const;

  NamedParameters params_;
  double lr_ = 0;
  std::int64_t step_count_ = 0;
  std::string type_;
};

struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0.0;      // >= 0
  double dampening = 0.0;     // in [0, 1]
  double weight_decay = 0.0;  // >= 0, L2 (added to the gradient, as torch.optim.SGD)
  bool nesterov = false;      // needs momentum > 0 and dampening == 0
};

// torch.optim.SGD: d = g + wd*p; with momentum, b = d on the first step and
// b = momentum*b + (1 - dampening)*d after; d = nesterov ? d + momentum*b : b;
// p -= lr*d.
class Sgd final : public Optimizer {
 public:
  Sgd(NamedParameters params, SgdOptions options = {});
  void step() override;
  std::vector<OptimizerState> named_state() override;
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::vector<OptimizerState> momentum_;  // one per parameter when momentum != 0
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;         // in [0, 1)
  double beta2 = 0.999;       // in [0, 1)
  double eps = 1e-8;          // >= 0
  double weight_decay = 1e-2; // >= 0, decoupled (p *= 1 - lr*wd before the Adam update)
};

// torch.optim.AdamW (amsgrad off): t += 1; p *= 1 - lr*wd; m = b1*m + (1-b1)*g;
// v = b2*v + (1-b2)*g^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
class AdamW final : public Optimizer {
 public:
  AdamW(NamedParameters params, AdamWOptions options = {});
  void step() override;
  std::vector<OptimizerState> named_state() override;
  const AdamWOptions& options() const { return options_; }

 private:
  AdamWOptions options_;
  std::vector<OptimizerState> exp_avg_, exp_avg_sq_;  // one per parameter
};

}  // namespace tessera
