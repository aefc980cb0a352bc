// The static executor on the embedded local cluster: real worker processes,
// both layouts ({num_workers=4} and {num_hosts=1, num_workers_per_host=4}).

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <string>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "test_main.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;

namespace {

std::string env_of(std::string name) {
  const char* value = std::getenv(name.c_str());
  return value ? value : "<unset>";
}

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : -1;
}

int rank_times(int epochs) {
  return env_int("HOROVOD_RANK") * epochs;
}

void do_nothing() {
}

/// A user type travelling as argument and result.
struct sample {
  int rank = 0;
  std::vector<double> values;
  std::string tag;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sample& x) {
  return f(caf::meta::type_name("sample"), x.rank, x.values, x.tag);
}

sample make_sample(sample in) {
  in.rank = env_int("HOROVOD_RANK");
  in.values.push_back(in.rank * 0.5);
  return in;
}

/// An executable: constructed in every worker after its env is set.
class trainer {
public:
  explicit trainer(int epochs) : epochs_(epochs), rank_at_construction_(env_int("HOROVOD_RANK")) {
  }

  int rank_times_epochs() const {
    return rank_at_construction_ * epochs_;
  }

  int add_steps(int steps) {
    steps_ += steps;
    return steps_;
  }

  int epochs_ = 0;
  int rank_at_construction_ = -1;
  int steps_ = 0;
};

/// +inf on rank 0, -inf elsewhere: CAF's own float format never finished
/// writing either (the worker hung in pack754).
double infinite_by_rank() {
  using lim = std::numeric_limits<double>;
  return env_int("HOROVOD_RANK") == 0 ? lim::infinity() : -lim::infinity();
}

std::map<std::string, float> odd_float_metrics() {
  using lim = std::numeric_limits<float>;
  return {{"inf", lim::infinity()}, {"nan", lim::quiet_NaN()}, {"tiny", lim::denorm_min()},
          {"zero", -0.0f}};
}

/// The driver's values back, a negative NaN appended.
std::vector<double> echo_odd(std::vector<double> in) {
  in.push_back(-std::numeric_limits<double>::quiet_NaN());
  return in;
}

std::vector<std::pair<std::string, hvactor::executor_options>> layouts() {
  return {{"num_workers=4", {.num_workers = 4}},
          {"num_hosts=1 x num_workers_per_host=4", {.num_hosts = 1, .num_workers_per_host = 4}}};
}

hvactor::settings quick_settings() {
  return hvactor::executor::create_settings({.timeout = 20s, .placement_timeout = 20s});
}

} // namespace

