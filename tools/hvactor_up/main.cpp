// hvactor-up / hvactor-down: Ray's cluster launcher (`ray up`, `ray down`)
// for machines you already have. Over ssh: runs the setup commands, makes
// and hands out the cluster's TLS certificates, starts the head and an
// hvactor-node on every worker, waits until each joined, prints how to use
// it; hvactor-down stops them; hvactor-up --status shows the cluster.
//
//   hvactor-up CLUSTER.yaml          hvactor-up --status CLUSTER.yaml
//   hvactor-down CLUSTER.yaml        (the same as hvactor-up --down)

#include <cstdio>
#include <filesystem>
#include <iostream>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include "cluster_file.hpp"
#include "commands.hpp"
#include "options.hpp"

int main(int argc, char** argv) {
  using namespace hvactor::up_tool;
  bool down_tool = std::filesystem::path(argv[0]).filename() == "hvactor-down";
  cxxopts::Options parser{down_tool ? "hvactor-down" : "hvactor-up",
                          "Starts (or stops) hvactor on machines you already have, over ssh, "
                          "from a cluster file (Ray's cluster launcher YAML, local provider):\n\n"
                          "  hvactor-up CLUSTER.yaml\n  hvactor-up --status CLUSTER.yaml\n"
                          "  hvactor-down CLUSTER.yaml\n"};
  parser.add_options()("down", "stop every node of the cluster (hvactor-down)")(
    "status", "show the cluster's nodes and their free resources")(
    "file", "the cluster file", cxxopts::value<std::string>())("h,help", "print this help");
  parser.parse_positional({"file"});
  parser.positional_help("CLUSTER.yaml");
  try {
    auto res = hvactor::tool::parse_options(parser, argv[0], {argv + 1, argv + argc});
    if (res.count("help")) {
      std::cout << parser.help() << std::endl;
      return 0;
    }
    if (!res.count("file"))
      throw std::invalid_argument("no cluster file: hvactor-up CLUSTER.yaml (see --help)");
    auto c = read_cluster_file(res["file"].as<std::string>());
    if (res.count("status"))
      return status(c);
    if (down_tool || res.count("down"))
      return down(c);
    return up(c);
  } catch (const cxxopts::exceptions::exception& e) {
    fmt::print(stderr, "{}: {} (see --help)\n", parser.program(), e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "{}: {}\n", parser.program(), e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", parser.program(), e.what());
    return 1;
  }
}
