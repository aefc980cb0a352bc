// train_step: the training step of a small MLP (Linear 1024-1024-ReLU-
// 1024-1024-ReLU-1024-10, batch 32, SGD) through hvd::distributed_optimizer
// on 1, 2 and 4 workers of the embedded local cluster, with tensor fusion on
// (HOROVOD_FUSION_THRESHOLD default, 128 MiB) and off (threshold 0), and the
// share of the step spent in the gradient allreduce (6 tensors, 8.4 MB);
// and with the allreduces overlapped with backward (distributed_optimizer's
// overlap mode).
//
// Per step every rank times forward+backward (compute) and
// distributed_optimizer::step() (allreduce + SGD update); the wrapped SGD
// step is timed alone on the same gradients, so allreduce = step() - SGD.
// Two more loops in the same workers: the six gradients fused explicitly
// (allreduce_async + synchronize, no optimizer), and the peer: the same
// volume as one flat 8.4 MB buffer through the blocking hvd::allreduce (the
// best case fusion can reach). Medians of rank 0 (every loop is lock-step
// across ranks through its allreduce).
//
//   train_step [--np 1,2,4] [--steps 20]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>
#include <hvactor/torch.hpp>
#include "bench_method.hpp"

namespace hvd = hvactor::hvd;
using clock_type = std::chrono::steady_clock;


namespace {

constexpr int batch = 32;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

using hvactor::bench::median;

enum result_index : size_t {
  r_step,       // whole step: zero_grad + forward + backward + step()
  r_compute,    // forward + backward
  r_opt_step,   // distributed_optimizer::step()
  r_sgd,        // the wrapped SGD step alone
  r_fused,      // the six gradients, allreduce_async + synchronize
  r_flat,       // peer: one flat buffer of the same size, hvd::allreduce
  r_bytes,      // gradient bytes per step
  r_tensors,    // gradient tensors per step
  r_count
};

/// Runs in every worker; returns this rank's medians (ms), indexed by
/// result_index.
/// The median ms of `steps` timed calls of `run` after 3 warm-up calls and
/// a barrier (bench_method.hpp).
template <class Run>
double median_ms_after_barrier(int steps, Run&& run) {
  hvactor::bench::warm_up(3, run);
  hvd::barrier();
  return median(hvactor::bench::timed_calls(steps, run).samples_us) / 1000;
}

std::vector<double> train_worker(int32_t steps, bool overlap) {
  hvd::init();
  torch::set_num_threads(1); // N processes share the VM's cores
  torch::manual_seed(42);
  torch::nn::Sequential net(torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
                            torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
                            torch::nn::Linear(1024, 10));
  hvd::broadcast_parameters(net->parameters(), 0);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01));
  hvd::distributed_optimizer opt(sgd, 1, hvd::op::average, overlap);

  torch::manual_seed(1000 + hvd::rank()); // each rank its own batch
  auto x = torch::randn({batch, 1024});
  auto y = torch::randint(0, 10, {batch}, torch::kLong);

  std::vector<double> step_ms, compute_ms, opt_ms;
  auto one_step = [&](bool record) {
    auto t0 = clock_type::now();
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    auto t1 = clock_type::now();
    opt.step();
    auto t2 = clock_type::now();
    if (record) {
      step_ms.push_back(ms_between(t0, t2));
      compute_ms.push_back(ms_between(t0, t1));
      opt_ms.push_back(ms_between(t1, t2));
    }
  };
  for (int i = 0; i < 3; ++i) // warm-up
    one_step(false);
  hvd::barrier();
  for (int i = 0; i < steps; ++i)
    one_step(true);

  // The wrapped SGD step alone, on the gradients the last step left (it
  // moves the weights further; nothing after this trains).
  double sgd_ms = median(hvactor::bench::timed_calls(steps, [&] { sgd.step(); }).samples_us) / 1000;

  // The same gradients fused explicitly, outside the optimizer.
  std::vector<torch::Tensor> grads;
  double bytes = 0;
  for (auto& p : net->parameters()) {
    grads.push_back(p.grad().clone());
    bytes += static_cast<double>(grads.back().numel()) * sizeof(float);
  }
  auto fused = [&] {
    std::vector<hvd::handle> hs;
    int k = 0;
    for (auto& g : grads)
      hs.push_back(hvd::allreduce_async(
        std::span<float>(g.data_ptr<float>(), static_cast<size_t>(g.numel())), hvd::op::average,
        fmt::format("g.{}", k++)));
    for (auto& h : hs)
      hvd::synchronize(h);
  };
  double fused_ms = median_ms_after_barrier(steps, fused);

  // Peer: one flat buffer of the same volume, plain blocking allreduce.
  std::vector<float> flat(static_cast<size_t>(bytes / sizeof(float)), 1.0f);
  double flat_ms = median_ms_after_barrier(
    steps, [&] { hvd::allreduce(std::span<float>(flat), hvd::op::average); });

  std::vector<double> out(r_count);
  out[r_step] = median(step_ms);
  out[r_compute] = median(compute_ms);
  out[r_opt_step] = median(opt_ms);
  out[r_sgd] = sgd_ms;
  out[r_fused] = fused_ms;
  out[r_flat] = flat_ms;
  out[r_bytes] = bytes;
  out[r_tensors] = static_cast<double>(grads.size());
  return out;
}

