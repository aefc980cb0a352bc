#pragma once

// Helpers for multi-process tests: pid liveness, bounded waits, and a
// child process whose stdout the test reads.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace hvactor::test {

/// True while `pid` exists and is not a zombie.
inline bool pid_alive(int pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0)
    return false;
  std::ifstream stat{"/proc/" + std::to_string(pid) + "/stat"};
  std::string line;
  if (!std::getline(stat, line))
    return false;
  auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

/// Polls `pred` every 20 ms until it holds or `timeout` passed.
inline bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

/// True once none of `pids` is alive, within `timeout`.
inline bool all_gone(const std::vector<int>& pids, std::chrono::milliseconds timeout) {
  return wait_until(
    [&] {
      for (int pid : pids)
        if (pid_alive(pid))
          return false;
      return true;
    },
    timeout);
}

/// A program started by a test, its stdout on a pipe. Killed and reaped on
/// destruction.
class program {
public:
  explicit program(std::vector<std::string> argv) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      std::vector<char*> args;
      for (auto& a : argv)
        args.push_back(a.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out[1]);
    fd_ = out[0];
  }

  ~program() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0)
      ::close(fd_);
  }

  int pid() const {
    return pid_;
  }

  /// Reads stdout until a line starting with `prefix` arrives; returns the
  /// rest of that line, or "" after `timeout`.
  std::string read_line_with(const std::string& prefix, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      for (size_t pos; (pos = buf_.find('\n')) != std::string::npos;) {
        auto line = buf_.substr(0, pos);
        buf_.erase(0, pos + 1);
        if (line.rfind(prefix, 0) == 0)
          return line.substr(prefix.size());
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        return "";
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0)
        return "";
      char chunk[4096];
      auto n = ::read(fd_, chunk, sizeof(chunk));
      if (n <= 0)
        return "";
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

  /// SIGKILLs the program and reaps it.
  void kill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

private:
  int pid_ = -1;
  int fd_ = -1;
  std::string buf_;
};

/// Integers of a whitespace-separated list.
inline std::vector<int> parse_ints(const std::string& text) {
  std::vector<int> out;
  std::istringstream in{text};
  for (int x; in >> x;)
    out.push_back(x);
  return out;
}

} // namespace hvactor::test
