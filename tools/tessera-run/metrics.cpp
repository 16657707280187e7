#include "metrics.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "tessera/error.hpp"

namespace tessera::run {

namespace {

void append_escaped(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out += ch;
    }
  }
  out += '"';
}

}  // namespace

JsonRecord::JsonRecord(std::string_view type) : text_("{") { add("type", type); }

void JsonRecord::key(std::string_view k) {
  if (text_.size() > 1) text_ += ", ";
  append_escaped(text_, k);
  text_ += ": ";
}

JsonRecord& JsonRecord::add(std::string_view k, double value) {
  key(k);
  if (!std::isfinite(value)) {
    text_ += "null";
  } else {
    char buffer[40];
    std::snprintf(buffer, sizeof buffer, "%.9g", value);  // float precision and a little more
    text_ += buffer;
  }
  return *this;
}

JsonRecord& JsonRecord::add(std::string_view k, std::int64_t value) {
  key(k);
  text_ += std::to_string(value);
  return *this;
}

JsonRecord& JsonRecord::add(std::string_view k, std::string_view value) {
  key(k);
  append_escaped(text_, value);
  return *this;
}

void MetricsFile::open(const std::string& path, bool writer, bool append) {
  path_ = path;
  if (!writer || path.empty()) return;
  // Its directory may be the run's own (runs/x/metrics.jsonl), not created yet.
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  // Opened without blocking: a FIFO that no process reads would block the open forever
  // (ENXIO instead). A FIFO or pipe with a reader, a device (/dev/null) or a regular file
  // is written as before; blocking again once open.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0 && errno == ENXIO) {
    throw IoError("logging.metrics_file '" + path +
                  "' is a FIFO that no process reads: writing to it would block the run; start its reader first, "
                  "or name a regular file");
  }
  if (fd < 0) throw IoError("logging.metrics_file: cannot open '" + path + "' for writing: " + std::strerror(errno));
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ||
      (file_ = ::fdopen(fd, append ? "a" : "w")) == nullptr) {
    const int saved = errno;
    ::close(fd);
    throw IoError("logging.metrics_file: cannot open '" + path + "' for writing: " + std::strerror(saved));
  }
}

MetricsFile::~MetricsFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsFile::write(const JsonRecord& record) {
  if (file_ == nullptr) return;
  const std::string line = record.str() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    lost_ = "writing to '" + path_ + "' failed (" + std::strerror(errno) + ") at the record " + line.substr(0, 40) +
            "...; it and every later record are lost";
    std::fprintf(stderr, "tessera-run: warning: logging.metrics_file: %s\n", lost_.c_str());
    std::fclose(file_);
    file_ = nullptr;
  }
}

void MetricsFile::check_complete() const {
  if (!lost_.empty()) {
    throw IoError("logging.metrics_file: " + lost_ + " (free space on its file system, or name another file)");
  }
}

}  // namespace tessera::run
