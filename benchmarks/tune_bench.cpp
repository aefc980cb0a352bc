// hvactor::tune's targets (issue 58), on a cluster of 4 hvactor-node
// processes x 2 CPUs on this machine (started here unless --address):
//
//   pack  16 trials x 2 workers, 20 (or 10-30) steps of 100 ms: the share of
//         the 8 CPUs held by a trial (start() to its fit's return) and busy
//         in a loop, and how soon a trial starts once its gang is free.
//   asha  least squares trained by distributed gradient descent (each rank
//         holds half of the rows; gradients averaged by allreduce), lr and
//         momentum searched: ASHA against full-budget random search over the
//         same 24 configs; the best loss and the worker-seconds of each.
//   pbt   the same problem by minibatch SGD, whose best lr falls as the loss
//         does: PBT against the same 8 configs with a fixed lr.
//
//   tune_bench [--only pack,asha,pbt] [--rounds 3] [--address HEAD:PORT]

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <hvactor/hvactor.hpp>
#include <hvactor/tune.hpp>

#include "local_cluster.hpp"

namespace fs = std::filesystem;
namespace train = hvactor::train;
namespace tune = hvactor::tune;

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
    .count();
}

double num(const train::config& cfg, const char* key, double fallback) {
  auto i = cfg.find(key);
  return i == cfg.end() ? fallback : i->second.as_double();
}

// -- pack: steps of a fixed length ------------------------------------------------

void step_loop(train::context& ctx) {
  auto& cfg = ctx.config();
  auto start = unix_now();
  hvactor::hvd::init();
  auto steps = static_cast<int>(num(cfg, "steps", 10));
  auto step = std::chrono::milliseconds{static_cast<int64_t>(num(cfg, "step_ms", 100))};
  std::vector<float> grad(256, 1.0f);
  for (int i = 0; i < steps; ++i) {
    std::this_thread::sleep_for(step);
    hvactor::hvd::allreduce(std::span<float>{grad});
    train::report({{"loss", 1.0 / (i + 1)}, {"loop_start", start}, {"now", unix_now()}});
  }
}

// -- asha and pbt: least squares --------------------------------------------------

constexpr int dims = 8, rows = 256;

/// Row k of the problem: x with column scales 0.15..2 (ill-conditioned),
/// y = x . w* + noise.
void problem_row(int k, double* x, double& y) {
  std::mt19937_64 gen{static_cast<uint64_t>(k) * 7919 + 1};
  std::normal_distribution<double> n{0, 1};
  y = 0;
  for (int j = 0; j < dims; ++j) {
    x[j] = n(gen) * (0.15 + 1.85 * j / (dims - 1));
    y += x[j] * (j % 2 ? 1.0 : -1.0);
  }
  y += 0.05 * n(gen);
}

struct model {
  std::vector<double> w = std::vector<double>(dims, 0.0), v = std::vector<double>(dims, 0.0);
  int iteration = 0;
};

void save(const fs::path& dir, const model& m) {
  fs::create_directories(dir);
  std::ofstream out{dir / "model"};
  out.precision(17);
  out << m.iteration;
  for (auto x : m.w)
    out << ' ' << x;
  for (auto x : m.v)
    out << ' ' << x;
}

model load(const fs::path& dir) {
  model m;
  std::ifstream in{dir / "model"};
  in >> m.iteration;
  for (auto& x : m.w)
    in >> x;
  for (auto& x : m.v)
    in >> x;
  return m;
}

