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

}  // namespace

LoadResult load_checkpoint(const std::string& path, const Mesh& mesh, const NamedParameters& params,
                           Optimizer* optimizer, const LoadOptions& options) {
  ::tessera::detail::hdf5_errors_as_exceptions();
  Communicator& world = mesh.world();
  const MPI_Comm comm = world.mpi_comm();

  // One rank resolves `latest`, so every rank reads the same checkpoint even while a
  // save elsewhere moves the pointer.
  std::string file;
  agree_on_success(comm, [&] {
    if (world.rank() == 0) file = resolve_checkpoint_file(path);
  });
  broadcast_text(world, file, 0);
  // Every file against the MANIFEST before HDF5 opens any (the rule verify applies):
  // shared out over the ranks, one read of the checkpoint in all.
  check_step_files(file, StepScope::every_file, &world);

  // With a pipeline each stage holds its own parameters: the model is the union of the
  // stages' names (for `only` and for what the file may hold), and each rank reads the
  // parameters it holds.
  std::set<std::string> model_names, state_names;
  for (const auto& [name, p] : params) model_names.insert(name);
  if (optimizer != nullptr) {
    for (const OptimizerState& s : optimizer->named_state()) state_names.insert(s.name);
  }
  if (mesh.pp_size() > 1) {
    // Each rank's list starts with its stage; a parameter on two stages (a model not
    // split by a pp::Pipeline) is refused before anything is read.
    std::map<int, std::vector<std::string>> paths_of_stage;
    for (auto* names : {&model_names, &state_names}) {
      const char* section = names == &model_names ? "model" : "optimizer";
      std::vector<std::string> mine{std::to_string(mesh.coords().pp)};
      mine.insert(mine.end(), names->begin(), names->end());
      std::set<int> stages_seen;
      for (const auto& list : all_gather_strings(world, mine)) {
        names->insert(list.begin() + 1, list.end());
        // The first rank of each stage speaks for it (its ranks hold the same names).
        if (!stages_seen.insert(std::stoi(list.front())).second) continue;
        auto& paths = paths_of_stage[std::stoi(list.front())];
        for (auto it = list.begin() + 1; it != list.end(); ++it) paths.push_back(dataset_path(section, *it));
      }
    }
    require_one_stage_per_tensor(paths_of_stage);
  }

  const auto shape_text = [&](const Shape& s) {
    return options.describe_shape ? options.describe_shape(s) : shape_str(s);
  };
  LoadResult result;
  result.file = file;
  std::optional<CheckpointReader> reader;
  std::vector<Target> targets;
  bool load_optimizer = false;

  agree_on_success(comm, [&] {
    reader.emplace(file, CheckpointReader::Verify::none);  // verified above
    const CheckpointHeader& h = reader->header();
    result.step = h.step;
    result.metadata = h.metadata;
    result.layout = h.layout;
    result.saved_mesh = h.mesh;
    result.saved_world_size = h.world_size;
    if (h.layout == CheckpointLayout::per_rank) {
      for (std::int64_t r : h.writer_ranks) {
        const fs::path slice = fs::path(file).parent_path() / rank_file_name(r);
        std::error_code ec;
        if (!fs::is_regular_file(slice, ec)) {
          throw IoError("checkpoint '" + file + "': slice file '" + slice.string() + "' is missing");
        }
      }
    }

    std::set<std::string> selected(options.only.begin(), options.only.end());
    for (const std::string& name : selected) {
      if (!model_names.count(name)) {
        throw InvalidArgument("load_checkpoint: '" + name + "' (in LoadOptions::only) is not a parameter of the model");
      }
    }
    auto wanted = [&](const std::string& fqn) { return selected.empty() || selected.count(fqn) > 0; };

    for (const auto& [name, p] : params) {
      if (p == nullptr) throw InvalidArgument("load_checkpoint: parameter '" + name + "' is null");
      if (!wanted(name)) continue;
      targets.push_back(make_target("model", name, p->value, p->global_shape, p->local_offset, p->placement));
    }
    if (optimizer != nullptr) {
      if (h.optimizer_type.empty()) {
        if (options.strict) {
          throw InvalidArgument("checkpoint '" + file + "' holds no optimizer state, but an optimizer (" +
                                optimizer->type_name() + ") was given to a strict load");
        }
      } else if (h.optimizer_type != optimizer->type_name()) {
        throw InvalidArgument("checkpoint '" + file + "' holds " + h.optimizer_type + " state, but the optimizer is " +
                              optimizer->type_name());
      } else {
        load_optimizer = true;
        for (const OptimizerState& s : optimizer->named_state()) {
          if (!wanted(parameter_of_state(s.name))) continue;
          targets.push_back(make_target("optimizer", s.name, s.tensor, s.global_shape, s.local_offset, s.placement));
        }
      }
    }

    std::vector<Target> present;
    for (Target& t : targets) {
      t.dataset = reader->find(t.path());
      if (t.dataset == nullptr) {
        if (options.strict) {
          throw InvalidArgument("checkpoint '" + file + "' has no dataset " + t.path() + " for " +
                                (t.section == "model" ? "parameter '" : "optimizer state '") + t.name +
                                "' (global shape " + shape_text(t.global_shape) + ")");
        }
        result.missing.push_back(t.path());
        continue;
      }
      if (t.dataset->shape != t.global_shape) {
        throw ShapeError("checkpoint '" + file + "': dataset " + t.path() + " has shape " +
                         shape_text(t.dataset->shape) + " but '" + t.name + "' has global shape " +
                         shape_text(t.global_shape));
      }
      if (t.dataset->dtype != t.destination.dtype()) {
        throw ShapeError("checkpoint '" + file + "': dataset " + t.path() + " has dtype " +
                         std::string(dtype_name(t.dataset->dtype)) + " but '" + t.name + "' has dtype " +
                         std::string(dtype_name(t.destination.dtype())));
      }
      present.push_back(std::move(t));
    }
    targets = std::move(present);

    if (selected.empty()) {
      std::set<std::string> expected;
      for (const std::string& name : model_names) expected.insert(dataset_path("model", name));
      if (load_optimizer) {
        for (const std::string& name : state_names) expected.insert(dataset_path("optimizer", name));
      }
      for (const DatasetInfo& d : reader->datasets()) {
        if (d.section == "optimizer" && !load_optimizer) continue;
        if (expected.count(d.path)) continue;
        if (options.strict) {
          throw InvalidArgument("checkpoint '" + file + "' has dataset " + d.path +
                                ", which the model does not have (use a non-strict load to skip it)");
        }
        result.unexpected.push_back(d.path);
      }
    }

    // Each rank reads exactly its block, whatever layout wrote the file.
    for (Target& t : targets) {
      t.staged = reader->read(*t.dataset, t.offset, t.destination.shape());
      if (is_main_replica(mesh, t.placement)) t.checksum = block_checksum(t.staged, t.global_shape, t.offset, reader->header().checksum);
    }
  });

  if (options.verify_checksums) {
    // The main replicas of the current layout tile every tensor exactly once, so their
    // shares add up to the checksum of the whole dataset.
    // With a pipeline the ranks read different tensors: the shares are added up by
    // dataset path over the union of the ranks' targets.
    std::vector<std::string> paths;
    for (const Target& t : targets) paths.push_back(t.path());
    std::vector<std::size_t> slot(targets.size());
    std::vector<std::uint64_t> sums(targets.size());
    if (mesh.pp_size() > 1) {
      std::set<std::string> all_paths;
      for (const auto& list : all_gather_strings(world, paths)) all_paths.insert(list.begin(), list.end());
      paths.assign(all_paths.begin(), all_paths.end());
      sums.assign(paths.size(), 0);
      for (std::size_t i = 0; i < targets.size(); ++i) {
        slot[i] = static_cast<std::size_t>(std::lower_bound(paths.begin(), paths.end(), targets[i].path()) - paths.begin());
      }
    } else {
      for (std::size_t i = 0; i < targets.size(); ++i) slot[i] = i;
    }
    for (std::size_t i = 0; i < targets.size(); ++i) sums[slot[i]] = targets[i].checksum;
    all_reduce_checksums(world, sums);
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

  // Nothing is modified until every tensor has been read and verified on every rank.
  agree_on_success(comm, [&] {
    for (Target& t : targets) {
      t.destination.copy_from(t.staged);
      result.loaded.push_back(t.path());
    }
    if (load_optimizer) optimizer->set_step_count(reader->header().optimizer_step_count);
  });
  return result;
}

LoadResult load_checkpoint(const std::string& path, const Mesh& mesh, nn::Module& model, Optimizer* optimizer,
                           const LoadOptions& options) {
  return load_checkpoint(path, mesh, model.named_parameters(), optimizer, options);
}

}  // namespace tessera::io
