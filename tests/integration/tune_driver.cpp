// A driver for hvactor::tune's tests (tune_test.cpp), run as a child
// process on the embedded cluster or joined to a cluster (--address).
// Every trial trains a quadratic with a real distributed loop: each rank
// holds half of the loss, averaged by hvd::allreduce; the loss at
// iteration i is (x - 1)^2 + (y + 2)^2 + 1 / (i + 1), best at x = 1, y = -2.
//
//   tune_driver --storage DIR --name NAME [--samples N] [--workers W]
//               [--iters I] [--sleep-ms S] [--scheduler fifo|asha|pbt]
//               [--search random|grid|bayes] [--max-failures K]
//               [--kill-trial ID] (its rank 1 SIGKILLs itself at iteration 1
//                of the first attempt) [--max-concurrent C] [--restore 1]
//               [--bad empty|samples|mode|metric-only|metric|scheduler]
//               [--pids DIR] (every worker writes DIR/<trial>.<rank>.<pid>)
//               [--verbose V] [--mixed 1] (gangs of 2, 3, then 1 worker x 8: the
//                trial's "w")
//
// Prints "trial id=... status=... iter=... loss=... stopped=... x=..."
// per trial, "best id=... loss=...", "errors n=...", and "thrown
// text=..." (exit 2) when fit() or the constructor threw.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <hvactor/hvactor.hpp>
#include <hvactor/tune.hpp>

namespace fs = std::filesystem;
namespace train = hvactor::train;
namespace tune = hvactor::tune;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in{p};
  std::string s;
  std::getline(in, s);
  return s;
}