/// Mean squared error over this rank's rows and its gradient (`batch` rows
/// drawn at random, or all of them when batch is 0), averaged over ranks.
double loss_and_grad(const model& m, int rank, int size, int batch, std::mt19937_64& gen,
                     std::vector<double>& g) {
  std::vector<double> acc(dims + 2, 0.0); // gradient, loss, row count
  std::uniform_int_distribution<int> pick{0, rows / size - 1};
  auto add = [&](int k, bool grad, bool loss) {
    double x[dims], y;
    problem_row(k, x, y);
    double r = -y;
    for (int j = 0; j < dims; ++j)
      r += x[j] * m.w[j];
    if (grad)
      for (int j = 0; j < dims; ++j)
        acc[j] += r * x[j] / (batch ? batch : rows / size);
    if (loss) {
      acc[dims] += r * r;
      acc[dims + 1] += 1;
    }
  };
  for (int k = rank; k < rows; k += size)
    add(k, batch == 0, true);
  for (int b = 0; b < batch; ++b)
    add(pick(gen) * size + rank, true, false);
  hvactor::hvd::allreduce(std::span<double>{acc}, hvactor::hvd::op::sum);
  g.assign(acc.begin(), acc.begin() + dims);
  for (auto& x : g)
    x /= size;
  return acc[dims] / acc[dims + 1];
}

void descent_loop(train::context& ctx) {
  auto& cfg = ctx.config();
  auto lr = num(cfg, "lr", 0.01), mom = num(cfg, "momentum", 0);
  auto batch = static_cast<int>(num(cfg, "batch", 0));
  auto iters = static_cast<int>(num(cfg, "iters", 27));
  auto step = std::chrono::milliseconds{static_cast<int64_t>(num(cfg, "step_ms", 20))};
  model m;
  if (auto ck = train::get_checkpoint())
    m = load(ck.path());
  hvactor::hvd::init();
  auto rank = ctx.world_rank(), size = ctx.world_size();
  std::mt19937_64 gen{static_cast<uint64_t>(rank * 1000003 + m.iteration) ^ 0x5eedull};
  std::vector<double> g;
  auto scratch = fs::path{cfg.at("scratch").as_string()};
  for (; m.iteration < iters;) {
    std::this_thread::sleep_for(step);
    auto loss = loss_and_grad(m, rank, size, batch, gen, g);
    for (int j = 0; j < dims; ++j) {
      m.v[j] = mom * m.v[j] + g[j];
      m.w[j] -= lr * m.v[j];
    }
    ++m.iteration;
    if (!std::isfinite(loss) || loss > 1e12)
      loss = 1e12; // diverged: a bad score, not a NaN
    auto dir = scratch / fmt::format("{}-{}-{}", ctx.experiment_name(), ::getpid(), m.iteration);
    train::checkpoint ck;
    if (rank == 0) {
      save(dir, m);
      ck = train::checkpoint::from_directory(dir.string());
    }
    train::report({{"loss", loss}, {"now", unix_now()}}, ck);
    if (rank == 0)
      fs::remove_all(dir);
  }
}

// -- the measurements ---------------------------------------------------------------

struct summary {
  double best = 0, worker_s = 0, loop_s = 0;
  /// Mean seconds from a trial's start() to its first result, and from its
  /// last result to its fit's return.
  double rampup = 0, teardown = 0;
};

summary summarize(const tune::result_grid& g, int workers) {
  summary s{1e300, 0, 0};
  for (auto& r : g) {
    for (auto& [a, b] : r.fit_spans)
      s.worker_s += (b - a) * workers;
    s.loop_s += r.metrics_history.size() * workers; // iterations x workers
    if (auto i = r.metrics.find("loss"); i != r.metrics.end())
      s.best = std::min(s.best, i->second.as_double());
    auto& h = r.metrics_history;
    if (!h.empty() && h.front().count("now") && r.fit_spans.size() == 1) {
      s.rampup += (h.front().at("now").as_double() - r.fit_spans.front().first) / g.size();
      s.teardown += (r.fit_spans.back().second - h.back().at("now").as_double()) / g.size();
    }
  }
  return s;
}

std::string percentiles(std::vector<double> xs) {
  if (xs.empty())
    return "-";
  std::sort(xs.begin(), xs.end());
  auto at = [&](double q) { return xs[static_cast<size_t>(q * (xs.size() - 1) + 0.5)]; };
  return fmt::format("{:.1f} / {:.1f} / {:.1f}", at(0.5) * 1e3, at(0.9) * 1e3, xs.back() * 1e3);
}

