// hvactor-run: launches an SPMD program on N slots, like horovodrun and
// mpirun: hvactor-run -np 4 [--address HEAD:PORT] -- ./train --lr 0.1
// Inside a Slurm allocation it starts the cluster there first
// (cluster/slurm_cluster.hpp).

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include "base/internal/actor_system.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "tools/cluster/node_options.hpp"
#include "tools/cluster/slurm_cluster.hpp"
#include "driver.hpp"
#include "hvactor/runtime.hpp"
#include "horovod_flags.hpp"
#include "job_cluster.hpp"
#include "run_options.hpp"

namespace {

using namespace hvactor;

// Ctrl-C / SIGTERM: stop every rank on every node, then exit. Blocked
// before any thread starts, so only the waiter started here sees them.
// Once the launcher runs (`limit` set), the first signal also starts a hard
// limit: the ranks' stop plus the teardown of a cluster this run brought
// up. Past it the process ends at once, even when a write to its own output
// blocks (no message, no flush: both could block on that same output).
struct stop_signal {
  stop_request request;
  std::atomic<std::chrono::milliseconds::rep> limit_ms{0};
};

stop_signal& stop_on_signals() {
  static stop_signal stop;
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::thread{[stop_signals] {
    int sig = 0;
    if (sigwait(&stop_signals, &sig) != 0)
      return;
    stop.request.request(sig);
    auto limit = std::chrono::milliseconds{stop.limit_ms.load()};
    if (limit.count() == 0)
      return;
    std::this_thread::sleep_for(limit);
    std::_Exit(128 + sig);
  }}.detach();
  return stop;
}

// The clusters this run brought up. Torn down after the runtime when the
// job ends, and also when the process must end without unwinding (a
// runtime whose actor system does not stop: destroy_bounded's hooks), so
// that no node outlives its job.
struct job_clusters {
  std::mutex mu;
  std::optional<cluster::slurm_cluster> slurm;
  std::optional<run_tool::job_cluster> hosts;

  static job_clusters& get() {
    static auto* clusters = new job_clusters; // never destroyed: used while exiting
    return *clusters;
  }
  /// When the main thread is tearing them down already, that one goes on.
  void tear_down(bool wait) {
    std::unique_lock<std::mutex> lock{mu, std::defer_lock};
    if (!(wait ? (lock.lock(), true) : lock.try_lock()))
      return;
    hosts.reset();
    slurm.reset();
  }
};

// Brings up the Slurm cluster when there is an allocation, then runs the
// driver once or the ranks through the launcher.
int run_job(run_tool::run_request& r, stop_signal& stop, job_clusters& clusters) {
  auto& slurm = clusters.slurm;
  auto& hosts = clusters.hosts;
  std::chrono::milliseconds teardown{0};
  if (!r.hosts.empty()) {
    hosts.emplace(r.hosts, r.ssh_port, r.ssh_identity, static_cast<int>(r.timeout.count()));
    teardown += hosts->teardown_bound();
    r.runtime_args.insert(r.runtime_args.end(), {"--address", hosts->address()});
    for (auto& a : cluster::tls_args(hosts->driver_tls()))
      r.runtime_args.push_back(a);
  }
  if (r.allocation) {
    slurm.emplace(*r.allocation,
                  cluster::slurm_cluster_options{cluster::node_binary(), r.bind, r.timeout});
    if (r.driver)
      return run_tool::run_driver(r.launch, slurm->address(), slurm->driver_tls(), stop.request);
    teardown += cluster::slurm_cluster::teardown_bound;
    r.runtime_args.insert(r.runtime_args.end(), {"--address", slurm->address()});
    for (auto& a : cluster::tls_args(slurm->driver_tls()))
      r.runtime_args.push_back(a);
  }
  std::vector<char*> rt_argv;
  for (auto& a : r.runtime_args)
    rt_argv.push_back(a.data());
  hvactor::runtime rt{static_cast<int>(rt_argv.size()), rt_argv.data()};
  settings s;
  s.timeout = r.gloo_timeout.value_or(r.timeout);
  s.placement_timeout = r.timeout;
  launcher run{rt, s, r.launch};
  stop.limit_ms = (std::chrono::milliseconds{knobs::launcher_stop_limit} + teardown).count();
  return run.run(stop.request);
}

int launch(run_tool::run_request& r, stop_signal& stop) {
  auto& clusters = job_clusters::get();
  on_forced_exit([&clusters] { clusters.tear_down(false); });
  struct teardown_at_exit {
    job_clusters& c;
    ~teardown_at_exit() {
      c.tear_down(true);
    }
  } at_exit{clusters};
  return run_job(r, stop, clusters);
}

} // namespace

int main(int argc, char** argv) {
  cxxopts::Options parser{"hvactor-run",
                          "Launches an SPMD program (it calls hvd::init()) on N slots, like "
                          "horovodrun / mpirun:\n\n"
                          "  hvactor-run -np 4 ./train --epochs 3\n"
                          "  hvactor-run -np 4 python3 train.py      (horovodrun's command lines)\n"
                          "  hvactor-run -np 8 --address HEAD:PORT --tls-cert ... -- ./train\n"
                          "  hvactor-run --min-np 2 --max-np 8 --address HEAD:PORT -- ./train\n"};
  run_tool::declare_run_options(parser);
  auto [ours, program] = run_tool::split_at_program(argc, argv, parser);
  try {
    // ours[0] is argv[0].
    auto res = run_tool::parse_run_options(parser, {ours.begin() + 1, ours.end()});
    if (res.count("help")) {
      std::cout << parser.help() << std::endl;
      return 0;
    }
    if (res.count("version")) {
      std::cout << run_tool::version_text() << std::endl;
      return 0;
    }
    if (res.count("check-build")) {
      std::cout << run_tool::check_build_text() << std::flush;
      return 0;
    }
    auto request = run_tool::read_run_options(res, program);
    return launch(request, stop_on_signals());
  } catch (const cxxopts::exceptions::exception& e) {
    fmt::print(stderr, "hvactor-run: {} (see --help)\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "hvactor-run: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hvactor-run: {}\n", e.what());
    return 1;
  }
}
