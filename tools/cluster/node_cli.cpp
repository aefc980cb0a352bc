// hvactor-node's options: declared and read here, beside node_command, which
// spells the same flags for the programs that start hvactor-node.

#include "tools/cluster/node_options.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "tools/cluster/slurm_step.hpp"
#include "hvactor/settings.hpp"
#include "collectives/backends/devices.hpp"

namespace hvactor::cluster {

void declare_node_options(cxxopts::Options& parser) {
  parser.positional_help("[status|wait|certs NAME...]");
  // clang-format off
  parser.add_options()
    ("head", "start the head: the node registry plus a node for this machine")
    ("address", "HEAD:PORT of the head to join (or to query with status and wait)",
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
    // Its value is a word of its own, as Ray's `ray start --include-dashboard
    // false`, or after '='; without a value of its own, cxxopts would take
    // "false" for the command.
    ("include-dashboard", "head: serve the dashboard, its JSON API and /metrics (default "
                          "true)", cxxopts::value<bool>()->no_implicit_value())
    ("dashboard-host", "head: the dashboard's address (default 127.0.0.1; another address "
                       "requires TLS and a client certificate or the token)",
     cxxopts::value<std::string>())
    ("dashboard-port", "head: the dashboard's port (default 8265; 0 picks one)",
     cxxopts::value<int>())
    ("dashboard-token", "head: the token the dashboard requires off loopback (default: a "
                        "random one, printed at start)", cxxopts::value<std::string>())
    ("connect-timeout", "seconds to wait for the head when joining (default 10)",
     cxxopts::value<int>())
    ("dir", "certs: output directory (the CA is created there once and reused)",
     cxxopts::value<std::string>())
    ("san", "certs: extra subjectAltName for every certificate, e.g. IP:10.0.0.5 or DNS:gpu1 "
            "(repeatable)", cxxopts::value<std::vector<std::string>>())
    ("nodes", "wait: node ids that must have joined (comma-separated; default: the head "
              "answering is enough)", cxxopts::value<std::vector<std::string>>())
    ("timeout", "wait: seconds to wait (default 30)", cxxopts::value<int>())
    ("command", "status | wait | certs", cxxopts::value<std::string>())
    ("names", "certs: certificate names", cxxopts::value<std::vector<std::string>>())
    ("h,help", "print this help");
  // clang-format on
  parser.parse_positional({"command", "names"});
}

namespace {

template <class T>
void take(const cxxopts::ParseResult& res, const char* name, T& out) {
  if (res.count(name))
    out = res[name].as<T>();
}

// A count given as --NAME, refused below 0.
int non_negative(const cxxopts::ParseResult& res, const char* name) {
  auto n = res[name].as<int>();
  if (n < 0)
    throw std::invalid_argument(fmt::format("--{} must be >= 0: Got {}.", name, n));
  return n;
}

void read_certs(const cxxopts::ParseResult& res, node_options& o) {
  if (!res.count("dir"))
    throw std::invalid_argument("certs needs --dir DIR (where ca.pem and the certificates go)");
  take(res, "dir", o.certs_dir);
  take(res, "names", o.names);
  take(res, "san", o.sans);
  if (o.names.empty())
    throw std::invalid_argument(
      "certs needs at least one name: hvactor-node certs --dir DIR head node-a driver");
}

void read_resources(const cxxopts::ParseResult& res, node_options& o) {
  o.num_cpus = res.count("num-cpus") ? res["num-cpus"].as<int>()
                                     : static_cast<int>(std::thread::hardware_concurrency());
  if (o.num_cpus < 0)
    throw std::invalid_argument(fmt::format("--num-cpus must be >= 0: Got {}.", o.num_cpus));
  if (res.count("gpu-ids")) {
    o.gpu_ids = parse_gpu_ids(res["gpu-ids"].as<std::string>());
  } else if (res.count("num-gpus")) {
    for (int i = 0, n = non_negative(res, "num-gpus"); i < n; ++i)
      o.gpu_ids.push_back(i);
  } else if (o.command.empty()) {
    // Offer what the CUDA runtime sees (none without CUDA or a driver).
    auto probe = collectives::probe_devices();
    for (int i = 0; i < probe.count; ++i)
      o.gpu_ids.push_back(i);
    if (probe.count == 0)
      fmt::print(stderr, "hvactor-node: offering no GPU: {}\n", probe.reason);
  }
}

void read_identity(const cxxopts::ParseResult& res, node_options& o) {
  take(res, "work-dir", o.work_dir);
  take(res, "tls-cert", o.tls.certificate);
  take(res, "tls-key", o.tls.key);
  take(res, "tls-ca", o.tls.cafile);
  o.insecure = res.count("insecure") > 0;
  if (res.count("connect-timeout"))
    o.connect_timeout_s = std::max(1, res["connect-timeout"].as<int>());
  o.exit_on_head_loss = res.count("exit-on-head-loss") > 0;
  std::string tls_dir;
  take(res, "tls-dir", tls_dir);
  if (!o.command.empty() || (!res.count("slurm") && !in_slurm_step() && tls_dir.empty()))
    return;
  slurm_explicit given{res.count("node-id") > 0, res.count("num-cpus") > 0,
                       res.count("gpu-ids") + res.count("num-gpus") > 0,
                       res.count("work-dir") > 0,
                       res.count("tls-cert") + res.count("tls-key") > 0};
  if (res.count("slurm") || in_slurm_step())
    apply_slurm_defaults(o, given, tls_dir);
  else
    apply_slurm_defaults(o, {true, true, true, true, given.tls}, tls_dir);
}

} // namespace

node_options read_node_options(const cxxopts::ParseResult& res) {
  node_options o;
  take(res, "command", o.command);
  if (o.command == "certs") {
    read_certs(res, o);
    return o;
  }
  if (!o.command.empty() && o.command != "status" && o.command != "wait")
    throw std::invalid_argument("unknown command '" + o.command + "' (status, wait or certs)");
  if (res.count("names"))
    throw std::invalid_argument("unexpected argument '"
                                + res["names"].as<std::vector<std::string>>().front() + "'");
  o.head = res.count("head") > 0;
  take(res, "address", o.address);
  if (res.count("port")) {
    auto port = res["port"].as<int>();
    if (port < 0 || port > 65535)
      throw std::invalid_argument(fmt::format("--port must be in 0..65535: Got {}.", port));
    o.port = static_cast<uint16_t>(port);
  } else if (o.head) {
    o.port = 6380;
  }
  take(res, "bind", o.bind);
  take(res, "node-ip", o.node_ip);
  if (res.count("node-id")) {
    o.node_id = res["node-id"].as<std::string>();
    validate_node_id(o.node_id);
  }
  take(res, "include-dashboard", o.include_dashboard);
  take(res, "dashboard-host", o.dashboard_host);
  take(res, "dashboard-token", o.dashboard_token);
  if (res.count("dashboard-port")) {
    o.dashboard_port = res["dashboard-port"].as<int>();
    o.dashboard_port_given = true;
    if (o.dashboard_port < 0 || o.dashboard_port > 65535)
      throw std::invalid_argument(
        fmt::format("--dashboard-port must be in 0..65535: Got {}.", o.dashboard_port));
  }
  take(res, "nodes", o.wait_nodes);
  if (res.count("timeout"))
    o.wait_timeout_s = std::max(1, res["timeout"].as<int>());
  read_resources(res, o);
  read_identity(res, o);
  if (!o.command.empty() && o.address.empty())
    throw std::invalid_argument(o.command + " needs --address HEAD:PORT");
  if (o.command.empty() && o.head == !o.address.empty())
    throw std::invalid_argument(o.head ? "give either --head or --address HEAD:PORT, not both"
                                       : "give --head to start a cluster or --address HEAD:PORT "
                                         "to join one (see --help)");
  return o;
}

} // namespace hvactor::cluster
