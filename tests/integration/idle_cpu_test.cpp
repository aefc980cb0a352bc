// An idle cluster on loopback (a head and two nodes, real hvactor-node
// processes) with an idle job (a driver and a worker per node, each of
// whose ranks did hvd::init() and then waits): every process sleeps nearly
// all the time. Wake-ups (voluntary context switches of all its threads)
// and CPU time are read from /proc over a few seconds. What used to wake
// them: a 50 ms poll of each worker's monitor thread on its node, CAF's
// scheduler threads looking for work to steal, heartbeats at their own
// phase in every process, the dashboard's threads, the Gloo loop's pacer,
// the colocators' usage samples every 2 s.

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "cluster_support.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;

namespace {

/// A process's wake-ups and CPU time so far (all its threads).
struct usage {
  long wakeups = 0;
  double cpu_ms = 0;
};

usage usage_of(int pid) {
  usage u;
  std::error_code ec;
  auto dir = "/proc/" + std::to_string(pid) + "/task";
  for (auto& task : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream status{task.path() / "status"};
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0)
        u.wakeups += std::stol(line.substr(line.find(':') + 1));
    std::ifstream schedstat{task.path() / "schedstat"};
    long long run_ns = 0;
    if (schedstat >> run_ns)
      u.cpu_ms += static_cast<double>(run_ns) / 1e6;
  }
  return u;
}

struct member {
  std::string role;
  int pid = 0;
  usage before;
};

/// Per second: wake-ups and CPU milliseconds of each member over `window`.
std::map<std::string, std::vector<std::pair<double, double>>> measure(
  std::vector<member>& members, std::chrono::milliseconds window) {
  for (auto& m : members)
    m.before = usage_of(m.pid);
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(window);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::map<std::string, std::vector<std::pair<double, double>>> out;
  for (auto& m : members) {
    auto after = usage_of(m.pid);
    out[m.role].emplace_back(static_cast<double>(after.wakeups - m.before.wakeups) / seconds,
                             (after.cpu_ms - m.before.cpu_ms) / seconds);
  }
  return out;
}

} // namespace

TEST_SUITE("idle cpu") {

TEST_CASE("an idle cluster with an idle job: no process wakes more than a few times a second") {
  cluster c; // head, node-a, node-b
  auto drv = c.driver({"idle", "3", "1", "30", "--timeout-ms", "30000"});
  auto idle = drv->read_line_with("IDLE", 90s);
  INFO("driver stdout:\n" << drv->stdout_text() << "\nstderr:\n" << drv->stderr_text());
  REQUIRE(idle);
  std::vector<member> members{{"head", c.node("head").pid(), {}},
                              {"node", c.node("node-a").pid(), {}},
                              {"node", c.node("node-b").pid(), {}},
                              {"driver", drv->pid(), {}}};
  for (int pid : parse_ints(first_line(*drv, "PIDS")))
    members.push_back({"worker", pid, {}});
  REQUIRE(members.size() == 7);
  // Past the start's busy tails (the first usage samples, Gloo's connects).
  std::this_thread::sleep_for(3s);
  auto rates = measure(members, 6s);
  double total_cpu = 0;
  std::ostringstream table;
  for (auto& [role, each] : rates)
    for (auto& [wakes, cpu] : each) {
      table << role << ": " << wakes << " wake-ups/s, " << cpu << " ms CPU/s\n";
      total_cpu += cpu;
    }
  MESSAGE("idle processes over 6 s:\n" << table.str() << "all: " << total_cpu << " ms CPU/s");
  // Before: a node 29 wake-ups a second (20 of them its worker's monitor),
  // the head 37, the driver 18, a worker 22; 9 ms of CPU a second in all.
  // Heartbeats (3 wake-ups a tick, every 2 s, and the peers' arriving
  // with them) and the workers' own collectives heartbeat remain.
  for (auto& [wakes, cpu] : rates["head"])
    CHECK(wakes < 6);
  for (auto& [wakes, cpu] : rates["node"])
    CHECK(wakes < 6);
  for (auto& [wakes, cpu] : rates["driver"])
    CHECK(wakes < 8);
  for (auto& [wakes, cpu] : rates["worker"])
    CHECK(wakes < 8);
  CHECK(total_cpu < 5.0);
  REQUIRE(drv->read_line_with("DONE", 60s));
  CHECK(c.no_workers_within(5s));
}

} // TEST_SUITE
