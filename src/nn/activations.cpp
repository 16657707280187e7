#include "tessera/nn/activations.hpp"

#include <string>

#include "tessera/error.hpp"
#include "tessera/nn/module.hpp"

namespace tessera::nn {

namespace {

std::string unlisted_message(const Module& leaf, const std::string& path) {
  return (path.empty() ? std::string() : "'" + path + "' (") + leaf.type_name() + (path.empty() ? "" : ")") +
         ": cannot stash its activations: it does not list what its forward caches (override "
         "Module::visit_activations, with an empty body if it caches nothing), or let the pipeline recompute "
         "instead (pipeline.activations: recompute)";
}

// Visits without touching anything; an unlisted leaf is the error.
class StashableProbe final : public ActivationVisitor {
 public:
  explicit StashableProbe(const std::string& path) : path_(path) {}
  void tensor(Tensor&) override {}
  void count(std::int64_t&) override {}
  void unlisted(const Module& leaf) override { throw InvalidArgument(unlisted_message(leaf, path_)); }

 private:
  const std::string& path_;
};

class ReleaseVisitor final : public ActivationVisitor {
 public:
  void tensor(Tensor& cached) override { cached = Tensor(); }
  void count(std::int64_t&) override {}  // a count holds no memory; the next forward sets it
  void unlisted(const Module&) override {}  // its caches stay: memory, never a result
};

}  // namespace

// Moves each cache into the stash, leaving the module's member empty, so the stash is
// the only holder and a later forward cannot overwrite what it keeps.
class StashVisitor final : public ActivationVisitor {
 public:
  explicit StashVisitor(ActivationStash& stash) : stash_(stash) {}
  void tensor(Tensor& cached) override {
    stash_.tensors_.push_back(std::move(cached));
    cached = Tensor();
  }
  void count(std::int64_t& cached) override { stash_.counts_.push_back(cached); }
  // Its backward would read whatever the next forward leaves in it: refused.
  void unlisted(const Module& leaf) override { throw InvalidArgument(unlisted_message(leaf, "")); }

 private:
  ActivationStash& stash_;
};

// Puts the caches back in the order StashVisitor took them; counts what it could not
// place, so a stash from another tree is an error and never a silent mix.
class RestoreVisitor final : public ActivationVisitor {
 public:
  explicit RestoreVisitor(ActivationStash& stash) : stash_(stash) {}
  void tensor(Tensor& cached) override {
    if (next_tensor_ < stash_.tensors_.size()) {
      cached = std::move(stash_.tensors_[next_tensor_]);
    } else {
      cached = Tensor();
    }
    ++next_tensor_;
  }
  void count(std::int64_t& cached) override {
    if (next_count_ < stash_.counts_.size()) cached = stash_.counts_[next_count_];
    ++next_count_;
  }
  void unlisted(const Module&) override {}  // a stash of this tree was refused before
  bool fitted() const { return next_tensor_ == stash_.tensors_.size() && next_count_ == stash_.counts_.size(); }
  std::string describe() const {
    return std::to_string(next_tensor_) + " cached tensors and " + std::to_string(next_count_) +
           " counts, the stash holds " + std::to_string(stash_.tensors_.size()) + " and " +
           std::to_string(stash_.counts_.size());
  }

 private:
  ActivationStash& stash_;
  std::size_t next_tensor_ = 0, next_count_ = 0;
};

void Module::visit_activations(ActivationVisitor& visitor) {
  if (children_.empty()) visitor.unlisted(*this);
  for (auto& [name, c] : children_) c->visit_activations(visitor);
}

void Module::release_activations() {
  ReleaseVisitor release;
  visit_activations(release);
}

ActivationStash Module::stash_activations() {
  ActivationStash stash;
  StashVisitor visitor(stash);
  visit_activations(visitor);
  return stash;
}

void Module::restore_activations(ActivationStash&& stash) {
  ActivationStash held = std::move(stash);
  RestoreVisitor visitor(held);
  visit_activations(visitor);
  if (!visitor.fitted()) {
    release_activations();  // never a mix of two forwards' caches
    throw InvalidArgument(type_name() + "::restore_activations: the stash was taken from another module tree (the tree has " +
                          visitor.describe() + ")");
  }
}

void require_stashable(Module& module, const std::string& path) {
  StashableProbe probe(path);
  module.visit_activations(probe);
}

}  // namespace tessera::nn