TEST_SUITE("executor") {

TEST_CASE("workers of one job share one node id and get Horovod's local and cross ranks") {
  for (auto& [name, opts] : layouts()) {
    CAPTURE(name);
    hvactor::executor ex{test_runtime(), quick_settings(), opts};
    ex.start();
    auto hosts = ex.run(&env_of, std::string{"HOROVOD_HOSTNAME"});
    CHECK(std::set<std::string>(hosts.begin(), hosts.end()).size() == 1);
    CHECK(hosts[0] == test_runtime().options().node_id);
    CHECK(ex.run(&env_of, std::string{"HOROVOD_RANK"})
          == std::vector<std::string>{"0", "1", "2", "3"});
    CHECK(ex.run(&env_of, std::string{"HOROVOD_LOCAL_RANK"})
          == std::vector<std::string>{"0", "1", "2", "3"});
    CHECK(ex.run(&env_of, std::string{"HOROVOD_SIZE"}) == std::vector<std::string>(4, "4"));
    CHECK(ex.run(&env_of, std::string{"HOROVOD_LOCAL_SIZE"})
          == std::vector<std::string>(4, "4"));
    CHECK(ex.run(&env_of, std::string{"HOROVOD_CROSS_RANK"})
          == std::vector<std::string>(4, "0"));
    CHECK(ex.run(&env_of, std::string{"HOROVOD_CROSS_SIZE"})
          == std::vector<std::string>(4, "1"));
    CHECK(ex.run(&env_of, std::string{"HOROVOD_CONTROLLER"})
          == std::vector<std::string>(4, "gloo"));
    CHECK(ex.run(&env_of, std::string{"HOROVOD_CPU_OPERATIONS"})
          == std::vector<std::string>(4, "gloo"));
    auto addr = ex.run(&env_of, std::string{"HOROVOD_GLOO_RENDEZVOUS_ADDR"});
    CHECK(addr == std::vector<std::string>(4, "127.0.0.1"));
    auto port = ex.run(&env_of, std::string{"HOROVOD_GLOO_RENDEZVOUS_PORT"});
    CHECK(std::set<std::string>(port.begin(), port.end()).size() == 1);
    CHECK(std::atoi(port[0].c_str()) > 0);
    ex.shutdown();
  }
}

TEST_CASE("run returns every worker's result in world-rank order") {
  for (auto& [name, opts] : layouts()) {
    CAPTURE(name);
    hvactor::executor ex{test_runtime(), quick_settings(), opts};
    ex.start();
    CHECK(ex.run(&rank_times, 0) == std::vector<int>{0, 0, 0, 0});
    CHECK(ex.run(&rank_times, 3) == std::vector<int>{0, 3, 6, 9});
    CHECK(ex.run([](int e) { return env_int("HOROVOD_RANK") * e; }, 2)
          == std::vector<int>{0, 2, 4, 6});
    ex.run(&do_nothing);
    auto samples = ex.run(&make_sample, sample{0, {1.5}, "batch"});
    REQUIRE(samples.size() == 4);
    for (int r = 0; r < 4; ++r) {
      CHECK(samples[r].rank == r);
      CHECK(samples[r].tag == "batch");
      CHECK(samples[r].values == std::vector<double>{1.5, r * 0.5});
    }
    ex.shutdown();
  }
}

TEST_CASE("run_remote returns one future per rank") {
  for (auto& [name, opts] : layouts()) {
    CAPTURE(name);
    hvactor::executor ex{test_runtime(), quick_settings(), opts};
    ex.start();
    auto futures = ex.run_remote(&rank_times, 5);
    REQUIRE(futures.size() == 4);
    std::vector<int> got;
    for (auto& f : futures)
      got.push_back(f.get());
    CHECK(got == std::vector<int>{0, 5, 10, 15});
    auto zero = ex.run_remote([](int e) { return env_int("HOROVOD_RANK") * e; }, 0);
    for (auto& f : zero)
      CHECK(f.get() == 0);
    ex.shutdown();
  }
}

TEST_CASE("start<T> builds the executable in every worker after its env is set") {
  for (auto& [name, opts] : layouts()) {
    CAPTURE(name);
    hvactor::executor ex{test_runtime(), quick_settings(), opts};
    ex.start<trainer>(2);
    CHECK(ex.execute([](trainer& t) { return env_int("HOROVOD_RANK") * t.epochs_; })
          == std::vector<int>{0, 2, 4, 6});
    CHECK(ex.execute(&trainer::rank_times_epochs) == std::vector<int>{0, 2, 4, 6});
    CHECK(ex.execute(&trainer::add_steps, 3) == std::vector<int>(4, 3));
    CHECK(ex.execute(&trainer::add_steps, 4) == std::vector<int>(4, 7));
    CHECK(ex.execute_single(&trainer::add_steps, 1) == 8);
    CHECK(ex.execute([](trainer& t, int k) { return t.steps_ * k; }, 10)
          == std::vector<int>{80, 70, 70, 70});
    ex.shutdown();
  }
}

TEST_CASE("extra_env_vars arrive in every worker as strings") {
  for (auto [name, opts] : layouts()) {
    CAPTURE(name);
    opts.extra_env_vars = {{"MY_SETTING", "42"}, {"HOROVOD_FUSION_THRESHOLD", "0"}};
    hvactor::executor ex{test_runtime(), quick_settings(), opts};
    ex.start();
    CHECK(ex.run(&env_of, std::string{"MY_SETTING"}) == std::vector<std::string>(4, "42"));
    CHECK(ex.run(&env_of, std::string{"HOROVOD_FUSION_THRESHOLD"})
          == std::vector<std::string>(4, "0"));
    ex.shutdown();
  }
}

TEST_CASE("calls before start() and after shutdown() throw not_started") {
  hvactor::executor ex{test_runtime(), quick_settings(), {.num_workers = 2}};
  CHECK_THROWS_AS(ex.run(&rank_times, 1), hvactor::not_started);
  CHECK_THROWS_WITH_AS(ex.execute(&trainer::rank_times_epochs),
                       doctest::Contains("call start() first"), hvactor::not_started);
  ex.start();
  auto pids = ex.worker_pids();
  CHECK(pids.size() == 2);
  ex.shutdown();
  ex.shutdown(); // idempotent
  CHECK(hvactor::test::all_gone(pids, 100ms));
  CHECK_THROWS_WITH_AS(ex.run(&rank_times, 1), doctest::Contains("shut down"),
                       hvactor::not_started);
  CHECK_THROWS_AS(ex.run_remote(&rank_times, 1), hvactor::not_started);
  CHECK_THROWS_AS(ex.execute_single(&trainer::rank_times_epochs), hvactor::not_started);
}

TEST_CASE("an executor that goes out of scope leaves no worker process behind") {
  std::vector<int> pids;
  {
    hvactor::executor ex{test_runtime(), quick_settings(),
                         {.num_hosts = 1, .num_workers_per_host = 4}};
    ex.start();
    pids = ex.worker_pids();
    REQUIRE(pids.size() == 4);
    for (int pid : pids)
      CHECK(hvactor::test::pid_alive(pid));
  }
  CHECK(hvactor::test::all_gone(pids, 1s));
}

TEST_CASE("invalid options are refused by the constructor with API.md's message") {
  auto refused = [](hvactor::executor_options opts) {
    try {
      hvactor::executor ex{test_runtime(), quick_settings(), std::move(opts)};
    } catch (const std::invalid_argument& e) {
      return std::string{e.what()};
    }
    return std::string{"<accepted>"};
  };
  CHECK(refused({}).rfind("One of num_workers or num_hosts must be set.", 0) == 0);
  CHECK(refused({.num_workers = 2, .num_hosts = 1, .num_workers_per_host = 2})
          .rfind("Only one of num_workers and num_hosts must be set.", 0)
        == 0);
  CHECK(refused({.num_workers = 0}).rfind("num_workers must be >= 1: Got 0.", 0) == 0);
  CHECK(refused({.num_workers = 1, .gpus_per_worker = 1})
          .rfind("gpus_per_worker is set, but use_gpu is False.", 0)
        == 0);
}

TEST_CASE("infeasible placement throws placement_timeout after placement_timeout, and "
          "shutdown still works") {
  // A second embedded cluster with 2 CPUs; the job wants 4 x 1 CPU.
  char name[] = "placement";
  char* argv[] = {name, nullptr};
  hvactor::runtime small{1, argv, {.num_cpus = 2, .node_id = "small-node"}};
  for (auto& [layout, opts] : layouts()) {
    CAPTURE(layout);
    hvactor::executor ex{small,
                         hvactor::executor::create_settings({.placement_timeout = 2s}), opts};
    auto t0 = std::chrono::steady_clock::now();
    std::string message;
    try {
      ex.start();
    } catch (const hvactor::placement_timeout& e) {
      message = e.what();
    }
    auto elapsed = std::chrono::steady_clock::now() - t0;
    CAPTURE(message);
    CHECK(elapsed >= 2s);
    CHECK(elapsed < 6s);
    CHECK(message.find("placement_timeout") != std::string::npos);
    CHECK(message.find("CPU: 4") != std::string::npos);               // requested
    CHECK(message.find("'small-node'") != std::string::npos);         // available, per node
    CHECK(message.find("CPU 2 free of 2") != std::string::npos);
    CHECK_NOTHROW(ex.shutdown());
    CHECK_THROWS_AS(ex.run(&rank_times, 1), hvactor::not_started);
  }
  // The failed attempts released everything: a fitting job starts at once.
  hvactor::executor fits{small, quick_settings(), {.num_workers = 2}};
  fits.start();
  CHECK(fits.run(&rank_times, 1) == std::vector<int>{0, 1});
}

TEST_CASE("inf, -inf, NaN, -0.0 and subnormals travel exactly as results and arguments") {
  using lim = std::numeric_limits<double>;
  // call_timeout bounds the old failure: a worker stuck serializing +inf.
  hvactor::executor ex{test_runtime(),
                       hvactor::executor::create_settings(
                         {.timeout = 20s, .placement_timeout = 20s, .call_timeout = 20s}),
                       {.num_workers = 2}};
  ex.start();
  auto infs = ex.run(&infinite_by_rank);
  REQUIRE(infs.size() == 2);
  CHECK(infs[0] == lim::infinity());
  CHECK(infs[1] == -lim::infinity());
  for (auto& m : ex.run(&odd_float_metrics)) {
    CHECK(m.at("inf") == std::numeric_limits<float>::infinity());
    CHECK(std::isnan(m.at("nan")));
    CHECK(m.at("tiny") == std::numeric_limits<float>::denorm_min());
    CHECK(std::bit_cast<uint32_t>(m.at("zero")) == std::bit_cast<uint32_t>(-0.0f));
  }
  std::vector<double> sent{lim::infinity(), -lim::infinity(), -0.0, lim::denorm_min(),
                           std::bit_cast<double>(uint64_t{0x7ff8000000000123})};
  for (auto& back : ex.run(&echo_odd, sent)) {
    REQUIRE(back.size() == sent.size() + 1);
    for (size_t i = 0; i < sent.size(); ++i)
      CHECK(std::bit_cast<uint64_t>(back[i]) == std::bit_cast<uint64_t>(sent[i]));
    CHECK((std::isnan(back.back()) && std::signbit(back.back())));
  }
  ex.shutdown();
}

} // TEST_SUITE