void loop(train::context& ctx) {
  auto& cfg = ctx.config();
  auto num = [&](const char* k, double fallback) {
    auto i = cfg.find(k);
    return i == cfg.end() ? fallback : i->second.as_double();
  };
  auto text = [&](const char* k) {
    auto i = cfg.find(k);
    return i == cfg.end() ? std::string{} : i->second.as_string();
  };
  auto rank = ctx.world_rank();
  auto trial = ctx.experiment_name();
  if (auto dir = text("pids"); !dir.empty())
    std::ofstream{fs::path{dir} / (trial + "." + std::to_string(rank) + "."
                                   + std::to_string(::getpid()))};
  int start = 0;
  if (auto ck = train::get_checkpoint())
    start = std::stoi(read(fs::path{ck.path()} / "epoch"));
  hvactor::hvd::init();
  auto x = num("x", 0), y = num("y", 0);
  auto iters = static_cast<int>(num("iters", 4));
  auto sleep = std::chrono::milliseconds{static_cast<int64_t>(num("sleep_ms", 50))};
  for (int i = start; i < iters; ++i) {
    std::this_thread::sleep_for(sleep);
    if (trial == text("kill_trial") && ctx.attempt() == 0 && rank == 1 && i == 1)
      ::kill(::getpid(), SIGKILL);
    // Half of the loss on each of two ranks (all of it on one).
    double whole = (x - 1) * (x - 1) + (y + 2) * (y + 2) + 1.0 / (i + 1);
    std::vector<double> part{whole};
    hvactor::hvd::allreduce(std::span<double>{part}, hvactor::hvd::op::average);
    auto dir = fs::path{text("scratch")} / (trial + "-" + std::to_string(::getpid()) + "-"
                                           + std::to_string(i));
    train::checkpoint ck;
    if (rank == 0) {
      fs::create_directories(dir);
      std::ofstream{dir / "epoch"} << i + 1;
      ck = train::checkpoint::from_directory(dir.string());
    }
    if (text("metric_only") == "1")
      train::report({{"other", part[0]}});
    else
      train::report({{"loss", part[0]},
                     {"epoch", i + 1},
                     {"host", std::string{std::getenv("HOROVOD_HOSTNAME")}}},
                    ck);
    if (rank == 0)
      fs::remove_all(dir);
  }
}

} // namespace

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv, {.num_cpus = 4}};
  auto& args = rt.args();
  auto opt = [&](const std::string& name, const std::string& fallback) {
    for (size_t i = 1; i + 1 < args.size(); ++i)
      if (args[i] == name)
        return args[i + 1];
    return fallback;
  };
  auto num = [&](const std::string& name, int64_t fallback) {
    return std::stoll(opt(name, std::to_string(fallback)));
  };
  try {
    auto storage = opt("--storage", "");
    auto bad = opt("--bad", "");
    fs::create_directories(fs::path{storage} / "scratch");
    int workers = static_cast<int>(num("--workers", 2));
    // --mixed 1: each trial's gang size is its config's "w".
    auto factory =
      num("--mixed", 0)
        ? tune::trainer_factory{loop,
                                [](const train::config& c) {
                                  return train::trainer_options{
                                    .scaling = {.num_workers = static_cast<int>(c.at("w").as_int())}};
                                }}
        : tune::trainer_factory{loop, train::trainer_options{.scaling = {.num_workers = workers}}};
    tune::tuner_options o;
    o.param_space = {{"x", tune::uniform(-2, 4)},
                     {"y", tune::uniform(-5, 1)},
                     {"iters", num("--iters", 4)},
                     {"sleep_ms", num("--sleep-ms", 50)},
                     {"scratch", (fs::path{storage} / "scratch").string()},
                     {"pids", opt("--pids", "")},
                     {"kill_trial", opt("--kill-trial", "")},
                     {"metric_only", bad == "metric" ? "1" : "0"}};
    if (num("--mixed", 0))
      o.param_space.insert_or_assign("w", tune::grid_search({2, 3, 1, 1, 1, 1, 1, 1, 1, 1}));
    auto search = opt("--search", "random");
    if (search == "grid")
      o.param_space.insert_or_assign("x", tune::grid_search({0.0, 1.0, 3.0}));
    o.tune_config.metric = "loss";
    o.tune_config.mode = "min";
    o.tune_config.num_samples = num("--samples", 4);
    o.tune_config.seed = static_cast<uint64_t>(num("--seed", 7));
    o.tune_config.max_concurrent_trials = static_cast<int>(num("--max-concurrent", 0));
    if (search == "bayes")
      o.tune_config.search_alg =
        std::make_shared<tune::bayesopt_search>(tune::bayesopt_search::options{.random_search_steps = 2});
    auto sched = opt("--scheduler", "fifo");
    if (sched == "asha")
      o.tune_config.scheduler = std::make_shared<tune::asha_scheduler>(
        tune::asha_scheduler::options{.max_t = static_cast<double>(num("--iters", 4)),
                                      .grace_period = 1, .reduction_factor = 2});
    else if (sched == "pbt")
      o.tune_config.scheduler = std::make_shared<tune::pbt_scheduler>(tune::pbt_scheduler::options{
        .time_attr = "training_iteration",
        .perturbation_interval = 2,
        .hyperparam_mutations = {{"x", tune::uniform(-2, 4)}},
        .quantile_fraction = 0.5,
        .seed = 3});
    o.run.name = opt("--name", "exp");
    o.run.storage_path = storage;
    o.run.failure.max_failures = static_cast<int>(num("--max-failures", 0));
    o.run.verbose = static_cast<int>(num("--verbose", 1));
    o.run.progress_interval_s = 1;
    if (bad == "empty")
      o.param_space.clear();
    else if (bad == "samples")
      o.tune_config.num_samples = -3;
    else if (bad == "mode")
      o.tune_config.mode = "avg";
    else if (bad == "scheduler") {
      o.tune_config.metric.clear();
      o.tune_config.mode.clear();
      o.tune_config.scheduler = std::make_shared<tune::asha_scheduler>();
    }
    auto t = num("--restore", 0)
               ? tune::tuner::restore((fs::path{storage} / o.run.name).string(), rt, factory,
                                      {.tune_config = o.tune_config})
               : tune::tuner{rt, factory, std::move(o)};
    auto grid = t.fit();
    for (auto& r : grid) {
      auto get = [&](const char* k) {
        auto i = r.metrics.find(k);
        return i == r.metrics.end() ? std::string{"-"} : i->second.to_string();
      };
      std::cout << "trial id=" << r.trial_id << " status=" << tune::to_string(r.status)
                << " iter=" << get("training_iteration") << " loss=" << get("loss")
                << " attempt=" << get("attempt") << " stopped=" << r.stopped_early
                << " x=" << r.config.at("x").to_string() << " results=" << r.metrics_history.size()
                << " fits=" << r.fit_spans.size() << " host=" << get("host") << " start="
                << std::fixed << std::setprecision(3)
                << (r.fit_spans.empty() ? 0.0 : r.fit_spans.front().first) << std::defaultfloat
                << "\n";
    }
    std::cout << "errors n=" << grid.num_errors() << "\n";
    auto& best = grid.get_best_result();
    std::cout << "best id=" << best.trial_id << " loss=" << best.metrics.at("loss").to_string()
              << "\n";
    std::cout << grid;
    return 0;
  } catch (const std::exception& e) {
    std::string text = e.what();
    std::replace(text.begin(), text.end(), '\n', ' ');
    std::cout << "thrown text=" << text << "\n";
    return 2;
  }
}
