#pragma once
// tessera-run's machine-readable record of a run (logging.metrics_file, docs/driver.md):
// one JSON object per line, written by rank 0 as the run goes, so a killed job keeps
// every record up to its last line and `scripts/plot-metrics` can read it while it runs.
// Each record has a "type": "run" (once, at the start of training), "train" (every
// progress line), "validation" (every evaluation) and "summary" (at the end).

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace tessera::run {

// One record: {"type": "...", key: value, ...}, keys in the order added.
class JsonRecord {
 public:
  explicit JsonRecord(std::string_view type);
  // A non-finite number is written as null (JSON has no NaN).
  JsonRecord& add(std::string_view key, double value);
  JsonRecord& add(std::string_view key, std::int64_t value);
  JsonRecord& add(std::string_view key, int value) { return add(key, static_cast<std::int64_t>(value)); }
  JsonRecord& add(std::string_view key, std::string_view value);
  JsonRecord& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  std::string str() const { return text_ + "}"; }

 private:
  void key(std::string_view k);
  std::string text_;
};

// The file, open on the rank that writes it and inert elsewhere (and until opened).
class MetricsFile {
 public:
  MetricsFile() = default;
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  // Opens `path` when `writer`. A run that resumes from a checkpoint appends (the records
  // before it stay); one that starts from step 0 truncates. Throws IoError naming the key
  // and the file (agree on it: only the writer can fail).
  void open(const std::string& path, bool writer, bool append);
  bool enabled() const { return file_ != nullptr; }
  // Writes the line and flushes it. A failed write (a full disk) must not stop one rank
  // while the others train on: it prints one warning, closes the file and remembers the
  // loss for check_complete.
  void write(const JsonRecord& record);
  // Throws IoError naming the key, the file, the first record lost and why, when a write
  // failed: lost records must not end in status 0. Called (agreed over the world) after
  // the first record, so a file that cannot take a line fails before training, and at
  // the end of the run.
  void check_complete() const;

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  std::string lost_;  // why the first record was lost ("" while none was)
};

}  // namespace tessera::run
