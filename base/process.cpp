#include "base/internal/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/child_output.hpp"

extern char** environ;

namespace hvactor {

std::string describe_exit(int exit_code, int signal) {
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return "signal " + std::to_string(signal) + (name ? " (SIG" + std::string{name} + ")" : "");
  }
  return "exit code " + std::to_string(exit_code);
}

struct child_process::state {
  std::atomic<pid_t> pid{0};
  std::atomic<bool> running{false};
};

namespace {

// Everything the forked child touches is prepared before fork(): between
// fork and exec only async-signal-safe calls are allowed.
struct prepared_exec {
  std::vector<std::string> arg_storage;
  std::vector<std::string> env_storage;
  std::vector<char*> argv;
  std::vector<char*> envp;

  explicit prepared_exec(const process_spec& spec) : arg_storage(spec.args) {
    if (arg_storage.empty())
      arg_storage.push_back(spec.executable);
    for (char** e = environ; e && *e; ++e) {
      std::string entry{*e};
      auto key = entry.substr(0, entry.find('='));
      bool overridden = false;
      for (auto& [k, v] : spec.env)
        overridden = overridden || k == key;
      if (!overridden)
        env_storage.push_back(std::move(entry));
    }
    for (auto& [k, v] : spec.env)
      env_storage.push_back(k + "=" + v);
    for (auto& a : arg_storage)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_storage)
      envp.push_back(e.data());
    envp.push_back(nullptr);
  }
};

[[noreturn]] void exec_child(const char* path, const prepared_exec& prep, int err_fd,
                             int stderr_fd, int stdout_fd, int inherit_fd, pid_t parent,
                             int max_fd) {
  // Die with the thread that forked us (SIGKILL of the parent included).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent)
    ::_exit(127);
  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != STDIN_FILENO)
    ::dup2(devnull, STDIN_FILENO);
  ::dup2(stderr_fd, STDERR_FILENO);
  if (stdout_fd >= 0)
    ::dup2(stdout_fd, STDOUT_FILENO);
  // Keep the exec-error pipe at fd 3, the inherited descriptor (if any) at
  // fd 4, and close everything else we inherited (the parent's listening
  // sockets must not leak into workers).
  int keep = inherit_fd >= 0 ? ::fcntl(inherit_fd, F_DUPFD, 16) : -1;
  if (err_fd != 3) {
    ::dup2(err_fd, 3);
  }
  ::fcntl(3, F_SETFD, FD_CLOEXEC);
  int first_closed = 4;
  if (keep >= 0) {
    ::dup2(keep, 4); // the copy at 4 is not close-on-exec
    first_closed = 5;
  }
  if (::syscall(SYS_close_range, static_cast<unsigned>(first_closed), ~0u, 0u) != 0)
    for (int fd = first_closed; fd < max_fd; ++fd) // kernels before 5.9, seccomp
      ::close(fd);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(path, prep.argv.data(), prep.envp.data());
  int err = errno;
  [[maybe_unused]] auto n = ::write(3, &err, sizeof(err));
  ::_exit(127);
}


// The pipes between the monitor thread and the child it starts: exec's
// errno (closed by a successful exec), the child's stderr, and its stdout
// when captured; -1 where there is none.
struct child_pipes {
  int exec_status[2] = {-1, -1};
  int err[2] = {-1, -1};
  int out[2] = {-1, -1};

  void close_all() {
    for (int fd : {exec_status[0], exec_status[1], err[0], err[1], out[0], out[1]})
      if (fd >= 0)
        ::close(fd);
  }
};

// Opens the pipes `spec` asks for: 0, or the errno of the failure (then
// none is left open).
int open_pipes(const process_spec& spec, child_pipes& p) {
  if (::pipe2(p.exec_status, O_CLOEXEC) != 0)
    return errno;
  if (::pipe2(p.err, O_CLOEXEC) != 0
      || (spec.on_line && spec.capture_stdout && ::pipe2(p.out, O_CLOEXEC) != 0)) {
    int err = errno;
    p.close_all();
    return err;
  }
  return 0;
}

