#pragma once

// Helpers for tests against a real cluster: hvactor-node processes on
// loopback (distinct node ids on one machine), drivers, and the output of
// `hvactor-node status`. Every process a helper starts is SIGKILLed and
// reaped by its destructor; every wait is bounded.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "test_support.hpp"

namespace hvactor::test {
/// Files of one TLS identity made by `hvactor-node certs`.
struct tls_identity {
  std::string cert;
  std::string key;
  std::string ca;

  /// `--tls-cert C --tls-key K --tls-ca CA`.
  std::vector<std::string> args() const {
    return {"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca};
  }
};

/// Makes a CA and certificates for `names` in `dir` with `hvactor-node certs`.
inline std::map<std::string, tls_identity> make_certs(const std::filesystem::path& dir,
                                                      const std::vector<std::string>& names) {
  std::vector<std::string> argv{HVACTOR_NODE, "certs", "--dir", dir.string()};
  argv.insert(argv.end(), names.begin(), names.end());
  std::filesystem::create_directories(dir);
  auto r = run_command(argv, dir / "certs-log", std::chrono::seconds(30));
  if (!r.status.success())
    throw std::runtime_error("hvactor-node certs failed: " + r.err);
  std::map<std::string, tls_identity> out;
  for (auto& name : names)
    out[name] = {(dir / (name + ".pem")).string(), (dir / (name + ".key")).string(),
                 (dir / "ca.pem").string()};
  return out;
}

/// One line of `hvactor-node status`.
struct node_status {
  std::string id;
  std::string address;
  int cpu_free = -1;
  int cpu_total = -1;
  int gpu_free = -1;
  int gpu_total = -1;
  std::vector<std::string> jobs;
};

/// `hvactor-node status`, parsed.
struct cluster_status {
  command_result result;
  std::vector<node_status> nodes;
  std::string summary; ///< the last line: "<n> nodes; CPU a/b free; ..."

