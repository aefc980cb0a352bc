// hvactor-run on the embedded local cluster with a real SPMD program, and
// hvactor::log::event reaching an executor callback.

#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "../unit/mini_json.hpp"
#include "child_process.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

command_result run(const temp_dir& dir, std::vector<std::string> args,
                   std::chrono::milliseconds timeout = 60s) {
  std::vector<std::string> argv{HVACTOR_RUN};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, dir.path() / "run", timeout);
}

void emit_event() {
  hvactor::log::event({{"rank", std::getenv("HOROVOD_RANK")}, {"step", "7"}});
}

} // namespace

TEST_SUITE("hvactor-run") {

TEST_CASE("-np 4 runs the program on 4 ranks and prints each rank's lines whole, tagged with "
          "its rank, and exits 0") {
  temp_dir dir;
  auto r = run(dir, {"-np", "4", "--", HVACTOR_RUN_PROGRAM, "ranks"});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.status.exited);
  CHECK(r.status.code == 0);
  std::regex tagged{R"(^\[1,(\d)\]<stdout>:rank (\d) of 4 sum 4$)"};
  std::set<std::string> ranks;
  for (auto& line : lines_of(r.out)) {
    std::smatch m;
    if (std::regex_match(line, m, tagged)) {
      CHECK(m[1] == m[2]);
      ranks.insert(m[1]);
    }
  }
  CHECK(ranks == std::set<std::string>{"0", "1", "2", "3"});
  for (int rank = 0; rank < 4; ++rank) {
    auto tag = "[1," + std::to_string(rank) + "]";
    CHECK(r.err.find(tag + "<stderr>:stderr of rank " + std::to_string(rank)) != std::string::npos);
    CHECK(r.out.find(tag + "<event>:loss=0.25 rank=" + std::to_string(rank)) != std::string::npos);
  }
}

TEST_CASE("a rank that exits 3 makes hvactor-run exit 3, naming that rank and its node") {
  temp_dir dir;
  auto r = run(dir, {"-np", "3", "--", HVACTOR_RUN_PROGRAM, "fail", "1"});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.status.exited);
  CHECK(r.status.code == 3);
  CHECK(r.err.find("one or more processes exited with non-zero status") != std::string::npos);
  CHECK(r.err.find("rank 1 on node '") != std::string::npos);
  CHECK(r.err.find("exit code 3") != std::string::npos);
}

TEST_CASE("--output-dir writes every rank's stdout and stderr to its own files") {
  temp_dir dir;
  auto out = dir.path() / "logs";
  auto r = run(dir, {"-np", "2", "--output-dir", out.string(), "--timestamps", "--",
                     HVACTOR_RUN_PROGRAM, "ranks"});
  REQUIRE(r.status.exited);
  CHECK(r.status.code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    auto d = out / ("rank." + std::to_string(rank));
    CHECK(read_file(d / "stdout").find("rank " + std::to_string(rank) + " of 2")
          != std::string::npos);
    CHECK(read_file(d / "stderr").find("stderr of rank " + std::to_string(rank))
          != std::string::npos);
  }
  // --timestamps: "2026-11-22T01:02:03.456 [1,0]<stdout>:..."
  CHECK(std::regex_search(r.out, std::regex{R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} \[1,0\])"}));
}

TEST_CASE("SIGTERM to hvactor-run stops every rank and exits 143") {
  temp_dir dir;
  process launcher{{HVACTOR_RUN, "-np", "3", "--", HVACTOR_RUN_PROGRAM, "sleep"},
                   dir.path() / "run"};
  std::vector<int> pids;
  for (int i = 0; i < 3; ++i) {
    auto line = launcher.read_line_with("[1,", 30s);
    REQUIRE(line);
    auto pos = line->find("pid ");
    REQUIRE(pos != std::string::npos);
    pids.push_back(std::stoi(line->substr(pos + 4)));
  }
  for (int pid : pids)
    CHECK(pid_alive(pid));
  ::kill(launcher.pid(), SIGTERM);
  auto exit = launcher.wait_exit(15s);
  INFO("stderr:\n" << launcher.stderr_text());
  REQUIRE(exit);
  CHECK(exit->exited);
  CHECK(exit->code == 143);
  CHECK(all_gone(pids, 5s));
}

TEST_CASE("--timeline writes one Chrome trace (valid JSON) with a row of events from every rank") {
  temp_dir dir;
  auto path = dir.path() / "timeline.json";
  auto r = run(dir, {"-np", "3", "--timeline", path.string(), "--", HVACTOR_RUN_PROGRAM, "ranks"});
  INFO("stderr:\n" << r.err);
  REQUIRE(r.status.exited);
  REQUIRE(r.status.code == 0);
  auto trace = json::parse(read_file(path));
  REQUIRE(trace.type == json::kind::array);
  std::set<int> ranks_with_ops;
  for (auto& e : trace.items)
    if (e.str("ph") == "X" && e.str("name").rfind("GLOO_ALLREDUCE", 0) == 0)
      ranks_with_ops.insert(static_cast<int>(e.num("pid")));
  CHECK(ranks_with_ops == std::set<int>{0, 1, 2});
}

TEST_CASE("bad invocations fail fast with a clear message") {
  temp_dir dir;
  auto none = run(dir, {"-np", "2"}, 10s);
  CHECK(none.status.code == 2);
  CHECK(none.err.find("no program") != std::string::npos);
  auto missing = run(dir, {"-np", "2", "--", "no-such-program-hvactor"}, 10s);
  CHECK(missing.status.code == 2);
  CHECK(missing.err.find("not found in PATH") != std::string::npos);
  auto bad_env = run(dir, {"-np", "2", "-x", "NOVALUE", "--", HVACTOR_RUN_PROGRAM}, 10s);
  CHECK(bad_env.status.code == 2);
  CHECK(bad_env.err.find("-x needs VAR=VALUE") != std::string::npos);
}

TEST_CASE("hvactor::log::event in every worker reaches the executor's callback with its rank") {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::map<std::string, std::string>> seen;
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                       {.num_workers = 3}};
  ex.on_event([&](int rank, const std::map<std::string, std::string>& kv) {
    std::lock_guard<std::mutex> guard{mu};
    seen[rank] = kv;
    cv.notify_all();
  });
  ex.start();
  ex.run(&emit_event);
  {
    std::unique_lock<std::mutex> lock{mu};
    CHECK(cv.wait_for(lock, 10s, [&] { return seen.size() == 3; }));
    for (auto& [rank, kv] : seen) {
      CHECK(kv.at("rank") == std::to_string(rank));
      CHECK(kv.at("step") == "7");
    }
  }
  ex.shutdown();
}

} // TEST_SUITE
