// hvactor-node: runs the head or a node of an hvactor cluster, shows the
// cluster's status, waits for it, and makes its TLS certificates.

#include <cstdio>
#include <iostream>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include "tools/cluster/node_options.hpp"
#include "commands.hpp"
#include "options.hpp"

int main(int argc, char** argv) {
  namespace node_tool = hvactor::node_tool;
  cxxopts::Options parser{"hvactor-node",
                          "Runs the head or a node of an hvactor cluster.\n\n"
                          "  hvactor-node --head [--port P]         start the head (and a node)\n"
                          "  hvactor-node --address HEAD:PORT       join a head as a node\n"
                          "  hvactor-node status --address HEAD:PORT   list nodes, resources, jobs\n"
                          "  hvactor-node wait --address HEAD:PORT [--nodes ID,...]   wait until "
                          "they joined\n"
                          "  hvactor-node certs --dir DIR NAME...   make a cluster CA and "
                          "certificates\n"};
  hvactor::cluster::declare_node_options(parser);
  try {
    auto res = hvactor::tool::parse_options(parser, argv[0], {argv + 1, argv + argc});
    if (res.count("help")) {
      std::cout << parser.help() << std::endl;
      return 0;
    }
    auto o = hvactor::cluster::read_node_options(res);
    if (o.command == "certs")
      return node_tool::certs(o);
    if (o.command == "status")
      return node_tool::status(o);
    if (o.command == "wait")
      return node_tool::wait(o);
    return node_tool::serve(std::move(o));
  } catch (const cxxopts::exceptions::exception& e) {
    fmt::print(stderr, "hvactor-node: {} (see --help)\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "hvactor-node: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hvactor-node: {}\n", e.what());
    return 1;
  }
}
