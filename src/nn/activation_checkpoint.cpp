#include "tessera/nn/activation_checkpoint.hpp"

#include <cerrno>
#include <cstdlib>

#include "tessera/error.hpp"

namespace tessera::nn {

ActivationCheckpoint::ActivationCheckpoint(std::unique_ptr<Module> inner) : inner_(std::move(inner)) {
  if (!inner_) throw InvalidArgument("ActivationCheckpoint: the wrapped module is null");
  // The parameters keep their names (no ".inner" in the FQN).
  for (auto& [name, p] : inner_->named_parameters()) register_parameter(name, *p);
}

std::string ActivationCheckpoint::type_name() const {
  return "Checkpointed(" + (inner_ ? inner_->type_name() : std::string("released")) + ")";
}

Tensor ActivationCheckpoint::forward(const Tensor& input) {
  if (!inner_) throw InvalidArgument(type_name() + ": the wrapped module was released");
  Tensor y = inner_->forward(input);
  // The output is the block's own tensor (the next block reads it); everything the block
  // kept for its backward goes, and the recompute brings it back.
  inner_->release_activations();
  input_ = input;
  return y;
}

Tensor ActivationCheckpoint::backward(const Tensor& grad_output) {
  if (!inner_) throw InvalidArgument(type_name() + ": the wrapped module was released");
  if (!input_.defined()) throw InvalidArgument(type_name() + ": backward called without a preceding forward");
  const Tensor input = std::move(input_);
  input_ = Tensor();
  // The same forward on the same input: the caches backward reads are the ones the first
  // forward had. Its output is not needed (and is freed here).
  (void)inner_->forward(input);
  return inner_->backward(grad_output);
}

void ActivationCheckpoint::visit_activations(ActivationVisitor& v) {
  v.tensor(input_);
  if (inner_) inner_->visit_activations(v);  // empty between forward and backward
}

std::vector<std::string> ActivationCheckpoint::tied_parameter_paths() const {
  // The block's modules are hidden from named_modules(), so their declarations are made
  // here, relative to the wrapper (which registers the same parameters under the same names).
  std::vector<std::string> out;
  if (!inner_) return out;
  for (const auto& [path, m] : inner_->named_modules()) {
    for (const std::string& relative : m->tied_parameter_paths()) {
      out.push_back(path.empty() ? relative : path + "." + relative);
    }
  }
  return out;
}

void ActivationCheckpoint::set_compute_precision(Precision precision) {
  Module::set_compute_precision(precision);
  if (inner_) inner_->set_compute_precision(precision);
}

void ActivationCheckpoint::after_initialize() {
  if (!inner_) return;
  for (const auto& [path, m] : inner_->named_modules()) m->after_initialize();
}

std::unique_ptr<Module> ActivationCheckpoint::release_inner() {
  input_ = Tensor();
  return std::move(inner_);
}

// ---------------------------------------------------------------------------
// CheckpointPolicy
// ---------------------------------------------------------------------------

std::string CheckpointPolicy::str() const {
  if (every <= 0) return "none";
  if (every == 1) return "blocks";
  return "every " + std::to_string(every);
}

CheckpointPolicy CheckpointPolicy::parse(std::string_view text, std::string_view key) {
  const std::string t(text);
  auto bad = [&]() -> ConfigError {
    return ConfigError(std::string(key) + ": unknown value '" + t +
                       "' (expected none, blocks, or every N with an integer N >= 1)");
  };
  if (t == "none") return {0};
  if (t == "blocks") return {1};
  const std::string lead = "every ";
  if (t.compare(0, lead.size(), lead) != 0) throw bad();
  std::size_t start = lead.size();
  while (start < t.size() && t[start] == ' ') ++start;
  const std::string number = t.substr(start);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(number.c_str(), &end, 10);
  if (number.empty() || *end != '\0' || errno == ERANGE || n < 1 || number[0] == '+' || number[0] == '-') throw bad();
  return {static_cast<std::int64_t>(n)};
}

std::vector<std::string> checkpoint_blocks(Module& model, const std::string& stack, const CheckpointPolicy& policy) {
  Module& blocks = model.at(stack);
  std::vector<std::string> selected;
  std::int64_t index = 0;
  for (const auto& [name, child] : blocks.children()) {
    if (policy.selects(index++)) selected.push_back(stack.empty() ? name : stack + "." + name);
  }
  // Checked before anything changes: a tree is converted whole or not at all.
  for (const std::string& path : selected) {
    if (dynamic_cast<ActivationCheckpoint*>(&model.at(path)) != nullptr) {
      throw InvalidArgument("checkpoint_blocks: '" + path + "' is checkpointed already");
    }
  }
  for (const std::string& path : selected) {
    // Out of the tree (an empty placeholder holds its place) and into its wrapper.
    struct Hole final : Module {
      Tensor forward(const Tensor&) override { throw InternalError("checkpoint_blocks: placeholder ran"); }
      Tensor backward(const Tensor&) override { throw InternalError("checkpoint_blocks: placeholder ran"); }
      std::string type_name() const override { return "Placeholder"; }
    };
    std::unique_ptr<Module> block = model.replace(path, std::make_unique<Hole>());
    model.replace(path, std::make_unique<ActivationCheckpoint>(std::move(block)));
  }
  return selected;
}

}  // namespace tessera::nn
