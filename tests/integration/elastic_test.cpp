// Elastic jobs on a real cluster: hvactor-node processes with distinct node
// ids are the hosts; elastic_driver is the driver. Horovod's elastic Ray
// tests (test_ray_elastic_v2.py) with their expected counts of (results,
// workers started, workers finished), their discovery schedules advanced by
// training progress instead of wall time (so they hold on a loaded machine);
// forceful failures in LibTorch training with torch_state; and the errors.
//
// HVACTOR_ELASTIC_REPEAT=N runs each schedule test N times in a row.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cluster_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace hvactor::test;

struct outcome {
  bool done = false;
  std::string error;
  std::map<std::string, std::string> counts;
  std::vector<std::string> results;
  std::vector<std::map<std::string, std::string>> events;
  std::string stdout_text;
  std::string stderr_text;
};

std::unique_ptr<process> start_driver(cluster& c, const std::string& driver,
                                      const std::vector<std::string>& args) {
  std::vector<std::string> argv{driver, "--address", c.address()};
  argv.insert(argv.end(), args.begin(), args.end());
  static int n = 0;
  return std::make_unique<process>(argv, c.dir() / ("elastic-driver-" + std::to_string(++n)));
}

outcome finish(process& p, std::chrono::seconds limit = 120s) {
  outcome out;
  out.done = p.read_line_with("DONE", limit).has_value();
  out.stdout_text = p.stdout_text();
  out.stderr_text = p.stderr_text();
  out.error = first_line(p, "ERROR ");
  auto counts = first_line(p, "COUNTS ");
  if (!counts.empty())
    out.counts = parse_fields(counts);
  auto results = first_line(p, "RESULTS ");
  if (!results.empty()) {
    auto words = split_words(results);
    out.results.assign(words.begin() + 1, words.end());
  }
  for (auto& line : lines_with(p, "EVENT "))
    out.events.push_back(parse_fields(line));
  return out;
}

outcome run_driver(cluster& c, const std::vector<std::string>& args) {
  auto p = start_driver(c, HVACTOR_ELASTIC_DRIVER, args);
  auto out = finish(*p);
  p->wait_exit(10s);
  return out;
}

int repeats() {
  const char* v = std::getenv("HVACTOR_ELASTIC_REPEAT");
  return v ? std::max(1, std::atoi(v)) : 1;
}

cluster_options hosts_cluster() {
  cluster_options o;
  o.node_ids = {"host-6", "host-1", "host-2", "host-3", "host-4", "host-5"};
  o.cpus_per_node = 2;
  return o;
}

// Horovod's expected (results, started, finished).
void check_counts(const outcome& out, int results, int started, int finished) {
  INFO("driver stdout:\n" << out.stdout_text << "\ndriver stderr:\n" << out.stderr_text);
  REQUIRE(out.done);
  REQUIRE(out.error.empty());
  CHECK(out.counts.at("results") == std::to_string(results));
  CHECK(out.counts.at("started") == std::to_string(started));
  CHECK(out.counts.at("finished") == std::to_string(finished));
}

// Every run of a schedule test in one cluster; the nodes end idle.
void schedule_test(cluster& c, const std::vector<std::string>& args, int results, int started,
                   int finished) {
  for (int i = 0; i < repeats(); ++i) {
    CAPTURE(i);
    check_counts(run_driver(c, args), results, started, finished);
  }
  CHECK(c.no_workers_within(5s));
}

} // namespace

