#include "tools/hvactor_bench/train/train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include <caf/meta/type_name.hpp>
#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>
#include <hvactor/torch.hpp>

#include "tools/hvactor_bench/layout.hpp"
#include "tools/hvactor_bench/load.hpp"
#include "tools/hvactor_bench/train/models.hpp"
#include "tools/hvactor_bench/report.hpp"

namespace hvactor::bench_tool {

namespace hvd = hvactor::hvd;

/// What a worker reports after setting its model up.
struct train_setup_info {
  int64_t params = 0;
  int32_t threads = 0;
  std::string path;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, train_setup_info& x) {
  return f(caf::meta::type_name("hvactor_bench_train_setup"), x.params, x.threads, x.path);
}

/// What a worker reports at the end (--check): a digest of its parameters'
/// bytes, whether they are all finite, and whether training moved them.
struct train_final_state {
  uint64_t digest = 0;
  bool finite = false, moved = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, train_final_state& x) {
  return f(caf::meta::type_name("hvactor_bench_train_final"), x.digest, x.finite, x.moved);
}

namespace {

using clock_type = std::chrono::steady_clock;

// -- in the workers ------------------------------------------------------------

/// One worker's training state, kept between the driver's calls (setup,
/// warm-up, each timed iteration, finish) so the driver can print each
/// iteration as it ends.
struct worker_state {
  model net;
  std::unique_ptr<torch::optim::SGD> sgd;
  std::unique_ptr<hvd::distributed_optimizer> opt;
  torch::Tensor data, target;
  std::vector<torch::Tensor> initial;
  bool gpu = false;
};

/// --device gpu: the GPU hvd's device collectives run on, else the one of
/// local_rank modulo the visible devices (torch's own count).
torch::Device worker_device(bool gpu) {
  if (!gpu)
    return torch::kCPU;
  if (!torch::cuda::is_available())
    throw std::runtime_error(fmt::format("hvactor-bench train --device gpu: rank {} sees no CUDA "
                                         "device through LibTorch",
                                         hvd::rank()));
  int index = hvd::gpu_available() ? hvd::gpu_device()
                                   : hvd::local_rank() % static_cast<int>(torch::cuda::device_count());
  return {torch::kCUDA, static_cast<torch::DeviceIndex>(index)};
}

std::unique_ptr<worker_state>& state() {
  static std::unique_ptr<worker_state> st;
  return st;
}

/// `threads` 0: the node's cores shared by `share` workers (0: by this
/// run's workers on the node).
train_setup_info train_setup(std::string model_name, int64_t batch, int64_t image_size,
                             int32_t threads, int32_t share, bool fp16, bool gpu) {
  hvd::init();
  state().reset();
  if (threads <= 0) {
    auto cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    int workers = share > 0 ? std::min(share, cores) : hvd::local_size();
    threads = std::max(1, cores / std::max(1, workers));
  }
  torch::set_num_threads(threads);
  auto st = std::make_unique<worker_state>();
  torch::manual_seed(42 + hvd::rank()); // broadcast_parameters makes them equal
  st->net = make_model(model_name, image_size);
  auto device = worker_device(gpu);
  st->gpu = gpu;
  st->net.module->to(device);
  auto params = st->net.module->parameters();
  hvd::broadcast_parameters(params, 0);
  for (auto& p : params)
    st->initial.push_back(p.detach().clone());
  // Horovod's script: SGD at lr 0.01 x size, its state broadcast from rank 0.
  st->sgd = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.01 * hvd::size()));
  hvd::broadcast_optimizer_state(*st->sgd, 0);
  st->opt = std::make_unique<hvd::distributed_optimizer>(
    *st->sgd, 1, hvd::op::average, true, fp16 ? hvd::compression::fp16 : hvd::compression::none);
  std::vector<int64_t> shape{batch};
  shape.insert(shape.end(), st->net.input_shape.begin(), st->net.input_shape.end());
  st->data = torch::randn(shape, torch::TensorOptions().device(device));
  st->target = torch::randint(0, st->net.classes, {batch},
                              torch::TensorOptions().dtype(torch::kLong).device(device));
  st->net.module->train();
  train_setup_info info;
  for (auto& p : params)
    info.params += p.numel();
  info.threads = threads;
  info.path = hvd::backend_info();
  if (gpu)
    info.path = fmt::format("{} (GPU collectives: {})", device.str(), hvd::gpu_backend());
  state() = std::move(st);
  return info;
}

