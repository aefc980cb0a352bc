#pragma once

// What a peer job of hvactor-bench owns, and how it is stopped, also when
// hvactor-bench itself is told to stop (SIGINT, SIGTERM).
//
// Each process of a peer job runs as the leader of a session of its own
// (`hvactor-bench __peer-session`: setsid, then exec), so every process
// it starts can be found by its session id, whatever process group it
// moves to: Open MPI gives each rank a process group of its own, and
// ranks whose mpirun was SIGKILLed keep running. Stopping a job signals
// every process of its sessions (pidfds: no pid is signalled after it was
// reused) and waits until they are gone.
//
// While peer jobs exist, SIGINT and SIGTERM are caught (the first job
// installs the handler; it only writes the signal to a pipe). A thread
// reading that pipe stops every job's processes (SIGTERM, SIGKILL 5 s
// later), removes their folders and ends hvactor-bench with 128 + signal.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/internal/process.hpp"

namespace hvactor::bench_tool {

/// `hvactor-bench __peer-session EXECUTABLE ARGV0 ARGS...`: becomes the
/// leader of a new session and execs the command; returns 127 when it
/// cannot.
int exec_in_session(int argc, char** argv);

/// One job of a peer: its private folder and the sessions of its
/// processes. Known to the signal handler from construction to
/// destruction.
class peer_job {
public:
  /// Creates the job's folder: `prefix`-XXXXXX in the temp directory,
  /// 0700 (mkdtemp). Throws std::runtime_error naming `what` and the
  /// folder when it cannot.
  peer_job(const std::string& what, const std::string& prefix);
  /// Stops whatever is left of the job's sessions (SIGKILL) and removes
  /// its folder.
  ~peer_job();

  peer_job(const peer_job&) = delete;
  peer_job& operator=(const peer_job&) = delete;

  const std::filesystem::path& folder() const noexcept;

  /// Starts `spec` as the leader of a new session (through
  /// `self`, the hvactor-bench binary: __peer-session), known to the
  /// signal handler before it can start anything.
  std::shared_ptr<child_process> start(const std::string& self, process_spec spec,
                                       child_process::exit_handler on_exit);

  /// Sends `sig` to every process of the job's sessions and waits at most
  /// `bound` until they are gone; true when none is left.
  bool signal(int sig, std::chrono::milliseconds bound);

  struct state;

private:
  std::shared_ptr<state> state_;
};

/// The processes of session `sid` (from /proc), zombies included.
std::vector<pid_t> session_members(pid_t sid);

} // namespace hvactor::bench_tool
