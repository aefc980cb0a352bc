// hvactor-up / hvactor-down: Ray's cluster launcher (`ray up`, `ray down`)
// for machines you already have. Over ssh: runs the setup commands, makes
// and hands out the cluster's TLS certificates, starts the head and an
// hvactor-node on every worker, waits until each joined, prints how to use
// it; hvactor-down stops them; hvactor-up --status shows the cluster.
//
//   hvactor-up CLUSTER.yaml          hvactor-up --status CLUSTER.yaml
//   hvactor-down CLUSTER.yaml        (the same as hvactor-up --down)

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include "cluster_file.hpp"
#include "hvactor/errors.hpp"
#include "internal/cert_authority.hpp"
#include "internal/process.hpp"
#include "options.hpp"
#include "registry_probe.hpp"
#include "remote.hpp"

namespace {

using namespace hvactor::up_tool;
using clock_type = std::chrono::steady_clock;

void say(const std::string& line) {
  fmt::print("hvactor-up: {}\n", line);
  std::fflush(stdout);
}

/// Where this machine keeps the cluster's CA and the driver's identity.
std::string local_dir(const cluster_file& c) {
  const char* home = std::getenv("HOME");
  return fmt::format("{}/.hvactor/up/{}", home ? home : "/tmp", c.name);
}

/// Where each machine keeps its certificate, log and pid file (relative to
/// the ssh user's home).
std::string remote_dir(const cluster_file& c) {
  return ".hvactor/nodes/" + c.name;
}

std::string head_address(const cluster_file& c) {
  return fmt::format("{}:{}", c.head.ip, c.port);
}

hvactor::tls::config driver_tls(const cluster_file& c) {
  if (!c.tls)
    return {};
  auto d = local_dir(c);
  return {d + "/driver.pem", d + "/driver.key", d + "/ca.pem", {}};
}

// The shell command that starts m's hvactor-node in the background (it
// outlives the ssh session: setsid, no terminal, output to its log).
std::string start_command(const cluster_file& c, const machine& m) {
  std::vector<std::string> args{c.node_binary};
  if (m.head)
    args.insert(args.end(), {"--head", "--port", std::to_string(c.port)});
  else
    args.insert(args.end(), {"--address", head_address(c)});
  args.insert(args.end(), {"--bind", m.ip, "--node-id", m.node_id, "--work-dir",
                           "work-" + m.node_id, "--connect-timeout",
                           std::to_string(c.timeout_s)});
  if (m.num_cpus)
    args.insert(args.end(), {"--num-cpus", std::to_string(*m.num_cpus)});
  if (m.num_gpus)
    args.insert(args.end(), {"--num-gpus", std::to_string(*m.num_gpus)});
  if (c.tls)
    args.insert(args.end(), {"--tls-cert", m.node_id + ".pem", "--tls-key", m.node_id + ".key",
                             "--tls-ca", "ca.pem"});
  else
    args.push_back("--insecure");
  std::string line;
  for (auto& a : args)
    line += (line.empty() ? "" : " ") + shell_quote(a);
  auto pid = shell_quote("node-" + m.node_id + ".pid");
  auto log = shell_quote("node-" + m.node_id + ".log");
  // A node already running under this id is stopped first: up is
  // idempotent.
  return fmt::format(
    "mkdir -p {0} && chmod 700 {0} && cd {0} && "
    "if [ -f {1} ] && kill -0 \"$(cat {1})\" 2>/dev/null; then kill -TERM \"$(cat {1})\"; "
    "sleep 1; fi; "
    "setsid {2} > {3} 2>&1 < /dev/null & echo $! > {1}; sleep 0.5; "
    "kill -0 \"$(cat {1})\" 2>/dev/null || {{ tail -5 {3} >&2; exit 1; }}",
    remote_dir(c), pid, line, log);
}

std::string stop_command(const cluster_file& c, const machine& m) {
  auto pid = shell_quote("node-" + m.node_id + ".pid");
  return fmt::format(
    "cd {0} 2>/dev/null || {{ echo 'not running'; exit 0; }}; "
    "[ -f {1} ] || {{ echo 'not running'; exit 0; }}; p=$(cat {1}); "
    "if kill -0 \"$p\" 2>/dev/null; then kill -TERM \"$p\"; "
    "for i in $(seq 100); do kill -0 \"$p\" 2>/dev/null || break; sleep 0.1; done; "
    "kill -0 \"$p\" 2>/dev/null && kill -KILL \"$p\"; echo stopped; else echo 'not running'; fi; "
    "rm -f {1}",
    remote_dir(c), pid);
}

bool setup(const remote& r, const cluster_file& c, const machine& m) {
  auto cmds = c.setup_commands;
  auto& extra = m.head ? c.head_setup_commands : c.worker_setup_commands;
  cmds.insert(cmds.end(), extra.begin(), extra.end());
  for (auto& cmd : cmds) {
    auto res = r.run(m, cmd);
    if (!res.ok) {
      say(fmt::format("{} ({}): setup command '{}' failed: {}", m.node_id, m.ip, cmd, res.err));
      return false;
    }
  }
  return true;
}

bool hand_out_certificates(const remote& r, const cluster_file& c, const machine& m) {
  if (!c.tls)
    return true;
  auto dir = local_dir(c);
  auto mk = r.run(m, fmt::format("mkdir -p {0} && chmod 700 {0}", remote_dir(c)));
  auto cp = mk.ok ? r.copy(m, {dir + "/ca.pem", dir + "/" + m.node_id + ".pem",
                               dir + "/" + m.node_id + ".key"},
                           remote_dir(c))
                  : mk;
  if (!cp.ok)
    say(fmt::format("{} ({}:{}): cannot reach it over ssh: {}", m.node_id, m.ip, m.ssh_port,
                    cp.err));
  return cp.ok;
}

int up(const cluster_file& c) {
  auto t0 = clock_type::now();
  auto dir = local_dir(c);
  std::filesystem::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  if (c.tls) {
    std::vector<std::string> names{"driver"};
    std::vector<std::string> sans;
    for (auto& m : c.machines()) {
      names.push_back(m.node_id);
      sans.push_back("IP:" + m.ip);
    }
    hvactor::tls::make_certificates(dir, names, sans);
  }
  remote r{c, dir + "/known_hosts"};
  std::vector<std::string> workers;
  for (auto& w : c.workers)
    workers.push_back(fmt::format("{}@{}", w.node_id, w.ip));
  say(fmt::format("cluster '{}': head {}@{}, {} worker{}{}{}", c.name, c.head.node_id, c.head.ip,
                  workers.size(), workers.size() == 1 ? "" : "s", workers.empty() ? "" : ": ",
                  fmt::join(workers, ", ")));
  // The head first: the workers join it.
  if (!hand_out_certificates(r, c, c.head) || !setup(r, c, c.head))
    return 1;
  if (auto res = r.run(c.head, start_command(c, c.head)); !res.ok) {
    say(fmt::format("head ({}): hvactor-node did not start: {}", c.head.ip, res.err));
    return 1;
  }
  say(fmt::format("head '{}' started on {}", c.head.node_id, head_address(c)));
  std::vector<std::string> failed;
  std::set<std::string> expected{c.head.node_id};
  for (auto& m : c.workers) {
    if (!hand_out_certificates(r, c, m) || !setup(r, c, m)) {
      failed.push_back(m.node_id);
      continue;
    }
    if (auto res = r.run(m, start_command(c, m)); !res.ok) {
      say(fmt::format("{} ({}): hvactor-node did not start: {}", m.node_id, m.ip, res.err));
      failed.push_back(m.node_id);
      continue;
    }
    expected.insert(m.node_id);
  }
  // Ready means joined, not started.
  std::set<std::string> joined;
  auto deadline = clock_type::now() + std::chrono::seconds(c.timeout_s);
  std::unique_ptr<hvactor::tool::registry_probe> probe;
  while (clock_type::now() < deadline) {
    try {
      if (!probe)
        probe = std::make_unique<hvactor::tool::registry_probe>(head_address(c), driver_tls(c),
                                                                std::chrono::seconds(5));
      auto ids = probe->node_ids();
      joined = {ids.begin(), ids.end()};
    } catch (const std::exception&) {
      probe.reset(); // the head is not listening yet
    }
    if (std::includes(joined.begin(), joined.end(), expected.begin(), expected.end()))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto& id : expected)
    if (!joined.count(id)) {
      say(fmt::format("{} started but never joined the head within {} s (see "
                      "~/{}/node-{}.log on its machine)",
                      id, c.timeout_s, remote_dir(c), id));
      failed.push_back(id);
    }
  auto secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  size_t up_count = c.machines().size() - failed.size();
  if (failed.empty())
    say(fmt::format("all {} nodes joined ({:.1f} s).", up_count, secs));
  else
    say(fmt::format("{} of {} nodes up ({:.1f} s); NOT up: {}. The others keep running; "
                    "hvactor-down stops them.",
                    up_count, c.machines().size(), secs, fmt::join(failed, ", ")));
  auto tls = c.tls ? fmt::format(" --tls-cert {0}/driver.pem --tls-key {0}/driver.key --tls-ca "
                                 "{0}/ca.pem",
                                 dir)
                   : std::string{" --insecure"};
  say("use it with:");
  fmt::print("  hvactor-run --address {}{} -np N -- ./train\n", head_address(c), tls);
  if (c.tls)
    fmt::print("  export HVACTOR_ADDRESS={0} HVACTOR_TLS_CERT={1}/driver.pem "
               "HVACTOR_TLS_KEY={1}/driver.key HVACTOR_TLS_CA={1}/ca.pem   # executor programs\n",
               head_address(c), dir);
  else
    fmt::print("  export HVACTOR_ADDRESS={}   # executor programs\n", head_address(c));
  return failed.empty() ? 0 : 1;
}

int down(const cluster_file& c) {
  remote r{c, local_dir(c) + "/known_hosts"};
  int rc = 0;
  auto machines = c.machines();
  // Workers first, the head last.
  std::rotate(machines.begin(), machines.begin() + 1, machines.end());
  for (auto& m : machines) {
    auto res = r.run(m, stop_command(c, m));
    if (!res.ok) {
      say(fmt::format("{} ({}:{}): unreachable: {}", m.node_id, m.ip, m.ssh_port, res.err));
      rc = 1;
      continue;
    }
    auto what = res.out.empty() ? std::string{"?"} : res.out.substr(0, res.out.find('\n'));
    say(fmt::format("{} ({}): {}", m.node_id, m.ip, what));
  }
  return rc;
}

int status(const cluster_file& c) {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  std::string node = self + "/hvactor-node";
  if (::access(node.c_str(), X_OK) != 0)
    node = hvactor::find_program("hvactor-node");
  std::vector<std::string> argv{node, "status", "--address", head_address(c)};
  auto tls = driver_tls(c);
  if (tls.enabled())
    argv.insert(argv.end(), {"--tls-cert", tls.certificate, "--tls-key", tls.key, "--tls-ca",
                             tls.cafile});
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(a.data());
  args.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(node.c_str(), args.data());
  fmt::print(stderr, "hvactor-up: cannot run {}\n", node);
  return 1;
}

} // namespace

int main(int argc, char** argv) {
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
