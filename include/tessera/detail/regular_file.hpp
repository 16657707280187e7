#pragma once
// The one check every path a tool or the library opens for reading goes through: a
// config, a data file, a statistics file, a mapping file, a mesh file. A character device
// (/dev/zero) would be read until memory runs out, a FIFO blocks the open or the read
// until a writer comes, and a directory reads as an empty file (an empty config is a
// valid one: all defaults). Each is refused by name before a byte is read.

#include <string>

namespace tessera::detail {

// Throws IoError unless `path` (symlinks followed) is a regular file. `what` names the
// path for the user, with its key where there is one: "config file", "data file
// (data.path)". The message says what the path is instead (a directory, a FIFO ...).
void require_regular_file(const std::string& path, const std::string& what);

// For an output written to PATH.tmp and renamed over `path`: throws IoError unless
// `path` is absent or a regular file. The rename would replace a device node, a FIFO or
// a directory's entry (as root, `data.stats: /dev/full` replaced the device).
void require_replaceable_file(const std::string& path, const std::string& what);

// The whole content of the regular file `path`: opened without blocking (a FIFO cannot
// hang the open) and checked on the open descriptor, so the check and the read see the
// same file. Throws IoError naming `what` and the path.
std::string read_regular_file(const std::string& path, const std::string& what);

}  // namespace tessera::detail
