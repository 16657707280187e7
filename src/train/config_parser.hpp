#pragma once
// The checked reading of the training configuration's YAML (include/tessera/train/
// run_config.hpp), private to src/train: a section's keys each with its handler (an
// unknown key is a ConfigError naming it, the file and the line, and listing the known
// ones), typed scalar readers with bounds, and the --set overrides.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/train/run_config.hpp"

namespace tessera::train::detail {

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  // "demo.yaml:7: data.batch_size"
  std::string where(const YAML::Node& node, const std::string& key) const;

  using Handler = std::function<void(const YAML::Node&, const std::string&)>;
  using Keys = std::vector<std::pair<std::string, Handler>>;

  // Runs the handler of every key of `section` (a mapping or null); an unknown key is
  // a ConfigError naming it and listing the known ones.
  void section(const YAML::Node& node, const std::string& name, const Keys& keys) const;

  std::string string(const YAML::Node& v, const std::string& key) const;
  std::int64_t integer(const YAML::Node& v, const std::string& key, std::int64_t min) const;
  double number(const YAML::Node& v, const std::string& key, double min, bool min_inclusive = true) const;
  bool boolean(const YAML::Node& v, const std::string& key) const;
  std::string choice(const YAML::Node& v, const std::string& key, const std::vector<std::string>& options) const;
  std::vector<std::string> strings(const YAML::Node& v, const std::string& key) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

// Applies "a.b.c=value" to the document (creating mappings on the way).
void apply_override(YAML::Node& root, const std::string& assignment);

// data.validation (both model types): a number is the held-out fraction, anything else
// a file path.
void parse_validation(const Parser& p, const YAML::Node& v, const std::string& key, DataConfig& d);

extern const std::vector<std::string> kModelTypes;  // model.type's values

// model.type onnx: its `model` keys and the rules between them and the rest of the
// config (onnx_config.cpp); its data section is the field emulator's.
void parse_onnx_model(const Parser& p, const YAML::Node& v, const std::string& key, RunConfig& c);
void check_onnx(const RunConfig& c);

// model.type decoder: the `model` and `data` sections' keys, and the cross-key rules
// (decoder_config.cpp).
void parse_decoder_model(const Parser& p, const YAML::Node& v, const std::string& key, RunConfig& c);
void parse_decoder_data(const Parser& p, const YAML::Node& v, const std::string& key, DataConfig& d);
void check_decoder(const RunConfig& c);

}  // namespace tessera::train::detail