TEST_SUITE("elastic schedules") {

TEST_CASE("hosts added and removed: one result, four workers started, one finished") {
  cluster c{hosts_cluster()};
  schedule_test(c,
                {"--schedule", "host-1:2@2/2|host-1:2,host-2:1,host-3:1@4/2|host-2:1", "--epochs",
                 "16", "--epoch-ms", "40", "--period-ms", "100"},
                1, 4, 1);
}

TEST_CASE("hosts removed and added (horovod#3197, skipped upstream): four results, seven "
          "started, four finished") {
  cluster c{hosts_cluster()};
  schedule_test(c,
                {"--schedule",
                 "host-1:2,host-2:1,host-3:2@5/2|host-1:2@2/2|host-1:2,host-4:1,host-5:1",
                 "--epochs", "16", "--epoch-ms", "40", "--period-ms", "100"},
                4, 7, 4);
}

TEST_CASE("a host removed and listed again is used again: its workers' CPUs were released when "
          "they left (four results, six started, four finished)") {
  // host-1's two workers leave when it disappears; once it is listed again
  // its CPUs must be free for two new ones (they stayed reserved, the
  // reservation failed and blacklisted host-1 for good).
  cluster c{hosts_cluster()};
  schedule_test(c,
                {"--schedule", "host-1:2,host-2:2@4/2|host-2:2@2/3|host-1:2,host-2:2", "--min",
                 "2", "--max", "4", "--epochs", "16", "--epoch-ms", "40", "--period-ms", "100"},
                4, 6, 4);
}

TEST_CASE("a host removed while its workers are mid-commit is used again when listed again "
          "(four results, six started, four finished)") {
  // Rank 0 (on host-1) is inside commit()'s save when host-1 disappears:
  // the removal lands while host-1's workers commit, they leave at the
  // commit's end, and host-1's CPUs must be free when it is listed again.
  cluster c{hosts_cluster()};
  schedule_test(c,
                {"--schedule", "host-1:2,host-2:2@4/2|host-2:2@2/3|host-1:2,host-2:2", "--min",
                 "2", "--max", "4", "--epochs", "12", "--epoch-ms", "20", "--commit-ms", "300",
                 "--advance-on", "saving", "--period-ms", "100"},
                4, 6, 4);
}

TEST_CASE("a host that shrinks and grows back gets its slot again (four results, five started, "
          "four finished)") {
  cluster c{hosts_cluster()};
  schedule_test(c,
                {"--schedule", "host-1:2,host-2:2@4/2|host-1:1,host-2:2@3/3|host-1:2,host-2:2",
                 "--min", "2", "--max", "4", "--epochs", "16", "--epoch-ms", "40",
                 "--period-ms", "100"},
                4, 5, 4);
}

TEST_CASE("max_workers 2 with more hosts discovered: two results, two started, two finished") {
  cluster c{hosts_cluster()};
  schedule_test(c,
                {"--schedule", "host-1:2@2/3|host-1:2,host-4:1,host-5:1", "--max", "2", "--epochs",
                 "10", "--epoch-ms", "40", "--period-ms", "100"},
                2, 2, 2);
}

TEST_CASE("min_workers = max_workers = 4 waits until four slots exist: four of each") {
  cluster c{hosts_cluster()};
  schedule_test(c,
                {"--schedule",
                 "host-1:1@t=500|host-1:1,host-4:1,host-5:1@t=500|host-1:1,host-4:1,host-5:1,"
                 "host-6:1",
                 "--min", "4", "--max", "4", "--epochs", "6", "--epoch-ms", "40", "--period-ms",
                 "100"},
                4, 4, 4);
}

} // TEST_SUITE

TEST_SUITE("elastic errors") {

TEST_CASE("start() throws elastic_timeout naming the slots seen when min_workers never appear") {
  cluster c{hosts_cluster()};
  auto t0 = std::chrono::steady_clock::now();
  auto out = run_driver(c, {"--schedule", "host-1:2", "--min", "3", "--elastic-timeout", "1",
                            "--period-ms", "100"});
  INFO("driver stdout:\n" << out.stdout_text << "\nstderr:\n" << out.stderr_text);
  REQUIRE(out.done);
  CHECK(out.error.rfind("elastic_timeout: Timed out waiting for minimum number of slots to become "
                        "available: wanted 3, saw 2 on nodes [host-1:2]",
                        0)
        == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < 15s);
  CHECK(out.stdout_text.find("STARTED") == std::string::npos);
}

TEST_CASE("more resets than reset_limit stop the job with Horovod's message") {
  cluster c{hosts_cluster()};
  auto out = run_driver(c, {"--schedule", "host-1:2@2/2|host-1:2,host-2:1@3/2|host-2:1",
                            "--reset-limit", "1", "--epochs", "30", "--epoch-ms", "40",
                            "--period-ms", "100"});
  INFO("driver stdout:\n" << out.stdout_text << "\nstderr:\n" << out.stderr_text);
  REQUIRE(out.done);
  CHECK(out.error
        == "reset_limit_exceeded: hvactor was shut down because the number of resets during the "
           "elastic job exceeded its limit: 1");
  CHECK(c.no_workers_within(5s));
}

TEST_CASE("every worker failing fails run() with the first failure") {
  cluster c{hosts_cluster()};
  auto out = run_driver(c, {"--schedule", "host-1:2,host-2:1", "--fail-all", "--period-ms",
                            "100"});
  INFO("driver stdout:\n" << out.stdout_text << "\nstderr:\n" << out.stderr_text);
  REQUIRE(out.done);
  CHECK(out.error.rfind("worker_error: ", 0) == 0);
  CHECK(out.error.find("this worker fails on purpose") != std::string::npos);
  CHECK(c.no_workers_within(5s));
}

TEST_CASE("a discovery script that fails on its first run fails start() naming it") {
  cluster c{hosts_cluster()};
  temp_dir dir;
  auto script = dir.path() / "discover.sh";
  std::ofstream{script} << "#!/bin/sh\necho 'no hosts for you' >&2\nexit 3\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  auto out = run_driver(c, {"--script", script.string(), "--period-ms", "100"});
  INFO("driver stdout:\n" << out.stdout_text << "\nstderr:\n" << out.stderr_text);
  REQUIRE(out.done);
  CHECK(out.error.rfind("error: host discovery (", 0) == 0);
  CHECK(out.error.find("failed on its first run") != std::string::npos);
  CHECK(out.error.find(script.string()) != std::string::npos);
  CHECK(out.error.find("no hosts for you") != std::string::npos);
}

TEST_CASE("a discovery script that fails later is logged and retried; the job finishes; slots "
          "beyond what the node holds are capped") {
  cluster c{hosts_cluster()};
  temp_dir dir;
  auto script = dir.path() / "discover.sh";
  auto counter = dir.path() / "runs";
  std::ofstream{script} << "#!/bin/sh\nn=$(cat " << counter.string()
                        << " 2>/dev/null || echo 0)\necho $((n+1)) > " << counter.string()
                        << "\nif [ $n -ge 2 ]; then echo 'discovery down' >&2; exit 1; fi\n"
                           "echo host-1:50\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  auto out = run_driver(c, {"--script", script.string(), "--period-ms", "100", "--epochs", "12",
                            "--epoch-ms", "40"});
  INFO("driver stdout:\n" << out.stdout_text << "\nstderr:\n" << out.stderr_text);
  check_counts(out, 2, 2, 2);
  CHECK(out.stderr_text.find("discovery down") != std::string::npos);
}

} // TEST_SUITE

