// Failures of a real cluster on loopback: a node or the driver SIGKILLed,
// a node stopped (SIGSTOP) or shut down (SIGTERM), a node restarted under
// its old id, a head that does not exist. Each ends in a clear error or a
// clean state within seconds, never a hang, and leaves no worker behind.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "cluster_support.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;

namespace {

using clock_type = std::chrono::steady_clock;

/// netfault_driver's ranks once each wrote RUNS/running-R ("host pid"):
/// rank -> (host, pid).
std::map<int, std::pair<std::string, int>> wait_running(const std::filesystem::path& runs) {
  std::map<int, std::pair<std::string, int>> running;
  REQUIRE(wait_until(
    [&] {
      for (int r = 0; r < 3; ++r)
        if (!running.count(r))
          if (auto w = split_words(read_file(runs / ("running-" + std::to_string(r))));
              w.size() == 2)
            running[r] = {w[0], std::stoi(w[1])};
      return running.size() == 3;
    },
    60s));
  return running;
}

/// The rank that runs on `node`.
int rank_on(const std::map<int, std::pair<std::string, int>>& running, const std::string& node) {
  int rank = -1;
  for (auto& [r, hp] : running)
    if (hp.first == node)
      rank = r;
  REQUIRE(rank >= 0);
  return rank;
}

/// netfault_driver on `c`: 3 ranks, one per node, 4 Mi floats each
/// (16 MiB: the ring), no pause; returned once every rank ran an allreduce
/// (and 200 ms more), with the rank on node-b.
struct ring_job {
  std::filesystem::path runs;
  std::unique_ptr<process> drv;
  std::map<int, std::pair<std::string, int>> running;
  int victim = -1;
};

ring_job start_ring_job(cluster& c) {
  ring_job j;
  j.runs = c.dir() / "runs";
  std::filesystem::create_directories(j.runs);
  j.drv = c.driver_program(HVACTOR_NETFAULT_DRIVER,
                           {"3", "1000000", "4194304", "0", j.runs.string()});
  j.running = wait_running(j.runs);
  j.victim = rank_on(j.running, "node-b");
  std::this_thread::sleep_for(200ms);
  return j;
}

/// Pids of the ranks on `node`, given a driver's NODES and PIDS lines.
std::vector<int> pids_on(const std::string& node, const std::vector<std::string>& nodes,
                         const std::vector<int>& pids) {
  std::vector<int> out;
  for (size_t i = 0; i < nodes.size() && i < pids.size(); ++i)
    if (nodes[i] == node)
      out.push_back(pids[i]);
  return out;
}

/// A driver holding 6 workers (every CPU of the cluster) inside a long call.
struct held_job {
  std::unique_ptr<process> driver;
  std::vector<std::string> nodes;
  std::vector<int> pids;

  held_job(cluster& c, int seconds) : driver(c.driver({"hold", "6", std::to_string(seconds)})) {
    auto line = driver->read_line_with("PIDS", 30s);
    INFO("driver stdout:\n" << driver->stdout_text() << "\nstderr:\n" << driver->stderr_text());
    REQUIRE(line);
    pids = parse_ints(*line);
    nodes = split_words(first_line(*driver, "NODES"));
    REQUIRE(pids.size() == 6);
    REQUIRE(nodes.size() == 6);
    for (int pid : pids)
      REQUIRE(pid_alive(pid));
    std::this_thread::sleep_for(300ms); // let the long call reach the workers
  }
};

/// How long the driver's shutdown() took, from its STOPPING and DONE lines.
long long shutdown_ms(const process& driver) {
  auto stopping = first_line(driver, "STOPPING ");
  auto done = first_line(driver, "DONE ");
  REQUIRE(!stopping.empty());
  REQUIRE(!done.empty());
  return std::stoll(done) - std::stoll(stopping);
}

bool lists(const cluster_status& st, const std::string& id) {
  return st.find(id) != nullptr;
}

} // namespace