tune::tuner_options base_options(const std::string& storage, const std::string& name) {
  tune::tuner_options o;
  o.run.storage_path = storage;
  o.run.name = name;
  o.run.verbose = 0;
  o.tune_config.seed = 11;
  return o;
}

void pack(hvactor::runtime& rt, const std::string& storage, int round, bool equal) {
  auto o = base_options(storage, fmt::format("pack-{}-{}", equal, round));
  o.param_space = {{"steps", equal ? tune::param{20} : tune::param{tune::randint(10, 31)}},
                   {"step_ms", 100}};
  o.tune_config.num_samples = 16;
  o.tune_config.seed = 11 + round;
  tune::tuner t{rt, tune::trainer_factory{step_loop, {.scaling = {.num_workers = 2}}}, o};
  auto g = t.fit();
  double first = 1e300, last = 0, held = 0, busy = 0;
  std::vector<std::pair<double, double>> spans;
  for (auto& r : g)
    for (auto& s : r.fit_spans) {
      first = std::min(first, s.first);
      last = std::max(last, s.second);
      held += (s.second - s.first) * 2;
      spans.push_back(s);
    }
  std::vector<double> decide, loop;
  for (auto& r : g) {
    auto& h = r.metrics_history;
    busy += (h.back().at("now").as_double() - h.front().at("loop_start").as_double()) * 2;
    auto start = r.fit_spans.front().first;
    if (start - first < 0.05)
      continue; // the first wave waited for nothing
    double freed = 0;
    for (auto& s : spans)
      if (s.second <= start)
        freed = std::max(freed, s.second);
    decide.push_back(start - freed);
    loop.push_back(h.front().at("loop_start").as_double() - freed);
  }
  auto span = last - first;
  std::printf("| %s %d | %.2f s | %.1f %% | %.1f %% | %s | %s |\n",
              equal ? "20 steps" : "10-30 steps", round, span,
              100 * held / (8 * span), 100 * busy / (8 * span), percentiles(decide).c_str(),
              percentiles(loop).c_str());
  std::fflush(stdout);
}

tune::result_grid descent(hvactor::runtime& rt, tune::tuner_options o) {
  tune::tuner t{rt, tune::trainer_factory{descent_loop, {.scaling = {.num_workers = 2}}}, o};
  return t.fit();
}

void asha(hvactor::runtime& rt, const std::string& storage, int round) {
  auto space = tune::param_space{{"lr", tune::loguniform(1e-3, 1)},
                                 {"momentum", tune::uniform(0, 0.5)},
                                 {"iters", 64},
                                 {"step_ms", 50},
                                 {"scratch", storage + "/scratch"}};
  auto o = base_options(storage, fmt::format("random-{}", round));
  o.param_space = space;
  o.tune_config.metric = "loss";
  o.tune_config.mode = "min";
  o.tune_config.num_samples = 32;
  o.tune_config.seed = 21 + round;
  auto full = summarize(descent(rt, o), 2);
  o.run.name = fmt::format("asha-{}", round);
  o.tune_config.scheduler = std::make_shared<tune::asha_scheduler>(
    tune::asha_scheduler::options{.max_t = 64, .grace_period = 4, .reduction_factor = 4});
  auto early = summarize(descent(rt, o), 2);
  std::printf("| asha %d | %.4g | %.4g | %.1f / %.1f | %.1f %% | %.0f / %.0f | %.1f %% | "
              "%.0f / %.0f ms | %.0f / %.0f ms |\n",
              round, full.best, early.best, full.worker_s, early.worker_s,
              100 * early.worker_s / full.worker_s, full.loop_s, early.loop_s,
              100 * early.loop_s / full.loop_s, full.rampup * 1e3, early.rampup * 1e3,
              full.teardown * 1e3, early.teardown * 1e3);
  std::fflush(stdout);
}

