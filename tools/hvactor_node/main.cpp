// hvactor-node: runs the head or a node of an hvactor cluster, shows the
// cluster's status, and makes its TLS certificates.

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include "internal/cert_authority.hpp"
#include "internal/devices.hpp"
#include "internal/net.hpp"
#include "hvactor/settings.hpp"
#include "node_options.hpp"
#include "options.hpp"

namespace {

using hvactor::node_tool::node_options;


int make_certs(const cxxopts::ParseResult& res) {
  if (!res.count("dir"))
    throw std::invalid_argument("certs needs --dir DIR (where ca.pem and the certificates go)");
  auto names = res.count("names") ? res["names"].as<std::vector<std::string>>()
                                  : std::vector<std::string>{};
  if (names.empty())
    throw std::invalid_argument(
      "certs needs at least one name: hvactor-node certs --dir DIR head node-a driver");
  std::vector<std::string> sans;
  if (res.count("san"))
    sans = res["san"].as<std::vector<std::string>>();
  auto dir = res["dir"].as<std::string>();
  for (auto& path : hvactor::tls::make_certificates(dir, names, sans))
    fmt::print("wrote {}\n", path);
  fmt::print("Start each process with --tls-cert {0}/NAME.pem --tls-key {0}/NAME.key "
             "--tls-ca {0}/ca.pem (keep ca.key off the cluster's machines).\n",
             dir);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  cxxopts::Options parser{"hvactor-node",
                          "Runs the head or a node of an hvactor cluster.\n\n"
                          "  hvactor-node --head [--port P]         start the head (and a node)\n"
                          "  hvactor-node --address HEAD:PORT       join a head as a node\n"
                          "  hvactor-node status --address HEAD:PORT   list nodes, resources, jobs\n"
                          "  hvactor-node certs --dir DIR NAME...   make a cluster CA and "
                          "certificates\n"};
  parser.positional_help("[status|certs NAME...]");
  // clang-format off
  parser.add_options()
    ("head", "start the head: the node registry plus a node for this machine")
    ("address", "HEAD:PORT of the head to join (or to query with status)",
     cxxopts::value<std::string>())
    ("port", "listening port: the head's (default 6380; 0 picks one) or a node's (default: any)",
     cxxopts::value<int>())
    ("bind", "address to listen on (default: 127.0.0.1 on the head, the address that reaches "
             "the head on a node); a non-loopback address requires TLS or --insecure",
     cxxopts::value<std::string>())
    ("node-ip", "address other machines use to reach this node (default: the bind address)",
     cxxopts::value<std::string>())
    ("node-id", "this node's id (default: the hostname); distinct ids let several nodes share "
                "a machine", cxxopts::value<std::string>())
    ("num-cpus", "CPUs this node offers (default: all)", cxxopts::value<int>())
    ("num-gpus", "GPUs this node offers, ids 0..N-1 (default: what the CUDA runtime sees)",
     cxxopts::value<int>())
    ("gpu-ids", "GPU ids this node offers, comma-separated (overrides --num-gpus)",
     cxxopts::value<std::string>())
    ("work-dir", "binary cache and scratch directory, mode 0700 (default: "
                 "/tmp/hvactor-UID/NODE-ID)", cxxopts::value<std::string>())
    ("tls-cert", "this process's certificate (PEM), from the cluster CA",
     cxxopts::value<std::string>())
    ("tls-key", "this process's private key (PEM)", cxxopts::value<std::string>())
    ("tls-ca", "the cluster CA certificate (PEM)", cxxopts::value<std::string>())
    ("insecure", "listen on a non-loopback address without TLS (anyone who reaches the port "
                 "can run programs here)")
    ("slurm", "inside a Slurm step (automatic when SLURM_STEP_ID and SLURMD_NODENAME are "
              "set): node id, CPUs, GPUs and work dir from the step")
    ("exit-on-head-loss", "stop (exit 0) when the head goes away instead of rejoining it")
    ("tls-dir", "take --tls-ca DIR/ca.pem and --tls-cert/--tls-key DIR/<node id>.pem/.key",
     cxxopts::value<std::string>())
    ("connect-timeout", "seconds to wait for the head when joining (default 10)",
     cxxopts::value<int>())
    ("dir", "certs: output directory (the CA is created there once and reused)",
     cxxopts::value<std::string>())
    ("san", "certs: extra subjectAltName for every certificate, e.g. IP:10.0.0.5 or DNS:gpu1 "
            "(repeatable)", cxxopts::value<std::vector<std::string>>())
    ("command", "status | certs", cxxopts::value<std::string>())
    ("names", "certs: certificate names", cxxopts::value<std::vector<std::string>>())
    ("h,help", "print this help");
  // clang-format on
  parser.parse_positional({"command", "names"});
  try {
    auto res = hvactor::tool::parse_options(parser, argv[0], {argv + 1, argv + argc});
    if (res.count("help")) {
      std::cout << parser.help() << std::endl;
      return 0;
    }
    std::string command = res.count("command") ? res["command"].as<std::string>() : "";
    if (command == "certs")
      return make_certs(res);
    if (!command.empty() && command != "status")
      throw std::invalid_argument("unknown command '" + command + "' (status or certs)");
    if (res.count("names"))
      throw std::invalid_argument("unexpected argument '"
                                  + res["names"].as<std::vector<std::string>>().front() + "'");
    node_options o;
    o.head = res.count("head") > 0;
    if (res.count("address"))
      o.address = res["address"].as<std::string>();
    if (res.count("port")) {
      auto port = res["port"].as<int>();
      if (port < 0 || port > 65535)
        throw std::invalid_argument(fmt::format("--port must be in 0..65535: Got {}.", port));
      o.port = static_cast<uint16_t>(port);
    } else if (o.head) {
      o.port = 6380;
    }
    if (res.count("bind"))
      o.bind = res["bind"].as<std::string>();
    if (res.count("node-ip"))
      o.node_ip = res["node-ip"].as<std::string>();
    if (res.count("node-id")) {
      o.node_id = res["node-id"].as<std::string>();
      hvactor::validate_node_id(o.node_id);
    }
    o.num_cpus = res.count("num-cpus") ? res["num-cpus"].as<int>()
                                       : static_cast<int>(std::thread::hardware_concurrency());
    if (o.num_cpus < 0)
      throw std::invalid_argument(fmt::format("--num-cpus must be >= 0: Got {}.", o.num_cpus));
    if (res.count("gpu-ids")) {
      o.gpu_ids = hvactor::parse_gpu_ids(res["gpu-ids"].as<std::string>());
    } else if (res.count("num-gpus")) {
      auto n = res["num-gpus"].as<int>();
      if (n < 0)
        throw std::invalid_argument(fmt::format("--num-gpus must be >= 0: Got {}.", n));
      for (int i = 0; i < n; ++i)
        o.gpu_ids.push_back(i);
    } else if (command.empty()) {
      // Offer what the CUDA runtime sees (none without CUDA or a driver).
      auto probe = hvactor::collectives::probe_devices();
      for (int i = 0; i < probe.count; ++i)
        o.gpu_ids.push_back(i);
      if (probe.count == 0)
        fmt::print(stderr, "hvactor-node: offering no GPU: {}\n", probe.reason);
    }
    if (res.count("work-dir"))
      o.work_dir = res["work-dir"].as<std::string>();
    if (res.count("tls-cert"))
      o.tls.certificate = res["tls-cert"].as<std::string>();
    if (res.count("tls-key"))
      o.tls.key = res["tls-key"].as<std::string>();
    if (res.count("tls-ca"))
      o.tls.cafile = res["tls-ca"].as<std::string>();
    o.insecure = res.count("insecure") > 0;
    if (res.count("connect-timeout"))
      o.connect_timeout_s = std::max(1, res["connect-timeout"].as<int>());
    o.exit_on_head_loss = res.count("exit-on-head-loss") > 0;
    std::string tls_dir = res.count("tls-dir") ? res["tls-dir"].as<std::string>() : "";
    bool in_step = std::getenv("SLURM_STEP_ID") && std::getenv("SLURMD_NODENAME");
    if (command.empty() && (res.count("slurm") || in_step || !tls_dir.empty())) {
      hvactor::node_tool::slurm_explicit given{res.count("node-id") > 0,
                                               res.count("num-cpus") > 0,
                                               res.count("gpu-ids") + res.count("num-gpus") > 0,
                                               res.count("work-dir") > 0,
                                               res.count("tls-cert") + res.count("tls-key") > 0};
      if (res.count("slurm") || in_step)
        hvactor::node_tool::apply_slurm_defaults(o, given, tls_dir);
      else
        hvactor::node_tool::apply_slurm_defaults(o, {true, true, true, true, given.tls}, tls_dir);
    }
    if (command == "status") {
      if (o.address.empty())
        throw std::invalid_argument("status needs --address HEAD:PORT");
      return hvactor::node_tool::status(o);
    }
    if (o.head == !o.address.empty())
      throw std::invalid_argument(
        o.head ? "give either --head or --address HEAD:PORT, not both"
               : "give --head to start a cluster or --address HEAD:PORT to join one "
                 "(see --help)");
    return hvactor::node_tool::serve(std::move(o));
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
