#include "yaml_file.hpp"

#include <cmath>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "text_file.hpp"

namespace hvactor::tool {

namespace {

// The walk over a loaded document: every key a name and none twice in one
// mapping, and no more nodes than the file could spell out. yaml-cpp keeps
// an alias (*a) as a reference to its anchor's node, so 13 lines of nested
// aliases load at once but stand for 10^12 nodes; a walk over them, ours or
// a reader's, would never end.
class document_check {
 public:
  document_check(const yaml_reader& r, size_t bytes)
    : r_(r), limit_(2 * bytes + alias_allowance), left_(limit_) {}

  void visit(const YAML::Node& n, const std::string& where) {
    if (left_-- == 0)
      r_.fail(where.empty() ? "(the document)" : where,
              fmt::format("its aliases (*name) expand to more than {} nodes (an alias repeats "
                          "what its anchor &name names, and nested ones multiply: an alias "
                          "bomb); write the repeated parts out",
                          limit_));
    if (n.IsSequence()) {
      for (size_t i = 0; i < n.size(); ++i)
        visit(n[i], fmt::format("{}[{}]", where, i));
      return;
    }
    if (n.IsMap())
      visit_map(n, where);
  }

 private:
  // YAML forbids a key twice in one mapping; yaml-cpp keeps both and
  // answers the first, so a second one would be ignored silently.
  void visit_map(const YAML::Node& n, const std::string& where) {
    std::map<std::string, int> lines;
    for (auto kv : n) {
      int line = kv.first.Mark().line + 1;
      if (!kv.first.IsScalar())
        r_.fail(where.empty() ? "(the document)" : where,
                fmt::format("a key must be a name, not a list or a mapping (line {})", line));
      auto key = kv.first.Scalar();
      auto name = where.empty() ? key : where + "." + key;
      if (auto [it, fresh] = lines.emplace(key, line); !fresh)
        r_.fail(name, fmt::format("the key appears twice, on lines {} and {} (YAML forbids "
                                  "duplicate keys; keep one)",
                                  it->second, line));
      visit(kv.second, name);
    }
  }

  // Nodes to visit at most: a file of N bytes spells out at most about N
  // nodes without aliases (every node takes a character or a separator);
  // aliases may add a fixed allowance (a list of commands named from
  // several places), far from a bomb's 10^12.
  static constexpr size_t alias_allowance = 100000;
  const yaml_reader& r_;
  size_t limit_;
  size_t left_;
};

} // namespace

YAML::Node load_yaml_file(const std::string& path, const std::string& what, uintmax_t max_bytes) {
  auto text = read_text_file(path, what, max_bytes);
  YAML::Node doc;
  try {
    doc = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(fmt::format("{}: not valid YAML: {}", path, e.what()));
  }
  yaml_reader r{path};
  document_check{r, text.size()}.visit(doc, "");
  return doc;
}

void yaml_reader::fail(const std::string& key, const std::string& why) const {
  throw std::invalid_argument(fmt::format("{}: {}: {}", path, key, why));
}

void yaml_reader::only(const YAML::Node& map, const std::string& where,
                       std::set<std::string> allowed) const {
  if (!map.IsMap())
    fail(where.empty() ? "(the document)" : where, "must be a mapping");
  for (auto kv : map) {
    // Keys are names (load_yaml_file refused any other).
    auto key = kv.first.Scalar();
    if (!allowed.count(key))
      fail(where.empty() ? key : where + "." + key,
           fmt::format("unknown key (allowed: {})", fmt::join(allowed, ", ")));
  }
}

std::string yaml_reader::text(const YAML::Node& n, const std::string& key) const {
  if (!n.IsScalar())
    fail(key, "must be a string");
  return n.as<std::string>();
}

int yaml_reader::number(const YAML::Node& n, const std::string& key, int min, int max) const {
  int v = 0;
  try {
    v = n.as<int>();
  } catch (const YAML::Exception&) {
    fail(key, "must be an integer");
  }
  if (v < min || v > max)
    fail(key, fmt::format("must be in {}..{} (got {})", min, max, v));
  return v;
}

double yaml_reader::real(const YAML::Node& n, const std::string& key, double min,
                         double max) const {
  double v = 0;
  try {
    v = n.as<double>();
  } catch (const YAML::Exception&) {
    fail(key, "must be a number");
  }
  if (!std::isfinite(v) || v < min || v > max)
    fail(key, fmt::format("must be in {}..{} (got {})", min, max, v));
  return v;
}

bool yaml_reader::flag(const YAML::Node& n, const std::string& key) const {
  try {
    return n.as<bool>();
  } catch (const YAML::Exception&) {
    fail(key, "must be true or false");
  }
}

std::vector<std::string> yaml_reader::texts(const YAML::Node& n, const std::string& key) const {
  std::vector<std::string> out;
  if (!n)
    return out;
  if (!n.IsSequence())
    fail(key, "must be a list");
  for (size_t i = 0; i < n.size(); ++i)
    out.push_back(text(n[i], fmt::format("{}[{}]", key, i)));
  return out;
}

} // namespace hvactor::tool
