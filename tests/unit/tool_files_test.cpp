// Files users name on the tools' command lines (tools/common): YAML files
// (hvactor-up's cluster file, hvactor-run's --config-file) and the text
// files read whole (host files): bounded in the work they make us do,
// never blocking on a FIFO, every error naming the file.

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>

#include <doctest/doctest.h>

#include "cluster_file.hpp"
#include "unit_temp_dir.hpp"
#include "yaml_file.hpp"

using namespace std::chrono_literals;

namespace {

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out{p};
  out << text;
}

// `levels` anchored lists of ten, each naming the one before ten times:
// 10^levels scalars by reference in a few lines.
std::string alias_bomb(int levels) {
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < levels; ++i) {
    auto prev = "*a" + std::to_string(i - 1);
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k)
      text += (k ? ", " : "") + prev;
    text += "]\n";
  }
  return text;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no std::invalid_argument)";
}

} // namespace

TEST_SUITE("tool files") {

TEST_CASE("an alias bomb is refused at once, naming the file and the aliases") {
  hvactor_test::temp_dir dir;
  auto path = (dir.path / "bomb.yaml").string();
  // 10^6 scalars from 6 lines (the 13-line one is 10^12).
  write_file(path, alias_bomb(6));
  auto t0 = std::chrono::steady_clock::now();
  auto m = message_of([&] { hvactor::tool::load_yaml_file(path, "the config file"); });
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  CHECK(m.rfind(path + ": ", 0) == 0);
  CHECK(m.find("alias") != std::string::npos);
  // The same through hvactor-up's cluster file.
  m = message_of([&] { hvactor::up_tool::read_cluster_file(path); });
  CHECK(m.rfind(path + ": ", 0) == 0);
  CHECK(m.find("alias") != std::string::npos);
}

TEST_CASE("aliases that stay within what the file could spell out are read") {
  hvactor_test::temp_dir dir;
  auto path = (dir.path / "ok.yaml").string();
  write_file(path, alias_bomb(2) + "list: [*a1, *a1]\n");
  auto doc = hvactor::tool::load_yaml_file(path, "the config file");
  CHECK(doc["list"].size() == 2);
  CHECK(doc["list"][1][9][9].as<std::string>() == "x");
}

TEST_CASE("a key that is a list or a mapping is refused naming the file and its place") {
  hvactor_test::temp_dir dir;
  auto path = (dir.path / "cluster.yaml").string();
  write_file(path, "cluster_name: c\n? [a, b]\n: 1\n");
  auto m = message_of([&] { hvactor::up_tool::read_cluster_file(path); });
  CHECK(m.rfind(path + ": ", 0) == 0);
  CHECK(m.find("a key must be a name") != std::string::npos);
  write_file(path, "cluster_name: c\nhvactor:\n  ? {x: 1}\n  : 2\n");
  m = message_of([&] { hvactor::up_tool::read_cluster_file(path); });
  CHECK(m.rfind(path + ": hvactor", 0) == 0);
  CHECK(m.find("a key must be a name") != std::string::npos);
}

TEST_CASE("a FIFO, a directory and an oversized file are refused without being read") {
  hvactor_test::temp_dir dir;
  auto fifo = (dir.path / "fifo.yaml").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto m = message_of([&] { hvactor::tool::load_yaml_file(fifo, "the config file"); });
  CHECK(m.find(fifo + ": cannot read the config file: not a regular file") == 0);
  m = message_of([&] { hvactor::tool::load_yaml_file(dir.path.string(), "the cluster file"); });
  CHECK(m.find("it is a directory") != std::string::npos);
  auto big = (dir.path / "big.yaml").string();
  write_file(big, "a: " + std::string(2000, 'x') + "\n");
  m = message_of([&] { hvactor::tool::load_yaml_file(big, "the config file", 1000); });
  CHECK(m.find(big + ": cannot read the config file: larger than 1000 bytes") == 0);
}

} // TEST_SUITE
