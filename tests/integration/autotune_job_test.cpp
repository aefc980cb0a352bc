// Autotune (HOROVOD_AUTOTUNE) in a real job: rank 0 scores the start and
// Horovod's test points while every rank trains with exact results; every
// rank adopts each new set of values after the same exchange and ends with
// the same final values; rank 0 writes the log. A knob set explicitly
// stays as set (Horovod's): HOROVOD_FUSION_THRESHOLD=0 while the cycle
// time is tuned, over shared memory (whose one-step path carries the
// values with a synchronous allreduce's data); with
// HVACTOR_AUTOTUNE_SET_KNOBS=start both set knobs are tuned from a
// mistuned start, over Gloo. Bad knobs fail init naming the variable.

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "collectives/api/hvd_calls.hpp"
#include "hvd_session.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;

namespace {

// `steps` training steps of 4 named gradients (async, fused as the values
// allow) and one synchronous allreduce, checked exactly every step;
// returns what went wrong, "|", then this rank's autotune history.
std::string tuned_training(int steps) {
  hvactor::test::hvd_session s;
  std::ostringstream wrong;
  int n = hvd::size(), me = hvd::rank();
  const std::vector<size_t> sizes{1000, 20000, 300, 70000};
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<float>> grads;
    for (size_t size : sizes)
      grads.emplace_back(size, static_cast<float>(me + step));
    std::vector<hvd::handle> hs;
    for (size_t i = 0; i < grads.size(); ++i)
      hs.push_back(hvd::allreduce_async(std::span(grads[i]), hvd::op::sum,
                                        "grad." + std::to_string(i)));
    for (auto& h : hs)
      hvd::synchronize(h);
    float want = static_cast<float>(n * step + n * (n - 1) / 2);
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].front() != want || grads[i].back() != want)
        wrong << "step " << step << " grad." << i << ": " << grads[i].back() << " != " << want
              << "\n";
    std::vector<int64_t> loss{me};
    hvd::allreduce(std::span(loss), hvd::op::sum);
    if (loss[0] != int64_t{n} * (n - 1) / 2)
      wrong << "step " << step << " loss " << loss[0] << "\n";
  }
  std::string history;
  for (auto& line : hvd::detail::autotune_history())
    history += line + "\n";
  return wrong.str() + "|" + history;
}

std::string init_error() {
  try {
    hvactor::test::hvd_session s;
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (auto& l : lines)
    out += l + "\n";
  return out;
}

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);)
    out.push_back(l);
  return out;
}

// Tunes a 3-rank job with `extra` over the defaults below; returns rank
// 0's list of changes (checked to be every rank's) and the CSV log.
std::pair<std::vector<std::string>, std::vector<std::string>>
tune_a_job(const std::map<std::string, std::string>& extra) {
  auto log = std::filesystem::temp_directory_path()
             / ("hvactor-autotune-" + std::to_string(::getpid()) + ".csv");
  std::filesystem::remove(log);
  std::map<std::string, std::string> env{{"HOROVOD_AUTOTUNE", "1"},
                                         {"HOROVOD_AUTOTUNE_LOG", log.string()},
                                         {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "1"},
                                         {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "2"},
                                         {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "3"}};
  env.insert(extra.begin(), extra.end());
  hvactor::executor ex{test_runtime(),
                       hvactor::executor::create_settings({.timeout = 30s,
                                                           .placement_timeout = 20s}),
                       {.num_workers = 3, .extra_env_vars = env}};
  ex.start();
  auto reports = ex.run(&tuned_training, 90);
  ex.shutdown();
  REQUIRE(reports.size() == 3);
  std::string history;
  for (size_t r = 0; r < reports.size(); ++r) {
    CAPTURE(r);
    auto bar = reports[r].find('|');
    REQUIRE(bar != std::string::npos);
    CHECK_MESSAGE(bar == 0, reports[r].substr(0, bar));
    auto mine = reports[r].substr(bar + 1);
    if (r == 0)
      history = mine;
    // The same values after the same exchanges on every rank.
    CHECK(mine == history);
  }
  std::vector<std::string> changes;
  std::istringstream in(history);
  for (std::string l; std::getline(in, l);)
    changes.push_back(l);
  auto csv = lines_of(log);
  std::filesystem::remove(log);
  return {changes, csv};
}

} // namespace

