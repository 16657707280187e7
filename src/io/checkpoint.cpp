// The save entry point: layout names, and save_checkpoint, which prepares the entries,
// hands the write to a layout and commits the temporary directory (io/checkpoint_*.cpp).
#include "tessera/io/checkpoint.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include "io/checkpoint_commit.hpp"
#include "io/checkpoint_save.hpp"
#include "tessera/agree.hpp"

namespace fs = std::filesystem;

namespace tessera::io {

using namespace detail;

std::string_view checkpoint_layout_name(CheckpointLayout layout) noexcept {
  return layout == CheckpointLayout::per_rank ? "per_rank" : "shared";
}

CheckpointLayout parse_checkpoint_layout(std::string_view text) {
  if (text == "per_rank") return CheckpointLayout::per_rank;
  if (text == "shared") return CheckpointLayout::shared;
  throw InvalidArgument("checkpoint layout '" + std::string(text) + "' is not one of per_rank, shared");
}

namespace detail {

PreparedSave prepare_save(const std::string& root, const Mesh& mesh, const NamedParameters& params,
                          Optimizer* optimizer, const SaveOptions& options, SnapshotBuffers* snapshot) {
  ::tessera::detail::hdf5_errors_as_exceptions();
  Communicator& world = mesh.world();
  const int rank = world.rank();
  PreparedSave save;
  save.root = root;
  save.options = options;
  agree_on_success(world.mpi_comm(), [&] {
    save.hook = FaultHook::from_environment();
    if (options.keep_last < 0) throw InvalidArgument("checkpoint: keep_last " + std::to_string(options.keep_last) + " is negative");
    // An empty checkpoint would still be committed and move `latest` past a real one.
    if (params.empty()) throw InvalidArgument("checkpoint: nothing to save (no parameters were given)");
    save.final_dir = (fs::path(root) / checkpoint_directory_name(options.step)).string();
    save.entries = collect_entries(mesh, params, optimizer, snapshot);
    save.hook.maybe_fail(rank, "prepare", "preparing " + save.final_dir);
  });
  add_entries_of_other_stages(mesh, save.entries);
  check_same_tensors_everywhere(world, save.entries, optimizer);
  check_blocks_tile(world, save.entries);
  save.header = make_header(mesh, options, optimizer);
  return save;
}

std::string write_prepared_save(PreparedSave& save, Communicator& world) {
  ::tessera::detail::hdf5_errors_as_exceptions();
  const MPI_Comm comm = world.mpi_comm();
  const int rank = world.rank();
  const std::string& root = save.root;
  const std::string& final_dir = save.final_dir;
  std::string nonce = rank == 0 ? make_nonce() : std::string();
  broadcast_text(world, nonce, 0);
  const std::string temp_dir = (fs::path(root) / ("." + checkpoint_directory_name(save.options.step) + ".tmp-" + nonce)).string();
  agree_on_success(comm, [&] {
    if (rank != 0) return;
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec) throw IoError("checkpoint: cannot create directory '" + root + "': " + ec.message());
    remove_stale_checkpoint_temporaries(root);
    if (!fs::create_directory(temp_dir, ec) || ec) {
      throw IoError("checkpoint: cannot create directory '" + temp_dir + "': " +
                    (ec ? ec.message() : std::string("it already exists")));
    }
  });

  try {
    SaveContext context{world, save.entries, save.header, temp_dir, save.hook, {}};
    if (save.options.layout == CheckpointLayout::per_rank) {
      save_per_rank(context);
    } else {
      save_shared(context);
    }
    // The MANIFEST last: a directory with one lists every file as it was written.
    agree_on_success(comm, [&] {
      if (rank == 0) write_manifest(temp_dir, context.files);
    });
    agree_on_success(comm, [&] { save.hook.maybe_fail(rank, "commit", "committing " + final_dir); });
    agree_on_success(comm, [&] {
      if (rank == 0) commit(root, temp_dir, final_dir, nonce, save.options.keep_last);
    });
  } catch (const Error&) {
    // Every rank is here with the same error; once all have closed their files, rank 0
    // removes the unfinished directory. Committed checkpoints were never touched.
    world.barrier();
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(temp_dir, ec);
    }
    throw;
  }
  return final_dir;
}

}  // namespace detail

std::string save_checkpoint(const std::string& root, const Mesh& mesh, const NamedParameters& params,
                            Optimizer* optimizer, const SaveOptions& options) {
  PreparedSave save = prepare_save(root, mesh, params, optimizer, options, nullptr);
  return write_prepared_save(save, mesh.world());
}

std::string save_checkpoint(const std::string& root, const Mesh& mesh, nn::Module& model, Optimizer* optimizer,
                            const SaveOptions& options) {
  return save_checkpoint(root, mesh, model.named_parameters(), optimizer, options);
}

}  // namespace tessera::io
