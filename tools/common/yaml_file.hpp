#pragma once

// Reading a YAML file a user wrote (hvactor-up's cluster file,
// hvactor-run's --config-file): bounded in size, strict about duplicate
// and unknown keys and about types, every error naming the file and the
// key ("cluster.yaml: hvactor.port: must be in 1..65535 (got 0)").

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace hvactor::tool {

/// `path`'s YAML (`what` names the file's role in messages: "the cluster
/// file"). Throws std::invalid_argument naming the path for a directory,
/// a FIFO or other special file (never opened for reading), more than
/// `max_bytes`, an unreadable file, text that is not YAML, a key that
/// appears twice in one mapping, a key that is a list or a mapping, and
/// aliases that expand past what a file of its size could spell out (an
/// alias bomb: 13 lines standing for 10^12 nodes).
YAML::Node load_yaml_file(const std::string& path, const std::string& what,
                          uintmax_t max_bytes = uintmax_t{1} << 20);

/// Typed access to the nodes of one file; every failure is a
/// std::invalid_argument "<path>: <key>: <why>".
struct yaml_reader {
  std::string path;

  [[noreturn]] void fail(const std::string& key, const std::string& why) const;

  /// Refuses a `map` that is not a mapping or holds a key not in `allowed`.
  void only(const YAML::Node& map, const std::string& where, std::set<std::string> allowed) const;

  std::string text(const YAML::Node& n, const std::string& key) const;
  int number(const YAML::Node& n, const std::string& key, int min, int max) const;
  double real(const YAML::Node& n, const std::string& key, double min, double max) const;
  bool flag(const YAML::Node& n, const std::string& key) const;
  /// A list of strings (absent: empty).
  std::vector<std::string> texts(const YAML::Node& n, const std::string& key) const;
};

} // namespace hvactor::tool
