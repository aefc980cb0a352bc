#include "tools/hvactor_bench/scale/scale_usage.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace hvactor::bench_tool {

namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& file) {
  std::ifstream in{file};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Fields of /proc/PID/stat after the command's closing parenthesis
/// (field 3, the state, first); empty when the process is gone.
std::vector<std::string> stat_fields(pid_t pid) {
  auto text = read_all(fmt::format("/proc/{}/stat", pid));
  auto close = text.rfind(')');
  std::vector<std::string> out;
  if (close == std::string::npos)
    return out;
  std::istringstream in{text.substr(close + 1)};
  for (std::string f; in >> f;)
    out.push_back(f);
  return out;
}

/// Every process's parent, from /proc.
std::map<pid_t, pid_t> parents() {
  std::map<pid_t, pid_t> out;
  for (auto& e : fs::directory_iterator{"/proc"}) {
    auto name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit))
      continue;
    auto f = stat_fields(static_cast<pid_t>(std::stol(name)));
    if (f.size() > 1)
      out[static_cast<pid_t>(std::stol(name))] = static_cast<pid_t>(std::stol(f[1]));
  }
  return out;
}

/// Every descendant of the `roots` (not the roots themselves).
std::vector<pid_t> descendants(const std::set<pid_t>& roots) {
  auto ppid = parents();
  std::vector<pid_t> out;
  for (auto& [pid, parent] : ppid) {
    if (roots.count(pid))
      continue;
    // Up the chain to a root or to init (a bounded walk: no cycles in /proc).
    for (pid_t p = parent, hops = 0; p > 1 && hops < 64; ++hops) {
      if (roots.count(p)) {
        out.push_back(pid);
        break;
      }
      auto it = ppid.find(p);
      if (it == ppid.end())
        break;
      p = it->second;
    }
  }
  return out;
}

/// state.json's "pids" object: member -> pid.
std::map<std::string, pid_t> netcluster_pids(const std::string& dir) {
  auto text = read_all(fs::path{dir} / "state.json");
  std::smatch block;
  std::map<std::string, pid_t> out;
  if (!std::regex_search(text, block, std::regex{R"re("pids"\s*:\s*\{([^}]*)\})re"}))
    throw std::runtime_error("cannot find the nodes' pids in " + dir + "/state.json");
  std::string body = block[1];
  std::regex pair{R"re("([A-Za-z0-9_-]+)"\s*:\s*(\d+))re"};
  for (std::sregex_iterator i{body.begin(), body.end(), pair}, end; i != end; ++i)
    out[(*i)[1]] = static_cast<pid_t>(std::stol((*i)[2]));
  return out;
}

} // namespace

std::vector<pid_t> cluster_processes::all() const {
  std::vector<pid_t> out;
  if (head > 0)
    out.push_back(head);
  for (auto& [id, pid] : nodes)
    out.push_back(pid);
  if (driver > 0)
    out.push_back(driver);
  out.insert(out.end(), workers.begin(), workers.end());
  return out;
}

cluster_processes find_cluster_processes() {
  cluster_processes p;
  p.driver = ::getpid();
  std::set<pid_t> roots;
  if (const char* dir = std::getenv("NETCLUSTER_STATE_DIR"); dir != nullptr && *dir != 0) {
    for (auto& [member, pid] : netcluster_pids(dir)) {
      if (member == "head")
        p.head = pid;
      else
        p.nodes[member] = pid;
    }
    for (auto& [id, pid] : p.nodes)
      roots.insert(pid);
  } else {
    roots.insert(p.driver);
  }
  p.workers = descendants(roots);
  return p;
}

uint64_t rss_bytes(pid_t pid) {
  std::ifstream in{fmt::format("/proc/{}/statm", pid)};
  uint64_t size = 0, resident = 0;
  if (!(in >> size >> resident))
    return 0;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

double cpu_seconds(pid_t pid) {
  auto f = stat_fields(pid);
  // utime and stime are fields 14 and 15 of stat: 11 and 12 after the state.
  if (f.size() < 13)
    return -1;
  return static_cast<double>(std::stoll(f[11]) + std::stoll(f[12]))
         / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

namespace {

/// Every thread of `pids`: (index in pids, thread name) -> CPU seconds.
std::map<std::pair<size_t, std::string>, double> thread_seconds(const std::vector<pid_t>& pids) {
  std::map<std::pair<size_t, std::string>, double> out;
  for (size_t i = 0; i < pids.size(); ++i) {
    std::error_code ec;
    for (auto& t : fs::directory_iterator{fmt::format("/proc/{}/task", pids[i]), ec}) {
      auto text = read_all(t.path() / "stat");
      auto open = text.find('('), close = text.rfind(')');
      if (open == std::string::npos || close == std::string::npos)
        continue;
      auto comm = text.substr(open + 1, close - open - 1);
      std::istringstream in{text.substr(close + 1)};
      std::vector<std::string> f;
      for (std::string w; in >> w;)
        f.push_back(w);
      if (f.size() > 12)
        out[{i, comm}] += static_cast<double>(std::stoll(f[11]) + std::stoll(f[12]))
                          / static_cast<double>(::sysconf(_SC_CLK_TCK));
    }
  }
  return out;
}

} // namespace

idle_cpu measure_idle_cpu(const cluster_processes& p, double seconds) {
  auto pids = p.all();
  std::vector<double> before;
  for (auto pid : pids)
    before.push_back(cpu_seconds(pid));
  auto threads_before = thread_seconds(pids);
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  idle_cpu out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::set<pid_t> nodes;
  for (auto& [id, pid] : p.nodes)
    nodes.insert(pid);
  auto role_of = [&](pid_t pid) -> std::string {
    return pid == p.head ? "head" : nodes.count(pid) ? "node" : pid == p.driver ? "driver" : "worker";
  };
  std::map<std::string, double> by_thread;
  for (auto& [key, after] : thread_seconds(pids))
    if (auto b = threads_before.find(key); b != threads_before.end())
      by_thread[role_of(pids[key.first]) + " " + key.second] +=
        100.0 * (after - b->second) / out.seconds;
  out.threads.assign(by_thread.begin(), by_thread.end());
  std::sort(out.threads.begin(), out.threads.end(),
            [](auto& a, auto& b) { return a.second > b.second; });
  for (size_t i = 0; i < pids.size(); ++i) {
    auto after = cpu_seconds(pids[i]);
    if (before[i] < 0 || after < 0)
      continue;
    double percent = 100.0 * (after - before[i]) / out.seconds;
    auto pid = pids[i];
    auto role = role_of(pid);
    (role == "head" ? out.head : role == "node" ? out.nodes
                               : role == "driver" ? out.driver
                                                  : out.workers) += percent;
    if (percent > out.busiest_percent) {
      out.busiest_percent = percent;
      out.busiest = fmt::format("{} (pid {})", role, pid);
    }
  }
  return out;
}

} // namespace hvactor::bench_tool
