// hvactor::tune end to end: tune_driver as a child process on the embedded
// cluster (real worker processes, real rendezvous, real allreduces) and
// joined to a cluster of real hvactor-node processes. Schedulers stop and
// restart trials, a SIGKILLed worker's trial retries, a SIGKILLed driver's
// experiment is restored, bad input fails before anything starts.

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cluster_support.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;
namespace fs = std::filesystem;

namespace {

std::string describe(const command_result& r) {
  return "exit " + std::to_string(r.status.code) + " signal " + std::to_string(r.status.signal)
         + "\n--- stdout\n" + r.out + "\n--- stderr\n" + r.err;
}

std::vector<std::string> driver_argv(const temp_dir& dir, const std::string& name,
                                     std::vector<std::string> args) {
  std::vector<std::string> argv{HVACTOR_TUNE_DRIVER, "--storage", (dir.path() / "results").string(),
                                "--name", name};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

command_result tune(const temp_dir& dir, const std::string& name, std::vector<std::string> args,
                    std::chrono::seconds limit = 120s) {
  static int n = 0;
  return run_command(driver_argv(dir, name, std::move(args)),
                     dir.path() / ("driver-" + std::to_string(n++)), limit);
}

/// The "trial ..." lines, by trial id.
std::map<std::string, std::map<std::string, std::string>> trials_of(const std::string& out) {
  std::map<std::string, std::map<std::string, std::string>> res;
  std::istringstream in{out};
  for (std::string line; std::getline(in, line);)
    if (line.rfind("trial ", 0) == 0) {
      auto f = parse_fields(line.substr(6));
      res[f["id"]] = f;
    }
  return res;
}

/// training_iteration of every line of a trial's result.json.
std::vector<int> iterations(const fs::path& trial_dir) {
  std::vector<int> out;
  std::ifstream in{trial_dir / "result.json"};
  for (std::string line; std::getline(in, line);) {
    auto at = line.find("\"training_iteration\": ");
    if (at != std::string::npos)
      out.push_back(std::stoi(line.substr(at + 22)));
  }
  return out;
}

/// Pids the workers wrote as DIR/<trial>.<rank>.<pid>.
std::vector<int> worker_pids(const fs::path& dir) {
  std::vector<int> out;
  for (auto& e : fs::directory_iterator{dir}) {
    auto name = e.path().filename().string();
    out.push_back(std::stoi(name.substr(name.rfind('.') + 1)));
  }
  return out;
}

std::string fmt_trial(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "trial_%05d", i);
  return buf;
}

bool all_gone_within(const std::vector<int>& pids, std::chrono::milliseconds limit) {
  return wait_until(
    [&] {
      for (int p : pids)
        if (::kill(p, 0) == 0)
          return false;
      return true;
    },
    limit);
}

int count_status(const fs::path& state, const std::string& status) {
  std::ifstream in{state};
  std::stringstream buf;
  buf << in.rdbuf();
  auto text = buf.str();
  int n = 0;
  for (size_t at = 0; (at = text.find("\"status\": \"" + status + "\"", at)) != std::string::npos;
       ++at)
    ++n;
  return n;
}

} // namespace

TEST_CASE("ASHA stops the bad trials early, keeps the best, and leaves no worker behind") {
  temp_dir dir;
  fs::create_directories(dir.path() / "pids");
  auto r = tune(dir, "asha",
                {"--samples", "8", "--iters", "8", "--scheduler", "asha", "--pids",
                 (dir.path() / "pids").string()});
  INFO(describe(r));
  REQUIRE(r.status.code == 0);
  auto trials = trials_of(r.out);
  REQUIRE(trials.size() == 8);
  int early = 0, full = 0;
  for (auto& [id, f] : trials) {
    CHECK(f["status"] == "TERMINATED");
    if (f["stopped"] == "1") {
      ++early;
      CHECK(std::stoi(f["iter"]) < 8);
    } else {
      ++full;
      CHECK(f["iter"] == "8");
    }
    // Every result is on disk, in order, with the trial's config.
    auto its = iterations(dir.path() / "results" / "asha" / id);
    CHECK(its.size() == static_cast<size_t>(std::stoi(f["iter"])));
    for (size_t i = 0; i < its.size(); ++i)
      CHECK(its[i] == static_cast<int>(i + 1));
    CHECK(fs::exists(dir.path() / "results" / "asha" / id / "params.json"));
    bool events = false;
    for (auto& e : fs::directory_iterator{dir.path() / "results" / "asha" / id})
      events = events || e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
    CHECK(events);
  }
  // Asynchronous: which trials pass a rung depends on the order results
  // come in (tune_test's unit cases pin the decisions); some stop, the
  // first at each rung never does.
  CHECK(early >= 1);
  CHECK(full >= 1);
  // The best trial ran its whole budget.
  auto best = parse_fields(r.out.substr(r.out.find("best ") + 5));
  CHECK(trials[best["id"]]["iter"] == "8");
  CHECK(all_gone_within(worker_pids(dir.path() / "pids"), 10s));
  CHECK(count_status(dir.path() / "results" / "asha" / "experiment_state.json", "TERMINATED")
        == 8);
}

