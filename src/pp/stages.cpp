#include "tessera/pp/stages.hpp"

#include <memory>

#include "tessera/error.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/placement.hpp"

namespace tessera::pp {

namespace {

void collect_units(const nn::Module& module, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& [name, child] : module.children()) {
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (dynamic_cast<const nn::Sequential*>(child.get()) != nullptr) {
      collect_units(*child, path, out);
    } else {
      out.push_back(path);
    }
  }
}

std::string joined(const std::vector<std::string>& paths) {
  std::string s;
  for (const auto& p : paths) s += (s.empty() ? "" : ", ") + p;
  return s;
}

StageSplit split_counts(const std::vector<std::string>& units, const std::vector<int>& counts) {
  StageSplit split;
  std::size_t next = 0;
  for (int count : counts) {
    split.stages.emplace_back(units.begin() + static_cast<std::ptrdiff_t>(next),
                              units.begin() + static_cast<std::ptrdiff_t>(next + static_cast<std::size_t>(count)));
    next += static_cast<std::size_t>(count);
  }
  return split;
}

// A placeholder for a unit of another stage: no parameters, no compute. Reaching it
// means a caller ran the whole tree's forward on one stage.
class OtherStageUnit final : public nn::Module {
 public:
  OtherStageUnit(std::string path, std::string type, int stage)
      : path_(std::move(path)), type_(std::move(type)), stage_(stage) {}
  Tensor forward(const Tensor&) override { throw InternalError(what("forward")); }
  Tensor backward(const Tensor&) override { throw InternalError(what("backward")); }
  std::string type_name() const override { return "OtherStageUnit(" + type_ + ")"; }

 private:
  std::string what(const char* pass) const {
    return std::string(pass) + " of unit '" + path_ + "' (" + type_ + ") reached on a rank that does not hold it: it " +
           "belongs to pipeline stage " + std::to_string(stage_) + "; run the model through pp::Pipeline";
  }
  std::string path_, type_;
  int stage_;
};

}  // namespace

std::vector<std::string> pipeline_units(const nn::Module& root) {
  if (dynamic_cast<const nn::Sequential*>(&root) == nullptr) {
    throw InvalidArgument("pipeline_units: the root module is a " + root.type_name() +
                          ", not a Sequential; only a Sequential's forward order is known (put the layers in "
                          "an nn::Sequential)");
  }
  std::vector<std::string> units;
  collect_units(root, "", units);
  if (units.empty()) throw InvalidArgument("pipeline_units: the Sequential holds no layer to split");
  return units;
}

std::string StageSplit::str() const {
  std::string s;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (i > 0) s += " | ";
    s += "stage " + std::to_string(i) + ":";
    for (const auto& p : stages[i]) s += " " + p;
  }
  return s;
}

StageSplit split_by_layer_count(const nn::Module& root, int stages) {
  const auto units = pipeline_units(root);
  if (stages < 1 || static_cast<std::size_t>(stages) > units.size()) {
    throw InvalidArgument("split_by_layer_count: " + std::to_string(stages) + " stages for " +
                          std::to_string(units.size()) + " layers (" + joined(units) +
                          "); every stage needs at least one layer");
  }
  std::vector<int> counts;
  for (int s = 0; s < stages; ++s) {
    counts.push_back(static_cast<int>(shard_range(static_cast<std::int64_t>(units.size()), stages, s).length));
  }
  return split_counts(units, counts);
}

StageSplit split_by_layer_count(const nn::Module& root, const std::vector<int>& units_per_stage) {
  const auto units = pipeline_units(root);
  if (units_per_stage.empty()) throw InvalidArgument("split_by_layer_count: no stage counts given");
  std::size_t total = 0;
  for (std::size_t s = 0; s < units_per_stage.size(); ++s) {
    if (units_per_stage[s] < 1) {
      throw InvalidArgument("split_by_layer_count: stage " + std::to_string(s) + " is given " +
                            std::to_string(units_per_stage[s]) + " layers; every stage needs at least one");
    }
    total += static_cast<std::size_t>(units_per_stage[s]);
  }
  if (total != units.size()) {
    throw InvalidArgument("split_by_layer_count: the stage counts add up to " + std::to_string(total) +
                          " layers but the model has " + std::to_string(units.size()) + " (" + joined(units) + ")");
  }
  return split_counts(units, units_per_stage);
}

StageSplit split_at(const nn::Module& root, const std::vector<std::string>& cut_points) {
  const auto units = pipeline_units(root);
  std::vector<int> counts;
  std::size_t begin = 0;  // first unit of the stage being closed
  for (const std::string& cut : cut_points) {
    // The first unit at or below `cut`.
    std::size_t at = units.size();
    for (std::size_t i = 0; i < units.size(); ++i) {
      if (units[i] == cut || units[i].rfind(cut + ".", 0) == 0) {
        at = i;
        break;
      }
    }
    if (at == units.size()) {
      throw InvalidArgument("split_at: cut point '" + cut + "' names no layer of the model (layers: " +
                            joined(units) + ")");
    }
    if (at <= begin) {
      throw InvalidArgument("split_at: cut point '" + cut + "' does not come after the previous stage's first layer '" +
                            units[begin] + "'; cut points must be in forward order and leave every stage a layer");
    }
    counts.push_back(static_cast<int>(at - begin));
    begin = at;
  }
  counts.push_back(static_cast<int>(units.size() - begin));
  return split_counts(units, counts);
}

void keep_stage(nn::Module& root, const StageSplit& split, int stage) {
  const int stages = static_cast<int>(split.stages.size());
  if (stage < 0 || stage >= stages) {
    throw InvalidArgument("keep_stage: stage " + std::to_string(stage) + " is outside the " + std::to_string(stages) +
                          " stages of the split");
  }
  for (int s = 0; s < stages; ++s) {
    if (s == stage) continue;
    for (const std::string& path : split.stages[static_cast<std::size_t>(s)]) {
      const std::string type = root.at(path).type_name();
      root.replace(path, std::make_unique<OtherStageUnit>(path, type, s));
    }
  }
}

}  // namespace tessera::pp