TEST_SUITE("autotune") {

TEST_CASE("a fusion threshold set explicitly stays as set while the cycle time is tuned "
          "(Horovod's); every rank adopts the same values after the same exchange; results "
          "stay exact; over shared memory") {
  auto job = tune_a_job({{"HOROVOD_FUSION_THRESHOLD", "0"}});
  const auto& changes = job.first;
  const auto& csv = job.second;
  INFO(joined(changes));
  // The start (1 ms), then Horovod's test points' cycle times 5, 50, 25
  // ms with the threshold as set, then the best of the 4 scored, final.
  REQUIRE(changes.size() == 4);
  CHECK(changes[0].find("[false, false, 5 ms, 0 mb]") != std::string::npos);
  CHECK(changes[1].find("[false, false, 50 ms, 0 mb]") != std::string::npos);
  CHECK(changes[2].find("[false, false, 25 ms, 0 mb]") != std::string::npos);
  CHECK(changes[3].find(" 0 mb] final") != std::string::npos);
  REQUIRE(csv.size() == 1 + 4 + 1);
  CHECK(csv[0] == "hierarchical_allreduce,hierarchical_allgather,cycle_time_ms,"
                  "tensor_fusion_threshold,score,fixed");
  CHECK(csv[1].rfind("0,0,1,0,", 0) == 0); // the start, scored
  for (size_t i = 1; i < csv.size(); ++i) {
    CAPTURE(csv[i]);
    std::istringstream row(csv[i]);
    std::string column;
    for (int c = 0; c < 4; ++c)
      std::getline(row, column, ',');
    CHECK(column == "0"); // tensor_fusion_threshold: 0 MiB in every row
    CHECK(csv[i].ends_with(",hierarchical_allreduce;hierarchical_allgather;"
                           "tensor_fusion_threshold;cache_capacity"));
  }
}

TEST_CASE("with HVACTOR_AUTOTUNE_SET_KNOBS=start a job tunes the set knobs from a mistuned "
          "start; over Gloo") {
  auto job = tune_a_job({{"HOROVOD_FUSION_THRESHOLD", "0"},
                         {"HOROVOD_CYCLE_TIME", "20"},
                         {"HVACTOR_AUTOTUNE_SET_KNOBS", "start"},
                         {"HVACTOR_SHM", "0"}});
  const auto& changes = job.first;
  const auto& csv = job.second;
  INFO(joined(changes));
  // The start, then Horovod's test points (4 MiB, 5 ms), (32, 50), (16, 25),
  // then the best of the 4 scored ones, final.
  REQUIRE(changes.size() == 4);
  CHECK(changes[0].find("[false, false, 5 ms, 4 mb]") != std::string::npos);
  CHECK(changes[1].find("[false, false, 50 ms, 32 mb]") != std::string::npos);
  CHECK(changes[2].find("[false, false, 25 ms, 16 mb]") != std::string::npos);
  CHECK(changes[3].find("final") != std::string::npos);
  REQUIRE(csv.size() == 1 + 4 + 1);
  CHECK(csv[1].rfind("0,0,20,0,", 0) == 0); // the mistuned start, scored
}

TEST_CASE("bad autotune knobs fail hvd::init on every rank, naming the variable") {
  for (auto [variable, value] : std::vector<std::pair<std::string, std::string>>{
         {"HOROVOD_AUTOTUNE", "yes"},
         {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "2"},
         {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "-1"},
         {"HVACTOR_AUTOTUNE_SET_KNOBS", "tune"}}) {
    CAPTURE(variable);
    std::map<std::string, std::string> env{{variable, value}};
    if (variable != "HOROVOD_AUTOTUNE")
      env["HOROVOD_AUTOTUNE"] = "1";
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                         {.num_workers = 2, .extra_env_vars = env}};
    ex.start();
    auto errors = ex.run(&init_error);
    ex.shutdown();
    REQUIRE(errors.size() == 2);
    for (auto& e : errors)
      CHECK(e.find(variable) != std::string::npos);
  }
}

} // TEST_SUITE
