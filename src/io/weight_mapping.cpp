// Weight mappings applied: the import and export plans (which key becomes which tensor,
// whole, split or transposed, every error naming the key and the rule) and the copies
// they describe. The mapping file is read in weight_mapping_yaml.cpp.
#include "tessera/io/weight_mapping.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "tessera/error.hpp"

namespace tessera::io {

namespace {

// ---- Patterns: literal pieces around each '*'; a '*' matches one or more characters
// other than '.', so it stands for one component of a dotted name (a layer index).

std::vector<std::string> pieces_of(const std::string& pattern) {
  std::vector<std::string> pieces(1);
  for (const char c : pattern) {
    if (c == '*') {
      pieces.emplace_back();
    } else {
      pieces.back() += c;
    }
  }
  return pieces;
}

bool match_rest(const std::vector<std::string>& pieces, std::size_t k, std::string_view name, std::size_t pos,
                std::vector<std::string>& captures) {
  if (k == pieces.size()) return pos == name.size();
  for (std::size_t q = pos + 1; q <= name.size() && name[q - 1] != '.'; ++q) {
    if (name.substr(q, pieces[k].size()) != pieces[k]) continue;
    captures.emplace_back(name.substr(pos, q - pos));
    if (match_rest(pieces, k + 1, name, q + pieces[k].size(), captures)) return true;
    captures.pop_back();
  }
  return false;
}

bool match(const std::string& pattern, std::string_view name, std::vector<std::string>& captures) {
  captures.clear();
  const auto pieces = pieces_of(pattern);
  if (name.substr(0, pieces[0].size()) != pieces[0]) return false;
  return match_rest(pieces, 1, name, pieces[0].size(), captures);
}

std::string substitute(const std::string& pattern, const std::vector<std::string>& captures) {
  const auto pieces = pieces_of(pattern);
  std::string out = pieces[0];
  for (std::size_t i = 1; i < pieces.size(); ++i) out += captures[i - 1] + pieces[i];
  return out;
}

std::string describe(const MappingRule& r) {
  return "the rule at " + r.where + " ('" + r.tessera + "' <- '" + r.source + "')";
}

Shape transposed(const Shape& s) { return {s[1], s[0]}; }

// ---- Plans.

bool same_cut(const TensorSplit& a, const TensorSplit& b) {
  return a.dim == b.dim && a.parts == b.parts && a.sizes == b.sizes;
}

// Offset and length of part `index` along an extent of `extent`; ShapeError naming `who`.
std::pair<std::int64_t, std::int64_t> part_range(const TensorSplit& s, std::int64_t extent, const std::string& who) {
  if (s.sizes.empty()) {
    if (extent % s.parts != 0) {
      throw ShapeError(who + ": dim " + std::to_string(s.dim) + " has extent " + std::to_string(extent) +
                       ", which " + std::to_string(s.parts) + " equal parts do not divide");
    }
    const std::int64_t length = extent / s.parts;
    return {s.index * length, length};
  }
  std::int64_t sum = 0, offset = 0;
  for (std::size_t i = 0; i < s.sizes.size(); ++i) {
    if (static_cast<std::int64_t>(i) == s.index) offset = sum;
    sum += s.sizes[i];
  }
  if (sum != extent) {
    throw ShapeError(who + ": dim " + std::to_string(s.dim) + " has extent " + std::to_string(extent) +
                     " but the split's sizes add up to " + std::to_string(sum));
  }
  return {offset, s.sizes[static_cast<std::size_t>(s.index)]};
}

// A strided view of a 2-D host tensor with its dims swapped; the caller keeps `t` alive.
Tensor transposed_view(const Tensor& t) {
  return Tensor::view(t.data(), {t.shape()[1], t.shape()[0]}, t.dtype(), t.device(),
                      {t.strides()[1], t.strides()[0]});
}

// heads divides `extent` (dim 0 of what a rope_permute reorders) into heads of an even
// head_dim; ShapeError naming `who` otherwise.
void check_rope_rows(std::int64_t extent, std::int64_t heads, const std::string& who) {
  if (heads < 1 || extent % heads != 0 || (extent / heads) % 2 != 0) {
    throw ShapeError(who + ": a rope_permute over " + std::to_string(heads) + " heads needs dim 0 to hold " +
                     std::to_string(heads) + " heads of an even head_dim, but its extent is " +
                     std::to_string(extent) + " (is `heads` the query heads for q and the key/value heads for k?)");
  }
}

}  // namespace

const char* rope_permute_name(RopePermute p) noexcept {
  switch (p) {
    case RopePermute::half_to_interleaved: return "half_to_interleaved";
    case RopePermute::interleaved_to_half: return "interleaved_to_half";
    case RopePermute::none: break;
  }
  return "none";
}

RopePermute inverse(RopePermute p) noexcept {
  switch (p) {
    case RopePermute::half_to_interleaved: return RopePermute::interleaved_to_half;
    case RopePermute::interleaved_to_half: return RopePermute::half_to_interleaved;
    case RopePermute::none: break;
  }
  return RopePermute::none;
}

Tensor rope_permute_rows(const Tensor& t, RopePermute p, std::int64_t heads, const std::string& who) {
  if (t.dim() < 1) throw ShapeError(who + ": a rope_permute needs a tensor of at least one dim, got " + t.str());
  const std::int64_t rows = t.shape()[0];
  check_rope_rows(rows, heads, who);
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  if (p == RopePermute::none) {
    out.copy_from(t);
    return out;
  }
  const std::int64_t head_dim = rows / heads, half = head_dim / 2;
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i < half; ++i) {
      // Interleaved rows 2i, 2i+1 of head h are half-split rows i, i + half.
      const std::int64_t inter = h * head_dim + 2 * i, split = h * head_dim + i;
      for (std::int64_t k = 0; k < 2; ++k) {
        const std::int64_t a = inter + k, b = split + k * half;
        const bool to_inter = p == RopePermute::half_to_interleaved;
        out.narrow(0, to_inter ? a : b, 1).copy_from(t.narrow(0, to_inter ? b : a, 1));
      }
    }
  }
  return out;
}