/// Trains `batches` batches; returns the seconds they took on this rank.
double train_batches(int32_t batches) {
  auto& st = state();
  if (!st)
    throw std::logic_error("hvactor-bench train: no model set up in this worker");
  auto t0 = clock_type::now();
  for (int32_t i = 0; i < batches; ++i) {
    st->opt->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(st->net.forward(st->data), st->target);
    loss.backward();
    st->opt->step();
  }
  if (st->gpu) // the last step's update kernels are part of the batch
    torch::cuda::synchronize();
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

train_final_state train_finish() {
  train_final_state out;
  if (auto& st = state()) {
    // FNV-1a over every parameter's bytes, in order.
    uint64_t h = 1469598103934665603ull;
    out.finite = true;
    auto params = st->net.module->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      auto p = params[i].detach().to(torch::kCPU).contiguous();
      out.finite = out.finite && torch::isfinite(p).all().item<bool>();
      out.moved = out.moved || !torch::equal(p, st->initial[i].to(torch::kCPU));
      auto* bytes = static_cast<const unsigned char*>(p.data_ptr());
      for (size_t b = 0; b < static_cast<size_t>(p.numel()) * p.element_size(); ++b)
        h = (h ^ bytes[b]) * 1099511628211ull;
    }
    out.digest = h;
  }
  state().reset();
  hvd::shutdown();
  return out;
}

// -- in the driver -------------------------------------------------------------

struct config {
  std::string model = "resnet50";
  int64_t batch = 32, image_size = 224;
  int warmup = 10, per_iter = 10, iters = 10;
  bool fp16 = false, check = false, gpu = false;
  int threads = 0;
  /// --bind-to: auto, core or none.
  std::string bind = "auto";
  layout where;
  std::vector<int> scaling;
  std::string json, csv;
};

/// One world size's run.
struct result {
  int workers = 0;
  int64_t params = 0;
  int threads = 0;
  std::string path;
  std::vector<double> img_secs; // per worker, one per timed iteration (rank 0's)
  double mean = 0, conf = 0, efficiency = 0;
  int wrong = 0;
  std::vector<std::string> nodes;
};

// Every option of hvactor-bench train.
void declare_train_options(cxxopts::Options& p) {
  add_layout_options(p);
  // clang-format off
  p.add_options()
    ("model", "resnet50 | mlp (1024-1024-1024-10)", cxxopts::value<std::string>()->default_value("resnet50"))
    ("batch-size", "input batch size per worker", cxxopts::value<int>()->default_value("32"))
    ("image-size", "resnet50's image side (3 x N x N)", cxxopts::value<int>()->default_value("224"))
    ("num-warmup-batches", "untimed batches first", cxxopts::value<int>()->default_value("10"))
    ("num-batches-per-iter", "batches per timed iteration", cxxopts::value<int>()->default_value("10"))
    ("num-iters", "timed iterations", cxxopts::value<int>()->default_value("10"))
    ("fp16-allreduce", "reduce gradients as float16 (hvd::compression::fp16)")
    ("device", "cpu | gpu: the model, the batch and the gradients on the CPU or on each "
               "worker's GPU (a LibTorch with CUDA)", cxxopts::value<std::string>()->default_value("cpu"))
    ("scaling", "run each of these world sizes (comma-separated, e.g. 1,2,4) and print the "
                "scaling efficiency against the smallest", cxxopts::value<std::string>())
    ("threads", "torch threads per worker (0: the node's cores / its workers; with --scaling, "
                "/ the largest world size, at every size)",
     cxxopts::value<int>()->default_value("0"))
    ("bind-to", "core: each worker pinned to a core of its own (HVACTOR_BIND_TO; give it one "
                "torch thread) | none | auto: core on one node when each worker has one torch "
                "thread and a core of its own, else none",
     cxxopts::value<std::string>()->default_value("auto"))
    ("c,check", "check that every rank ends with the same, finite, trained parameters")
    ("json", "write every sample and the machine's description here", cxxopts::value<std::string>())
    ("csv", "write one row per world size here", cxxopts::value<std::string>())
    ("h,help", "this text");
  // clang-format on
}