std::string load_average() {
  std::ifstream in{"/proc/loadavg"};
  double a = 0, b = 0, c = 0;
  if (!(in >> a >> b >> c))
    return "n/a";
  return fmt::format("{:.2f} {:.2f} {:.2f}", a, b, c);
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < s.size()) {
    auto comma = s.find(',', pos);
    out.push_back(std::stoi(s.substr(pos, comma - pos)));
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  return out;
}

} // namespace

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv, {.num_cpus = 8}};
  cxxopts::Options parser{"train_step", "MLP training step through hvd::distributed_optimizer"};
  parser.add_options()("np", "worker counts", cxxopts::value<std::string>()->default_value("1,2,4"))(
    "steps", "timed steps (and iterations of each other loop)",
    cxxopts::value<int>()->default_value("20"));
  std::vector<char*> rest;
  for (auto& a : rt.args())
    rest.push_back(const_cast<char*>(a.c_str()));
  auto opts = parser.parse(static_cast<int>(rest.size()), rest.data());
  auto nps = parse_list(opts["np"].as<std::string>());
  int steps = opts["steps"].as<int>();
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int max_np = *std::max_element(nps.begin(), nps.end());

  std::printf("hvactor train_step: MLP 1024-1024-1024-10 (ReLU), batch %d per worker, SGD through "
              "hvd::distributed_optimizer, float32 on CPU, torch::set_num_threads(1) per worker\n",
              batch);
  std::printf("embedded local cluster, %u cores, load average %s at start (whole VM, other processes "
              "included), %d timed steps "
              "(3 warm-up), medians of rank 0\n",
              cores, load_average().c_str(), steps);
  if (static_cast<unsigned>(max_np) > cores)
    std::printf("NOTE: %d workers oversubscribe %u cores: compute and allreduce of N > %u "
                "contend for CPU, so their step times are not a scaling measurement\n",
                max_np, cores, cores);
  std::printf("fusion on: HOROVOD_FUSION_THRESHOLD default (128 MiB); off: "
              "HOROVOD_FUSION_THRESHOLD=0 (one Gloo allreduce per gradient); both reduce at "
              "step(); overlap: fusion on, each gradient's allreduce started during backward "
              "(compute_ms then includes the overlapped communication)\n");
  std::printf("allreduce = distributed_optimizer::step() - wrapped SGD step alone; share = "
              "allreduce / step; eff = samples/s / (N * samples/s of N=1, same fusion)\n");
  std::printf("fused = the same gradients through allreduce_async+synchronize outside the "
              "optimizer; peer = one flat buffer of the same bytes through hvd::allreduce\n\n");

  std::printf("| %7s | %7s | %8s | %10s | %12s | %7s | %9s | %5s | %8s | %8s | %7s |\n", "workers",
              "fusion", "step_ms", "compute_ms", "allreduce_ms", "share", "samples/s", "eff",
              "fused_ms", "peer_ms", "sgd_ms");
  std::printf("|---------|---------|----------|------------|--------------|---------|-----------|----"
              "---|----------|----------|---------|\n");
  std::fflush(stdout);

  // Modes: fusion on, fusion off (both reducing at step()), and fusion on
  // with the gradients' allreduces started during backward (overlap).
  double base[3] = {0, 0, 0};
  double grad_bytes = 0, grad_tensors = 0;
  for (int n : nps) {
    for (int f = 0; f < 3; ++f) {
      bool fusion = f != 1;
      bool overlap = f == 2;
      hvactor::executor_options o{.num_workers = n};
      if (!fusion)
        o.extra_env_vars["HOROVOD_FUSION_THRESHOLD"] = "0";
      hvactor::executor ex{rt, hvactor::executor::create_settings({}), o};
      ex.start();
      auto r = ex.run(&train_worker, static_cast<int32_t>(steps), overlap).front();
      ex.shutdown();
      grad_bytes = r[r_bytes];
      grad_tensors = r[r_tensors];
      double allreduce = std::max(0.0, r[r_opt_step] - r[r_sgd]);
      double sps = n * batch / (r[r_step] / 1000);
      if (n == 1)
        base[f] = sps;
      std::string eff = base[f] > 0 ? fmt::format("{:.2f}", sps / (n * base[f])) : "n/a";
      std::printf("| %7d | %7s | %8.2f | %10.2f | %12.2f | %6.1f%% | %9.0f | %5s | %8.2f | %8.2f | "
                  "%7.2f |\n",
                  n, overlap ? "overlap" : fusion ? "on" : "off", r[r_step], r[r_compute], allreduce,
                  100 * allreduce / r[r_step], sps, eff.c_str(), r[r_fused], r[r_flat], r[r_sgd]);
      std::fflush(stdout);
    }
  }
  std::printf("\ngradients per step: %.0f tensors, %.2f MB; load average at end %s\n", grad_tensors,
              grad_bytes / 1e6, load_average().c_str());
  return 0;
}