std::vector<ImportStep> WeightMapping::plan_import(const NamedShapes& keys, const std::string& file) const {
  std::vector<ImportStep> steps;
  std::vector<bool> used(rules_.size(), false);
  std::map<std::string, std::string> made;  // tessera name -> the PyTorch key it came from
  std::vector<std::string> captures;
  auto add = [&](ImportStep step) {
    const auto [it, fresh] = made.emplace(step.tessera_name, step.source_name);
    if (!fresh) {
      throw ConfigError(source_ + ": the tessera name '" + step.tessera_name + "' is made from both '" + it->second +
                        "' and '" + step.source_name + "' of '" + file + "'");
    }
    steps.push_back(std::move(step));
  };

  for (const auto& entry : keys) {
    // Named references, not a structured binding: clang 14 cannot capture those in lambdas.
    const std::string& key = entry.first;
    const Shape& shape = entry.second;
    const std::string who = "'" + key + "' of '" + file + "' (shape " + shape_str(shape) + ")";
    std::vector<std::pair<std::size_t, std::vector<std::string>>> matching;
    for (std::size_t r = 0; r < rules_.size(); ++r) {
      if (match(rules_[r].source, key, captures)) matching.emplace_back(r, captures);
    }
    if (matching.empty()) {
      const bool ignored = std::any_of(ignore_.begin(), ignore_.end(),
                                       [&](const std::string& p) { return match(p, key, captures); });
      if (ignored) continue;
      if (!passthrough_) {
        throw ConfigError(source_ + ": no rule maps the key " + who +
                          "; add it under tensors:, list it under ignore:, or set passthrough: true");
      }
      ImportStep step;
      step.tessera_name = step.source_name = key;
      step.source_shape = step.shape = shape;
      add(std::move(step));
      continue;
    }
    for (const auto& [r, caps] : matching) used[r] = true;

    // One rule takes the whole tensor, or split rules take every part of it exactly once.
    const MappingRule& first = rules_[matching.front().first];
    if (matching.size() > 1 && !first.split) {
      throw ConfigError(source_ + ": the key " + who + " is taken whole by " + describe(first) + " and also by " +
                        describe(rules_[matching[1].first]) + "; one key feeds one rule, or split rules that take "
                        "every part of it");
    }
    if (first.split) {
      std::set<std::int64_t> indices;
      for (const auto& [r, caps] : matching) {
        const MappingRule& rule = rules_[r];
        if (!rule.split || !same_cut(*rule.split, *first.split)) {
          throw ConfigError(source_ + ": the key " + who + " is taken by " + describe(first) + " and " +
                            describe(rule) + ", which do not cut it into the same parts");
        }
        if (!indices.insert(rule.split->index).second) {
          throw ConfigError(source_ + ": two rules take part " + std::to_string(rule.split->index) + " of " + who);
        }
      }
      if (static_cast<std::int64_t>(indices.size()) != first.split->parts) {
        throw ConfigError(source_ + ": " + describe(first) + " cuts " + who + " into " +
                          std::to_string(first.split->parts) + " parts but rules take only " +
                          std::to_string(indices.size()) + " of them (export could not put it back together)");
      }
    }
    std::vector<ImportStep> parts;
    for (const auto& [r, caps] : matching) {
      const MappingRule& rule = rules_[r];
      ImportStep step;
      step.source_name = key;
      step.tessera_name = substitute(rule.tessera, caps);
      step.source_shape = step.shape = shape;
      step.rule = rule.where;
      step.transpose = rule.transpose;
      if (rule.split) {
        if (rule.split->dim >= static_cast<int>(shape.size())) {
          throw ShapeError(describe(rule) + ": " + who + " has no dim " + std::to_string(rule.split->dim) +
                           " to split");
        }
        step.dim = rule.split->dim;
        std::tie(step.offset, step.length) = part_range(*rule.split, shape[step.dim], describe(rule) + ": " + who);
        step.shape[step.dim] = step.length;
      }
      if (rule.rope_permute != RopePermute::none) {
        if (step.shape.empty()) throw ShapeError(describe(rule) + ": rope_permute of " + who + ", a scalar");
        check_rope_rows(step.shape[0], rule.heads, describe(rule) + ": " + who);
        step.rope_permute = rule.rope_permute;
        step.heads = rule.heads;
      }
      if (rule.transpose) {
        if (step.shape.size() != 2) {
          throw ShapeError(describe(rule) + " transposes " + who + ", which is not 2-D");
        }
        step.shape = transposed(step.shape);
      }
      parts.push_back(std::move(step));
    }
    std::stable_sort(parts.begin(), parts.end(), [](const ImportStep& a, const ImportStep& b) { return a.offset < b.offset; });
    for (auto& p : parts) add(std::move(p));
  }
  for (std::size_t r = 0; r < rules_.size(); ++r) {
    if (!used[r]) {
      throw ConfigError(source_ + ": " + describe(rules_[r]) + " matches no key of '" + file +
                        "' (a misspelt key, or a rule for another model)");
    }
  }
  return steps;
}

