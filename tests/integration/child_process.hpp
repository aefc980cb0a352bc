#pragma once

// Child processes for multi-process tests: stdout and stderr captured in
// files, waits for a line or an exit with a timeout, and SIGKILL + reap on
// destruction; a temp dir removed on destruction; run-to-completion
// commands.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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
  /// HVACTOR_TEST_KEEP_DIRS=1 keeps it (and its logs) for a post-mortem.
  ~temp_dir() {
    if (const char* keep = std::getenv("HVACTOR_TEST_KEEP_DIRS"); keep && *keep == '1')
      return;
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

} // namespace hvactor::test