// Forks and execs the child: its pid, or 0 when it did not start (the
// errno in `err`, its pipes closed and the child reaped). Leaves the read
// ends of the child's stderr and stdout open.
pid_t fork_child(const process_spec& spec, const prepared_exec& prep, child_pipes& p, int& err) {
  int max_fd = static_cast<int>(::sysconf(_SC_OPEN_MAX));
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    err = errno;
    p.close_all();
    return 0;
  }
  if (pid == 0)
    exec_child(spec.executable.c_str(), prep, p.exec_status[1], p.err[1], p.out[1],
               spec.inherit_fd, parent, max_fd);
  ::close(p.exec_status[1]);
  ::close(p.err[1]);
  if (p.out[1] >= 0)
    ::close(p.out[1]);
  int exec_errno = 0;
  ssize_t got;
  do {
    got = ::read(p.exec_status[0], &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  ::close(p.exec_status[0]);
  if (got == sizeof(exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    ::close(p.err[0]);
    if (p.out[0] >= 0)
      ::close(p.out[0]);
    err = exec_errno == 0 ? EINVAL : exec_errno;
    return 0;
  }
  return pid;
}

// Reads the child's output until it is reaped: its wait status, or -1 when
// it was reaped elsewhere.
int pump_until_reaped(pid_t pid, child_output& output) {
  int status = 0;
  // Readable the moment the child exits (Linux 5.3+): its death is seen at
  // once (a worker's peers wait on it), not at the next poll timeout. With
  // it, the thread sleeps until output or the exit: polling every 50 ms, a
  // node's monitor of one idle worker woke 20 times a second and used
  // 0.6-0.7 ms of CPU a second, most of an idle node's (1.2 ms/s).
  // Without a pidfd (older kernels, seccomp) it polls every 50 ms, and so it
  // does after a readable pidfd whose process waitpid cannot reap yet (no spin).
  int exit_fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  bool exit_pending = false;
  for (;;) {
    if (output.open() || exit_fd >= 0) {
      pollfd pfds[3] = {{output.err_fd(), POLLIN, 0}, {output.out_fd(), POLLIN, 0},
                        {exit_pending ? -1 : exit_fd, POLLIN, 0}};
      bool sleep_until_event = exit_fd >= 0 && !exit_pending;
      ::poll(pfds, 3, sleep_until_event ? -1 : 50);
      exit_pending = exit_pending || (pfds[2].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
      output.pump();
    } else {
      ::usleep(20000);
    }
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid)
      break;
    if (r < 0 && errno != EINTR) {
      // Reaped elsewhere (SIGCHLD ignored, or a waitpid(-1) in the program):
      // the status is lost, but the process is gone.
      status = -1;
      break;
    }
  }
  if (exit_fd >= 0)
    ::close(exit_fd);
  return status;
}

// Runs on the monitor thread: start, pump stderr (and stdout), reap, report.
void monitor(process_spec spec, std::shared_ptr<child_process::state> st,
             child_process::exit_handler on_exit, std::promise<int> started) {
  // Named for per-thread tables: it inherited its creator's ("caf.multiplexer"
  // on a node), where its 50 ms polls once passed for the multiplexer's.
  ::pthread_setname_np(::pthread_self(), "hvactor.child");
  prepared_exec prep{spec};
  child_pipes pipes;
  if (int err = open_pipes(spec, pipes); err != 0) {
    started.set_value(err);
    return;
  }
  int err = 0;
  pid_t pid = fork_child(spec, prep, pipes, err);
  if (pid == 0) {
    started.set_value(err);
    return;
  }
  st->pid = pid;
  st->running = true;
  started.set_value(0);
  ::fcntl(pipes.err[0], F_SETFL, O_NONBLOCK);
  if (pipes.out[0] >= 0)
    ::fcntl(pipes.out[0], F_SETFL, O_NONBLOCK);
  child_output output{pipes.err[0], pipes.out[0],
                      static_cast<size_t>(std::max(spec.stderr_tail_lines, 1)),
                      spec.echo_stderr, spec.on_line, spec.event_marker};
  int status = pump_until_reaped(pid, output);
  output.drain();
  process_exit result;
  result.pid = pid;
  result.stderr_tail = output.finish();
  if (status != -1 && WIFEXITED(status))
    result.exit_code = WEXITSTATUS(status);
  else if (status != -1 && WIFSIGNALED(status))
    result.signal = WTERMSIG(status);
  st->running = false;
  if (on_exit)
    on_exit(std::move(result));
}

} // namespace

child_process::child_process(std::shared_ptr<state> st) : state_(std::move(st)) {
}

child_process::~child_process() = default;

std::shared_ptr<child_process> child_process::start(const process_spec& spec,
                                                    exit_handler on_exit) {
  auto st = std::make_shared<state>();
  std::promise<int> started;
  auto result = started.get_future();
  std::thread{monitor, spec, st, std::move(on_exit), std::move(started)}.detach();
  if (int err = result.get(); err != 0)
    throw error("cannot start worker process '" + spec.executable + "': " + std::strerror(err));
  return std::shared_ptr<child_process>{new child_process(std::move(st))};
}

pid_t child_process::pid() const noexcept {
  return state_->pid;
}

bool child_process::running() const noexcept {
  return state_->running;
}

void child_process::signal(int sig) noexcept {
  if (state_->running)
    ::kill(state_->pid, sig);
}

std::string find_program(const std::string& name) {
  namespace fs = std::filesystem;
  auto runnable = [](const fs::path& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (!runnable(name))
      throw std::invalid_argument(fmt::format("'{}' is not an executable file", name));
    return fs::absolute(name).lexically_normal().string();
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    auto end = dirs.find(':', start);
    auto dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    auto candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (runnable(candidate))
      return fs::absolute(candidate).lexically_normal().string();
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  throw std::invalid_argument(fmt::format("'{}' not found in PATH", name));
}

command_result run_command(process_spec spec, std::chrono::milliseconds limit) {
  struct shared {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<process_exit> exit;
    std::string out;
  };
  auto st = std::make_shared<shared>();
  if (spec.capture_stdout) {
    auto user = std::move(spec.on_line);
    spec.on_line = [st, user](int stream, const std::string& line) {
      if (stream == 1) {
        std::lock_guard<std::mutex> lk{st->mu};
        st->out += line + "\n";
      }
      if (user)
        user(stream, line);
    };
  }
  auto child = child_process::start(spec, [st](process_exit ex) {
    std::lock_guard<std::mutex> lk{st->mu};
    st->exit = std::move(ex);
    st->cv.notify_all();
  });
  command_result r;
  std::unique_lock<std::mutex> lk{st->mu};
  auto ended = [&] { return st->exit.has_value(); };
  if (!st->cv.wait_for(lk, limit, ended)) {
    r.timed_out = true;
    child->signal(SIGTERM);
    if (!st->cv.wait_for(lk, std::chrono::seconds(2), ended))
      child->signal(SIGKILL);
    // The monitor reaps a SIGKILLed child at once, unless it is stuck in
    // the kernel: then its monitor thread keeps waiting, not us.
    st->cv.wait_for(lk, std::chrono::seconds(10), ended);
  }
  if (st->exit)
    r.exit = std::move(*st->exit);
  else
    r.exit.pid = child->pid();
  r.out = std::move(st->out);
  return r;
}

std::filesystem::path worker_scratch_dir(int pid) {
  return std::filesystem::temp_directory_path() / ("hvactor-worker-" + std::to_string(pid));
}

namespace {

// A real directory (not a link to one) owned by this user.
bool own_directory(const std::filesystem::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid();
}

} // namespace

std::filesystem::path make_worker_scratch_dir(int pid) {
  auto dir = worker_scratch_dir(pid);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    int err = errno;
    if (err != EEXIST || !own_directory(dir))
      throw error(fmt::format("cannot create the scratch folder {}: {}", dir.string(),
                              err == EEXIST ? "something else is there (a link, or a folder of "
                                              "another user)"
                                            : std::strerror(err)));
    ::chmod(dir.c_str(), 0700);
  }
  return dir;
}

void remove_worker_scratch_dir(int pid) noexcept {
  try {
    auto dir = worker_scratch_dir(pid);
    if (!own_directory(dir))
      return;
    std::error_code ec;
    // remove_all removes links inside, never what they point to.
    std::filesystem::remove_all(dir, ec);
  } catch (...) {
    // temp_directory_path() failed: nothing of ours to remove.
  }
}

} // namespace hvactor
