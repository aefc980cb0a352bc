#include "actors/placement/discovery_script.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "hvactor/errors.hpp"
#include "base/internal/process.hpp"

extern char** environ;

namespace hvactor {

namespace {

/// Bytes of stderr kept for the error message (its last lines).
constexpr size_t stderr_keep = 4096;
/// Lines of stderr quoted in an error message.
constexpr size_t stderr_lines = 5;

void close_fd(int& fd) noexcept {
  if (fd >= 0)
    ::close(fd);
  fd = -1;
}

/// Owns the pipe ends of one run; closes whatever is still open.
struct run_fds {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  int exec[2] = {-1, -1};

  ~run_fds() {
    for (int* fd : {&out[0], &out[1], &err[0], &err[1], &exec[0], &exec[1]})
      close_fd(*fd);
  }
};

// Between fork and exec only async-signal-safe calls (see process.cpp).
[[noreturn]] void exec_script(const char* path, char* const argv[], const run_fds& fds,
                              pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent)
    ::_exit(127);
  ::setpgid(0, 0);
  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != STDIN_FILENO)
    ::dup2(devnull, STDIN_FILENO);
  ::dup2(fds.out[1], STDOUT_FILENO);
  ::dup2(fds.err[1], STDERR_FILENO);
  ::dup2(fds.exec[1], 3);
  ::fcntl(3, F_SETFD, FD_CLOEXEC);
  if (::syscall(SYS_close_range, 4u, ~0u, 0u) != 0)
    for (int fd = 4; fd < 65536; ++fd)
      ::close(fd);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(path, argv, environ);
  int err = errno;
  [[maybe_unused]] auto n = ::write(3, &err, sizeof(err));
  ::_exit(127);
}

/// The last `stderr_lines` non-empty lines of `text`, "; "-joined.
std::string last_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    auto line = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!line.empty())
      lines.push_back(line);
    start = end == std::string::npos ? text.size() : end + 1;
  }
  std::string out;
  size_t first = lines.size() > stderr_lines ? lines.size() - stderr_lines : 0;
  for (size_t i = first; i < lines.size(); ++i)
    out += (out.empty() ? "" : " | ") + lines[i];
  return out;
}

