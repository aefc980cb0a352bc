// hvactor-up's commands: up (setup, certificates, start, readiness), down,
// status. The hvactor-node command line, the TLS layout and readiness are
// the cluster module's (tools/cluster).

#include "commands.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "tools/cluster/node_options.hpp"
#include "tools/cluster/readiness.hpp"
#include "tools/cluster/tls_layout.hpp"
#include "remote.hpp"

namespace hvactor::up_tool {

using clock_type = std::chrono::steady_clock;

namespace {

std::string& message_prefix() {
  static std::string prefix = "hvactor-up";
  return prefix;
}

void say(const std::string& line) {
  fmt::print("{}: {}\n", message_prefix(), line);
  std::fflush(stdout);
}


/// Where each machine keeps its certificate, log and pid file (relative to
/// the ssh user's home).
std::string remote_dir(const cluster_file& c) {
  return ".hvactor/nodes/" + c.name;
}


// The shell command that starts m's hvactor-node in the background (it
// outlives the ssh session: setsid, no terminal, output to its log).
std::string start_command(const cluster_file& c, const machine& m) {
  cluster::node_command n;
  n.binary = c.node_binary;
  n.head = m.head;
  if (m.head)
    n.port = c.port;
  else
    n.address = head_address(c);
  n.bind = m.ip;
  n.node_id = m.node_id;
  n.work_dir = "work-" + m.node_id;
  n.connect_timeout_s = c.timeout_s;
  n.num_cpus = m.num_cpus;
  n.num_gpus = m.num_gpus;
  // The machine's copy of the TLS directory is its working directory.
  if (c.tls)
    n.tls = cluster::tls_layout{""}.identity(m.node_id);
  n.insecure = !c.tls;
  auto args = n.argv();
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
  auto mk = r.run(m, fmt::format("mkdir -p {0} && chmod 700 {0}", remote_dir(c)));
  auto cp = mk.ok ? r.copy(m, cluster::tls_layout{local_dir(c)}.handed_out(m.node_id),
                           remote_dir(c))
                  : mk;
  if (!cp.ok)
    say(fmt::format("{} ({}:{}): cannot reach it over ssh: {}", m.node_id, m.ip, m.ssh_port,
                    cp.err));
  return cp.ok;
}

// Starts m's hvactor-node (certificates and setup commands first); false,
// having said why, when it did not start.
bool start_node(const remote& r, const cluster_file& c, const machine& m) {
  if (!hand_out_certificates(r, c, m) || !setup(r, c, m))
    return false;
  if (auto res = r.run(m, start_command(c, m)); !res.ok) {
    say(m.head ? fmt::format("head ({}): hvactor-node did not start: {}", m.ip, res.err)
               : fmt::format("{} ({}): hvactor-node did not start: {}", m.node_id, m.ip, res.err));
    return false;
  }
  return true;
}

// How to use the cluster: hvactor-run's options and an executor program's
// environment.
void print_usage(const cluster_file& c) {
  auto tls = driver_tls(c);
  auto args = cluster::tls_args(tls);
  if (!c.tls)
    args = {"--insecure"};
  say("use it with:");
  fmt::print("  hvactor-run --address {} {} -np N -- ./train\n", head_address(c),
             fmt::join(args, " "));
  std::vector<std::string> vars{"HVACTOR_ADDRESS=" + head_address(c)};
  for (auto& [name, value] : tls::to_env(tls))
    vars.push_back(name + "=" + value);
  fmt::print("  export {}   # executor programs\n", fmt::join(vars, " "));
}

// A machine's address in a certificate: IP:... for an address, DNS:... for
// a host name.
std::string san_of(const std::string& host) {
  in6_addr buf{};
  bool ip = ::inet_pton(AF_INET, host.c_str(), &buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), &buf) == 1;
  return (ip ? "IP:" : "DNS:") + host;
}

} // namespace

void set_message_prefix(std::string prefix) {
  message_prefix() = std::move(prefix);
}

std::string local_dir(const cluster_file& c) {
  const char* home = std::getenv("HOME");
  return fmt::format("{}/.hvactor/up/{}", home ? home : "/tmp", c.name);
}

std::string head_address(const cluster_file& c) {
  return fmt::format("{}:{}", c.head.ip, c.port);
}

tls::config driver_tls(const cluster_file& c) {
  if (!c.tls)
    return {};
  return cluster::tls_layout{local_dir(c)}.identity("driver");
}

int up(const cluster_file& c, bool print_how_to_use) {
  auto t0 = clock_type::now();
  auto dir = local_dir(c);
  std::filesystem::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  if (c.tls) {
    std::vector<std::string> names{"driver"};
    std::vector<std::string> sans;
    for (auto& m : c.machines()) {
      names.push_back(m.node_id);
      sans.push_back(san_of(m.ip));
    }
    cluster::tls_layout{dir}.make(names, sans);
  }
  remote r{c, dir + "/known_hosts"};
  std::vector<std::string> workers;
  for (auto& w : c.workers)
    workers.push_back(fmt::format("{}@{}", w.node_id, w.ip));
  say(fmt::format("cluster '{}': head {}@{}, {} worker{}{}{}", c.name, c.head.node_id, c.head.ip,
                  workers.size(), workers.size() == 1 ? "" : "s", workers.empty() ? "" : ": ",
                  fmt::join(workers, ", ")));
  // The head first: the workers join it.
  if (!start_node(r, c, c.head))
    return 1;
  say(fmt::format("head '{}' started on {}", c.head.node_id, head_address(c)));
  std::vector<std::string> failed;
  std::set<std::string> started{c.head.node_id};
  for (auto& m : c.workers) {
    if (start_node(r, c, m))
      started.insert(m.node_id);
    else
      failed.push_back(m.node_id);
  }
  // Ready means joined, not started.
  auto ready = cluster::wait_for_nodes(head_address(c), driver_tls(c),
                                       {started.begin(), started.end()},
                                       std::chrono::seconds(c.timeout_s));
  if (!ready.head_answered)
    say(fmt::format("the head at {} does not answer: {}", head_address(c), ready.head_error));
  for (auto& id : ready.missing) {
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
  if (print_how_to_use)
    print_usage(c);
  return failed.empty() ? 0 : 1;
}

int down(const cluster_file& c, bool remove_files) {
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
    if (remove_files) {
      // The files of this node only: several nodes may share a machine
      // (and a home) while the others still stop.
      auto q = [&](const std::string& f) { return shell_quote(f); };
      r.run(m, fmt::format("cd {} 2>/dev/null && rm -rf -- {} {} {} {} ca.pem && cd && rmdir -p {} "
                           "2>/dev/null; true",
                           q(remote_dir(c)), q("work-" + m.node_id), q("node-" + m.node_id + ".log"),
                           q(m.node_id + ".pem"), q(m.node_id + ".key"), q(remote_dir(c))));
    }
  }
  if (remove_files) {
    std::error_code ec;
    std::filesystem::remove_all(local_dir(c), ec);
  }
  return rc;
}

std::chrono::milliseconds stop_bound(const cluster_file& c) {
  return 2 * std::chrono::seconds{c.timeout_s};
}

int status(const cluster_file& c) {
  auto node = cluster::node_binary();
  auto argv = cluster::status_argv(node, head_address(c), driver_tls(c));
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(a.data());
  args.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(node.c_str(), args.data());
  fmt::print(stderr, "hvactor-up: cannot run {}\n", node);
  return 1;
}

} // namespace hvactor::up_tool
