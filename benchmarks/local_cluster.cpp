#include "local_cluster.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "tools/cluster/node_options.hpp"

extern char** environ;

namespace hvactor::bench {

using namespace std::chrono_literals;

pid_t spawn_process(const std::vector<std::string>& argv, const std::string& out_path,
                    const std::string& err_path, const std::vector<std::string>& extra_env) {
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  auto overridden = [&](const char* entry) {
    for (auto& e : extra_env) {
      auto name = e.substr(0, e.find('=') + 1);
      if (std::strncmp(entry, name.c_str(), name.size()) == 0)
        return true;
    }
    return false;
  };
  for (char** e = environ; *e != nullptr; ++e)
    if (!overridden(*e))
      env.push_back(*e);
  for (auto& e : extra_env)
    env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  constexpr int flags = O_WRONLY | O_CREAT | O_APPEND; // no O_CLOEXEC: these are the child's stdout and stderr
  if (!out_path.empty())
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), flags, 0600);
  if (!err_path.empty())
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), flags, 0600);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

int wait_process(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    auto got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (got < 0 && errno != EINTR)
      return -2; // not our child (already reaped)
    if (std::chrono::steady_clock::now() >= deadline)
      return -1;
    std::this_thread::sleep_for(2ms);
  }
}

int stop_process(pid_t pid, std::chrono::milliseconds grace) {
  ::kill(pid, SIGTERM);
  int rc = wait_process(pid, grace);
  if (rc == -1) {
    ::kill(pid, SIGKILL);
    rc = wait_process(pid, 5s);
  }
  return rc;
}

std::string make_temp_dir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string{base && *base ? base : "/tmp"} + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    throw std::runtime_error("cannot create a temporary directory " + templ + ": "
                             + std::strerror(errno));
  return buf.data();
}

void remove_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

std::string tail_of(const std::string& path, int lines) {
  std::ifstream in{path};
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines)
      last.pop_front();
  }
  std::string out;
  for (auto& l : last)
    out += "\n    " + l;
  return out.empty() ? std::string{" (nothing)"} : out;
}

local_cluster::local_cluster(options opts) : opts_(std::move(opts)) {
  std::filesystem::create_directories(opts_.dir);
  try {
    for (int i = 0; i < opts_.nodes; ++i) {
      bool head = i == 0;
      auto id = head ? std::string{"head"} : "node" + std::to_string(i);
      auto work = opts_.dir + "/" + id;
      auto out = opts_.dir + "/" + id + ".out";
      auto err = opts_.dir + "/" + id + ".err";
      cluster::node_command node;
      node.binary = opts_.node_binary;
      node.head = head;
      if (head)
        node.port = 0;
      else
        node.address = address_;
      node.num_cpus = opts_.cpus_per_node;
      node.node_id = id;
      node.work_dir = work;
      pids_.push_back(spawn_process(node.argv(), out, err));
      work_dirs_.push_back(work);
      if (head)
        address_ = *cluster::listening_address(wait_for_line(pids_.back(), out, [](auto& line) {
          return cluster::listening_address(line).has_value();
        }));
      else
        wait_for_line(pids_.back(), out, cluster::joined_line);
    }
  } catch (...) {
    stop();
    throw;
  }
}

local_cluster::~local_cluster() {
  stop();
}

void local_cluster::stop() {
  // Nodes first, the head last: nodes then leave a live registry.
  for (auto i = pids_.rbegin(); i != pids_.rend(); ++i)
    ::kill(*i, SIGTERM);
  for (auto i = pids_.rbegin(); i != pids_.rend(); ++i)
    if (wait_process(*i, 5s) == -1) {
      ::kill(*i, SIGKILL);
      wait_process(*i, 5s);
    }
  pids_.clear();
}

std::string local_cluster::wait_for_line(pid_t pid, const std::string& path,
                                         const std::function<bool(const std::string&)>& ready) {
  auto deadline = std::chrono::steady_clock::now() + opts_.ready_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in{path};
    for (std::string line; std::getline(in, line);)
      if (ready(line))
        return line;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pids_.erase(std::find(pids_.begin(), pids_.end(), pid));
      throw std::runtime_error("hvactor-node (" + path + ") exited before it was ready; stderr:"
                               + tail_of(path.substr(0, path.size() - 4) + ".err"));
    }
    std::this_thread::sleep_for(10ms);
  }
  throw std::runtime_error("hvactor-node (" + path + ") printed no ready line within "
                           + std::to_string(opts_.ready_timeout.count()) + " s; stderr:"
                           + tail_of(path.substr(0, path.size() - 4) + ".err"));
}

} // namespace hvactor::bench
