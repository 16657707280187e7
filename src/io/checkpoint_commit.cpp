// The step directories under a checkpoint root: their names, listing and the `latest`
// pointer, and the commit of a finished save (rename, fsync, `latest`, rotation).
#include "io/checkpoint_commit.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "io/format.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"

namespace fs = std::filesystem;

namespace tessera::io {

std::string checkpoint_directory_name(std::int64_t step) {
  if (step < 0) throw InvalidArgument("checkpoint: step " + std::to_string(step) + " is negative");
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "step_%08" PRId64, step);
  return buffer;
}

namespace {

// step_<digits> -> step; -1 for any other name.
std::int64_t parse_step_directory(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return -1;
  std::int64_t step = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

}  // namespace

std::optional<std::string> latest_checkpoint(const std::string& root) {
  const fs::path pointer = fs::path(root) / "latest";
  std::error_code ec;
  const fs::file_status status = fs::status(pointer, ec);
  if (!fs::exists(status)) return std::nullopt;
  // A directory reads as an empty pointer and a FIFO blocks the reader: say what it is.
  if (!fs::is_regular_file(status)) {
    const char* kind = fs::is_directory(status) ? "a directory" : fs::is_fifo(status) ? "a FIFO" : "not a regular file";
    throw IoError("checkpoint root '" + root + "': its 'latest' pointer is " + kind +
                  ", not the one-line file a save writes: remove it (the next save writes it again) or load a "
                  "step directory directly");
  }
  std::ifstream in(pointer);
  if (!in) throw IoError("checkpoint root '" + root + "': cannot read its 'latest' pointer");
  std::string name;
  std::getline(in, name);
  while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
  // The pointer names one step directory of this root, nothing else: an absolute path,
  // "..", a link or any other name would lead outside the root or to something that is
  // not a committed checkpoint.
  if (parse_step_directory(name) < 0) {
    throw IoError("checkpoint root '" + root + "': its 'latest' pointer holds '" + name +
                  "', which is not the name of a step directory (step_<digits>) of this root");
  }
  const fs::path target = fs::path(root) / name;
  if (fs::is_symlink(target, ec) || !fs::is_directory(target, ec)) {
    throw IoError("checkpoint root '" + root + "': its 'latest' pointer names '" + name +
                  "', which is not a step directory here (missing, or a link)");
  }
  return target.string();
}

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::int64_t step = parse_step_directory(entry.path().filename().string());
    if (step >= 0 && entry.is_directory(ec)) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

int remove_stale_checkpoint_temporaries(const std::string& root) {
  const auto committed = list_checkpoints(root);
  if (committed.empty()) return 0;
  const std::int64_t newest = parse_step_directory(fs::path(committed.back()).filename().string());
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    // ".step_<N>.tmp-<nonce>" (an unfinished save) and ".step_<N>.old-<nonce>" (a
    // replaced step not yet deleted), both left by a killed job.
    if (name.size() < 2 || name[0] != '.') continue;
    const std::size_t dot = name.find('.', 1);
    if (dot == std::string::npos) continue;
    const std::string rest = name.substr(dot);
    if (rest.rfind(".tmp-", 0) != 0 && rest.rfind(".old-", 0) != 0) continue;
    const std::int64_t step = parse_step_directory(name.substr(1, dot - 1));
    if (step < 0 || step > newest) continue;  // a newer one may be a save in progress
    std::error_code remove_ec;
    fs::remove_all(entry.path(), remove_ec);
    if (remove_ec) throw IoError("checkpoint: cannot remove the stale '" + entry.path().string() + "': " + remove_ec.message());
    ++removed;
  }
  return removed;
}

namespace detail {

void commit(const std::string& root, const std::string& temp_dir, const std::string& final_dir,
            const std::string& nonce, int keep_last) {
  fsync_path(temp_dir, true);
  std::error_code ec;
  const std::string aside = (fs::path(root) / ("." + fs::path(final_dir).filename().string() + ".old-" + nonce)).string();
  const bool replacing = fs::exists(final_dir, ec);
  // A directory cannot be renamed over a non-empty one: move the old one aside first
  // and delete it only once the new one is in place.
  if (replacing) rename_path(final_dir, aside);
  rename_path(temp_dir, final_dir);
  fsync_path(root, true);
  if (replacing) fs::remove_all(aside, ec);

  const std::string pointer_tmp = (fs::path(root) / ("latest.tmp-" + nonce)).string();
  {
    std::ofstream out(pointer_tmp, std::ios::trunc);
    out << fs::path(final_dir).filename().string() << "\n";
    out.flush();
    if (!out) throw IoError("checkpoint: cannot write '" + pointer_tmp + "'");
  }
  fsync_path(pointer_tmp, false);
  rename_path(pointer_tmp, (fs::path(root) / "latest").string());
  fsync_path(root, true);

  if (keep_last > 0) {
    auto all = list_checkpoints(root);
    // Rotation deletes only steps older than the one just committed, and nothing at all
    // when a newer step exists: a run that restarted from an earlier step (or from
    // scratch) must never delete the checkpoints it may have to return to.
    const std::int64_t committed = parse_step_directory(fs::path(final_dir).filename().string());
    const std::int64_t newest = all.empty() ? -1 : parse_step_directory(fs::path(all.back()).filename().string());
    if (newest > committed) {
      std::fprintf(stderr,
                   "tessera: checkpoint: keep_last rotation skipped in '%s': it holds %s, newer than the %s just "
                   "saved (remove old steps by hand)\n",
                   root.c_str(), fs::path(all.back()).filename().c_str(), fs::path(final_dir).filename().c_str());
      return;
    }
    std::size_t excess = all.size() > static_cast<std::size_t>(keep_last) ? all.size() - keep_last : 0;
    for (std::size_t i = 0; i < all.size() && excess > 0; ++i) {
      if (fs::path(all[i]) == fs::path(final_dir)) continue;
      fs::remove_all(all[i], ec);
      if (ec) throw IoError("checkpoint: cannot remove old checkpoint '" + all[i] + "': " + ec.message());
      --excess;
    }
  }
}

std::string make_nonce() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%d-%" PRIx64, static_cast<int>(::getpid()), ns);
  return buffer;
}

}  // namespace detail

}  // namespace tessera::io
