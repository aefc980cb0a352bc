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
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace hvactor::test {

/// A directory under /tmp, removed with everything in it on destruction.
class temp_dir {
public:
  temp_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "hvactor-ct-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed");
    path_ = std::filesystem::canonical(pattern);
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& path() const {
    return path_;
  }

private:
  std::filesystem::path path_;
};

/// How a process ended.
struct exit_status {
  bool exited = false; ///< false: killed by `signal`
  int code = -1;
  int signal = 0;

  bool success() const {
    return exited && code == 0;
  }
};

inline exit_status decode_wait_status(int status) {
  exit_status out;
  if (WIFEXITED(status)) {
    out.exited = true;
    out.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out.signal = WTERMSIG(status);
  }
  return out;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// A child process whose stdout and stderr go to files (so that it never
/// blocks on a full pipe, and a test can read either at any time).
/// SIGKILLed and reaped on destruction unless it was reaped before.
class process {
public:
  /// Starts `argv` (argv[0] a path); output goes to `log_base`.out/.err.
  process(std::vector<std::string> argv, const std::filesystem::path& log_base)
    : out_path_(log_base.string() + ".out"), err_path_(log_base.string() + ".err") {
    int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0 || err < 0) {
      for (int fd : {out, err})
        if (fd >= 0)
          ::close(fd);
      throw std::runtime_error("cannot create the output files of " + argv.at(0));
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out, STDOUT_FILENO);
      ::dup2(err, STDERR_FILENO);
      std::vector<char*> args;
      for (auto& a : argv)
        args.push_back(a.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out);
    ::close(err);
    if (pid_ < 0)
      throw std::runtime_error("fork failed");
  }

  ~process() {
    kill();
  }

  process(const process&) = delete;
  process& operator=(const process&) = delete;

  int pid() const {
    return pid_;
  }

  /// Waits for the next stdout line starting with `prefix` (lines before it
  /// are consumed); returns the rest of the line, or nullopt after `timeout`.
  std::optional<std::string> read_line_with(const std::string& prefix,
                                            std::chrono::milliseconds timeout) {
    std::optional<std::string> found;
    wait_until(
      [&] {
        auto text = read_file(out_path_);
        if (text.size() > read_) {
          buf_ += text.substr(read_);
          read_ = text.size();
        }
        for (size_t pos; (pos = buf_.find('\n')) != std::string::npos;) {
          auto line = buf_.substr(0, pos);
          buf_.erase(0, pos + 1);
          if (line.rfind(prefix, 0) == 0) {
            found = line.substr(prefix.size());
            return true;
          }
        }
        return false;
      },
      timeout);
    return found;
  }

  /// Everything the process wrote so far.
  std::string stdout_text() const {
    return read_file(out_path_);
  }
  std::string stderr_text() const {
    return read_file(err_path_);
  }

  void signal(int sig) const {
    if (pid_ > 0)
      ::kill(pid_, sig);
  }

  /// Reaps the process once it exits within `timeout`; nullopt if it is
  /// still running then.
  std::optional<exit_status> wait_exit(std::chrono::milliseconds timeout) {
    if (pid_ <= 0)
      return status_;
    int status = 0;
    bool done = wait_until(
      [&] {
        auto got = ::waitpid(pid_, &status, WNOHANG);
        return got == pid_ || got < 0;
      },
      timeout);
    if (!done)
      return std::nullopt;
    status_ = decode_wait_status(status);
    pid_ = -1;
    return status_;
  }

  /// SIGKILLs the process (if still running) and reaps it.
  void kill() {
    if (pid_ <= 0)
      return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    status_ = decode_wait_status(status);
    pid_ = -1;
  }

private:
  std::string out_path_;
  std::string err_path_;
  int pid_ = -1;
  std::optional<exit_status> status_;
  size_t read_ = 0;
  std::string buf_;
};

/// Every stdout line of `p` so far that starts with `prefix`, prefix removed.
inline std::vector<std::string> lines_with(const process& p, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in{p.stdout_text()};
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0)
      out.push_back(line.substr(prefix.size()));
  return out;
}

/// The first stdout line of `p` that starts with `prefix`, prefix removed;
/// "" if none.
inline std::string first_line(const process& p, const std::string& prefix) {
  auto lines = lines_with(p, prefix);
  return lines.empty() ? "" : lines.front();
}

/// Output of a finished command.
struct command_result {
  exit_status status;
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};

/// Runs `argv` to completion, SIGKILLing it after `timeout` (then
/// `status.signal` is SIGKILL).
inline command_result run_command(const std::vector<std::string>& argv,
                                  const std::filesystem::path& log_base,
                                  std::chrono::milliseconds timeout) {
  auto t0 = std::chrono::steady_clock::now();
  process p{argv, log_base};
  command_result r;
  if (auto st = p.wait_exit(timeout)) {
    r.status = *st;
  } else {
    p.kill();
    r.status = exit_status{.exited = false, .code = -1, .signal = SIGKILL};
  }
  r.elapsed =
    std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  r.out = p.stdout_text();
  r.err = p.stderr_text();
  return r;
}

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

/// Shape of a test cluster: a head plus nodes, all on 127.0.0.1.
struct cluster_options {
  /// Node ids; the first is the head.
  std::vector<std::string> node_ids{"head", "node-a", "node-b"};
  int cpus_per_node = 2;
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
    std::vector<std::string> argv{HVACTOR_CLUSTER_DRIVER, "--address", address_};
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
                             "--work-dir", work_dir(id).string()});
    if (auto i = opts_.tls.find(id); i != opts_.tls.end()) {
      auto extra = i->second.args();
      argv.insert(argv.end(), extra.begin(), extra.end());
    }
  }

  void start_head() {
    auto& id = opts_.node_ids.at(0);
    std::vector<std::string> argv{HVACTOR_NODE, "--head", "--port", "0"};
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
