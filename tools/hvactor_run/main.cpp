// hvactor-run: launches an SPMD program on N slots, like horovodrun and
// mpirun: hvactor-run -np 4 [--address HEAD:PORT] -- ./train --lr 0.1

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <iostream>
#include <optional>
#include <thread>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include "internal/launcher.hpp"
#include "internal/slurm.hpp"
#include "options.hpp"
#include "slurm_cluster.hpp"
#include "slurm_mode.hpp"
#include "hvactor/runtime.hpp"
#include "internal/knobs.hpp"

namespace {

// Everything after "--" is the program and its arguments.
std::pair<std::vector<std::string>, std::vector<std::string>> split_at_dashes(int argc,
                                                                              char** argv) {
  std::vector<std::string> ours, program;
  bool after = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (!after && a == "--") {
      after = true;
      continue;
    }
    // mpirun's single-dash spelling; cxxopts would read "-np" as "-n p".
    if (!after && (a == "-np" || a.rfind("-np=", 0) == 0))
      a = "-" + a;
    // horovodrun's "--blacklist-cooldown-range LOWER UPPER": one list for
    // cxxopts.
    if (!after && a == "--blacklist-cooldown-range" && i + 2 < argc
        && std::string{argv[i + 2]}.rfind("-", 0) != 0) {
      ours.push_back(a);
      ours.push_back(std::string{argv[i + 1]} + "," + argv[i + 2]);
      i += 2;
      continue;
    }
    (after ? program : ours).push_back(a);
  }
  return {ours, program};
}

// The value of a numeric option, refused (exit 2) below `min`.
int int_option(const cxxopts::ParseResult& res, const std::string& name, int min) {
  int v = res[name].as<int>();
  if (v < min)
    throw std::invalid_argument(fmt::format("{}{} must be {} (got {})", name == "np" ? "-" : "--",
                                            name,
                                            min == 0 ? std::string{"0 or more"}
                                                     : "at least " + std::to_string(min),
                                            v));
  return v;
}

// horovodrun's stall-check flags, as the variables Horovod's stall
// inspector reads on every rank (after -x, so the flags win).
void stall_check_env(const cxxopts::ParseResult& res, std::map<std::string, std::string>& env) {
  const std::string warning = "stall-check-warning-time-seconds";
  const std::string shutdown = "stall-check-shutdown-time-seconds";
  if (res.count("no-stall-check")) {
    for (auto& name : {warning, shutdown})
      if (res.count(name))
        throw std::invalid_argument(fmt::format(
          "--no-stall-check turns the stall check off: drop --{} or --no-stall-check", name));
    env[hvactor::env::stall_check_disable] = "1";
    return;
  }
  // The warning time the ranks will use: the flag, else -x's, else
  // Horovod's default.
  int warning_s = 60;
  std::string warning_from = "the default";
  if (res.count(warning)) {
    warning_s = int_option(res, warning, 1);
    env[hvactor::env::stall_check_time_seconds] = std::to_string(warning_s);
    warning_from = "--" + warning;
  } else if (auto it = env.find(hvactor::env::stall_check_time_seconds); it != env.end()) {
    // Not a whole number: left to the ranks, which name it at hvd::init.
    auto& v = it->second;
    int x = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec == std::errc{} && end == v.data() + v.size()) {
      warning_s = x;
      warning_from = fmt::format("-x {}", hvactor::env::stall_check_time_seconds);
    }
  }
  if (res.count(shutdown)) {
    int shutdown_s = int_option(res, shutdown, 0);
    // Horovod ignores a shutdown time below the warning time (it logs that
    // it will not shut down); refused here instead.
    if (shutdown_s > 0 && shutdown_s < warning_s)
      throw std::invalid_argument(fmt::format(
        "--{} must be 0 (never) or at least the warning time, {} s ({}); got {}", shutdown,
        warning_s, warning_from, shutdown_s));
    env[hvactor::env::stall_shutdown_time_seconds] = std::to_string(shutdown_s);
  }
}

} // namespace

