// SGD and AdamW on local shards (optim.hpp), on whichever device the parameters live:
// the element updates run in the parameter's backend (compute.hpp: sgd_update,
// adamw_update), in double per element. No communication is needed because both rules
// are element-wise.

#include "tessera/optim.hpp"

#include <cmath>
#include <set>
#include <sstream>

#include "backend/compute.hpp"
#include "tessera/error.hpp"

namespace tessera {

namespace {

std::string num(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

void require_option(bool ok, const std::string& type, const char* option, double value, const char* rule) {
  if (!ok || !std::isfinite(value)) {
    throw InvalidArgument(type + ": option " + option + " = " + num(value) + " " + rule);
  }
}

// Frozen parameters (trainable = false) are dropped here, as PyTorch users filter on
// requires_grad: they get no state and no update, and may have no gradient at all.
NamedParameters trainable_only(NamedParameters params) {
  NamedParameters out;
  for (auto& entry : params) {
    if (entry.second == nullptr || entry.second->trainable) out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------- Optimizer

Optimizer::Optimizer(NamedParameters params, double lr, std::string type)
    : params_(trainable_only(params)), type_(std::move(type)) {
  if (params.empty()) throw InvalidArgument(type_ + ": got an empty parameter list");
  if (params_.empty()) {
    throw InvalidArgument(type_ + ": every one of the " + std::to_string(params.size()) +
                          " parameters is frozen (trainable = false); nothing to optimize");
  }
  std::set<std::string> names;
  std::set<const Parameter*> seen;
  for (const auto& [name, p] : params_) {
    const std::string who = type_ + ": parameter '" + name + "'";
    if (p == nullptr) throw InvalidArgument(who + " is null");
    if (!names.insert(name).second) throw InvalidArgument(who + " is listed twice");
    if (!seen.insert(p).second) throw InvalidArgument(who + " is the same Parameter as an earlier entry");
    if (!p->value.defined()) throw InvalidArgument(who + " has an undefined value");
    require_usable(p->value, who);
    if (p->value.dtype() != DType::f32 && p->value.dtype() != DType::f64) {
      throw UnsupportedError(who + " " + p->value.str() + " must be f32 or f64 (keep an f32 master copy of " +
                             "lower-precision weights)");
    }
    if (!p->value.is_contiguous()) throw ShapeError(who + " " + p->value.str() + " must be contiguous");
    check_grad(name, *p);
  }
  set_learning_rate(lr);
}

void Optimizer::check_grad(const std::string& name, const Parameter& p) const {
  if (!p.grad.defined() || p.grad.shape() != p.value.shape() || p.grad.dtype() != p.value.dtype() ||
      !(p.grad.device() == p.value.device()) || !p.grad.is_contiguous()) {
    throw ShapeError(type_ + ": parameter '" + name + "': gradient " +
                     (p.grad.defined() ? p.grad.str() : std::string("(undefined)")) +
                     " must be a contiguous tensor shaped, typed and placed like the value " + p.value.str());
  }
}

OptimizerState Optimizer::make_state(const std::string& fqn, const Parameter& p, const std::string& suffix) const {
  return {fqn + "." + suffix, Tensor::zeros(p.value.shape(), p.value.dtype(), p.value.device()), p.global_shape,
          p.placement, p.local_offset};
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p->zero_grad();
}

void Optimizer::set_learning_rate(double lr) {
  require_option(lr >= 0, type_, "lr", lr, "must be a finite value >= 0");
  lr_ = lr;
}

void Optimizer::set_step_count(std::int64_t steps) {
  if (steps < 0) throw InvalidArgument(type_ + ": step count " + std::to_string(steps) + " must be >= 0");
  step_count_ = steps;
}

// ---------------------------------------------------------------------------------------- Sgd

Sgd::Sgd(NamedParameters params, SgdOptions options) : Optimizer(std::move(params), options.lr, "Sgd"), options_(options) {
  require_option(options.momentum >= 0, type_, "momentum", options.momentum, "must be a finite value >= 0");
  require_option(options.dampening >= 0 && options.dampening <= 1, type_, "dampening", options.dampening,
                 "must be in [0, 1]");
  require_option(options.weight_decay >= 0, type_, "weight_decay", options.weight_decay,
                 "must be a finite value >= 0");
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0)) {
    throw InvalidArgument("Sgd: option nesterov = true needs momentum > 0 and dampening = 0 (momentum = " +
                          num(options.momentum) + ", dampening = " + num(options.dampening) + ")");
  }
  if (options.momentum != 0) {
    for (const auto& [name, p] : params_) momentum_.push_back(make_state(name, *p, "momentum_buffer"));
  }
}

void Sgd::step() {
  for (const auto& [name, p] : params_) check_grad(name, *p);
  detail::SgdStep step;
  step.lr = lr_;
  step.weight_decay = options_.weight_decay;
  step.momentum = options_.momentum;
  step.dampening = options_.dampening;
  step.nesterov = options_.nesterov;
  step.first = step_count_ == 0;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    Parameter& p = *params_[k].second;
    void* buffer = options_.momentum != 0 ? momentum_[k].tensor.data() : nullptr;
    detail::compute_for(p.value, type_ + ": parameter '" + params_[k].first + "'")
        .sgd_update(p.value.dtype(), p.value.numel(), p.value.data(), p.grad.data(), buffer, step,
                    p.value.device().index);
  }
  ++step_count_;
}

std::vector<OptimizerState> Sgd::named_state() { return momentum_; }

// -------------------------------------------------------------------------------------- AdamW

AdamW::AdamW(NamedParameters params, AdamWOptions options)
    : Optimizer(std::move(params), options.lr, "AdamW"), options_(options) {
  require_option(options.beta1 >= 0 && options.beta1 < 1, type_, "beta1", options.beta1, "must be in [0, 1)");
  require_option(options.beta2 >= 0 && options.beta2 < 1, type_, "beta2", options.beta2, "must be in [0, 1)");
  require_option(options.eps >= 0, type_, "eps", options.eps, "must be a finite value >= 0");
  require_option(options.weight_decay >= 0, type_, "weight_decay", options.weight_decay,
                 "must be a finite value >= 0");
  for (const auto& [name, p] : params_) {
    exp_avg_.push_back(make_state(name, *p, "exp_avg"));
    exp_avg_sq_.push_back(make_state(name, *p, "exp_avg_sq"));
  }
}

void AdamW::step() {
  for (const auto& [name, p] : params_) check_grad(name, *p);
  const double lr = lr_;
  const auto t = static_cast<double>(step_count_ + 1);
  detail::AdamWStep step;
  step.beta1 = options_.beta1;
  step.beta2 = options_.beta2;
  step.eps = options_.eps;
  step.decay = 1.0 - lr * options_.weight_decay;
  step.step_size = lr / (1.0 - std::pow(options_.beta1, t));
  step.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(options_.beta2, t));
  for (std::size_t k = 0; k < params_.size(); ++k) {
    Parameter& p = *params_[k].second;
    detail::compute_for(p.value, type_ + ": parameter '" + params_[k].first + "'")
        .adamw_update(p.value.dtype(), p.value.numel(), p.value.data(), p.grad.data(), exp_avg_[k].tensor.data(),
                      exp_avg_sq_[k].tensor.data(), step, p.value.device().index);
  }
  ++step_count_;
}

std::vector<OptimizerState> AdamW::named_state() {
  std::vector<OptimizerState> out;
  for (std::size_t k = 0; k < exp_avg_.size(); ++k) {
    out.push_back(exp_avg_[k]);
    out.push_back(exp_avg_sq_[k]);
  }
  return out;
}

}  // namespace tessera
