#pragma once

// Benchmark helper: a cluster of real hvactor-node processes on this machine
// (a head plus nodes, each with its own work dir), and the process plumbing
// around it. Plain POSIX; no actor system: the command lines and the ready
// lines are the cluster module's (tools/cluster/cluster/node_options.hpp).

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace hvactor::bench {

/// Starts `argv` (argv[0] is the path) with stdout and stderr appended to
/// the given files ("" keeps the parent's) and this process's environment
/// plus `extra_env` ("NAME=value"); throws std::runtime_error.
pid_t spawn_process(const std::vector<std::string>& argv, const std::string& out_path = "",
                    const std::string& err_path = "",
                    const std::vector<std::string>& extra_env = {});

/// Waits for `pid` up to `timeout`; its exit code, 128+signal, or -1 when it
/// is still running.
int wait_process(pid_t pid, std::chrono::milliseconds timeout);

/// SIGTERM, SIGKILL after `grace`, then reaps; returns what wait_process does.
int stop_process(pid_t pid, std::chrono::milliseconds grace = std::chrono::seconds(5));

/// A fresh private directory under $TMPDIR (or /tmp).
std::string make_temp_dir(const std::string& prefix);

/// rm -r `dir`, errors ignored.
void remove_dir(const std::string& dir);

/// The last `lines` lines of a text file, for error messages.
std::string tail_of(const std::string& path, int lines = 10);

/// A head and `nodes - 1` more hvactor-node processes on 127.0.0.1.
class local_cluster {
public:
  struct options {
    /// Path of the hvactor-node binary.
    std::string node_binary;
    /// Nodes including the head.
    int nodes = 3;
    int cpus_per_node = 4;
    /// Parent of the nodes' work dirs and logs; created when missing.
    std::string dir;
    /// How long each process may take to print its ready line.
    std::chrono::seconds ready_timeout{20};
  };

  /// Starts the head (--port 0), reads its port, then starts the other
  /// nodes and waits until each has joined; throws std::runtime_error with
  /// the process's log tail on failure (processes started so far are
  /// stopped).
  explicit local_cluster(options opts);

  /// Stops and reaps every node.
  ~local_cluster();

  local_cluster(const local_cluster&) = delete;
  local_cluster& operator=(const local_cluster&) = delete;

  /// "127.0.0.1:PORT" of the head.
  const std::string& address() const noexcept {
    return address_;
  }

  /// Work dir of every node, head first.
  const std::vector<std::string>& work_dirs() const noexcept {
    return work_dirs_;
  }

  /// Stops and reaps every node (idempotent).
  void stop();

private:
  /// The first line of `path` (pid's stdout) that `ready` accepts.
  std::string wait_for_line(pid_t pid, const std::string& path,
                            const std::function<bool(const std::string&)>& ready);

  options opts_;
  std::string address_;
  std::vector<pid_t> pids_;
  std::vector<std::string> work_dirs_;
};

} // namespace hvactor::bench
