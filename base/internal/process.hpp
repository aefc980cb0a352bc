#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hvactor {

/// What to start.
struct process_spec {
  std::string executable;
  /// argv, including argv[0].
  std::vector<std::string> args;
  /// Set on top of the current environment, in order.
  std::vector<std::pair<std::string, std::string>> env;
  /// Lines of stderr kept for the exit report.
  int stderr_tail_lines = 20;
  /// Echo the child's stderr lines to ours.
  bool echo_stderr = true;
  /// When set, every complete line the child writes to stderr (stream 2)
  /// and, with `capture_stdout`, to stdout (stream 1) is passed here,
  /// without its newline, on the monitor thread, in the order read. Lines
  /// that start with `event_marker` go only here (no echo, no tail).
  std::function<void(int stream, const std::string& line)> on_line;
  /// Capture stdout for on_line (else the child writes to ours).
  bool capture_stdout = false;
  /// See on_line; empty: none.
  std::string event_marker;
  /// A descriptor the child inherits as fd 4 (the node's shared-memory
  /// segment); -1: none.
  int inherit_fd = -1;
};

/// How a process ended.
struct process_exit {
  pid_t pid = 0;
  /// Exit status when it exited normally, -1 otherwise.
  int exit_code = -1;
  /// Signal that ended it, 0 otherwise.
  int signal = 0;
  /// The last lines it wrote to stderr.
  std::vector<std::string> stderr_tail;
};

/// `name` as the shell would run it, absolute (nodes start it from their
/// own working directory): a path to an executable file, or the first match
/// in PATH. Throws std::invalid_argument naming `name` otherwise.
std::string find_program(const std::string& name);

/// "exit code 3" / "signal 9 (SIGKILL)".
std::string describe_exit(int exit_code, int signal);

/// A child process owned by one monitor thread, which starts it, reads its
/// stderr, reaps it and reports how it ended.
///
/// The child gets PR_SET_PDEATHSIG(SIGKILL) tied to the monitor thread, so it
/// never outlives this process (SIGKILL of the parent included); it inherits
/// no file descriptor other than stdin (/dev/null), stdout and stderr (a
/// pipe). `on_exit` runs on the monitor thread exactly once.
class child_process {
public:
  using exit_handler = std::function<void(process_exit)>;

  /// Starts `spec`; throws hvactor::error naming the executable and errno
  /// when it cannot be started.
  static std::shared_ptr<child_process> start(const process_spec& spec, exit_handler on_exit);

  ~child_process();

  /// Process id of the child.
  pid_t pid() const noexcept;

  /// True until the monitor thread reaped the child.
  bool running() const noexcept;

  /// Sends `sig` if the child still runs.
  void signal(int sig) noexcept;

  struct state;

private:
  explicit child_process(std::shared_ptr<state> st);
  std::shared_ptr<state> state_;
};

/// How a command run to its end went (run_command).
struct command_result {
  process_exit exit;
  /// Its stdout, when the spec captured it: every line followed by '\n'.
  std::string out;
  /// True when it ran past its limit and was stopped.
  bool timed_out = false;
};

/// Runs `spec` to its end: argv as given, no shell in between. Past
/// `limit` the command gets SIGTERM, then SIGKILL 2 s later; either way it
/// is reaped before this returns. Throws hvactor::error when it cannot start.
command_result run_command(process_spec spec, std::chrono::milliseconds limit);

/// A scratch directory for process `pid` (temp dir / hvactor-worker-<pid>):
/// a worker puts what it unpacks there (hvactor::train's resume
/// checkpoint), and its colocator removes it once it reaped the process, so
/// nothing stays behind a SIGKILLed worker.
std::filesystem::path worker_scratch_dir(int pid);

/// Creates worker_scratch_dir(pid) (mode 0700) and returns it; an existing
/// one is taken only when it is a real directory owned by this user.
/// Anything else there (a symlink or another user's folder planted in a
/// shared temp dir) is an hvactor::error: nothing is written through it.
std::filesystem::path make_worker_scratch_dir(int pid);

/// Removes worker_scratch_dir(pid) and what is in it when it is a real
/// directory owned by this user; leaves anything else alone (it is not ours
/// to remove). Never throws.
void remove_worker_scratch_dir(int pid) noexcept;

} // namespace hvactor