int main(int argc, char** argv) {
  auto [ours, program] = split_at_dashes(argc, argv);
  cxxopts::Options parser{"hvactor-run",
                          "Launches an SPMD program (it calls hvd::init()) on N slots, like "
                          "horovodrun / mpirun:\n\n"
                          "  hvactor-run -np 4 -- ./train --epochs 3\n"
                          "  hvactor-run -np 8 --address HEAD:PORT --tls-cert ... -- ./train\n"
                          "  hvactor-run --min-np 2 --max-np 8 --address HEAD:PORT -- ./train\n"};
  // clang-format off
  parser.add_options()
    ("n,np", "number of slots (ranks)", cxxopts::value<int>())
    ("address", "HEAD:PORT of a cluster of hvactor-node processes (default: this machine, "
                "an embedded local cluster)", cxxopts::value<std::string>())
    ("num-hosts", "distinct nodes, one colocator each (with --per-host)", cxxopts::value<int>())
    ("per-host", "slots per node (with --num-hosts)", cxxopts::value<int>())
    ("cpus-per-worker", "CPUs reserved per slot (default 1)", cxxopts::value<int>())
    ("gpus-per-worker", "GPUs reserved per slot (default 0)", cxxopts::value<int>())
    ("min-np", "elastic job: least number of processes; the job waits for this many slots "
               "and keeps going while at least this many survive", cxxopts::value<int>())
    ("max-np", "elastic job: most processes (default: -np, else no limit)",
     cxxopts::value<int>())
    ("host-discovery-script", "elastic job: prints the usable hosts, one 'node-id:slots' or "
                              "'node-id' per line (default: the cluster's live nodes)",
     cxxopts::value<std::string>())
    ("reset-limit", "elastic job: most resets (re-rendezvous) before the job fails",
     cxxopts::value<int>())
    ("blacklist-cooldown-range", "elastic job: 'LOWER UPPER' seconds a failed host stays out "
                                 "(default: for good)",
     cxxopts::value<std::vector<int>>())
    ("elastic-timeout", "elastic job: seconds to wait for --min-np slots (default 600)",
     cxxopts::value<int>())
    ("x,env", "VAR=VALUE set in every rank (repeatable)",
     cxxopts::value<std::vector<std::string>>())
    ("timeout", "seconds for placement and for every rank to start (default 30)",
     cxxopts::value<int>())
    ("output-dir", "also write DIR/rank.N/stdout and stderr", cxxopts::value<std::string>())
    ("timestamps", "prefix every forwarded line with its arrival time")
    ("timeline", "write a Chrome trace of every collective (sets HOROVOD_TIMELINE)",
     cxxopts::value<std::string>())
    ("bind-to", "core: every rank pinned to a core of its own by local rank, as mpirun "
                "--bind-to core (unbound when a node has more ranks than cores) | none (the "
                "default, as horovodrun); sets HVACTOR_BIND_TO",
     cxxopts::value<std::string>())
    ("stall-check-warning-time-seconds", "seconds a rank waits for the other ranks to submit "
                                         "an operation before it warns, naming them and the "
                                         "operation, again every such interval (whole seconds "
                                         ">= 1; default 60; sets "
                                         "HOROVOD_STALL_CHECK_TIME_SECONDS)",
     cxxopts::value<int>())
    ("stall-check-shutdown-time-seconds", "seconds until such a stall fails every rank: 0 "
                                          "(never, the default) or at least the warning time "
                                          "(sets HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)",
     cxxopts::value<int>())
    ("no-stall-check", "no stall warnings and no stall shutdown (sets "
                       "HOROVOD_STALL_CHECK_DISABLE=1)")
    ("num-cpus", "CPUs of the embedded local cluster (default: all)", cxxopts::value<int>())
    ("tls-cert", "this launcher's certificate (PEM), for a TLS cluster",
     cxxopts::value<std::string>())
    ("tls-key", "this launcher's private key (PEM)", cxxopts::value<std::string>())
    ("tls-ca", "the cluster CA (PEM)", cxxopts::value<std::string>())
    ("insecure", "join a non-loopback cluster without TLS")
    ("launcher", "auto | local | slurm: inside a Slurm allocation (SLURM_JOB_ID set, no "
                 "--address) hvactor-run starts the cluster on the allocated nodes itself",
     cxxopts::value<std::string>()->default_value("auto"))
    ("driver", "Slurm: bring the cluster up, then run the program once as an executor-API "
               "driver (HVACTOR_ADDRESS set) instead of -np copies of it")
    ("bind", "Slurm: the address the head listens on (default: the address of this host that "
             "reaches the nodes)", cxxopts::value<std::string>())
    ("h,help", "print this help");
  // clang-format on
  try {
    // ours[0] is argv[0].
    auto res = hvactor::tool::parse_options(parser, "hvactor-run", {ours.begin() + 1, ours.end()});
    if (res.count("help")) {
      std::cout << parser.help() << std::endl;
      return 0;
    }
    if (!res.unmatched().empty())
      throw std::invalid_argument("unexpected argument '" + res.unmatched().front()
                                  + "' (the program goes after --)");
    if (program.empty())
      throw std::invalid_argument("no program: hvactor-run -np N -- PROGRAM [ARGS...]");
    hvactor::launch_options o;
    if (res.count("np"))
      o.np = int_option(res, "np", 1);
    if (res.count("num-hosts"))
      o.num_hosts = int_option(res, "num-hosts", 1);
    if (res.count("per-host"))
      o.per_host = int_option(res, "per-host", 1);
    if (res.count("min-np"))
      o.min_np = int_option(res, "min-np", 1);
    if (res.count("max-np"))
      o.max_np = int_option(res, "max-np", 1);
    if (res.count("host-discovery-script"))
      o.discovery_script = res["host-discovery-script"].as<std::string>();
    if (res.count("reset-limit"))
      o.reset_limit = int_option(res, "reset-limit", 0);
    if (res.count("blacklist-cooldown-range")) {
      auto range = res["blacklist-cooldown-range"].as<std::vector<int>>();
      if (range.size() != 2)
        throw std::invalid_argument("--blacklist-cooldown-range needs two numbers: LOWER UPPER");
      o.cooldown_range = std::pair{range[0], range[1]};
    }
    if (res.count("elastic-timeout"))
      o.elastic_timeout = int_option(res, "elastic-timeout", 1);
    // Inside a Slurm allocation without --address: hvactor-run starts the
    // cluster there, and the allocation gives the defaults (horovodrun's
    // LSF mode).
    auto launcher_mode = res["launcher"].as<std::string>();
    if (launcher_mode != "auto" && launcher_mode != "local" && launcher_mode != "slurm")
      throw std::invalid_argument("--launcher must be auto, local or slurm (got '" + launcher_mode
                                  + "')");
    bool has_address = res.count("address") || std::getenv(hvactor::env::address) != nullptr;
    std::optional<hvactor::slurm::allocation> alloc;
    if (launcher_mode == "slurm" || (launcher_mode == "auto" && !has_address))
      alloc = hvactor::slurm::allocation_from_env();
    if (launcher_mode == "slurm" && !alloc)
      throw std::invalid_argument("--launcher slurm: not inside a Slurm allocation (SLURM_JOB_ID "
                                  "is not set; run it under salloc or sbatch)");
    if (alloc && has_address)
      throw std::invalid_argument("--launcher slurm starts its own cluster: drop --address");
    bool driver = res.count("driver") > 0;
    if (driver && !alloc)
      throw std::invalid_argument("--driver needs a Slurm allocation (run it under salloc or "
                                  "sbatch)");
    if (alloc && !driver)
      hvactor::run_tool::apply_allocation(*alloc, o, res.count("gpus-per-worker") > 0);
    if (o.np <= 0 && !o.num_hosts && !o.min_np && !driver)
      throw std::invalid_argument("-np N is required (or --num-hosts H --per-host K, or --min-np "
                                  "N for an elastic job)");
    if (res.count("cpus-per-worker"))
      o.cpus_per_worker = int_option(res, "cpus-per-worker", 0);
    if (res.count("gpus-per-worker"))
      o.gpus_per_worker = int_option(res, "gpus-per-worker", 0);
    if (res.count("env"))
      for (auto& kv : res["env"].as<std::vector<std::string>>()) {
        auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0)
          throw std::invalid_argument("-x needs VAR=VALUE: '" + kv + "'");
        o.env[kv.substr(0, eq)] = kv.substr(eq + 1);
      }
    if (res.count("timeline"))
      o.env[hvactor::env::timeline] = res["timeline"].as<std::string>();
    if (res.count("bind-to")) {
      auto bind = res["bind-to"].as<std::string>();
      if (bind != "core" && bind != "none")
        throw std::invalid_argument("--bind-to must be core or none (got '" + bind + "')");
      o.env[hvactor::env::bind_to] = bind;
    }
    stall_check_env(res, o.env);
    if (res.count("output-dir"))
      o.output_dir = res["output-dir"].as<std::string>();
    o.timestamps = res.count("timestamps") > 0;
    o.program = program.front();
    o.args.assign(program.begin() + 1, program.end());
    auto timeout = std::chrono::seconds(res.count("timeout") ? int_option(res, "timeout", 1) : 30);
    // The runtime gets only its own options.
    std::vector<std::string> rt_args{"hvactor-run"};
    for (auto* name : {"address", "tls-cert", "tls-key", "tls-ca"})
      if (res.count(name))
        rt_args.insert(rt_args.end(), {std::string{"--"} + name, res[name].as<std::string>()});
    // Ctrl-C / SIGTERM: stop every rank on every node, then exit. Blocked
    // before any thread starts, so only the waiter below sees them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    static std::atomic<int> stop{0};
    std::thread{[stop_signals] {
      int sig = 0;
      if (sigwait(&stop_signals, &sig) == 0)
        stop = sig;
    }}.detach();
    std::optional<hvactor::run_tool::slurm_cluster> cluster;
    if (alloc) {
      hvactor::run_tool::slurm_cluster_options copts{hvactor::run_tool::node_binary(),
                                                    res.count("bind") ? res["bind"].as<std::string>()
                                                                      : std::string{},
                                                    timeout};
      cluster.emplace(*alloc, copts);
      rt_args.insert(rt_args.end(), {"--address", cluster->address()});
      for (auto& a : cluster->driver_tls_args())
        rt_args.push_back(a);
      if (driver)
        return hvactor::run_tool::run_driver(o, *cluster, stop);
    }
    if (res.count("num-cpus")) {
      rt_args.insert(rt_args.end(), {"--num-cpus", std::to_string(int_option(res, "num-cpus", 1))});
    } else if (!has_address && !alloc) {
      // Local mode (horovodrun -np N on one machine): N slots even when the
      // machine has fewer cores.
      // In 64 bits, capped: the launcher refuses what does not fit an int
      // with a message naming the options.
      int64_t slots = std::max({int64_t{o.np},
                                int64_t{o.num_hosts.value_or(1)} * o.per_host.value_or(1),
                                int64_t{o.min_np.value_or(0)}, int64_t{o.max_np.value_or(0)}});
      int64_t cores = std::max(1u, std::thread::hardware_concurrency());
      int64_t cpus = std::min<int64_t>(std::max(slots * o.cpus_per_worker, cores),
                                       std::numeric_limits<int>::max());
      rt_args.insert(rt_args.end(), {"--num-cpus", std::to_string(cpus)});
    }
    if (res.count("insecure"))
      rt_args.push_back("--insecure");
    std::vector<char*> rt_argv;
    for (auto& a : rt_args)
      rt_argv.push_back(a.data());
    hvactor::runtime rt{static_cast<int>(rt_argv.size()), rt_argv.data()};
    hvactor::settings s;
    s.timeout = timeout;
    s.placement_timeout = timeout;
    hvactor::launcher run{rt, s, o};
    return run.run(stop);
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