TEST_CASE("grid search runs every point num_samples times") {
  temp_dir dir;
  auto r = tune(dir, "grid", {"--search", "grid", "--samples", "2", "--iters", "2"});
  INFO(describe(r));
  REQUIRE(r.status.code == 0);
  auto trials = trials_of(r.out);
  REQUIRE(trials.size() == 6);
  std::multiset<std::string> xs;
  for (auto& [id, f] : trials)
    xs.insert(f["x"]);
  CHECK(xs == std::multiset<std::string>{"0", "0", "1", "1", "3", "3"});
  // The best result is the lowest loss of all.
  auto best = parse_fields(r.out.substr(r.out.find("best ") + 5));
  for (auto& [id, f] : trials)
    CHECK(std::stod(best["loss"]) <= std::stod(f["loss"]));
}

TEST_CASE("PBT restarts bottom trials from a top trial's checkpoint with a perturbed config") {
  temp_dir dir;
  auto r = tune(dir, "pbt", {"--samples", "4", "--iters", "8", "--scheduler", "pbt"});
  INFO(describe(r));
  REQUIRE(r.status.code == 0);
  auto trials = trials_of(r.out);
  REQUIRE(trials.size() == 4);
  int exploited = 0;
  for (auto& [id, f] : trials) {
    CHECK(f["status"] == "TERMINATED");
    CHECK(f["iter"] == "8");
    if (f["fits"] != "1") {
      ++exploited;
      CHECK(fs::is_directory(dir.path() / "results" / "pbt" / id / "exploit_0001"));
    }
  }
  CHECK(exploited >= 1);
}

TEST_CASE("Bayesian optimisation suggests configs one trial at a time and finishes") {
  temp_dir dir;
  auto r = tune(dir, "bayes", {"--search", "bayes", "--samples", "5", "--iters", "2"});
  INFO(describe(r));
  REQUIRE(r.status.code == 0);
  auto trials = trials_of(r.out);
  CHECK(trials.size() == 5);
  for (auto& [id, f] : trials)
    CHECK(f["status"] == "TERMINATED");
}

TEST_CASE("a trial whose worker is SIGKILLed retries from its checkpoint; without retries it "
          "fails alone") {
  temp_dir dir;
  auto retried = tune(dir, "retry",
                      {"--samples", "3", "--iters", "4", "--kill-trial", "trial_00001",
                       "--max-failures", "1"});
  INFO(describe(retried));
  REQUIRE(retried.status.code == 0);
  auto t = trials_of(retried.out);
  CHECK(t["trial_00001"]["status"] == "TERMINATED");
  CHECK(t["trial_00001"]["attempt"] == "1");
  CHECK(t["trial_00001"]["iter"] == "4");
  CHECK(retried.out.find("errors n=0") != std::string::npos);

  auto failed = tune(dir, "fail", {"--samples", "3", "--iters", "4", "--kill-trial", "trial_00001"});
  INFO(describe(failed));
  REQUIRE(failed.status.code == 0);
  auto f = trials_of(failed.out);
  CHECK(f["trial_00001"]["status"] == "ERROR");
  CHECK(f["trial_00000"]["status"] == "TERMINATED");
  CHECK(f["trial_00002"]["status"] == "TERMINATED");
  CHECK(failed.out.find("errors n=1") != std::string::npos);
  std::ifstream err{dir.path() / "results" / "fail" / "trial_00001" / "error.txt"};
  std::string line;
  std::getline(err, line);
  CHECK(line.find("SIGKILL") != std::string::npos);
}

