#include "tools/hvactor_bench/peers/peer_session.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

namespace hvactor::bench_tool {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct peer_job::state {
  fs::path folder;
  /// The session ids (= the pids) of the job's processes.
  std::vector<pid_t> sessions;
};

namespace {

// Every live job. Held while a job starts a process or ends, and by the
// thread that handles a signal from its first step until the process ends.
struct registry {
  std::mutex mtx;
  std::set<peer_job::state*> jobs;
};

registry& live_jobs() {
  static auto* r = new registry; // never destroyed: the signal thread may outlive main
  return *r;
}

// Where the handler writes the signal's number (non-blocking).
int stop_pipe_in = -1;

extern "C" void on_stop_signal(int sig) {
  int saved = errno;
  auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] auto n = ::write(stop_pipe_in, &byte, 1);
  errno = saved;
}

struct proc_stat {
  char state = '?';
  pid_t ppid = 0;
  pid_t session = -1;
};

// Fields 3, 4 and 6 of /proc/PID/stat (after the command's name, which may
// hold spaces and parentheses); session -1 when the process is gone.
proc_stat stat_of(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string line;
  std::getline(in, line);
  proc_stat st;
  auto close = line.rfind(')');
  if (close == std::string::npos)
    return st;
  int pgrp = 0;
  if (std::sscanf(line.c_str() + close + 1, " %c %d %d %d", &st.state, &st.ppid, &pgrp,
                  &st.session) != 4)
    st.session = -1;
  return st;
}

int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

// Signals every process of `sessions` that is still running (and the
// leaders themselves while they are this process's children: a leader
// that has not called setsid yet); returns pidfds to wait on.
std::vector<int> signal_members(const std::vector<pid_t>& sessions, int sig) {
  std::vector<int> fds;
  for (pid_t sid : sessions) {
    auto members = session_members(sid);
    if (std::find(members.begin(), members.end(), sid) == members.end())
      members.push_back(sid);
    for (pid_t pid : members) {
      int fd = pidfd_open(pid);
      // Checked after the pidfd pins the process: a reused pid is left alone.
      auto st = stat_of(pid);
      bool ours = st.session == sid || st.ppid == ::getpid();
      if (!ours || st.state == 'Z') {
        if (fd >= 0)
          ::close(fd);
        continue;
      }
      if (fd < 0) { // kernels before 5.3: no pidfd, no wait
        ::kill(pid, sig);
        continue;
      }
      if (::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0) == 0)
        fds.push_back(fd);
      else
        ::close(fd);
    }
  }
  return fds;
}

// Waits until every pidfd reports its process gone, or `deadline`.
void wait_gone(std::vector<int>& fds, std::chrono::steady_clock::time_point deadline) {
  std::vector<pollfd> pending;
  for (int fd : fds)
    pending.push_back({fd, POLLIN, 0});
  while (!pending.empty()) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline
                                                             - std::chrono::steady_clock::now());
    if (left <= 0ms)
      break;
    int n = ::poll(pending.data(), pending.size(), static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR)
      break;
    std::erase_if(pending, [](const pollfd& p) { return p.revents != 0; });
    for (auto& p : pending)
      p.revents = 0;
  }
  for (int fd : fds)
    ::close(fd);
  fds.clear();
}

// Sends `sig` to every process of `sessions` and waits until they are
// gone, at most `bound`; again while something is left (a process may
// start another meanwhile). True when none is left.
bool stop_sessions(const std::vector<pid_t>& sessions, int sig, std::chrono::milliseconds bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    auto fds = signal_members(sessions, sig);
    if (fds.empty())
      return true;
    wait_gone(fds, deadline);
    if (std::chrono::steady_clock::now() >= deadline) {
      auto left = signal_members(sessions, 0); // a probe
      bool none = left.empty();
      wait_gone(left, deadline); // closes them
      return none;
    }
  }
}

// SIGINT/SIGTERM: every job's processes stopped (SIGTERM: mpirun stops its
// ranks; SIGKILL for what is left 5 s later), its folder removed, then
// the process ends with 128 + sig. The lock is never released: no job
// starts a process or ends meanwhile.
[[noreturn]] void stop_everything(int sig) {
  auto& reg = live_jobs();
  reg.mtx.lock();
  for (auto* job : reg.jobs) {
    if (!stop_sessions(job->sessions, SIGTERM, 5s))
      stop_sessions(job->sessions, SIGKILL, 5s);
    std::error_code ec;
    fs::remove_all(job->folder, ec);
  }
  auto line = fmt::format("hvactor-bench: {}: stopped; no peer process or peer folder left\n",
                          sig == SIGINT ? "SIGINT" : "SIGTERM");
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
  std::_Exit(128 + sig);
}

void install_stop_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error(fmt::format("--peer: cannot create a pipe: {}",
                                           std::strerror(errno)));
    ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
    stop_pipe_in = fds[1];
    std::thread{[fd = fds[0]] {
      for (;;) {
        unsigned char sig = 0;
        auto n = ::read(fd, &sig, 1);
        if (n == 1)
          stop_everything(sig);
        if (n < 0 && errno == EINTR)
          continue;
        return;
      }
    }}.detach();
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
  });
}

} // namespace

int exec_in_session(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: hvactor-bench __peer-session EXECUTABLE ARGV0 [ARGS...]\n");
    return 127;
  }
  ::setsid();
  ::execv(argv[2], argv + 3);
  std::fprintf(stderr, "hvactor-bench: cannot run %s: %s\n", argv[2], std::strerror(errno));
  return 127;
}

std::vector<pid_t> session_members(pid_t sid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (fs::directory_iterator it{"/proc", ec}, end; !ec && it != end; it.increment(ec)) {
    auto name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    auto pid = static_cast<pid_t>(std::stol(name));
    if (stat_of(pid).session == sid)
      out.push_back(pid);
  }
  return out;
}

peer_job::peer_job(const std::string& what, const std::string& prefix)
    : state_(std::make_shared<state>()) {
  install_stop_handler();
  auto tmpl = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  auto& reg = live_jobs();
  std::lock_guard<std::mutex> guard{reg.mtx};
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error(fmt::format("{}: cannot create {}: {}", what, tmpl,
                                         std::strerror(errno)));
  state_->folder = tmpl;
  reg.jobs.insert(state_.get());
}

peer_job::~peer_job() {
  auto& reg = live_jobs();
  std::lock_guard<std::mutex> guard{reg.mtx};
  reg.jobs.erase(state_.get());
  stop_sessions(state_->sessions, SIGKILL, 5s);
  std::error_code ec;
  fs::remove_all(state_->folder, ec);
}

const fs::path& peer_job::folder() const noexcept {
  return state_->folder;
}

std::shared_ptr<child_process> peer_job::start(const std::string& self, process_spec spec,
                                               child_process::exit_handler on_exit) {
  std::vector<std::string> args{self, "__peer-session", spec.executable};
  args.insert(args.end(), spec.args.begin(), spec.args.end());
  spec.executable = self;
  spec.args = std::move(args);
  auto& reg = live_jobs();
  std::lock_guard<std::mutex> guard{reg.mtx};
  auto child = child_process::start(spec, std::move(on_exit));
  state_->sessions.push_back(child->pid());
  return child;
}

bool peer_job::signal(int sig, std::chrono::milliseconds bound) {
  std::vector<pid_t> sessions;
  {
    std::lock_guard<std::mutex> guard{live_jobs().mtx};
    sessions = state_->sessions;
  }
  return stop_sessions(sessions, sig, bound);
}

} // namespace hvactor::bench_tool