  bool ok() const {
    return result.status.success();
  }
  const node_status* find(const std::string& id) const {
    for (auto& n : nodes)
      if (n.id == id)
        return &n;
    return nullptr;
  }
  /// True when the status worked and every node is idle: all CPUs free, no job.
  bool all_free() const {
    if (!ok() || nodes.empty())
      return false;
    for (auto& n : nodes)
      if (n.cpu_free != n.cpu_total || !n.jobs.empty())
        return false;
    return true;
  }
  int free_cpus() const {
    int sum = 0;
    for (auto& n : nodes)
      sum += n.cpu_free;
    return sum;
  }
};

inline std::pair<int, int> parse_fraction(const std::string& text) {
  auto slash = text.find('/');
  if (slash == std::string::npos)
    throw std::runtime_error("not a free/total pair: '" + text + "'");
  return {std::stoi(text.substr(0, slash)), std::stoi(text.substr(slash + 1))};
}

inline cluster_status parse_status(command_result r) {
  cluster_status st;
  std::istringstream in{r.out};
  std::string line;
  bool header = false;
  while (std::getline(in, line)) {
    if (line.empty())
      continue;
    if (!header) {
      header = line.rfind("NODE", 0) == 0;
      continue;
    }
    if (line.find(" nodes; CPU ") != std::string::npos) {
      st.summary = line;
      continue;
    }
    std::istringstream fields{line};
    node_status n;
    std::string cpu, gpu, jobs;
    if (!(fields >> n.id >> n.address >> cpu >> gpu >> jobs))
      throw std::runtime_error("unexpected status line: '" + line + "'");
    std::tie(n.cpu_free, n.cpu_total) = parse_fraction(cpu);
    std::tie(n.gpu_free, n.gpu_total) = parse_fraction(gpu);
    if (jobs != "-") {
      std::istringstream list{jobs};
      for (std::string job; std::getline(list, job, ',');)
        n.jobs.push_back(job);
    }
    st.nodes.push_back(std::move(n));
  }
  st.result = std::move(r);
  return st;
}

/// A TCP port on 127.0.0.1 that nothing listens on (free a moment ago).
inline int unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0)
      ::close(fd);
    throw std::runtime_error("cannot find an unused port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// Key=value tokens of a driver's output line ("rank=0 host=a ...").
inline std::map<std::string, std::string> parse_fields(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream in{line};
  for (std::string tok; in >> tok;) {
    auto eq = tok.find('=');
    if (eq != std::string::npos)
      out[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return out;
}

/// Whitespace-separated words of a line.
inline std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in{line};
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

/// Pids of the processes whose executable lies under `dir`: the workers of
/// a cluster whose work dirs are there (they run from the binary cache).
inline std::vector<int> processes_running_from(const std::filesystem::path& dir) {
  std::vector<int> out;
  auto prefix = dir.string() + "/";
  std::error_code ec;
  for (auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    auto name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::error_code link_ec;
    auto exe = std::filesystem::read_symlink(entry.path() / "exe", link_ec);
    if (!link_ec && exe.string().rfind(prefix, 0) == 0 && pid_alive(std::stoi(name)))
      out.push_back(std::stoi(name));
  }
  return out;
}

/// Another local user (uid 65534) can be acted as: root and setpriv.
inline bool can_switch_user() {
  return ::geteuid() == 0 && std::filesystem::exists("/usr/bin/setpriv");
}

/// `argv` run as uid/gid 65534 with no supplementary groups.
inline std::vector<std::string> as_other_user(std::vector<std::string> argv) {
  std::vector<std::string> out{"/usr/bin/setpriv", "--reuid=65534",
                               "--regid=65534", "--clear-groups", "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

/// Listening TCP ports of process `pid` (its socket inodes in /proc/net/tcp).
inline std::set<int> listening_ports(int pid) {
  std::set<std::string> inodes;
  for (auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0)
      inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  for (auto table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in{table};
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream fields{line};
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      fields >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode))
        ports.insert(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

/// Shape of a test cluster: a head plus nodes, all on 127.0.0.1.
struct cluster_options {
  /// Node ids; the first is the head.
  std::vector<std::string> node_ids{"head", "node-a", "node-b"};
  int cpus_per_node = 2;
  /// Fake GPU ids 0..N-1 each node offers (--num-gpus).
  int gpus_per_node = 0;
  /// Per-node TLS identity (by node id); empty: no TLS.
  std::map<std::string, tls_identity> tls;
};

/// A head and its nodes as real `hvactor-node` processes, each with its own
/// work dir under a temp dir. Nodes are SIGKILLed and reaped on destruction.
class cluster {
public:
  explicit cluster(cluster_options opts = {}) : opts_(std::move(opts)) {
    start_head();
    for (size_t i = 1; i < opts_.node_ids.size(); ++i)
      start_node(opts_.node_ids[i]);
  }

  ~cluster() {
    nodes_.clear();
  }

  cluster(const cluster&) = delete;
  cluster& operator=(const cluster&) = delete;

  /// "127.0.0.1:PORT" of the head.
  const std::string& address() const {
    return address_;
  }

  const std::filesystem::path& dir() const {
    return dir_.path();
  }

  const cluster_options& options() const {
    return opts_;
  }

  std::filesystem::path work_dir(const std::string& id) const {
    return dir_.path() / ("work-" + id);
  }

  /// The running hvactor-node process of node `id`.
  process& node(const std::string& id) {
    auto i = nodes_.find(id);
    if (i == nodes_.end() || !i->second)
      throw std::runtime_error("no node process '" + id + "'");
    return *i->second;
  }

  /// Starts (or restarts) node `id` joining the head, and waits until it
  /// printed that it joined. Throws with its stderr if it did not within 15 s.
  void start_node(const std::string& id) {
    std::vector<std::string> argv{HVACTOR_NODE, "--address", address_};
    add_common_args(argv, id);
    auto p = std::make_unique<process>(argv, dir_.path() / ("node-" + id + "-" + next_log()));
    if (!p->read_line_with("hvactor-node: node '" + id + "' joined ", std::chrono::seconds(15)))
      throw std::runtime_error("node '" + id + "' did not join within 15 s; stderr:\n"
                               + p->stderr_text());
    nodes_[id] = std::move(p);
  }

  /// SIGKILLs node `id` and reaps it.
  void kill_node(const std::string& id) {
    node(id).kill();
  }

  /// SIGKILLs the head and starts a new one on the same port.
  void restart_head() {
    kill_node(opts_.node_ids.at(0));
    start_head(address_.substr(address_.rfind(':') + 1));
  }

  /// Forgets node `id`'s process after a test reaped it some other way.
  void drop_node(const std::string& id) {
    nodes_.erase(id);
  }

  /// Runs `hvactor-node status` against the head with `tls_args`; by
  /// default (nullopt) with the head's certificate on a TLS cluster.
  cluster_status status(std::optional<std::vector<std::string>> tls_args = std::nullopt) {
    std::vector<std::string> argv{HVACTOR_NODE, "status", "--address", address_};
    if (!tls_args)
      tls_args = opts_.tls.empty() ? std::vector<std::string>{}
                                   : opts_.tls.at(opts_.node_ids.front()).args();
    argv.insert(argv.end(), tls_args->begin(), tls_args->end());
    return parse_status(
      run_command(argv, dir_.path() / ("status-" + next_log()), std::chrono::seconds(20)));
  }

  /// Polls status until `pred` holds, within `timeout`; returns the last one.
  template <class Pred>
  cluster_status wait_for_status(Pred pred, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto st = status();
      if (pred(st) || std::chrono::steady_clock::now() >= deadline)
        return st;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  /// Starts a driver (`cluster_driver`) against this cluster: `--address`,
  /// then `tls_args`, then `args`.
  std::unique_ptr<process> driver(const std::vector<std::string>& args,
                                  const std::vector<std::string>& tls_args = {}) {
    return driver_program(HVACTOR_CLUSTER_DRIVER, args, tls_args);
  }

  /// Starts another driver program (it takes `--address` as an
  /// hvactor::runtime does) against this cluster.
  std::unique_ptr<process> driver_program(const std::string& binary,
                                          const std::vector<std::string>& args,
                                          const std::vector<std::string>& tls_args = {}) {
    std::vector<std::string> argv{binary, "--address", address_};
    argv.insert(argv.end(), tls_args.begin(), tls_args.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<process>(argv, dir_.path() / ("driver-" + next_log()));
  }

  /// Pids of every process running a binary cached by one of the nodes.
  std::vector<int> worker_processes() const {
    return processes_running_from(dir_.path());
  }

  /// True once no process runs from the nodes' binary caches, within `timeout`.
  bool no_workers_within(std::chrono::milliseconds timeout) const {
    return wait_until([&] { return worker_processes().empty(); }, timeout);
  }

private:
  void add_common_args(std::vector<std::string>& argv, const std::string& id) const {
    argv.insert(argv.end(), {"--node-id", id, "--num-cpus", std::to_string(opts_.cpus_per_node),
                             "--num-gpus", std::to_string(opts_.gpus_per_node), "--work-dir",
                             work_dir(id).string()});
    if (auto i = opts_.tls.find(id); i != opts_.tls.end()) {
      auto extra = i->second.args();
      argv.insert(argv.end(), extra.begin(), extra.end());
    }
  }

  void start_head(const std::string& port = "0") {
    auto& id = opts_.node_ids.at(0);
    std::vector<std::string> argv{HVACTOR_NODE, "--head", "--port", port};
    add_common_args(argv, id);
    auto p = std::make_unique<process>(argv, dir_.path() / ("node-" + id + "-" + next_log()));
    auto line = p->read_line_with("hvactor-node: head '" + id + "' listening on ",
                                  std::chrono::seconds(15));
    if (!line)
      throw std::runtime_error("the head did not start within 15 s; stderr:\n"
                               + p->stderr_text());
    // "127.0.0.1:PORT (2 CPUs, ...); join with: ..."
    address_ = line->substr(0, line->find(' '));
    nodes_[id] = std::move(p);
  }

  std::string next_log() {
    return std::to_string(++logs_);
  }

  cluster_options opts_;
  temp_dir dir_;
  std::string address_;
  std::map<std::string, std::unique_ptr<process>> nodes_;
  int logs_ = 0;
};

} // namespace hvactor::test
