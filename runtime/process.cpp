#include "hvactor/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <thread>

#include "hvactor/errors.hpp"

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
                             int stderr_fd, pid_t parent, int max_fd) {
  // Die with the thread that forked us (SIGKILL of the parent included).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent)
    ::_exit(127);
  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != STDIN_FILENO)
    ::dup2(devnull, STDIN_FILENO);
  ::dup2(stderr_fd, STDERR_FILENO);
  // Keep the exec-error pipe at fd 3 and close everything else we inherited
  // (the parent's listening sockets must not leak into workers).
  if (err_fd != 3) {
    ::dup2(err_fd, 3);
  }
  ::fcntl(3, F_SETFD, FD_CLOEXEC);
  if (::syscall(SYS_close_range, 4u, ~0u, 0u) != 0) // kernels before 5.9, seccomp
    for (int fd = 4; fd < max_fd; ++fd)
      ::close(fd);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(path, prep.argv.data(), prep.envp.data());
  int err = errno;
  [[maybe_unused]] auto n = ::write(3, &err, sizeof(err));
  ::_exit(127);
}

class line_tail {
public:
  line_tail(size_t max_lines, bool echo) : max_lines_(max_lines), echo_(echo) {
  }

  void feed(const char* data, size_t n) {
    partial_.append(data, n);
    size_t start = 0;
    for (size_t pos; (pos = partial_.find('\n', start)) != std::string::npos; start = pos + 1)
      push(partial_.substr(start, pos - start + 1));
    partial_.erase(0, start);
  }

  std::vector<std::string> finish() {
    if (!partial_.empty())
      push(partial_ + "\n");
    partial_.clear();
    std::vector<std::string> out;
    for (auto& line : lines_)
      out.push_back(line.substr(0, line.size() - 1));
    return out;
  }

private:
  void push(std::string line) {
    if (echo_)
      [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
    lines_.push_back(std::move(line));
    while (lines_.size() > max_lines_)
      lines_.pop_front();
  }

  size_t max_lines_;
  bool echo_;
  std::string partial_;
  std::deque<std::string> lines_;
};

// Runs on the monitor thread: start, pump stderr, reap, report.
void monitor(process_spec spec, std::shared_ptr<child_process::state> st,
             child_process::exit_handler on_exit, std::promise<int> started) {
  prepared_exec prep{spec};
  int err_pipe[2];
  int out_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    started.set_value(errno);
    return;
  }
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    started.set_value(err);
    return;
  }
  int max_fd = static_cast<int>(::sysconf(_SC_OPEN_MAX));
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    for (int fd : {err_pipe[0], err_pipe[1], out_pipe[0], out_pipe[1]})
      ::close(fd);
    started.set_value(err);
    return;
  }
  if (pid == 0)
    exec_child(spec.executable.c_str(), prep, err_pipe[1], out_pipe[1], parent, max_fd);
  ::close(err_pipe[1]);
  ::close(out_pipe[1]);
  int exec_errno = 0;
  ssize_t got;
  do {
    got = ::read(err_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (got == sizeof(exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    ::close(out_pipe[0]);
    started.set_value(exec_errno == 0 ? EINVAL : exec_errno);
    return;
  }
  st->pid = pid;
  st->running = true;
  started.set_value(0);
  ::fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  line_tail tail{static_cast<size_t>(std::max(spec.stderr_tail_lines, 1)), spec.echo_stderr};
  char buf[4096];
  bool pipe_open = true;
  int status = 0;
  for (;;) {
    if (pipe_open) {
      pollfd pfd{out_pipe[0], POLLIN, 0};
      ::poll(&pfd, 1, 50);
      for (;;) {
        ssize_t n = ::read(out_pipe[0], buf, sizeof(buf));
        if (n > 0) {
          tail.feed(buf, static_cast<size_t>(n));
          continue;
        }
        if (n == 0)
          pipe_open = false;
        break;
      }
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
  // Drain what the child wrote before it died (grandchildren may keep the
  // pipe open: never wait for EOF here).
  for (int i = 0; pipe_open && i < 64; ++i) {
    ssize_t n = ::read(out_pipe[0], buf, sizeof(buf));
    if (n <= 0)
      break;
    tail.feed(buf, static_cast<size_t>(n));
  }
  ::close(out_pipe[0]);
  process_exit result;
  result.pid = pid;
  if (status != -1 && WIFEXITED(status))
    result.exit_code = WEXITSTATUS(status);
  else if (status != -1 && WIFSIGNALED(status))
    result.signal = WTERMSIG(status);
  result.stderr_tail = tail.finish();
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

} // namespace hvactor