// Refuses sizes that cannot train or cannot fit a worker.
void check_sizes(const config& c) {
  if (c.batch < 1 || c.batch > 65536)
    throw std::invalid_argument(fmt::format("--batch-size must be in 1..65536 (got {})", c.batch));
  if (c.image_size < 32 || c.image_size > 4096)
    throw std::invalid_argument(fmt::format("--image-size must be in 32..4096 (got {})", c.image_size));
  if (c.model == "resnet50") {
    auto side = resnet50_final_side(c.image_size);
    if (c.batch * side * side < 2)
      throw std::invalid_argument(fmt::format(
        "resnet50 at --image-size {} ends in {}x{} feature maps: batch normalization needs more "
        "than one value per channel; raise --batch-size to 2 or --image-size to 64",
        c.image_size, side, side));
  }
  // The synthetic batch lives in every worker: refuse one that cannot fit
  // rather than let the workers be killed for memory.
  double input = static_cast<double>(c.batch) * 4
                 * (c.model == "resnet50" ? 3.0 * static_cast<double>(c.image_size * c.image_size) : 1024.0);
  if (input > 4.0 * (1 << 30))
    throw std::invalid_argument(fmt::format(
      "--batch-size {} of {} inputs is {:.1f} GiB per worker (activations need several times "
      "more): at most 4 GiB", c.batch, c.model, input / (1 << 30)));
  if (c.warmup < 0 || c.warmup > 100000 || c.per_iter < 1 || c.per_iter > 100000 || c.iters < 1
      || c.iters > 100000)
    throw std::invalid_argument("--num-warmup-batches must be in 0..100000, --num-batches-per-iter "
                                "and --num-iters in 1..100000");
  if (c.threads < 0 || c.threads > 1024)
    throw std::invalid_argument(fmt::format("--threads must be in 0..1024 (got {})", c.threads));
}

config parse(const std::vector<std::string>& args) {
  cxxopts::Options p{"hvactor-bench train",
                     "Horovod's synthetic benchmark: data-parallel training on random data "
                     "through hvd::distributed_optimizer (LibTorch, CPU or GPU), img/sec per worker "
                     "and in total"};
  declare_train_options(p);
  auto o = parse_words(p, args, 2);
  if (o.count("help")) {
    std::cout << p.help() << "\n";
    std::exit(0);
  }
  config c;
  c.model = o["model"].as<std::string>();
  if (c.model != "resnet50" && c.model != "mlp")
    throw std::invalid_argument("--model must be mlp or resnet50 (got '" + c.model + "')");
  c.batch = o["batch-size"].as<int>();
  c.image_size = o["image-size"].as<int>();
  c.warmup = o["num-warmup-batches"].as<int>();
  c.per_iter = o["num-batches-per-iter"].as<int>();
  c.iters = o["num-iters"].as<int>();
  c.threads = o["threads"].as<int>();
  c.fp16 = o.count("fp16-allreduce") > 0;
  auto device = o["device"].as<std::string>();
  if (device != "cpu" && device != "gpu")
    throw std::invalid_argument("--device must be cpu or gpu (got '" + device + "')");
  c.gpu = device == "gpu";
  if (c.gpu && !torch::cuda::is_available())
    throw std::invalid_argument("--device gpu: LibTorch sees no CUDA device here (a LibTorch "
                                "built without CUDA, or no GPU)");
  c.bind = o["bind-to"].as<std::string>();
  if (c.bind != "core" && c.bind != "none" && c.bind != "auto")
    throw std::invalid_argument("--bind-to must be auto, core or none (got '" + c.bind + "')");
  c.check = o.count("check") > 0;
  check_sizes(c);
  if (o.count("scaling")) {
    if (o.count("np") || o.count("num-hosts"))
      throw std::invalid_argument("--scaling gives the world sizes: not with -np or --num-hosts");
    c.scaling = parse_int_list(o["scaling"].as<std::string>(), "--scaling", 1, 65536);
    std::sort(c.scaling.begin(), c.scaling.end());
    c.scaling.erase(std::unique(c.scaling.begin(), c.scaling.end()), c.scaling.end());
  }
  c.where = parse_layout(o);
  if (o.count("json"))
    c.json = o["json"].as<std::string>();
  if (o.count("csv"))
    c.csv = o["csv"].as<std::string>();
  return c;
}

const char* unit(const config& c) {
  return c.model == "resnet50" ? "img/sec" : "samples/sec";
}

// --bind-to auto: a core each on one node when every worker computes with
// one torch thread (train_setup's count) and has a core to itself; a bound
// worker's other threads would share its one core.
std::string binding(const config& c, const layout& where) {
  if (c.bind != "auto")
    return c.bind;
  int cores = busy_load::usable_cores();
  int largest = c.scaling.empty() ? where.np : c.scaling.back();
  int threads = c.threads > 0 ? c.threads : std::max(1, cores / std::max(1, largest));
  return where.num_hosts <= 1 && threads == 1 && where.np <= cores ? "core" : "none";
}

