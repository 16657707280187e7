// load_checkpoint: every rank reads exactly the hyperslab its current parameters (and
// optimizer state) need, whatever layout wrote the file, verifies checksums, then copies.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "io/checkpoint_collectives.hpp"
#include "io/format.hpp"
#include "io/step_files.hpp"
#include "tessera/agree.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/io/checksum.hpp"

namespace fs = std::filesystem;

namespace tessera::io {

using namespace detail;

namespace {

struct Target {
  std::string section, name;
  Tensor destination;  // aliases the parameter's value or the optimizer's state
  Shape global_shape, offset;
  MeshPlacement placement;
  const DatasetInfo* dataset = nullptr;
  Tensor staged;
  std::uint64_t checksum = 0;
  std::string path() const { return dataset_path(section, name); }
};

Target make_target(std::string section, std::string name, const Tensor& destination, const Shape& global_shape,
                   const Shape& offset, const MeshPlacement& placement) {
  Target t;
  t.section = std::move(section);
  t.name = std::move(name);
  t.destination = destination;
  t.global_shape = global_shape;
  t.offset = offset;
  t.placement = placement;
  return t;
}

std::string parameter_of_state(const std::string& state) {
  const auto dot = state.rfind('.');
  return dot == std::string::npos ? state : state.substr(0, dot);
}

// The file `path` names, the same on every rank: one rank resolves `latest`, so every
// rank reads the same checkpoint even while a save elsewhere moves the pointer. Every
// file is checked against the MANIFEST before HDF5 opens any (the rule verify applies):
// shared out over the ranks, one read of the checkpoint in all.
std::string agreed_file(const std::string& path, Communicator& world) {
  std::string file;
  agree_on_success(world.mpi_comm(), [&] {
    if (world.rank() == 0) file = resolve_checkpoint_file(path);
  });
  broadcast_text(world, file, 0);
  check_step_files(file, StepScope::every_file, &world);
  return file;
}

// The model's parameter and optimizer-state names. With a pipeline each stage holds its
// own parameters: the model is the union of the stages' names (for `only` and for what
// the file may hold), and each rank reads the parameters it holds.
struct ModelNames {
  std::set<std::string> model, state;
};

ModelNames model_names(const Mesh& mesh, const NamedParameters& params, Optimizer* optimizer) {
  ModelNames names;
  for (const auto& [name, p] : params) names.model.insert(name);
  if (optimizer != nullptr) {
    for (const OptimizerState& s : optimizer->named_state()) names.state.insert(s.name);
  }
  if (mesh.pp_size() <= 1) return names;
  // Each rank's list starts with its stage; a parameter on two stages (a model not
  // split by a pp::Pipeline) is refused before anything is read.
  std::map<int, std::vector<std::string>> paths_of_stage;
  for (auto* set : {&names.model, &names.state}) {
    const char* section = set == &names.model ? "model" : "optimizer";
    std::vector<std::string> mine{std::to_string(mesh.coords().pp)};
    mine.insert(mine.end(), set->begin(), set->end());
    std::set<int> stages_seen;
    for (const auto& list : all_gather_strings(mesh.world(), mine)) {
      set->insert(list.begin() + 1, list.end());
      // The first rank of each stage speaks for it (its ranks hold the same names).
      if (!stages_seen.insert(std::stoi(list.front())).second) continue;
      auto& paths = paths_of_stage[std::stoi(list.front())];
      for (auto it = list.begin() + 1; it != list.end(); ++it) paths.push_back(dataset_path(section, *it));
    }
  }
  require_one_stage_per_tensor(paths_of_stage);
  return names;
}

// What a load reads: the open file and the tensors this rank fills from it. The targets
// point into the reader's datasets, so a plan is filled in place, never moved.
struct LoadPlan {
  std::optional<CheckpointReader> reader;
  std::vector<Target> targets;
  bool load_optimizer = false;
};

// The arguments every planning step reads.
struct LoadRequest {
  const std::string& file;
  const ModelNames& names;
  const NamedParameters& params;
  Optimizer* optimizer;
  const LoadOptions& options;
  std::string shape_text(const Shape& s) const {
    return options.describe_shape ? options.describe_shape(s) : shape_str(s);
  }
};

// Opens the file (verified before) and copies its header into `result`; a per_rank
// checkpoint must have every slice file its header names.
void open_checkpoint(LoadPlan& plan, const std::string& file, LoadResult& result) {
  plan.reader.emplace(file, CheckpointReader::Verify::none);  // verified above
  const CheckpointHeader& h = plan.reader->header();
  result.step = h.step;
  result.metadata = h.metadata;
  result.layout = h.layout;
  result.saved_mesh = h.mesh;
  result.saved_world_size = h.world_size;
  if (h.layout != CheckpointLayout::per_rank) return;
  for (std::int64_t r : h.writer_ranks) {
    const fs::path slice = fs::path(file).parent_path() / rank_file_name(r);
    std::error_code ec;
    if (!fs::is_regular_file(slice, ec)) {
      throw IoError("checkpoint '" + file + "': slice file '" + slice.string() + "' is missing");
    }
  }
}

// The parameters (those in `only` when given) and, when the file holds the optimizer's
// kind of state, the optimizer's states.
void select_targets(LoadPlan& plan, const LoadRequest& request) {
  const std::set<std::string> selected(request.options.only.begin(), request.options.only.end());
  for (const std::string& name : selected) {
    if (!request.names.model.count(name)) {
      throw InvalidArgument("load_checkpoint: '" + name + "' (in LoadOptions::only) is not a parameter of the model");
    }
  }
  auto wanted = [&](const std::string& fqn) { return selected.empty() || selected.count(fqn) > 0; };
  for (const auto& [name, p] : request.params) {
    if (p == nullptr) throw InvalidArgument("load_checkpoint: parameter '" + name + "' is null");
    if (!wanted(name)) continue;
    plan.targets.push_back(make_target("model", name, p->value, p->global_shape, p->local_offset, p->placement));
  }
  Optimizer* const optimizer = request.optimizer;
  if (optimizer == nullptr) return;
  const std::string& saved_type = plan.reader->header().optimizer_type;
  if (saved_type.empty()) {
    if (request.options.strict) {
      throw InvalidArgument("checkpoint '" + request.file + "' holds no optimizer state, but an optimizer (" +
                            optimizer->type_name() + ") was given to a strict load");
    }
  } else if (saved_type != optimizer->type_name()) {
    throw InvalidArgument("checkpoint '" + request.file + "' holds " + saved_type + " state, but the optimizer is " +
                          optimizer->type_name());
  } else {
    plan.load_optimizer = true;
    for (const OptimizerState& s : optimizer->named_state()) {
      if (!wanted(parameter_of_state(s.name))) continue;
      plan.targets.push_back(make_target("optimizer", s.name, s.tensor, s.global_shape, s.local_offset, s.placement));
    }
  }
}

// Each target's dataset, of its global shape and dtype; a missing one is an error of a
// strict load, else listed in result.missing and dropped.
void match_datasets(LoadPlan& plan, const LoadRequest& request, LoadResult& result) {
  const std::string& file = request.file;
  std::vector<Target> present;
  for (Target& t : plan.targets) {
    t.dataset = plan.reader->find(t.path());
    if (t.dataset == nullptr) {
      if (request.options.strict) {
        throw InvalidArgument("checkpoint '" + file + "' has no dataset " + t.path() + " for " +
                              (t.section == "model" ? "parameter '" : "optimizer state '") + t.name +
                              "' (global shape " + request.shape_text(t.global_shape) + ")");
      }
      result.missing.push_back(t.path());
      continue;
    }
    if (t.dataset->shape != t.global_shape) {
      throw ShapeError("checkpoint '" + file + "': dataset " + t.path() + " has shape " +
                       request.shape_text(t.dataset->shape) + " but '" + t.name + "' has global shape " +
                       request.shape_text(t.global_shape));
    }
    if (t.dataset->dtype != t.destination.dtype()) {
      throw ShapeError("checkpoint '" + file + "': dataset " + t.path() + " has dtype " +
                       std::string(dtype_name(t.dataset->dtype)) + " but '" + t.name + "' has dtype " +
                       std::string(dtype_name(t.destination.dtype())));
    }
    present.push_back(std::move(t));
  }
  plan.targets = std::move(present);
}

// A dataset of the file the model lacks: an error of a strict load, else listed in
// result.unexpected. Not checked when `only` selects a part of the model.
void find_unexpected(const LoadPlan& plan, const LoadRequest& request, LoadResult& result) {
  if (!request.options.only.empty()) return;
  std::set<std::string> expected;
  for (const std::string& name : request.names.model) expected.insert(dataset_path("model", name));
  if (plan.load_optimizer) {
    for (const std::string& name : request.names.state) expected.insert(dataset_path("optimizer", name));
  }
  for (const DatasetInfo& d : plan.reader->datasets()) {
    if (d.section == "optimizer" && !plan.load_optimizer) continue;
    if (expected.count(d.path)) continue;
    if (request.options.strict) {
      throw InvalidArgument("checkpoint '" + request.file + "' has dataset " + d.path +
                            ", which the model does not have (use a non-strict load to skip it)");
    }
    result.unexpected.push_back(d.path);
  }
}

// Opens the file and decides what this rank reads; throws before anything is read.
void plan_load(LoadPlan& plan, const LoadRequest& request, LoadResult& result) {
  open_checkpoint(plan, request.file, result);
  select_targets(plan, request);
  match_datasets(plan, request, result);
  find_unexpected(plan, request, result);
}

// Each rank reads exactly its block, whatever layout wrote the file, and the main
// replicas their block's share of the dataset's checksum.
void read_targets(LoadPlan& plan, const Mesh& mesh) {
  for (Target& t : plan.targets) {
    t.staged = plan.reader->read(*t.dataset, t.offset, t.destination.shape());
    if (is_main_replica(mesh, t.placement)) {
      t.checksum = block_checksum(t.staged, t.global_shape, t.offset, plan.reader->header().checksum);
    }
  }
}

// The main replicas of the current layout tile every tensor exactly once, so their
// shares add up to the checksum of the whole dataset. With a pipeline the ranks read
// different tensors: the shares are added up by dataset path over the union of the
// ranks' targets. IoError naming the dataset on a mismatch.
void verify_checksums(const std::vector<Target>& targets, const Mesh& mesh, const std::string& file) {
  std::vector<std::string> paths;
  for (const Target& t : targets) paths.push_back(t.path());
  std::vector<std::size_t> slot(targets.size());
  std::vector<std::uint64_t> sums(targets.size());
  if (mesh.pp_size() > 1) {
    std::set<std::string> all_paths;
    for (const auto& list : all_gather_strings(mesh.world(), paths)) all_paths.insert(list.begin(), list.end());
    paths.assign(all_paths.begin(), all_paths.end());
    sums.assign(paths.size(), 0);
    for (std::size_t i = 0; i < targets.size(); ++i) {
      slot[i] = static_cast<std::size_t>(std::lower_bound(paths.begin(), paths.end(), targets[i].path()) - paths.begin());
    }
  } else {
    for (std::size_t i = 0; i < targets.size(); ++i) slot[i] = i;
  }
  for (std::size_t i = 0; i < targets.size(); ++i) sums[slot[i]] = targets[i].checksum;
  all_reduce_checksums(mesh.world(), sums);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (sums[slot[i]] != targets[i].dataset->checksum) {
      char detail[96];
      std::snprintf(detail, sizeof detail, "stored 0x%016" PRIx64 ", computed 0x%016" PRIx64,
                    targets[i].dataset->checksum, sums[slot[i]]);
      throw IoError("checkpoint '" + file + "': checksum mismatch in dataset " + targets[i].path() + " (" + detail +
                    "): the data is corrupted");
    }
  }
}

// Copies every staged block into its tensor. Nothing is modified until every tensor has
// been read and verified on every rank.
void commit(LoadPlan& plan, Optimizer* optimizer, const Mesh& mesh, LoadResult& result) {
  agree_on_success(mesh.world().mpi_comm(), [&] {
    for (Target& t : plan.targets) {
      t.destination.copy_from(t.staged);
      result.loaded.push_back(t.path());
    }
    if (plan.load_optimizer) optimizer->set_step_count(plan.reader->header().optimizer_step_count);
  });
}

}  // namespace

LoadResult load_checkpoint(const std::string& path, const Mesh& mesh, const NamedParameters& params,
                           Optimizer* optimizer, const LoadOptions& options) {
  ::tessera::detail::hdf5_errors_as_exceptions();
  const std::string file = agreed_file(path, mesh.world());
  const ModelNames names = model_names(mesh, params, optimizer);
  const LoadRequest request{file, names, params, optimizer, options};
  LoadResult result;
  result.file = file;
  LoadPlan plan;
  agree_on_success(mesh.world().mpi_comm(), [&] {
    plan_load(plan, request, result);
    read_targets(plan, mesh);
  });
  if (options.verify_checksums) verify_checksums(plan.targets, mesh, file);
  commit(plan, optimizer, mesh, result);
  return result;
}

LoadResult load_checkpoint(const std::string& path, const Mesh& mesh, nn::Module& model, Optimizer* optimizer,
                           const LoadOptions& options) {
  return load_checkpoint(path, mesh, model.named_parameters(), optimizer, options);
}

}  // namespace tessera::io