TEST_CASE("a driver SIGKILLed mid-experiment resumes with restore and runs every trial once") {
  temp_dir dir;
  fs::create_directories(dir.path() / "pids");
  auto state = dir.path() / "results" / "crash" / "experiment_state.json";
  std::vector<std::string> args{"--samples", "6", "--iters", "6", "--sleep-ms", "150",
                                "--verbose", "0", "--pids", (dir.path() / "pids").string()};
  {
    process first{driver_argv(dir, "crash", args), dir.path() / "first"};
    // Killed while some trials finished and others run.
    REQUIRE(wait_until(
      [&] { return count_status(state, "TERMINATED") >= 2 && count_status(state, "RUNNING") >= 1; },
      60s));
    first.kill();
  }
  // Its workers follow it.
  CHECK(all_gone_within(worker_pids(dir.path() / "pids"), 15s));
  int finished_before = count_status(state, "TERMINATED");
  CHECK(finished_before < 6);
  args.insert(args.end(), {"--restore", "1"});
  auto r = tune(dir, "crash", args);
  INFO(describe(r));
  REQUIRE(r.status.code == 0);
  auto trials = trials_of(r.out);
  REQUIRE(trials.size() == 6);
  int ran_again = 0;
  for (auto& [id, f] : trials) {
    CHECK(f["status"] == "TERMINATED");
    CHECK(f["iter"] == "6");
    // Each iteration once, in order: the resumed trials went on from their
    // checkpoints, the finished ones did not run again.
    auto its = iterations(dir.path() / "results" / "crash" / id);
    CHECK(its == std::vector<int>{1, 2, 3, 4, 5, 6});
    ran_again += f["fits"] != "0";
  }
  CHECK(ran_again == 6 - finished_before);
  CHECK(count_status(state, "TERMINATED") == 6);
}

TEST_CASE("bad input fails with a clear error before anything starts") {
  temp_dir dir;
  std::map<std::string, std::string> cases{
    {"empty", "param_space is empty"},
    {"samples", "num_samples must be >= 1, or -1"},
    {"mode", "mode must be 'min' or 'max': Got 'avg'"},
    {"scheduler", "asha_scheduler needs a metric and a mode"}};
  for (auto& [bad, message] : cases) {
    auto r = tune(dir, "bad-" + bad, {"--bad", bad}, 30s);
    INFO(bad << ": " << describe(r));
    CHECK(r.status.code == 2);
    CHECK(r.out.find(message) != std::string::npos);
    CHECK(!fs::exists(dir.path() / "results" / ("bad-" + bad)));
  }
  // A metric no result holds ends the experiment at the first result.
  auto r = tune(dir, "bad-metric", {"--bad", "metric", "--iters", "50", "--sleep-ms", "100"}, 60s);
  INFO(describe(r));
  CHECK(r.status.code == 2);
  CHECK(r.out.find("without the metric 'loss'") != std::string::npos);
  CHECK(r.out.find("it reported: attempt, other") != std::string::npos);
}

TEST_CASE("a small trial passes a big one that does not fit yet, and the big one is not starved") {
  // 4 CPUs; gangs of 2, 3, then eight of 1. The 3-worker trial cannot
  // start beside the first; 1-worker trials pass it, at most 4 times.
  temp_dir dir;
  auto r = tune(dir, "mixed", {"--mixed", "1", "--samples", "1", "--iters", "4", "--sleep-ms",
                               "150", "--verbose", "0"});
  INFO(describe(r));
  REQUIRE(r.status.code == 0);
  auto trials = trials_of(r.out);
  REQUIRE(trials.size() == 10);
  auto start = [&](int i) { return std::stod(trials[fmt_trial(i)]["start"]); };
  for (auto& [id, f] : trials)
    CHECK(f["status"] == "TERMINATED");
  // No head-of-line blocking: trial 2 (1 worker) started before trial 1 (3).
  CHECK(start(2) < start(1));
  // No starvation: trial 1 started before the last small trials.
  int after = 0;
  for (int i = 2; i < 10; ++i)
    after += start(i) > start(1);
  CHECK(after >= 3);
}

TEST_CASE("an experiment on a cluster of hvactor-nodes packs trials onto both nodes") {
  cluster c{{.node_ids = {"head", "n1"}, .cpus_per_node = 2}};
  temp_dir dir;
  auto r = tune(dir, "nodes",
                {"--address", c.address(), "--samples", "4", "--iters", "3", "--scheduler",
                 "asha"});
  INFO(describe(r));
  REQUIRE(r.status.code == 0);
  auto trials = trials_of(r.out);
  REQUIRE(trials.size() == 4);
  std::set<std::string> hosts;
  for (auto& [id, f] : trials) {
    CHECK(f["status"] == "TERMINATED");
    hosts.insert(f["host"]);
  }
  CHECK(hosts == std::set<std::string>{"head", "n1"});
  CHECK(c.no_workers_within(10s));
}