#ifdef HVACTOR_ELASTIC_TORCH_DRIVER

namespace {

// Four nodes of one slot each (2 CPUs, 2 per worker): a 4-worker job.
cluster_options four_slot_cluster() {
  cluster_options o;
  o.node_ids = {"head", "node-a", "node-b", "node-c"};
  o.cpus_per_node = 2;
  return o;
}

std::vector<std::string> torch_args(std::vector<std::string> extra) {
  std::vector<std::string> args{"--torch", "--min", "2", "--max", "4", "--cpus-per-worker", "2",
                                "--epochs", "60", "--epoch-ms", "40", "--period-ms", "100"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Reads the driver's events until rank 0 of a 4-worker world committed
// `epoch`; returns the pid of a worker on `host` (from its started event).
int wait_for_training(process& driver, const std::string& host, int epoch) {
  int pid = -1;
  auto deadline = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto line = driver.read_line_with("EVENT ", 5s);
    if (!line)
      continue;
    auto f = parse_fields(*line);
    if (f["kind"] == "started" && f["host"] == host)
      pid = std::stoi(f["pid"]);
    if (f["kind"] == "commit" && f["rank"] == "0" && f["size"] == "4"
        && std::stoi(f["epoch"]) >= epoch && pid > 0)
      return pid;
  }
  return -1;
}

// Rank 0's committed epochs, in arrival order.
std::vector<int> committed_epochs(const outcome& out) {
  std::vector<int> epochs;
  for (auto& e : out.events)
    if (e.at("kind") == "commit" && e.at("rank") == "0")
      epochs.push_back(std::stoi(e.at("epoch")));
  return epochs;
}

void check_survivors_agree(const outcome& out, size_t workers) {
  INFO("driver stdout:\n" << out.stdout_text << "\ndriver stderr:\n" << out.stderr_text);
  REQUIRE(out.done);
  REQUIRE(out.error.empty());
  REQUIRE(out.results.size() == workers);
  // Identical parameters on every rank: the same checksum.
  CHECK(std::set<std::string>(out.results.begin(), out.results.end()).size() == 1);
  // The epoch counter never went backwards past the last commit.
  auto epochs = committed_epochs(out);
  REQUIRE(!epochs.empty());
  for (size_t i = 1; i < epochs.size(); ++i) {
    CAPTURE(i);
    CHECK(epochs[i] > epochs[i - 1]);
  }
  CHECK(epochs.back() == 60);
}

} // namespace

TEST_SUITE("elastic failures") {

TEST_CASE("SIGKILL of one worker in 4-worker LibTorch training: the survivors restore the last "
          "commit, re-rendezvous and finish with identical parameters; the host comes back "
          "after its cooldown") {
  cluster c{four_slot_cluster()};
  auto driver = start_driver(c, HVACTOR_ELASTIC_TORCH_DRIVER, torch_args({"--cooldown", "1", "1"}));
  int victim = wait_for_training(*driver, "node-b", 3);
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  auto out = finish(*driver, 180s);
  check_survivors_agree(out, 4);
  // Four started, then the replacement on node-b after its cooldown.
  CHECK(out.counts.at("started") == "5");
  int on_b = 0;
  for (auto& e : out.events)
    on_b += e.at("kind") == "started" && e.at("host") == "node-b";
  CHECK(on_b == 2);
  CHECK(out.stderr_text.find("node 'node-b'") != std::string::npos);
  CHECK(c.no_workers_within(5s));
}

TEST_CASE("SIGKILL of one whole node in 4-worker LibTorch training: the three survivors finish "
          "with identical parameters and the dead node stays out") {
  cluster c{four_slot_cluster()};
  auto driver = start_driver(c, HVACTOR_ELASTIC_TORCH_DRIVER, torch_args({}));
  REQUIRE(wait_for_training(*driver, "node-c", 3) > 0);
  c.kill_node("node-c");
  auto out = finish(*driver, 180s);
  check_survivors_agree(out, 3);
  CHECK(out.counts.at("started") == "4");
  CHECK(c.no_workers_within(5s));
}

} // TEST_SUITE

#endif

TEST_SUITE("elastic hvactor-run") {

namespace {

// hvactor-run's stdout lines from its ranks: "[1,W]<stdout>:TEXT" -> TEXT.
std::vector<std::string> rank_lines(const process& p, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in{p.stdout_text()};
  std::string line;
  while (std::getline(in, line)) {
    auto tag = line.find("]<stdout>:");
    if (tag != std::string::npos && line.compare(tag + 10, prefix.size(), prefix) == 0)
      out.push_back(line.substr(tag + 10));
  }
  return out;
}

bool has_rank_line(const process& p, const std::string& text, std::chrono::seconds limit) {
  return wait_until(
    [&] {
      for (auto& l : rank_lines(p, ""))
        if (l.find(text) != std::string::npos)
          return true;
      return false;
    },
    limit);
}

struct elastic_run {
  cluster& c;
  temp_dir dir;
  std::filesystem::path hosts = dir.path() / "hosts";
  std::unique_ptr<process> run;

  elastic_run(cluster& cl, const std::string& first_hosts, std::vector<std::string> flags)
    : c(cl) {
    set_hosts(first_hosts);
    auto script = dir.path() / "discover.sh";
    std::ofstream{script} << "#!/bin/sh\ncat " << hosts.string() << "\n";
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
    std::vector<std::string> argv{HVACTOR_RUN, "--address", c.address(),
                                  "--host-discovery-script", script.string()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", HVACTOR_ELASTIC_PROGRAM, "60", "40"});
    run = std::make_unique<process>(argv, dir.path() / "hvactor-run");
  }

  void set_hosts(const std::string& text) {
    auto tmp = hosts;
    tmp += ".new";
    std::ofstream{tmp} << text;
    std::filesystem::rename(tmp, hosts);
  }

  int pid_on(const std::string& host) {
    for (auto& l : rank_lines(*run, "STARTED "))
      if (auto f = parse_fields(l); f["host"] == host)
        return std::stoi(f["pid"]);
    return -1;
  }
};

} // namespace

TEST_CASE("hvactor-run --min-np/--max-np grows with discovered hosts, survives a killed "
          "process and exits 0 when the job finishes") {
  cluster c{hosts_cluster()};
  elastic_run job{c, "host-1:2\n", {"--min-np", "2", "--max-np", "3"}};
  INFO("hvactor-run stdout:\n" << job.run->stdout_text() << "\nstderr:\n"
                               << job.run->stderr_text());
  REQUIRE(has_rank_line(*job.run, "COMMIT epoch=3 size=2", 60s));
  job.set_hosts("host-1:2\nhost-2:1\n");
  REQUIRE(has_rank_line(*job.run, "size=3", 60s));
  REQUIRE(has_rank_line(*job.run, "COMMIT epoch=", 60s));
  int victim = job.pid_on("host-2");
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  auto exit = job.run->wait_exit(120s);
  REQUIRE(exit);
  CHECK(exit->exited);
  CHECK(exit->code == 0);
  CHECK(rank_lines(*job.run, "STARTED ").size() == 3);
  auto finished = rank_lines(*job.run, "FINISHED ");
  CHECK(finished.size() == 2);
  for (auto& f : finished)
    CHECK(f.find("size=2") != std::string::npos);
  CHECK(c.no_workers_within(5s));
}

TEST_CASE("hvactor-run --min-np exits 1 with the reason when too few hosts are left") {
  cluster c{hosts_cluster()};
  elastic_run job{c, "host-1:1\nhost-2:1\n", {"--min-np", "2", "--elastic-timeout", "2"}};
  INFO("hvactor-run stdout:\n" << job.run->stdout_text() << "\nstderr:\n"
                               << job.run->stderr_text());
  REQUIRE(has_rank_line(*job.run, "COMMIT epoch=2 size=2", 60s));
  int victim = job.pid_on("host-2");
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  auto exit = job.run->wait_exit(60s);
  REQUIRE(exit);
  CHECK(exit->exited);
  CHECK(exit->code == 1);
  CHECK(job.run->stderr_text().find("Timed out waiting for minimum number of slots") !=
        std::string::npos);
  CHECK(c.no_workers_within(5s));
}

} // TEST_SUITE