void pbt(hvactor::runtime& rt, const std::string& storage, int round) {
  auto o = base_options(storage, fmt::format("fixed-{}", round));
  o.param_space = {{"lr", tune::loguniform(1e-2, 0.5)},
                   {"momentum", 0.0},
                   {"batch", 1},
                   {"iters", 120},
                   {"scratch", storage + "/scratch"}};
  o.tune_config.metric = "loss";
  o.tune_config.mode = "min";
  o.tune_config.num_samples = 8;
  o.tune_config.seed = 31 + round;
  auto fixed = summarize(descent(rt, o), 2);
  o.run.name = fmt::format("pbt-{}", round);
  o.tune_config.scheduler = std::make_shared<tune::pbt_scheduler>(tune::pbt_scheduler::options{
    .time_attr = "training_iteration",
    .perturbation_interval = 6,
    .hyperparam_mutations = {{"lr", tune::loguniform(1e-3, 0.5)}},
    .seed = static_cast<uint64_t>(round + 1)});
  auto pop = summarize(descent(rt, o), 2);
  std::printf("| pbt %d | %.4g | %.4g | %.2fx |\n", round, fixed.best, pop.best,
              fixed.best / pop.best);
  std::fflush(stdout);
}

int run_child(hvactor::runtime& rt, const std::string& only, int rounds) {
  auto storage = hvactor::bench::make_temp_dir("hvactor-tune-bench");
  fs::create_directories(storage + "/scratch");
  auto want = [&](const char* what) { return only.find(what) != std::string::npos; };
  if (want("pack")) {
    std::printf("| round | makespan | CPUs held | CPUs in a loop | start() after a gang "
                "is free, ms (p50 / p90 / max) | loop running after, ms |\n|---|---|---|---|"
                "---|---|\n");
    for (bool equal : {true, false})
      for (int r = 0; r < rounds; ++r)
        pack(rt, storage, r, equal);
  }
  if (want("asha")) {
    std::printf("\n| round | best loss, random | best loss, ASHA | worker-s (random / ASHA) "
                "| ASHA's share | worker-iterations | share | start() to 1st result | last result to "
                "the end |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int r = 0; r < rounds; ++r)
      asha(rt, storage, r);
  }
  if (want("pbt")) {
    std::printf("\n| round | best loss, fixed lr | best loss, PBT | fixed / PBT |\n"
                "|---|---|---|---|\n");
    for (int r = 0; r < rounds; ++r)
      pbt(rt, storage, r);
  }
  hvactor::bench::remove_dir(storage);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  auto opt = [&](const std::string& name, const std::string& fallback) {
    for (size_t i = 1; i + 1 < args.size(); ++i)
      if (args[i] == name)
        return args[i + 1];
    return fallback;
  };
  auto only = opt("--only", "pack,asha,pbt");
  auto rounds = std::stoi(opt("--rounds", "3"));
  bool child = std::find(args.begin(), args.end(), "--address") != args.end();
  if (child) {
    hvactor::runtime rt{argc, argv};
    return run_child(rt, only, rounds);
  }
  // The parent: 4 nodes x 2 CPUs, then this program joined to them.
  auto dir = hvactor::bench::make_temp_dir("hvactor-tune-cluster");
  int rc = 1;
  try {
    hvactor::bench::local_cluster cluster{{HVACTOR_NODE_BIN, 4, 2, dir + "/cluster"}};
    std::vector<std::string> child_argv{fs::read_symlink("/proc/self/exe").string(), "--address",
                                        cluster.address(), "--only", only, "--rounds",
                                        std::to_string(rounds)};
    auto pid = hvactor::bench::spawn_process(child_argv);
    rc = hvactor::bench::wait_process(pid, std::chrono::minutes(30));
    if (rc == -1)
      rc = hvactor::bench::stop_process(pid);
    cluster.stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tune_bench: %s\n", e.what());
  }
  hvactor::bench::remove_dir(dir);
  return rc;
}
