#include "yaml_file.hpp"

#include <cmath>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace hvactor::tool {

namespace {

// YAML forbids a key twice in one mapping; yaml-cpp keeps both and answers
// the first, so a second one would be ignored silently.
void refuse_duplicate_keys(const yaml_reader& r, const YAML::Node& n, const std::string& where) {
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      refuse_duplicate_keys(r, n[i], fmt::format("{}[{}]", where, i));
    return;
  }
  if (!n.IsMap())
    return;
  std::map<std::string, int> lines;
  for (auto kv : n) {
    auto key = kv.first.IsScalar() ? kv.first.Scalar() : std::string{"(a non-scalar key)"};
    auto name = where.empty() ? key : where + "." + key;
    int line = kv.first.Mark().line + 1;
    if (auto [it, fresh] = lines.emplace(key, line); !fresh)
      r.fail(name, fmt::format("the key appears twice, on lines {} and {} (YAML forbids "
                               "duplicate keys; keep one)",
                               it->second, line));
    refuse_duplicate_keys(r, kv.second, name);
  }
}

} // namespace

YAML::Node load_yaml_file(const std::string& path, const std::string& what, uintmax_t max_bytes) {
  YAML::Node doc;
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(status))
    throw std::invalid_argument(fmt::format("{}: cannot read {}: it is a directory", path, what));
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    throw std::invalid_argument(
      fmt::format("{}: cannot read {}: not a regular file", path, what));
  if (std::filesystem::exists(status) && std::filesystem::file_size(path, ec) > max_bytes)
    throw std::invalid_argument(
      fmt::format("{}: cannot read {}: larger than {} bytes", path, what, max_bytes));
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw std::invalid_argument(fmt::format("{}: cannot read {}", path, what));
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(fmt::format("{}: not valid YAML: {}", path, e.what()));
  }
  refuse_duplicate_keys(yaml_reader{path}, doc, "");
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
    auto key = kv.first.as<std::string>();
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
