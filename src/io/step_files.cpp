#include "io/step_files.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "io/format.hpp"
#include "io/manifest.hpp"
#include "tessera/agree.hpp"
#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint_reader.hpp"

namespace fs = std::filesystem;

namespace tessera::io {

using namespace detail;

namespace {

// checkpoint.rank<digits>.h5, as rank_file_name writes it (or with more digits).
bool is_slice_file_name(const std::string& name) {
  const std::string prefix = "checkpoint.rank", suffix = ".h5";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()),
                     name.end() - static_cast<std::ptrdiff_t>(suffix.size()),
                     [](char c) { return c >= '0' && c <= '9'; });
}

std::string quoted_command(const std::string& command, const std::string& dir) {
  return "`tessera-ckpt " + command + " '" + dir + "'`";
}

StepProblem no_manifest(const std::string& dir) {
  return {manifest_file_name,
          "checkpoint: '" + dir + "' has no MANIFEST, so its files cannot be checked before HDF5 opens them " +
              "(HDF5 may crash or hang on a damaged file). Copy the step directory whole, MANIFEST included; if " +
              "this copy is trusted (written before MANIFESTs existed, or its *.h5 files copied alone from an " +
              "intact step), write one with " + quoted_command("manifest", dir) + ", then run " +
              quoted_command("verify", dir)};
}

StepProblem unlisted(const std::string& dir, const std::string& name) {
  return {name, "checkpoint: '" + (fs::path(dir) / name).string() + "' is not listed in the MANIFEST of '" + dir +
                    "', so it cannot be checked before HDF5 opens it (a damaged MANIFEST, or one of another " +
                    "copy): restore the step directory from an intact copy, or, if this copy is trusted, add the " +
                    "file with " + quoted_command("manifest", dir)};
}

}  // namespace

namespace detail {

std::vector<std::string> step_file_names(const std::string& dir, const std::string& opened) {
  std::vector<std::string> names;
  if (!opened.empty()) names.push_back(opened);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if ((name == checkpoint_file_name || is_slice_file_name(name)) &&
        std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(name);
    }
  }
  if (ec) throw IoError("checkpoint: cannot list '" + dir + "': " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<StepProblem> step_file_problems(const std::string& file, StepScope scope, int share_rank,
                                            int share_size) {
  const fs::path path(file);
  const std::string dir = path.parent_path().empty() ? "." : path.parent_path().string();
  const std::string opened = path.filename().string();
  std::optional<std::vector<FileDigest>> listed;
  try {
    listed = read_manifest(dir);
  } catch (const IoError& e) {
    return {{manifest_file_name, e.what()}};
  }
  if (!listed) return {no_manifest(dir)};
  auto is_listed = [&](const std::string& name) {
    return std::any_of(listed->begin(), listed->end(), [&](const FileDigest& f) { return f.name == name; });
  };
  for (const std::string& name : step_file_names(dir, opened)) {
    if (!is_listed(name)) return {unlisted(dir, name)};
  }
  std::vector<StepProblem> problems;
  for (std::size_t i = 0; i < listed->size(); ++i) {
    const FileDigest& f = (*listed)[i];
    const bool mine = scope == StepScope::opened_file
                          ? f.name == opened && share_rank == 0
                          : static_cast<int>(i % static_cast<std::size_t>(share_size)) == share_rank;
    if (!mine) continue;
    try {
      check_file(dir, f);
    } catch (const IoError& e) {
      problems.push_back({f.name, e.what()});
    }
  }
  return problems;
}

void check_step_files(const std::string& file, StepScope scope, Communicator* comm) {
  auto check_share = [&](int rank, int size) {
    const auto problems = step_file_problems(file, scope, rank, size);
    if (!problems.empty()) throw IoError(problems.front().message);
  };
  if (comm == nullptr) {
    check_share(0, 1);
    return;
  }
  agree_on_success(comm->mpi_comm(), [&] { check_share(comm->rank(), comm->size()); });
}

}  // namespace detail

std::vector<std::string> write_checkpoint_manifest(const std::string& path) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  const std::string dir = is_dir ? path : fs::absolute(path).parent_path().string();
  const std::string opened = is_dir ? "" : fs::path(path).filename().string();
  if (!is_dir && !fs::exists(path, ec)) throw IoError("checkpoint: '" + path + "' does not exist");
  if (!is_dir) tessera::detail::require_regular_file(path, "checkpoint: the path");
  const auto names = step_file_names(dir, opened);
  if (names.empty()) {
    throw IoError("checkpoint: '" + path + "' holds no " + checkpoint_file_name +
                  ": name a step directory (step_<digits>) or a checkpoint file");
  }
  std::vector<FileDigest> listed;
  try {
    listed = read_manifest(dir).value_or(std::vector<FileDigest>{});
  } catch (const IoError& e) {
    throw IoError(std::string(e.what()) + "; if every file of this copy is trusted, remove the MANIFEST and run " +
                  quoted_command("manifest", path) + " again");
  }
  // What the MANIFEST lists must still match: a damaged file is never blessed.
  for (const FileDigest& f : listed) check_file(dir, f);
  std::vector<FileDigest> added;
  std::vector<std::string> added_names;
  for (const std::string& name : names) {
    const bool known =
        std::any_of(listed.begin(), listed.end(), [&](const FileDigest& f) { return f.name == name; });
    if (known) continue;
    if (!fs::is_regular_file(fs::symlink_status(fs::path(dir) / name, ec))) {
      throw IoError("checkpoint: '" + (fs::path(dir) / name).string() + "' is not a regular file");
    }
    added.push_back(digest_file(dir, name));
    added_names.push_back(name);
  }
  if (!added.empty()) update_manifest(dir, added);
  return added_names;
}

}  // namespace tessera::io