result run_one(hvactor::runtime& rt, const config& c, const layout& where) {
  hvactor::executor_options opts;
  where.apply(opts);
  opts.extra_env_vars["HVACTOR_BIND_TO"] = binding(c, where);
  // A batch of ResNet-50 on a few CPU cores takes seconds: collectives wait
  // for the slowest rank's backward.
  hvactor::executor ex{rt, hvactor::executor::create_settings({.timeout = std::chrono::minutes(10)}),
                       opts};
  ex.start();
  result r;
  r.workers = where.np;
  progress line;
  line.show(fmt::format("[train {}] {} workers: setting up", c.model, r.workers));
  // With --scaling every world size gets the threads of the largest, so
  // that the efficiency compares the same compute per worker.
  int32_t share = c.scaling.empty() ? 0 : c.scaling.back();
  auto info = ex.run(&train_setup, c.model, c.batch, c.image_size, int32_t{c.threads}, share,
                     c.fp16, c.gpu);
  r.params = info.at(0).params;
  r.threads = info.at(0).threads;
  r.path = info.at(0).path;
  line.clear();
  fmt::print("Model: {} ({} parameters)\nBatch size: {}\nNumber of workers: {} ({} torch "
             "thread(s) each, {})\nGradients: {}{}\n",
             c.model, r.params, c.batch, r.workers, r.threads,
             binding(c, where) == "core" ? "a core each" : "unbound",
             r.path.substr(0, r.path.find(',')), c.fp16 ? ", float16 on the wire" : "");
  fmt::print("Running warmup...\n");
  std::fflush(stdout);
  line.show(fmt::format("[train {}] {} workers: warm-up ({} batches)", c.model, r.workers, c.warmup));
  if (c.warmup > 0)
    ex.run(&train_batches, int32_t{c.warmup});
  line.clear();
  fmt::print("Running benchmark...\n");
  std::fflush(stdout);
  for (int i = 0; i < c.iters; ++i) {
    line.show(fmt::format("[train {}] {} workers: iteration {}/{}", c.model, r.workers, i + 1,
                          c.iters));
    auto secs = ex.run(&train_batches, int32_t{c.per_iter});
    double img_sec = static_cast<double>(c.batch * c.per_iter) / std::max(1e-9, secs.at(0));
    r.img_secs.push_back(img_sec);
    line.clear();
    fmt::print("Iter #{}: {:.1f} {} per worker\n", i, img_sec, unit(c));
    std::fflush(stdout);
  }
  auto finals = ex.run(&train_finish);
  r.nodes = ex.worker_nodes();
  ex.shutdown();
  r.mean = mean(r.img_secs);
  r.conf = ci95(r.img_secs);
  fmt::print("{} per worker: {:.1f} +-{:.1f}\n", unit(c), r.mean, r.conf);
  fmt::print("Total {} on {} worker(s): {:.1f} +-{:.1f}\n", unit(c), r.workers, r.mean * r.workers,
             r.conf * r.workers);
  if (c.check) {
    std::string why;
    for (size_t k = 0; k < finals.size(); ++k) {
      auto& f = finals[k];
      if (f.digest == finals.at(0).digest && f.finite && f.moved)
        continue;
      ++r.wrong;
      why += fmt::format("{}rank {}: {}", why.empty() ? "" : "; ", k,
                         !f.finite  ? (c.fp16 ? "non-finite parameters (a gradient beyond float16's "
                                                "range, 65504, with --fp16-allreduce?)"
                                              : "non-finite parameters")
                         : !f.moved ? "parameters never changed"
                                    : "parameters differ from rank 0's");
    }
    fmt::print("Check: {} of {} workers end with the same, finite, trained parameters{}\n",
               static_cast<int>(finals.size()) - r.wrong, finals.size(),
               r.wrong ? " (WRONG: " + why + ")" : "");
  }
  std::fflush(stdout);
  return r;
}