/// Reads what `fd` holds now into `into`, keeping at most `keep` bytes (the
/// newest when `tail`). Returns false at EOF or on an error.
bool drain(int fd, std::string& into, size_t keep, bool tail) {
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      into.append(buf, static_cast<size_t>(n));
      if (into.size() > keep) {
        if (!tail)
          return false; // over the limit: the caller checks the size
        into.erase(0, into.size() - keep);
      }
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

[[noreturn]] void script_failed(const std::string& path, const std::string& why,
                                const std::string& err_text) {
  auto tail = last_lines(err_text);
  throw error("host discovery script '" + path + "' failed: " + why
              + (tail.empty() ? "" : " (stderr: " + tail + ")"));
}

// Starts `program` (the script `path`) with its stdout and stderr on
// `fds`: its pid, in a process group of its own. Throws (naming `path`)
// when it cannot.
pid_t start_script(const std::string& path, std::string& program, run_fds& fds) {
  std::vector<char*> argv{program.data(), nullptr};
  if (::pipe2(fds.out, O_CLOEXEC) != 0 || ::pipe2(fds.err, O_CLOEXEC) != 0
      || ::pipe2(fds.exec, O_CLOEXEC) != 0)
    script_failed(path, std::string{"cannot create pipes: "} + std::strerror(errno), {});
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0)
    script_failed(path, std::string{"cannot fork: "} + std::strerror(errno), {});
  if (pid == 0)
    exec_script(program.c_str(), argv.data(), fds, parent);
  // Also from here, so that a kill of the group never races the child's own
  // setpgid (EACCES after its exec is fine: it did it itself).
  ::setpgid(pid, pid);
  close_fd(fds.out[1]);
  close_fd(fds.err[1]);
  close_fd(fds.exec[1]);
  int exec_errno = 0;
  ssize_t got;
  do {
    got = ::read(fds.exec[0], &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  close_fd(fds.exec[0]);
  if (got == sizeof(exec_errno)) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    script_failed(path, std::string{"cannot start it: "} + std::strerror(exec_errno), {});
  }
  return pid;
}

/// What a run of the script left: its output, its stderr's tail, and how
/// it ended.
struct script_run {
  std::string out;
  std::string err;
  bool exited = false;
  bool overflow = false;
  /// The wait status; -1 when it was lost.
  int status = 0;
};

// Reads the script's output until it exits, writes too much or `limit`
// passed (then kills its process group), and reaps it.
script_run collect(pid_t pid, const run_fds& fds, std::chrono::milliseconds limit) {
  ::fcntl(fds.out[0], F_SETFL, O_NONBLOCK);
  ::fcntl(fds.err[0], F_SETFL, O_NONBLOCK);
  script_run run;
  bool out_open = true;
  bool err_open = true;
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!run.exited) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      break;
    pollfd pfds[2] = {{out_open ? fds.out[0] : -1, POLLIN, 0},
                      {err_open ? fds.err[0] : -1, POLLIN, 0}};
    // Short slices: the script may exit while a child of it keeps the pipes.
    ::poll(pfds, 2, static_cast<int>(std::min<long>(left.count(), 20)));
    if (out_open)
      out_open = drain(fds.out[0], run.out, discovery_output_limit, false);
    if (err_open)
      err_open = drain(fds.err[0], run.err, stderr_keep, true);
    if (run.out.size() > discovery_output_limit) {
      run.overflow = true;
      break;
    }
    pid_t r = ::waitpid(pid, &run.status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) {
      if (r < 0)
        run.status = -1; // reaped elsewhere (SIGCHLD ignored): the status is lost
      run.exited = true;
    }
  }
  if (!run.exited) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &run.status, 0) < 0 && errno == EINTR) {
    }
  }
  // What it wrote just before it exited (never wait for EOF: a child of the
  // script may hold the pipes).
  if (out_open && !run.overflow)
    drain(fds.out[0], run.out, discovery_output_limit, false);
  if (err_open)
    drain(fds.err[0], run.err, stderr_keep, true);
  return run;
}

// Throws, naming `path` and quoting its stderr, unless the run ended well.
void check_ended(const std::string& path, const script_run& run,
                 std::chrono::milliseconds limit) {
  auto fail = [&](const std::string& why) { script_failed(path, why, run.err); };
  if (run.overflow || run.out.size() > discovery_output_limit)
    fail("it wrote more than " + std::to_string(discovery_output_limit)
         + " bytes to stdout (killed)");
  if (!run.exited)
    fail("it did not finish within "
         + (limit.count() % 1000 == 0 ? std::to_string(limit.count() / 1000) + " s"
                                      : std::to_string(limit.count()) + " ms")
         + " (killed with its process group); a discovery script must print its hosts "
           "and exit");
  if (run.status == -1)
    fail("its exit status was lost (SIGCHLD ignored?)");
  if (WIFSIGNALED(run.status))
    fail("it ended with " + describe_exit(-1, WTERMSIG(run.status)));
  if (WEXITSTATUS(run.status) != 0)
    fail("it ended with " + describe_exit(WEXITSTATUS(run.status), 0));
}

} // namespace

std::vector<host_slots> run_discovery_script(const std::string& path,
                                             std::chrono::milliseconds limit, int default_slots) {
  std::string program;
  try {
    program = find_program(path);
  } catch (const std::invalid_argument& e) {
    script_failed(path, e.what(), {});
  }
  run_fds fds;
  pid_t pid = start_script(path, program, fds);
  auto run = collect(pid, fds, limit);
  check_ended(path, run, limit);
  try {
    return parse_host_slots(run.out, default_slots);
  } catch (const std::invalid_argument& e) {
    script_failed(path, e.what(), run.err);
  }
}

} // namespace hvactor