TEST_SUITE("cluster failures") {

TEST_CASE("SIGKILL of a node in the middle of a long call fails the job within 5 s naming that "
          "node, and no worker of the job survives the driver's shutdown") {
  cluster c;
  held_job job{c, 30};
  auto on_victim = pids_on("node-a", job.nodes, job.pids);
  REQUIRE(on_victim.size() == 2);
  auto t0 = clock_type::now();
  c.kill_node("node-a");
  auto error = job.driver->read_line_with("ERROR ", 5s);
  auto elapsed = clock_type::now() - t0;
  INFO("driver stdout:\n" << job.driver->stdout_text() << "\nstderr:\n"
                          << job.driver->stderr_text());
  REQUIRE(error);
  CHECK(elapsed < 5s);
  bool node_lost = error->rfind("node_lost: ", 0) == 0;
  bool worker_error = error->rfind("worker_error: ", 0) == 0;
  CHECK((node_lost || worker_error));
  CHECK(error->find("'node-a'") != std::string::npos);
  if (node_lost)
    for (int pid : on_victim)
      CHECK(error->find("pid " + std::to_string(pid)) != std::string::npos);
  CHECK(all_gone(on_victim, 2s)); // the node's workers die with it
  REQUIRE(job.driver->read_line_with("DONE", 20s));
  // The node is known to be gone: shutdown() has nobody there to wait for.
  CHECK(shutdown_ms(*job.driver) < 5000);
  CHECK(all_gone(job.pids, 2s));
  CHECK(c.no_workers_within(2s));
  auto exit = job.driver->wait_exit(10s);
  REQUIRE(exit);
  CHECK(exit->exited);
  CHECK(exit->code == 1);
  // The survivors are free again.
  auto st = c.wait_for_status([](const cluster_status& s) { return s.all_free(); }, 3s);
  INFO("status:\n" << st.result.out);
  CHECK(st.all_free());
  CHECK(st.nodes.size() == 2);
  CHECK(!lists(st, "node-a"));
}

TEST_CASE("SIGKILL of the driver frees every node within 5 s and ends all its workers") {
  cluster c;
  held_job job{c, 60};
  auto job_prefix = "job-" + std::to_string(job.driver->pid()) + "-";
  auto during = c.status();
  REQUIRE(during.ok());
  CHECK(during.free_cpus() == 0);
  auto t0 = clock_type::now();
  job.driver->kill();
  auto st = c.wait_for_status([](const cluster_status& s) { return s.all_free(); }, 5s);
  auto elapsed = clock_type::now() - t0;
  INFO("status:\n" << st.result.out << st.result.err);
  CHECK(st.all_free());
  CHECK(st.nodes.size() == 3);
  // The 5 s connection timeout, up to a 1 s heartbeat tick, one status round trip.
  CHECK(elapsed < 8s);
  CHECK(all_gone(job.pids, 5s));
  CHECK(c.no_workers_within(1s));
}

TEST_CASE("a node stopped with SIGSTOP leaves the registry within 16 s") {
  cluster c;
  REQUIRE(lists(c.status(), "node-b"));
  auto t0 = clock_type::now();
  c.node("node-b").signal(SIGSTOP);
  auto st = c.wait_for_status([](const cluster_status& s) { return s.ok() && !lists(s, "node-b"); },
                              18s);
  auto elapsed = clock_type::now() - t0;
  c.node("node-b").signal(SIGCONT);
  c.kill_node("node-b");
  INFO("status:\n" << st.result.out << st.result.err);
  CHECK(st.ok());
  CHECK(!lists(st, "node-b"));
  CHECK(lists(st, "head"));
  CHECK(lists(st, "node-a"));
  // The 9 s connection timeout checked at a 4 s heartbeat tick (8-12 s after
  // the freeze), one status round trip, slack for a loaded machine.
  CHECK(elapsed < 16s);
}

TEST_CASE("a node frozen with its worker while the others wait on it inside a ring allreduce: "
          "every survivor fails within 16 s naming the frozen rank, not after Gloo's timeout") {
  // The survivors wait in the ring's reduce-scatter, on Gloo's own scratch
  // buffer; the driver's closed scope (node_lost) must wake that wait too.
  cluster c;
  auto [runs, drv, running, victim] = start_ring_job(c);
  auto t0 = clock_type::now();
  c.node("node-b").signal(SIGSTOP);
  ::kill(running[victim].second, SIGSTOP);
  auto error = drv->read_line_with("ERROR ", 18s);
  // Each survivor writes its report as its collective fails.
  std::map<int, std::string> reports;
  wait_until(
    [&] {
      for (auto& [r, hp] : running)
        if (r != victim && !reports.count(r))
          if (auto text = read_file(runs / ("rank-" + std::to_string(r))); !text.empty())
            reports[r] = text;
      return reports.size() == 2;
    },
    15s);
  ::kill(running[victim].second, SIGKILL);
  c.node("node-b").signal(SIGCONT);
  c.kill_node("node-b");
  INFO("driver stdout:\n" << drv->stdout_text() << "\nstderr:\n" << drv->stderr_text());
  REQUIRE(error);
  CHECK(error->find("node_lost") != std::string::npos);
  CHECK(error->find("'node-b'") != std::string::npos);
  REQUIRE(reports.size() == 2);
  auto t0_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
  for (auto& [r, text] : reports) {
    INFO("rank " << r << ": " << text);
    auto w = split_words(text);
    REQUIRE(w.size() > 3);
    CHECK(w[0] == "collective_error");
    CHECK(w[1] == std::to_string(victim));
    CHECK(text.find("peer rank " + std::to_string(victim)) != std::string::npos);
    double after_s = static_cast<double>(std::stoll(w[2]) - t0_ns) / 1e9;
    MESSAGE("rank " << r << " failed " << after_s << " s after the freeze");
    CHECK(after_s < 16.0); // the 9 s connection timeout checked at a 4 s tick (8-12 s)
  }
  REQUIRE(drv->read_line_with("DONE", 30s));
  CHECK(c.no_workers_within(5s));
}

TEST_CASE("a worker frozen alone (SIGSTOP; its node answers) fails the job with worker_error "
          "naming it, not node_lost") {
  // The driver drops the frozen worker's connection after the heartbeat
  // timeout and asks its node's colocator, which answers: the worker is
  // to blame, its node is not lost.
  cluster c;
  auto [runs, drv, running, victim] = start_ring_job(c);
  auto t0 = clock_type::now();
  ::kill(running[victim].second, SIGSTOP);
  auto error = drv->read_line_with("ERROR ", 24s);
  auto elapsed = clock_type::now() - t0;
  ::kill(running[victim].second, SIGKILL);
  INFO("driver stdout:\n" << drv->stdout_text() << "\nstderr:\n" << drv->stderr_text());
  REQUIRE(error);
  CHECK(error->find("worker_error") != std::string::npos);
  CHECK(error->find("lost the connection to worker rank " + std::to_string(victim))
        != std::string::npos);
  CHECK(error->find("node_lost") == std::string::npos);
  // The 9 s timeout checked at a 4 s tick (8-12 s), the exit-report grace,
  // the node's answer.
  CHECK(elapsed < 18s);
  REQUIRE(drv->read_line_with("DONE", 30s));
  CHECK(c.no_workers_within(10s));
}

TEST_CASE("a node resumed after a long SIGSTOP is back in the registry within 2 s and runs "
          "workers") {
  cluster c{{.node_ids = {"head", "node-a"}}};
  REQUIRE(lists(c.status(), "node-a"));
  c.node("node-a").signal(SIGSTOP);
  // Long enough for the head to drop it (8-12 s) and for CAF's view of
  // the old connection to go stale on both sides.
  REQUIRE(c.wait_for_status([](const cluster_status& s) { return s.ok() && !lists(s, "node-a"); },
                            16s)
            .ok());
  std::this_thread::sleep_for(5s);
  auto t0 = clock_type::now();
  c.node("node-a").signal(SIGCONT);
  auto st = c.wait_for_status([](const cluster_status& s) { return s.ok() && lists(s, "node-a"); },
                              5s);
  auto elapsed = clock_type::now() - t0;
  INFO("node stderr:\n" << c.node("node-a").stderr_text());
  CHECK(lists(st, "node-a"));
  CHECK(elapsed < 2s);
  MESSAGE("node back after " << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
                             << " ms");
  auto driver = c.driver({"hosts", "2", "1"});
  REQUIRE(driver->read_line_with("DONE", 60s));
  CHECK(driver->stdout_text().find("host=node-a") != std::string::npos);
}

TEST_CASE("a long-lived driver runs its next job on a head that was restarted on the same port") {
  cluster c;
  auto go = c.dir() / "go";
  auto driver = c.driver({"twice-after", "2", go.string(), "--placement-ms", "15000"});
  REQUIRE(driver->read_line_with("PAUSED", 60s));
  c.restart_head();
  // Its nodes rejoin within about a second.
  auto st = c.wait_for_status([](const cluster_status& s) { return s.ok() && s.nodes.size() == 3; },
                              10s);
  REQUIRE(st.nodes.size() == 3);
  auto t0 = clock_type::now();
  std::ofstream{go} << "go\n";
  auto done = driver->read_line_with("DONE", 60s);
  INFO("driver stdout:\n" << driver->stdout_text() << "\nstderr:\n" << driver->stderr_text());
  REQUIRE(done);
  CHECK(driver->stdout_text().find("ERROR") == std::string::npos);
  auto exit = driver->wait_exit(20s);
  REQUIRE(exit);
  CHECK(exit->code == 0);
  MESSAGE("second job after the head restart took "
          << std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count()
          << " ms");
}

TEST_CASE("a node restarted under its old id after SIGKILL rejoins and runs workers") {
  cluster c;
  c.kill_node("node-b");
  auto gone = c.wait_for_status([](const cluster_status& s) { return s.ok() && !lists(s, "node-b"); },
                                5s);
  CHECK(!lists(gone, "node-b"));
  c.start_node("node-b"); // same id, same work dir; throws if it cannot join
  auto back = c.status();
  INFO("status:\n" << back.result.out << back.result.err);
  REQUIRE(back.ok());
  REQUIRE(lists(back, "node-b"));
  CHECK(back.find("node-b")->cpu_free == 2);
  CHECK(back.nodes.size() == 3);
  auto driver = c.driver({"hosts", "3", "2"});
  auto done = driver->read_line_with("DONE", 60s);
  auto exit = driver->wait_exit(10s);
  INFO("driver stdout:\n" << driver->stdout_text() << "\nstderr:\n" << driver->stderr_text());
  REQUIRE(done);
  REQUIRE(exit);
  CHECK(exit->success());
  auto nodes = split_words(first_line(*driver, "NODES"));
  CHECK(std::count(nodes.begin(), nodes.end(), "node-b") == 2);
  CHECK(all_gone(parse_ints(first_line(*driver, "PIDS")), 5s));
  CHECK(c.no_workers_within(5s));
}

TEST_CASE("SIGTERM stops a node cleanly: exit status 0 and its workers gone") {
  cluster c;
  held_job job{c, 30};
  auto on_victim = pids_on("node-b", job.nodes, job.pids);
  REQUIRE(on_victim.size() == 2);
  c.node("node-b").signal(SIGTERM);
  auto exit = c.node("node-b").wait_exit(20s);
  INFO("node stderr:\n" << c.node("node-b").stderr_text());
  REQUIRE(exit);
  CHECK(exit->exited);
  CHECK(exit->code == 0);
  CHECK(all_gone(on_victim, 1s));
  // The driver learns of it and shuts down cleanly.
  auto error = job.driver->read_line_with("ERROR ", 10s);
  INFO("driver stdout:\n" << job.driver->stdout_text());
  REQUIRE(error);
  CHECK(error->find("'node-b'") != std::string::npos);
  REQUIRE(job.driver->read_line_with("DONE", 20s));
  CHECK(shutdown_ms(*job.driver) < 5000);
  CHECK(all_gone(job.pids, 2s));
  CHECK(c.no_workers_within(2s));
  auto st = c.wait_for_status([](const cluster_status& s) { return s.all_free(); }, 3s);
  CHECK(st.all_free());
  CHECK(!lists(st, "node-b"));
}

TEST_CASE("joining a head that does not exist fails within --connect-timeout naming the "
          "address, for a node and for a driver") {
  temp_dir dir;
  auto address = "127.0.0.1:" + std::to_string(unused_port());
  auto node = run_command({HVACTOR_NODE, "--address", address, "--node-id", "lonely",
                           "--num-cpus", "1", "--work-dir", (dir.path() / "work").string(),
                           "--connect-timeout", "2"},
                          dir.path() / "node", 20s);
  INFO("node stderr: " << node.err);
  CHECK(node.status.exited);
  CHECK(node.status.code == 1);
  CHECK(node.elapsed < 5s); // --connect-timeout 2 plus start and stop
  CHECK(node.err.find(address) != std::string::npos);

  auto driver = run_command({HVACTOR_CLUSTER_DRIVER, "--address", address, "pack", "1"},
                            dir.path() / "driver", 20s);
  INFO("driver stdout: " << driver.out << "\nstderr: " << driver.err);
  CHECK(driver.status.exited);
  CHECK(driver.status.code == 1);
  CHECK(driver.elapsed < 12s); // the runtime waits at most 10 s for the head
  CHECK(driver.out.find("ERROR error: hvactor::runtime: cannot join the cluster at " + address)
        != std::string::npos);
}

} // TEST_SUITE
