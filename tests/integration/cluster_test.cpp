// A real cluster on loopback: a head and two nodes (hvactor-node processes
// with distinct ids, 2 CPUs each), cluster_driver as the driver. Placement,
// Horovod's rank layout, `hvactor-node status`, concurrent jobs and code
// shipping, as a user sees them.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cluster_support.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;

namespace {

/// Waits for a driver to finish: `jobs` DONE lines and a clean exit.
void require_success(process& driver, std::chrono::milliseconds timeout = 60s, int jobs = 1) {
  INFO("driver stdout:\n" << driver.stdout_text() << "\ndriver stderr:\n" << driver.stderr_text());
  for (int i = 0; i < jobs; ++i)
    REQUIRE(driver.read_line_with("DONE", timeout));
  auto exit = driver.wait_exit(10s);
  REQUIRE(exit);
  REQUIRE(exit->success());
}

/// Asserts that the job's workers and every process from a node's binary
/// cache are gone within 5 s.
void check_no_workers_left(const cluster& c, const std::vector<int>& pids) {
  CHECK(all_gone(pids, 5s));
  CHECK(c.no_workers_within(5s));
}

long long field_int(const std::map<std::string, std::string>& fields, const std::string& key) {
  auto i = fields.find(key);
  REQUIRE_MESSAGE(i != fields.end(), "no field " << key);
  return std::stoll(i->second);
}

} // namespace

