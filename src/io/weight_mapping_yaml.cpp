// The mapping file (docs/pytorch.md): YAML read into rules, every error naming the file
// and line. The plans and the copies they describe are in weight_mapping.cpp.
#include "tessera/io/weight_mapping.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tessera/detail/regular_file.hpp"
#include "tessera/error.hpp"
#include "tessera/parallelism.hpp"

namespace tessera::io {

namespace {

// ---- YAML reading.

std::string at(std::string_view source, const YAML::Node& node) {
  std::string s(source);
  if (node.Mark().line >= 0) s += ":" + std::to_string(node.Mark().line + 1);
  return s;
}

std::string scalar(const YAML::Node& node, std::string_view source, const std::string& what) {
  if (!node.IsScalar()) throw ConfigError(at(source, node) + ": " + what + " must be a string");
  return node.Scalar();
}

std::int64_t integer(const YAML::Node& node, std::string_view source, const std::string& what, std::int64_t min) {
  std::int64_t v = 0;
  try {
    if (!node.IsScalar()) throw YAML::Exception(node.Mark(), "not a scalar");
    v = node.as<std::int64_t>();
  } catch (const YAML::Exception&) {
    throw ConfigError(at(source, node) + ": " + what + " must be an integer");
  }
  if (v < min) throw ConfigError(at(source, node) + ": " + what + " must be >= " + std::to_string(min));
  return v;
}

void check_pattern(const std::string& pattern, const YAML::Node& node, std::string_view source) {
  if (pattern.empty()) throw ConfigError(at(source, node) + ": an empty name");
  if (pattern.find("**") != std::string::npos) {
    throw ConfigError(at(source, node) + ": '" + pattern + "' has two '*' in a row (one '*' matches a whole component)");
  }
}

TensorSplit parse_split(const YAML::Node& node, std::string_view source, const std::string& rule) {
  if (!node.IsMap()) throw ConfigError(at(source, node) + ": " + rule + ".split must be a mapping {dim, index, parts}");
  TensorSplit s;
  bool has_dim = false, has_index = false, has_parts = false, has_sizes = false;
  for (const auto& item : node) {
    const std::string key = item.first.Scalar();
    if (key == "dim") {
      s.dim = static_cast<int>(integer(item.second, source, rule + ".split.dim", 0));
      has_dim = true;
    } else if (key == "index") {
      s.index = integer(item.second, source, rule + ".split.index", 0);
      has_index = true;
    } else if (key == "parts") {
      s.parts = integer(item.second, source, rule + ".split.parts", 1);
      has_parts = true;
    } else if (key == "sizes") {
      if (!item.second.IsSequence() || item.second.size() == 0) {
        throw ConfigError(at(source, item.second) + ": " + rule + ".split.sizes must be a list of extents");
      }
      for (const auto& v : item.second) s.sizes.push_back(integer(v, source, rule + ".split.sizes[]", 0));
      has_sizes = true;
    } else {
      throw ConfigError(at(source, item.first) + ": " + rule + ".split: unknown key '" + key +
                        "' (expected dim, index, parts or sizes)");
    }
  }
  if (!has_dim || !has_index || has_parts == has_sizes) {
    throw ConfigError(at(source, node) + ": " + rule + ".split needs dim, index and one of parts or sizes");
  }
  if (has_sizes) s.parts = static_cast<std::int64_t>(s.sizes.size());
  if (s.index >= s.parts) {
    throw ConfigError(at(source, node) + ": " + rule + ".split.index " + std::to_string(s.index) +
                      " is not below the " + std::to_string(s.parts) + " parts");
  }
  return s;
}

}  // namespace

WeightMapping::WeightMapping() : source_("<identity>") {}

WeightMapping WeightMapping::from_file(const std::string& path) {
  return from_yaml(tessera::detail::read_regular_file(path, "mapping file"), path);
}

WeightMapping WeightMapping::from_yaml(std::string_view text, std::string_view source) {
  check_unique_yaml_keys(text, source);  // also rejects text that is not YAML
  const YAML::Node root = YAML::Load(std::string(text));
  if (!root.IsMap()) throw ConfigError(std::string(source) + ": a mapping file is a YAML mapping with `tensors:`");
  WeightMapping m;
  m.source_ = source;
  m.passthrough_ = false;
  bool has_tensors = false;
  for (const auto& item : root) {
    const std::string key = item.first.Scalar();
    const YAML::Node& v = item.second;
    if (key == "tensors") {
      has_tensors = true;
      if (!v.IsMap()) throw ConfigError(at(source, v) + ": tensors must be a mapping of tessera name: PyTorch key");
      for (const auto& entry : v) {
        MappingRule r;
        r.where = at(source, entry.first);
        r.tessera = scalar(entry.first, source, "a tessera name");
        const std::string rule = "tensors." + r.tessera;
        if (entry.second.IsMap()) {
          bool has_from = false;
          for (const auto& field : entry.second) {
            const std::string name = field.first.Scalar();
            if (name == "from") {
              r.source = scalar(field.second, source, rule + ".from");
              has_from = true;
            } else if (name == "transpose") {
              try {
                r.transpose = field.second.as<bool>();
              } catch (const YAML::Exception&) {
                throw ConfigError(at(source, field.second) + ": " + rule + ".transpose must be true or false");
              }
            } else if (name == "split") {
              r.split = parse_split(field.second, source, rule);
            } else if (name == "rope_permute") {
              const std::string how = scalar(field.second, source, rule + ".rope_permute");
              if (how == "half_to_interleaved") {
                r.rope_permute = RopePermute::half_to_interleaved;
              } else if (how == "interleaved_to_half") {
                r.rope_permute = RopePermute::interleaved_to_half;
              } else {
                throw ConfigError(at(source, field.second) + ": " + rule + ".rope_permute is '" + how +
                                  "' (expected half_to_interleaved or interleaved_to_half)");
              }
            } else if (name == "heads") {
              r.heads = integer(field.second, source, rule + ".heads", 1);
            } else {
              throw ConfigError(at(source, field.first) + ": " + rule + ": unknown key '" + name +
                                "' (expected from, transpose, split, rope_permute, heads)");
            }
          }
          if (!has_from) throw ConfigError(r.where + ": " + rule + " needs `from:` (the PyTorch key)");
          if ((r.rope_permute != RopePermute::none) != (r.heads > 0)) {
            throw ConfigError(r.where + ": " + rule + (r.heads > 0 ? ".heads needs rope_permute"
                                                                   : ".rope_permute needs heads: N (the heads of dim 0)"));
          }
        } else {
          r.source = scalar(entry.second, source, rule + " (the PyTorch key)");
        }
        check_pattern(r.tessera, entry.first, source);
        check_pattern(r.source, entry.second, source);
        if (std::count(r.tessera.begin(), r.tessera.end(), '*') != std::count(r.source.begin(), r.source.end(), '*')) {
          throw ConfigError(r.where + ": '" + r.tessera + "' and '" + r.source +
                            "' hold different numbers of '*' (each '*' of one side is one of the other)");
        }
        m.rules_.push_back(std::move(r));
      }
    } else if (key == "ignore") {
      if (v.IsScalar()) {
        m.ignore_.push_back(v.Scalar());
      } else if (v.IsSequence()) {
        for (const auto& p : v) m.ignore_.push_back(scalar(p, source, "ignore[]"));
      } else {
        throw ConfigError(at(source, v) + ": ignore must be a list of PyTorch keys");
      }
    } else if (key == "passthrough") {
      try {
        m.passthrough_ = v.as<bool>();
      } catch (const YAML::Exception&) {
        throw ConfigError(at(source, v) + ": passthrough must be true or false");
      }
    } else {
      throw ConfigError(at(source, item.first) + ": unknown key '" + key +
                        "' (expected tensors, ignore, passthrough)");
    }
  }
  if (!has_tensors) throw ConfigError(std::string(source) + ": the mapping has no `tensors:`");
  return m;
}

}  // namespace tessera::io
