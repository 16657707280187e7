#include "config_parser.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "tessera/error.hpp"

namespace tessera::train::detail {

const std::vector<std::string> kModelTypes = {"field_emulator", "decoder", "onnx"};

std::string Parser::where(const YAML::Node& node, const std::string& key) const {
  std::string s = source_;
  if (node.Mark().line >= 0) s += ":" + std::to_string(node.Mark().line + 1);
  return s + ": " + key;
}

void Parser::section(const YAML::Node& node, const std::string& name, const Keys& keys) const {
  if (!node.IsDefined() || node.IsNull()) return;
  if (!node.IsMap()) throw ConfigError(where(node, name) + " must be a mapping");
  for (const auto& item : node) {
    const std::string key = item.first.IsScalar() ? item.first.Scalar() : "<non-scalar>";
    const std::string path = name + "." + key;
    bool found = false;
    for (const auto& [k, handler] : keys) {
      if (k == key) {
        handler(item.second, path);
        found = true;
        break;
      }
    }
    if (!found) {
      std::string known;
      for (const auto& [k, handler] : keys) known += (known.empty() ? "" : ", ") + k;
      throw ConfigError(where(item.first, path) + ": unknown key '" + key + "' (expected " + known + ")");
    }
  }
}

std::string Parser::string(const YAML::Node& v, const std::string& key) const {
  if (!v.IsScalar()) throw ConfigError(where(v, key) + " must be a string");
  return v.Scalar();
}
std::int64_t Parser::integer(const YAML::Node& v, const std::string& key, std::int64_t min) const {
  if (!v.IsScalar()) throw ConfigError(where(v, key) + " must be an integer >= " + std::to_string(min));
  const std::string& t = v.Scalar();
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(t.c_str(), &end, 10);
  if (t.empty() || *end != '\0' || errno == ERANGE) {
    throw ConfigError(where(v, key) + " must be an integer >= " + std::to_string(min) + ", got '" + t + "'");
  }
  if (x < min) throw ConfigError(where(v, key) + " must be an integer >= " + std::to_string(min) + ", got " + t);
  return x;
}
double Parser::number(const YAML::Node& v, const std::string& key, double min, bool min_inclusive) const {
  if (!v.IsScalar()) throw ConfigError(where(v, key) + " must be a number");
  const std::string& t = v.Scalar();
  char* end = nullptr;
  const double x = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || !std::isfinite(x)) {
    throw ConfigError(where(v, key) + " must be a finite number, got '" + t + "'");
  }
  if (min_inclusive ? x < min : x <= min) {
    throw ConfigError(where(v, key) + " must be " + (min_inclusive ? ">= " : "> ") + std::to_string(min) +
                      ", got " + t);
  }
  return x;
}
bool Parser::boolean(const YAML::Node& v, const std::string& key) const {
  if (v.IsScalar()) {
    const std::string& t = v.Scalar();
    if (t == "true" || t == "True" || t == "yes" || t == "on") return true;
    if (t == "false" || t == "False" || t == "no" || t == "off") return false;
  }
  throw ConfigError(where(v, key) + " must be true or false");
}
std::string Parser::choice(const YAML::Node& v, const std::string& key, const std::vector<std::string>& options) const {
  const std::string t = string(v, key);
  std::string list;
  for (const auto& o : options) {
    if (o == t) return t;
    list += (list.empty() ? "" : ", ") + o;
  }
  throw ConfigError(where(v, key) + ": unknown value '" + t + "' (expected " + list + ")");
}
std::vector<std::string> Parser::strings(const YAML::Node& v, const std::string& key) const {
  if (!v.IsSequence()) throw ConfigError(where(v, key) + " must be a list of names");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string item = key + "[" + std::to_string(i) + "]";
    out.push_back(string(v[i], item));
    // A name given twice (two channels 'h', two files, two cut points) is refused here,
    // not where it would make two things of one name later (a checkpoint predict refuses).
    const auto first = std::find(out.begin(), out.end() - 1, out.back());
    if (first != out.end() - 1) {
      throw ConfigError(where(v[i], item) + ": '" + out.back() + "' is given twice (also as " + key + "[" +
                        std::to_string(first - out.begin()) + "]); list each name once");
    }
  }
  return out;
}

namespace {

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, c)) parts.push_back(part);
  return parts;
}

}  // namespace

void apply_override(YAML::Node& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError("--set '" + assignment + "': expected KEY=VALUE, e.g. --set schedule.steps=50");
  }
  const std::string key = assignment.substr(0, eq);
  const auto path = split(key, '.');
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set " + key + ": the value is not valid YAML: " + e.what());
  }
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw ConfigError("--set " + key + ": the config's top level is not a mapping");
  YAML::Node current = root;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    if (path[i].empty()) throw ConfigError("--set '" + assignment + "': empty key component");
    YAML::Node next = current[path[i]];
    if (!next.IsDefined() || next.IsNull()) {
      current[path[i]] = YAML::Node(YAML::NodeType::Map);
      next = current[path[i]];
    }
    if (!next.IsMap()) {
      throw ConfigError("--set " + key + ": '" + path[i] + "' is not a mapping in the config");
    }
    current.reset(next);  // (operator= would assign into the node)
  }
  current[path.back()] = value;
}


// Write ./0.5 for a file of that name.
void parse_validation(const Parser& p, const YAML::Node& v, const std::string& key, DataConfig& d) {
  d.validation_fraction = 0;
  d.validation_path.clear();
  if (v.IsNull()) return;
  const std::string t = p.string(v, key);
  char* end = nullptr;
  const double x = std::strtod(t.c_str(), &end);
  if (!t.empty() && *end == '\0') {
    if (!(x > 0 && x < 1)) {
      throw ConfigError(p.where(v, key) + " must be a fraction in (0, 1) of the data to hold out, or a file path; got " +
                        t);
    }
    d.validation_fraction = x;
    return;
  }
  if (t.empty()) throw ConfigError(p.where(v, key) + " must be a fraction in (0, 1) or a file path, got ''");
  d.validation_path = t;
}

}  // namespace tessera::train::detail