std::vector<ExportStep> WeightMapping::plan_export(const NamedShapes& names, const std::string& checkpoint) const {
  struct Slot {
    ExportStep step;
    std::vector<std::pair<const MappingRule*, Shape>> rules;  // per part: its rule (null: whole) and shape
  };
  std::vector<Slot> slots;
  std::map<std::string, std::size_t> slot_of;  // PyTorch key -> slot
  std::vector<bool> used(rules_.size(), false);
  std::vector<std::string> captures;

  for (const auto& [name, shape] : names) {
    const std::string who = "'" + name + "' of '" + checkpoint + "' (shape " + shape_str(shape) + ")";
    const MappingRule* rule = nullptr;
    std::vector<std::string> rule_captures;
    for (std::size_t r = 0; r < rules_.size(); ++r) {
      if (!match(rules_[r].tessera, name, captures)) continue;
      if (rule != nullptr) {
        throw ConfigError(source_ + ": the tensor " + who + " matches both " + describe(*rule) + " and " +
                          describe(rules_[r]));
      }
      rule = &rules_[r];
      rule_captures = captures;
      used[r] = true;
    }
    if (rule == nullptr && !passthrough_) {
      throw ConfigError(source_ + ": no rule maps the tensor " + who +
                        "; add it under tensors:, or set passthrough: true");
    }
    ExportStep::Part part;
    part.tessera_name = name;
    Shape untransposed = shape;
    std::string key = name;
    if (rule != nullptr) {
      key = substitute(rule->source, rule_captures);
      part.transpose = rule->transpose;
      if (rule->transpose) {
        if (shape.size() != 2) throw ShapeError(describe(*rule) + " transposes " + who + ", which is not 2-D");
        untransposed = transposed(shape);
      }
      if (rule->rope_permute != RopePermute::none) {
        if (untransposed.empty()) throw ShapeError(describe(*rule) + ": rope_permute of " + who + ", a scalar");
        check_rope_rows(untransposed[0], rule->heads, describe(*rule) + ": " + who);
        part.rope_permute = inverse(rule->rope_permute);
        part.heads = rule->heads;
      }
    }
    const bool split = rule != nullptr && rule->split;
    auto [it, fresh] = slot_of.emplace(key, slots.size());
    if (fresh) {
      Slot slot;
      slot.step.source_name = key;
      slot.step.dim = split ? rule->split->dim : -1;
      slots.push_back(std::move(slot));
    } else if (!split || slots[it->second].rules.front().first == nullptr ||
               !slots[it->second].rules.front().first->split) {
      throw ConfigError(source_ + ": the tensor " + who + " and '" + slots[it->second].step.parts.front().tessera_name +
                        "' both become the PyTorch key '" + key + "' and no split puts them together");
    }
    slots[it->second].step.parts.push_back(part);
    slots[it->second].rules.emplace_back(split ? rule : nullptr, untransposed);
  }

  std::vector<ExportStep> steps;
  for (auto& slot : slots) {
    ExportStep& step = slot.step;
    const std::string key = "PyTorch key '" + step.source_name + "'";
    if (step.dim < 0) {
      step.shape = slot.rules.front().second;
      step.parts.front().length = step.shape.empty() ? 1 : step.shape.front();
      steps.push_back(std::move(step));
      continue;
    }
    // The parts of a split, ordered by index, must all be there and agree on every dim
    // but the split one.
    const TensorSplit& cut = *slot.rules.front().first->split;
    std::vector<std::size_t> order(step.parts.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const MappingRule& rule = *slot.rules[i].first;
      if (!same_cut(*rule.split, cut)) {
        throw ConfigError(source_ + ": " + describe(*slot.rules.front().first) + " and " + describe(rule) +
                          " cut the " + key + " into different parts");
      }
    }
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return slot.rules[a].first->split->index < slot.rules[b].first->split->index; });
    if (static_cast<std::int64_t>(order.size()) != cut.parts) {
      std::string have;
      for (std::size_t i : order) have += (have.empty() ? "" : ", ") + step.parts[i].tessera_name;
      throw ConfigError(source_ + ": the " + key + " has " + std::to_string(cut.parts) + " parts along dim " +
                        std::to_string(cut.dim) + " but '" + checkpoint + "' holds only " + have);
    }
    std::vector<ExportStep::Part> parts;
    Shape full;
    std::int64_t offset = 0;
    for (std::size_t n = 0; n < order.size(); ++n) {
      const std::size_t i = order[n];
      const MappingRule& rule = *slot.rules[i].first;
      const Shape& s = slot.rules[i].second;
      const std::string who = "'" + step.parts[i].tessera_name + "' (shape " + shape_str(s) + " before the transpose)";
      if (rule.split->index != static_cast<std::int64_t>(n)) {
        throw ConfigError(source_ + ": the " + key + " gets part " + std::to_string(rule.split->index) +
                          " twice or misses part " + std::to_string(n));
      }
      if (cut.dim >= static_cast<int>(s.size())) {
        throw ShapeError(describe(rule) + ": " + who + " has no dim " + std::to_string(cut.dim));
      }
      if (n == 0) {
        full = s;
        full[cut.dim] = 0;
      } else {
        Shape a = full, b = s;
        a[cut.dim] = b[cut.dim] = 0;
        if (a != b) {
          throw ShapeError(describe(rule) + ": " + who + " does not match the other parts of the " + key +
                           " outside dim " + std::to_string(cut.dim));
        }
      }
      const std::int64_t length = s[cut.dim];
      const std::int64_t want = cut.sizes.empty() ? slot.rules[order[0]].second[cut.dim]
                                                  : cut.sizes[static_cast<std::size_t>(n)];
      if (length != want) {
        throw ShapeError(describe(rule) + ": " + who + " is " + std::to_string(length) + " long along dim " +
                         std::to_string(cut.dim) + ", the split wants " + std::to_string(want));
      }
      ExportStep::Part p = step.parts[i];
      p.offset = offset;
      p.length = length;
      offset += length;
      parts.push_back(std::move(p));
    }
    full[cut.dim] = offset;
    step.shape = full;
    step.parts = std::move(parts);
    steps.push_back(std::move(step));
  }
  // After the parts check, whose message (which part is missing) says more.
  for (std::size_t r = 0; r < rules_.size(); ++r) {
    if (!used[r]) {
      throw ConfigError(source_ + ": " + describe(rules_[r]) + " matches no tensor of '" + checkpoint +
                        "' (a misspelt name, or a rule for another model)");
    }
  }
  return steps;
}

