// Refusing non-regular files before reading them (detail/regular_file.hpp).

#include "tessera/detail/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/error.hpp"

namespace tessera::detail {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void refuse(const std::string& path, const std::string& what, mode_t mode) {
  throw IoError(what + " '" + path + "' is " + kind_of(mode) +
                ", not a regular file; give the path of a file");
}

[[noreturn]] void cannot_read(const std::string& path, const std::string& what, int err) {
  throw IoError("cannot read " + what + " '" + path + "': " + std::strerror(err));
}

// Closes the descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) cannot_read(path, what, errno);
  if (!S_ISREG(st.st_mode)) refuse(path, what, st.st_mode);
}

void require_replaceable_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // absent (or unreachable: the write says why)
  if (!S_ISREG(st.st_mode)) {
    throw IoError(what + " '" + path + "' is " + kind_of(st.st_mode) +
                  ", not a regular file; tessera writes a new file and renames it over the old one, so name a file");
  }
}

std::string read_regular_file(const std::string& path, const std::string& what) {
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer.
  const Fd file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (file.fd < 0) cannot_read(path, what, errno);
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) cannot_read(path, what, errno);
  if (!S_ISREG(st.st_mode)) refuse(path, what, st.st_mode);
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(file.fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      cannot_read(path, what, errno);
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace tessera::detail
