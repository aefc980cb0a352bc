#include "allreduce_mpi_peer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

extern char** environ;

namespace hvactor::bench {

std::vector<std::string> mpi_command(const mpi_request& req) {
  std::vector<std::string> cmd{req.mpirun, "--allow-run-as-root", "--oversubscribe", "-np",
                               std::to_string(req.ranks)};
  if (req.tcp)
    for (const char* arg : {"--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo",
                            "--mca", "oob_tcp_if_include", "lo"})
      cmd.emplace_back(arg);
  cmd.insert(cmd.end(), {req.program, "--min-bytes", std::to_string(req.min_bytes),
                         "--max-bytes", std::to_string(req.max_bytes), "--budget-ms",
                         fmt::format("{}", req.budget_ms)});
  return cmd;
}

namespace {

/// Adds one output line of the peer to `out`.
void parse_line(const std::string& line, mpi_sweep& out) {
  if (line.empty() || line[0] == '#')
    return;
  if (line.rfind("error ", 0) == 0) {
    out.errors.push_back("MPI_Allreduce returned a wrong sum: " + line.substr(6));
    return;
  }
  std::istringstream in{line};
  uint64_t bytes = 0;
  mpi_point p;
  if (in >> bytes >> p.time_us >> p.p50_us)
    out.points[bytes] = p;
}

std::string describe_status(int status) {
  if (WIFEXITED(status))
    return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string{"signal "} + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

} // namespace

mpi_sweep run_mpi_peer(const mpi_request& req) {
  mpi_sweep out;
  // Everything the child needs is built before fork(): the driver has
  // threads, so the child may only make async-signal-safe calls.
  auto cmd = mpi_command(req);
  std::vector<char*> argv;
  for (auto& a : cmd)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings{"OMPI_ALLOW_RUN_AS_ROOT=1",
                                       "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "OMPI_ALLOW_RUN_AS_ROOT", 22) != 0)
      env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings)
    envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    out.errors.push_back(std::string{"pipe: "} + std::strerror(errno));
    return out;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    out.errors.push_back(std::string{"fork: "} + std::strerror(errno));
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return out;
  }
  if (pid == 0) {
    ::setpgid(0, 0); // its own group, so that the whole job can be killed
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::close_range(3, ~0U, 0);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid); // also here: no race with the child's own setpgid
  ::close(out_pipe[1]);

  auto deadline = std::chrono::steady_clock::now() + req.limit;
  std::string pending;
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{out_pipe[0], POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      continue;
    char buf[4096];
    ssize_t n = ::read(out_pipe[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break; // EOF: mpirun closed stdout (it is ending)
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      parse_line(pending.substr(0, nl), out);
      pending.erase(0, nl + 1);
    }
  }
  parse_line(pending, out);
  ::close(out_pipe[0]);
  if (timed_out) {
    // SIGTERM first: mpirun then stops the ranks it started (which may sit
    // in process groups of their own); SIGKILL to its group 5 s later.
    ::kill(-pid, SIGTERM);
    out.errors.push_back("stopped after the limit of " + std::to_string(req.limit.count())
                         + " s");
  }
  int status = 0;
  // After EOF mpirun is exiting; bound the wait anyway (10 s).
  for (int i = 0; ::waitpid(pid, &status, WNOHANG) == 0; ++i) {
    if (i == (timed_out ? 50 : 100))
      ::kill(-pid, SIGKILL);
    ::usleep(100'000);
  }
  if (!timed_out && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    out.errors.push_back("mpirun ended with " + describe_status(status));
  return out;
}

} // namespace hvactor::bench
