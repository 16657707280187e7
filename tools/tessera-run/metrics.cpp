#include "metrics.hpp"

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
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr) {
    throw IoError("logging.metrics_file: cannot open '" + path + "' for writing: " + std::strerror(errno));
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