void write_json(const config& c, const std::vector<result>& rs) {
  std::ofstream out{c.json};
  if (!out)
    throw std::runtime_error("cannot write " + c.json);
  std::string scaling;
  for (auto n : c.scaling)
    scaling += (scaling.empty() ? "" : ", ") + std::to_string(n);
  out << json_head("train", rs.back().nodes, rs.back().path,
                   fmt::format("{{\"model\": {}, \"unit\": {}, \"batch_size\": {}, "
                               "\"image_size\": {}, \"num_warmup_batches\": {}, "
                               "\"num_batches_per_iter\": {}, \"num_iters\": {}, "
                               "\"fp16_allreduce\": {}, \"threads\": {}, \"check\": {}, "
                               "\"num_hosts\": {}, \"per_host\": {}, \"scaling\": [{}]}}",
                               json_string(c.model), json_string(unit(c)), c.batch, c.image_size,
                               c.warmup, c.per_iter, c.iters, c.fp16, c.threads, c.check,
                               c.where.num_hosts, c.where.per_host, scaling));
  for (size_t i = 0; i < rs.size(); ++i) {
    auto& r = rs[i];
    out << fmt::format("    {{\"workers\": {}, \"params\": {}, \"threads\": {}, "
                       "\"per_worker_mean\": {:.3f}, \"per_worker_ci95\": {:.3f}, "
                       "\"total_mean\": {:.3f}, \"total_ci95\": {:.3f}, \"efficiency\": {:.4f}, "
                       "\"wrong\": {}, \"samples\": {}, \"path\": {}}}{}\n",
                       r.workers, r.params, r.threads, r.mean, r.conf, r.mean * r.workers,
                       r.conf * r.workers, r.efficiency, r.wrong, json_numbers(r.img_secs),
                       json_string(r.path), i + 1 < rs.size() ? "," : "");
  }
  out << "  ]\n}\n";
}

void write_csv(const config& c, const std::vector<result>& rs) {
  std::ofstream out{c.csv};
  if (!out)
    throw std::runtime_error("cannot write " + c.csv);
  out << "workers,per_worker_mean,per_worker_ci95,total_mean,total_ci95,efficiency,wrong\n";
  for (auto& r : rs)
    out << fmt::format("{},{:.3f},{:.3f},{:.3f},{:.3f},{:.4f},{}\n", r.workers, r.mean, r.conf,
                       r.mean * r.workers, r.conf * r.workers, r.efficiency, r.wrong);
}

} // namespace

int run_train(hvactor::runtime& rt, const std::vector<std::string>& args) {
  auto c = parse(args);
  std::vector<layout> runs;
  if (c.scaling.empty()) {
    runs.push_back(c.where);
  } else {
    for (int n : c.scaling)
      runs.push_back(layout{.np = n});
  }
  std::vector<result> rs;
  for (auto& where : runs) {
    if (!rs.empty())
      fmt::print("\n");
    rs.push_back(run_one(rt, c, where));
  }
  // Horovod's scaling efficiency: total throughput at N / (N x the
  // throughput of one worker); against the smallest world size when 1 is
  // not among them.
  auto& base = rs.front();
  for (auto& r : rs)
    r.efficiency = base.mean > 0 ? r.mean / base.mean : 0;
  if (rs.size() > 1) {
    fmt::print("\nScaling ({}, batch {} per worker{}; efficiency = total / (workers x {} per "
               "worker at {} worker{})):\n",
               c.model, c.batch, c.fp16 ? ", fp16 allreduce" : "", unit(c), base.workers,
               base.workers == 1 ? "" : "s, scaled");
    fmt::print("| {:>7} | {:>24} | {:>24} | {:>10} |\n", "workers",
               fmt::format("{} per worker", unit(c)), fmt::format("total {}", unit(c)),
               "efficiency");
    fmt::print("|--------:|-------------------------:|-------------------------:|-----------:|\n");
    for (auto& r : rs)
      fmt::print("| {:>7} | {:>24} | {:>24} | {:>9.1f}% |\n", r.workers,
                 fmt::format("{:.1f} +-{:.1f}", r.mean, r.conf),
                 fmt::format("{:.1f} +-{:.1f}", r.mean * r.workers, r.conf * r.workers),
                 100 * r.efficiency);
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    if (static_cast<unsigned>(rs.back().workers) > cores && !rs.back().nodes.empty()
        && std::all_of(rs.back().nodes.begin(), rs.back().nodes.end(),
                       [&](auto& n) { return n == rs.back().nodes.front(); }))
      fmt::print("NOTE: {} workers on one node with {} cores share them: this measures "
                 "contention, not scaling\n",
                 rs.back().workers, cores);
  }
  if (!c.json.empty())
    write_json(c, rs);
  if (!c.csv.empty())
    write_csv(c, rs);
  int wrong = 0;
  for (auto& r : rs)
    wrong += r.wrong;
  if (wrong > 0) {
    fmt::print(stderr, "hvactor-bench train: {} worker(s) ended with parameters unlike rank 0's\n",
               wrong);
    return 1;
  }
  return 0;
}

} // namespace hvactor::bench_tool