Tensor WeightMapping::apply(const ImportStep& step, const Tensor& source) {
  if (source.shape() != step.source_shape) {
    throw ShapeError("import of '" + step.source_name + "': the tensor is " + source.str() + ", the plan expected " +
                     shape_str(step.source_shape));
  }
  Tensor t = step.dim >= 0 ? source.narrow(step.dim, step.offset, step.length) : source;
  if (step.rope_permute != RopePermute::none) {
    t = rope_permute_rows(t, step.rope_permute, step.heads, "import of '" + step.source_name + "'");
  }
  if (step.transpose) t = transposed_view(t);  // `source` (or the permuted copy) keeps the storage alive
  Tensor out = Tensor::empty(step.shape, source.dtype(), source.device());
  out.copy_from(t);
  return out;
}

Tensor WeightMapping::assemble(const ExportStep& step, const std::vector<Tensor>& parts) {
  if (parts.size() != step.parts.size() || parts.empty()) {
    throw InvalidArgument("export of '" + step.source_name + "': " + std::to_string(parts.size()) +
                          " tensors given for " + std::to_string(step.parts.size()) + " parts");
  }
  Tensor out = Tensor::empty(step.shape, parts.front().dtype(), parts.front().device());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const ExportStep::Part& p = step.parts[i];
    if (parts[i].dtype() != out.dtype()) {
      throw ShapeError("export of '" + step.source_name + "': its parts '" + step.parts.front().tessera_name + "' (" +
                       std::string(dtype_name(out.dtype())) + ") and '" + p.tessera_name + "' (" +
                       std::string(dtype_name(parts[i].dtype())) + ") differ in dtype");
    }
    Tensor src = p.transpose ? transposed_view(parts[i]) : parts[i];
    if (p.rope_permute != RopePermute::none) {
      src = rope_permute_rows(src, p.rope_permute, p.heads, "export of '" + p.tessera_name + "'");
    }
    Tensor dst = step.dim >= 0 ? out.narrow(step.dim, p.offset, p.length) : out;
    dst.copy_from(src);  // ShapeError naming both shapes when the part does not fit
  }
  return out;
}

}  // namespace tessera::io