TEST_SUITE("cluster") {

TEST_CASE("num_hosts=3 x num_workers_per_host=2 on a head and two nodes gives each node two "
          "local ranks, a distinct cross rank and its node id as HOROVOD_HOSTNAME") {
  cluster c;
  auto driver = c.driver({"hosts", "3", "2"});
  require_success(*driver);
  auto nodes = split_words(first_line(*driver, "NODES"));
  auto pids = parse_ints(first_line(*driver, "PIDS"));
  auto workers = lines_with(*driver, "WORKER ");
  REQUIRE(workers.size() == 6);
  REQUIRE(nodes.size() == 6);
  std::map<std::string, std::set<long long>> local_ranks_by_host;
  std::map<std::string, std::set<long long>> cross_ranks_by_host;
  std::set<long long> cross_ranks;
  for (size_t rank = 0; rank < workers.size(); ++rank) {
    CAPTURE(workers[rank]);
    auto w = parse_fields(workers[rank]);
    CHECK(field_int(w, "rank") == static_cast<long long>(rank));
    CHECK(field_int(w, "size") == 6);
    CHECK(field_int(w, "local_size") == 2);
    CHECK(field_int(w, "cross_size") == 3);
    CHECK(field_int(w, "pid") == pids.at(rank));
    CHECK(w["host"] == nodes[rank]);
    local_ranks_by_host[w["host"]].insert(field_int(w, "local_rank"));
    cross_ranks_by_host[w["host"]].insert(field_int(w, "cross_rank"));
    cross_ranks.insert(field_int(w, "cross_rank"));
  }
  CHECK(local_ranks_by_host.size() == 3);
  for (auto& id : c.options().node_ids) {
    CAPTURE(id);
    CHECK(local_ranks_by_host[id] == std::set<long long>{0, 1});
    CHECK(cross_ranks_by_host[id].size() == 1); // one cross rank per node
  }
  CHECK(cross_ranks == std::set<long long>{0, 1, 2});
  check_no_workers_left(c, pids);
}

TEST_CASE("num_workers=5 over three 2-CPU nodes packs 2, 2 and 1 ranks, contiguous per node") {
  cluster c;
  auto driver = c.driver({"pack", "5"});
  require_success(*driver);
  auto nodes = split_words(first_line(*driver, "NODES"));
  REQUIRE(nodes.size() == 5);
  std::map<std::string, int> per_node;
  for (auto& n : nodes)
    ++per_node[n];
  std::vector<int> counts;
  for (auto& [id, n] : per_node) {
    CHECK(std::count(c.options().node_ids.begin(), c.options().node_ids.end(), id) == 1);
    counts.push_back(n);
  }
  std::sort(counts.begin(), counts.end());
  CHECK(counts == std::vector<int>{1, 2, 2});
  // Contiguous: once the ranks moved on from a node, they never come back.
  std::set<std::string> finished;
  for (size_t rank = 1; rank < nodes.size(); ++rank) {
    CAPTURE(rank);
    if (nodes[rank] != nodes[rank - 1])
      finished.insert(nodes[rank - 1]);
    CHECK(finished.count(nodes[rank]) == 0);
  }
  check_no_workers_left(c, parse_ints(first_line(*driver, "PIDS")));
}

TEST_CASE("status lists every node with free/total CPUs, the job on the nodes it uses while it "
          "runs, and everything free after shutdown") {
  cluster c;
  auto before = c.status();
  INFO("status stderr: " << before.result.err);
  REQUIRE(before.ok());
  REQUIRE(before.nodes.size() == 3);
  std::set<std::string> addresses;
  for (auto& id : c.options().node_ids) {
    CAPTURE(id);
    auto n = before.find(id);
    REQUIRE(n != nullptr);
    CHECK(n->cpu_free == 2);
    CHECK(n->cpu_total == 2);
    CHECK(n->gpu_free == 0);
    CHECK(n->gpu_total == 0);
    CHECK(n->jobs.empty());
    CHECK(n->address.rfind("127.0.0.1:", 0) == 0);
    addresses.insert(n->address);
  }
  CHECK(addresses.size() == 3);
  CHECK(before.summary == "3 nodes; CPU 6/6 free; GPU 0/0 free");

  auto driver = c.driver({"hold", "5", "3"});
  auto pids_line = driver->read_line_with("PIDS", 30s);
  REQUIRE_MESSAGE(pids_line, driver->stdout_text() << driver->stderr_text());
  auto nodes = split_words(first_line(*driver, "NODES"));
  REQUIRE(nodes.size() == 5);
  auto job_prefix = "job-" + std::to_string(driver->pid()) + "-";
  auto during = c.status();
  REQUIRE(during.ok());
  REQUIRE(during.nodes.size() == 3);
  for (auto& id : c.options().node_ids) {
    CAPTURE(id);
    auto n = during.find(id);
    REQUIRE(n != nullptr);
    auto ranks_here = static_cast<int>(std::count(nodes.begin(), nodes.end(), id));
    CHECK(n->cpu_free == 2 - ranks_here);
    CHECK(n->cpu_total == 2);
    if (ranks_here > 0) {
      REQUIRE(n->jobs.size() == 1);
      CHECK(n->jobs[0].rfind(job_prefix, 0) == 0);
    } else {
      CHECK(n->jobs.empty());
    }
  }
  CHECK(during.summary == "3 nodes; CPU 1/6 free; GPU 0/0 free");

  require_success(*driver);
  auto after = c.wait_for_status([](const cluster_status& s) { return s.all_free(); }, 3s);
  INFO("status after:\n" << after.result.out);
  CHECK(after.all_free());
  CHECK(after.nodes.size() == 3);
  check_no_workers_left(c, parse_ints(*pids_line));
}

TEST_CASE("a job that cannot fit fails with placement_timeout within placement_timeout + 2 s, "
          "naming every node's free resources, and reserves nothing") {
  struct infeasible {
    const char* name;
    std::vector<std::string> args;
  };
  cluster c;
  for (auto& [name, args] : {infeasible{"num_workers=7 on 6 CPUs", {"pack", "7"}},
                             infeasible{"num_hosts=4 on 3 nodes", {"hosts", "4", "1"}}}) {
    CAPTURE(name);
    auto argv = args;
    argv.insert(argv.end(), {"--placement-ms", "2000"});
    auto driver = c.driver(argv);
    auto error = driver->read_line_with("ERROR ", 20s);
    auto elapsed = driver->read_line_with("ELAPSED ", 5s);
    auto exit = driver->wait_exit(15s);
    INFO("driver stdout:\n" << driver->stdout_text() << "\nstderr:\n" << driver->stderr_text());
    REQUIRE(error);
    REQUIRE(elapsed);
    CHECK(error->rfind("placement_timeout: ", 0) == 0);
    CHECK(std::stoll(*elapsed) >= 2000);
    CHECK(std::stoll(*elapsed) < 4000);
    for (auto& id : c.options().node_ids)
      CHECK(error->find("node '" + id + "': CPU 2 free of 2, GPU 0 free of 0")
            != std::string::npos);
    REQUIRE(exit);
    CHECK(exit->exited);
    CHECK(exit->code == 1);
    auto after = c.wait_for_status([](const cluster_status& s) { return s.all_free(); }, 3s);
    INFO("status after:\n" << after.result.out);
    CHECK(after.all_free());
    CHECK(c.no_workers_within(5s));
  }
}

TEST_CASE("two drivers asking for 4 of 6 CPUs each never oversubscribe: the second starts only "
          "once the first shuts down") {
  cluster c;
  auto first = c.driver({"hold", "4", "3"});
  auto first_pids = first->read_line_with("PIDS", 30s);
  REQUIRE_MESSAGE(first_pids, first->stdout_text() << first->stderr_text());
  auto second = c.driver({"hold", "4", "1", "--placement-ms", "20000"});
  auto first_job = "job-" + std::to_string(first->pid()) + "-";
  auto second_job = "job-" + std::to_string(second->pid()) + "-";
  // While the first job runs, the second waits for resources; status never
  // shows more CPUs used than exist, nor the second job.
  int polls = 0;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (first->stdout_text().find("STOPPING") == std::string::npos
         && std::chrono::steady_clock::now() < deadline) {
    auto st = c.status();
    REQUIRE(st.ok());
    // The first job may stop between the check above and this status.
    bool first_running = first->stdout_text().find("STOPPING") == std::string::npos;
    ++polls;
    INFO("status:\n" << st.result.out);
    CHECK(st.nodes.size() == 3);
    for (auto& n : st.nodes) {
      CHECK(n.cpu_free >= 0);
      CHECK(n.cpu_free <= n.cpu_total);
      for (auto& job : n.jobs)
        if (first_running)
          CHECK(job.rfind(first_job, 0) == 0);
    }
    if (first_running)
      CHECK(st.free_cpus() == 2);
    std::this_thread::sleep_for(100ms);
  }
  CHECK(polls >= 2);
  require_success(*first);
  require_success(*second, 40s);
  auto first_stopping = std::stoll(first_line(*first, "STOPPING "));
  auto second_started = std::stoll(first_line(*second, "STARTED "));
  CHECK(second_started > first_stopping);
  CHECK(first_line(*first, "RESULT") == " 0 1 2 3");
  CHECK(first_line(*second, "RESULT") == " 0 1 2 3");
  check_no_workers_left(c, parse_ints(*first_pids));
  check_no_workers_left(c, parse_ints(first_line(*second, "PIDS")));
  CHECK(c.wait_for_status([](const cluster_status& s) { return s.all_free(); }, 3s).all_free());
}

/// Checks a ship-twice driver's workers: each node ran both jobs from one
/// cached copy of the binary in its work dir's bin/, mode 0700.
void check_cached_binaries(cluster& c, process& driver, long long binary_size) {
  auto workers = lines_with(driver, "WORKER ");
  REQUIRE(workers.size() == 12);
  std::set<std::string> exes;
  for (auto& line : workers) {
    CAPTURE(line);
    auto w = parse_fields(line);
    auto bin = c.work_dir(w["host"]) / "bin";
    std::filesystem::path exe = w["exe"];
    CHECK(exe.parent_path() == bin);
    CHECK(exe.filename().string().size() == 64); // sha256, hex
    struct stat file {};
    struct stat dir {};
    REQUIRE(::stat(exe.c_str(), &file) == 0);
    REQUIRE(::stat(bin.c_str(), &dir) == 0);
    CHECK((file.st_mode & 07777) == 0700);
    CHECK((dir.st_mode & 07777) == 0700);
    CHECK(file.st_size == binary_size);
    exes.insert(exe.string());
  }
  CHECK(exes.size() == 3); // one cached copy per node, used by both jobs
  auto pids = parse_ints(lines_with(driver, "PIDS").at(0));
  auto second = parse_ints(lines_with(driver, "PIDS").at(1));
  pids.insert(pids.end(), second.begin(), second.end());
  check_no_workers_left(c, pids);
}

TEST_CASE("nodes that see the driver's binary at its path take it from their own disk: nothing "
          "is shipped, and workers run from the node's work dir bin/ with mode 0700") {
  cluster c;
  auto driver = c.driver({"ship-twice", "6"});
  require_success(*driver, 60s, 2);
  auto shipped = parse_ints(first_line(*driver, "SHIPPED"));
  REQUIRE(shipped.size() == 2);
  CHECK(shipped[0] == 0); // the same bytes at the same path on every node (digest checked)
  CHECK(shipped[1] == 0);
  check_cached_binaries(
    c, *driver, static_cast<long long>(std::filesystem::file_size(HVACTOR_CLUSTER_DRIVER)));
}

TEST_CASE("the first job ships the driver's binary to every node that cannot see it, and the "
          "second ships nothing") {
  if (::geteuid() != 0 || ::access("/usr/bin/unshare", X_OK) != 0) {
    MESSAGE("skipped: needs root and unshare (the driver runs from a tmpfs of its own)");
    return;
  }
  cluster c;
  // The driver runs from a copy on a tmpfs mounted in a mount namespace of
  // its own: the nodes find nothing at its path and must be sent the bytes.
  auto wrapper = c.dir() / "private-driver.sh";
  {
    std::ofstream out{wrapper};
    out << "#!/bin/sh\nTMPDIR=" << c.dir().string() << R"( exec /usr/bin/unshare -m --propagation private /bin/sh -c 'd=$(mktemp -d) && mount -t tmpfs none "$d" && cp "$0" "$d/cluster_driver" && exec "$d/cluster_driver" "$@"' )"
        << HVACTOR_CLUSTER_DRIVER << R"( "$@")" << "\n";
  }
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  auto driver = c.driver_program(wrapper.string(), {"ship-twice", "6"});
  require_success(*driver, 60s, 2);
  auto shipped = parse_ints(first_line(*driver, "SHIPPED"));
  REQUIRE(shipped.size() == 2);
  auto binary_size = static_cast<long long>(std::filesystem::file_size(HVACTOR_CLUSTER_DRIVER));
  CHECK(static_cast<long long>(shipped[0]) == 3 * binary_size); // three nodes lacked it
  CHECK(shipped[1] == 0);
  check_cached_binaries(c, *driver, binary_size);
}

} // TEST_SUITE
