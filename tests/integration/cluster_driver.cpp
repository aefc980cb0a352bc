// The driver the cluster tests run against real hvactor-node processes. One
// program, one mode per run (the first program argument after hvactor's own
// options):
//
//   cluster_driver --address A [TLS] hosts H W [OPTIONS]   num_hosts=H x num_workers_per_host=W
//   cluster_driver --address A [TLS] pack N [OPTIONS]      num_workers=N
//   cluster_driver --address A [TLS] hold N SECONDS [OPTIONS]
//       num_workers=N, then a call that sleeps SECONDS in every worker
//   cluster_driver --address A [TLS] idle H W SECONDS [OPTIONS]
//       num_hosts=H x num_workers_per_host=W; every rank hvd::init()s, then
//       the job sits idle for SECONDS (IDLE when it begins) and shuts down
//   cluster_driver --address A [TLS] ship-twice N [OPTIONS]
//   cluster_driver --address A [TLS] twice-after N FILE [OPTIONS]  a job, PAUSED, a job once FILE exists
//       two jobs of num_workers=N one after the other, same binary
//
// OPTIONS: --placement-ms MS (default 3000), --timeout-ms MS (default 10000),
// --gpus-per-worker G (use_gpu with G GPUs per worker), --unlink-self (delete
// this program's file before start(), so that shipping it to a node fails).
//
// Output, one machine-readable line each (flushed at once):
//   NODES <node id per rank>          after start()
//   PIDS <pid per rank>               after start()
//   STARTED <monotonic ms>            when start() returned
//   WORKER rank=R size=.. local_rank=.. local_size=.. cross_rank=.. cross_size=..
//          host=.. pid=.. exe=.. cvd=..   one per rank (hosts, pack, ship-twice);
//                                    cvd: CUDA_VISIBLE_DEVICES or -
//   SHIPPED <bytes job 1> [<bytes job 2>]
//   RESULT <value per rank>           hold: the sleeping call's results
//   ERROR <class>: <message>          any exception (message on one line)
//   ELAPSED <ms>                      hold: the call; else start()'s attempt
//   IDLE <monotonic ms>               idle: every rank initialized its collectives
//   STOPPING <monotonic ms>           right before shutdown()
//   DONE <monotonic ms>               after shutdown()
// Exit code: 0 when the mode succeeded, 1 after an ERROR, 2 on bad usage.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

std::string env_or(const char* name, const char* fallback = "?") {
  const char* value = std::getenv(name);
  return value ? value : fallback;
}

/// What a worker knows about itself, as one "k=v ..." line.
std::string describe_worker() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return "rank=" + env_or("HOROVOD_RANK") + " size=" + env_or("HOROVOD_SIZE")
         + " local_rank=" + env_or("HOROVOD_LOCAL_RANK")
         + " local_size=" + env_or("HOROVOD_LOCAL_SIZE")
         + " cross_rank=" + env_or("HOROVOD_CROSS_RANK")
         + " cross_size=" + env_or("HOROVOD_CROSS_SIZE") + " host=" + env_or("HOROVOD_HOSTNAME")
         + " pid=" + std::to_string(::getpid()) + " exe=" + (ec ? "?" : exe.string())
         + " cvd=" + env_or("CUDA_VISIBLE_DEVICES", "-");
}

/// Sleeps `seconds` in the worker, then returns its rank.
int sleep_then_rank(int seconds) {
  ::sleep(static_cast<unsigned>(seconds));
  return std::atoi(env_or("HOROVOD_RANK", "-1").c_str());
}

/// Initializes the worker's collectives (and leaves them up), returns its rank.
int init_collectives() {
  hvactor::hvd::init();
  return hvactor::hvd::rank();
}

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           clock_type::now().time_since_epoch())
    .count();
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

template <class T>
std::string join(const std::vector<T>& xs) {
  std::string out;
  for (auto& x : xs) {
    out += ' ';
    if constexpr (std::is_same_v<T, std::string>)
      out += x;
    else
      out += std::to_string(x);
  }
  return out;
}

std::string one_line(std::string text) {
  for (auto& c : text)
    if (c == '\n')
      c = ' ';
  return text;
}

/// "ERROR <class>: <message>" for the exception in flight.
void report_current_exception() {
  try {
    throw;
  } catch (const hvactor::placement_timeout& e) {
    say("ERROR placement_timeout: " + one_line(e.what()));
  } catch (const hvactor::rendezvous_timeout& e) {
    say("ERROR rendezvous_timeout: " + one_line(e.what()));
  } catch (const hvactor::worker_error& e) {
    say("ERROR worker_error: " + one_line(e.what()));
  } catch (const hvactor::node_lost& e) {
    say("ERROR node_lost: " + one_line(e.what()));
  } catch (const hvactor::not_started& e) {
    say("ERROR not_started: " + one_line(e.what()));
  } catch (const hvactor::error& e) {
    say("ERROR error: " + one_line(e.what()));
  } catch (const std::invalid_argument& e) {
    say("ERROR invalid_argument: " + one_line(e.what()));
  } catch (const std::exception& e) {
    say("ERROR exception: " + one_line(e.what()));
  }
}

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct command {
  std::vector<std::string> words; // mode and its positional arguments
  std::chrono::milliseconds placement{3000};
  std::chrono::milliseconds timeout{10000};
  int gpus_per_worker = 0;
  bool unlink_self = false;

  int number(size_t i) const {
    if (i >= words.size())
      throw usage_error("mode '" + words.at(0) + "' needs more arguments");
    return std::stoi(words[i]);
  }
};

command parse(const std::vector<std::string>& args) {
  command cmd;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--unlink-self") {
      cmd.unlink_self = true;
    } else if (args[i] == "--gpus-per-worker" && i + 1 < args.size()) {
      cmd.gpus_per_worker = std::stoi(args[++i]);
    } else if ((args[i] == "--placement-ms" || args[i] == "--timeout-ms") && i + 1 < args.size()) {
      auto& field = args[i] == "--placement-ms" ? cmd.placement : cmd.timeout;
      field = std::chrono::milliseconds(std::stoll(args[++i]));
    } else {
      cmd.words.push_back(args[i]);
    }
  }
  if (cmd.words.empty())
    throw usage_error("no mode given (hosts, pack, hold, ship-twice)");
  return cmd;
}

hvactor::settings settings_of(const command& cmd) {
  return hvactor::executor::create_settings(
    {.timeout = cmd.timeout, .placement_timeout = cmd.placement});
}

void print_started(hvactor::executor& ex) {
  say("NODES" + join(ex.worker_nodes()));
  say("PIDS" + join(ex.worker_pids()));
  say("STARTED " + std::to_string(now_ms()));
}

void stop(hvactor::executor& ex) {
  say("STOPPING " + std::to_string(now_ms()));
  ex.shutdown();
  say("DONE " + std::to_string(now_ms()));
}

/// start(), one describe_worker() per rank, shutdown(); returns the bytes
/// start() shipped, or nullopt when start() failed (reported as ERROR).
std::optional<uint64_t> describe_job(hvactor::runtime& rt, const command& cmd,
                                     hvactor::executor_options opts) {
  hvactor::executor ex{rt, settings_of(cmd), std::move(opts)};
  auto t0 = clock_type::now();
  try {
    ex.start();
  } catch (...) {
    report_current_exception();
    say("ELAPSED " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      clock_type::now() - t0)
                                      .count()));
    stop(ex);
    return std::nullopt;
  }
  print_started(ex);
  for (auto& line : ex.run(&describe_worker))
    say("WORKER " + line);
  auto shipped = ex.shipped_bytes();
  stop(ex);
  return shipped;
}

int hold(hvactor::runtime& rt, const command& cmd) {
  hvactor::executor_options opts{.num_workers = cmd.number(1)};
  if (cmd.gpus_per_worker > 0) {
    opts.use_gpu = true;
    opts.gpus_per_worker = cmd.gpus_per_worker;
  }
  hvactor::executor ex{rt, settings_of(cmd), opts};
  ex.start();
  print_started(ex);
  auto t0 = clock_type::now();
  int rc = 0;
  try {
    say("RESULT" + join(ex.run(&sleep_then_rank, cmd.number(2))));
  } catch (...) {
    report_current_exception();
    rc = 1;
  }
  say("ELAPSED "
      + std::to_string(
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count()));
  stop(ex);
  return rc;
}

/// idle H W SECONDS: a job whose ranks initialized their collectives and
/// then wait, doing nothing, for SECONDS (an idle job, as after hvd::init()).
int idle(hvactor::runtime& rt, const command& cmd) {
  hvactor::executor_options opts{.num_hosts = cmd.number(1),
                                 .num_workers_per_host = cmd.number(2)};
  hvactor::executor ex{rt, settings_of(cmd), opts};
  ex.start();
  print_started(ex);
  say("RESULT" + join(ex.run(&init_collectives)));
  say("IDLE " + std::to_string(now_ms()));
  std::this_thread::sleep_for(std::chrono::seconds(cmd.number(3)));
  stop(ex);
  return 0;
}

/// twice-after N FILE: a job of N workers, then PAUSED, then (once FILE
/// exists) a second job in the same process: a long-lived driver.
int twice_after(hvactor::runtime& rt, const command& cmd) {
  hvactor::executor_options opts{.num_workers = cmd.number(1)};
  if (!describe_job(rt, cmd, opts))
    return 1;
  say("PAUSED");
  auto go = std::filesystem::path{cmd.words.at(2)};
  for (int i = 0; i < 1200 && !std::filesystem::exists(go); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return describe_job(rt, cmd, opts) ? 0 : 1;
}

int run_mode(hvactor::runtime& rt, const command& cmd) {
  auto& mode = cmd.words.at(0);
  if (cmd.unlink_self)
    std::filesystem::remove(std::filesystem::read_symlink("/proc/self/exe"));
  if (mode == "hold")
    return hold(rt, cmd);
  if (mode == "twice-after")
    return twice_after(rt, cmd);
  if (mode == "idle")
    return idle(rt, cmd);
  if (mode != "hosts" && mode != "pack" && mode != "ship-twice")
    throw usage_error("unknown mode '" + mode
                      + "' (hosts, pack, hold, idle, ship-twice, twice-after)");
  hvactor::executor_options opts;
  if (mode == "hosts") {
    opts.num_hosts = cmd.number(1);
    opts.num_workers_per_host = cmd.number(2);
  } else {
    opts.num_workers = cmd.number(1);
  }
  if (cmd.gpus_per_worker > 0) {
    opts.use_gpu = true;
    opts.gpus_per_worker = cmd.gpus_per_worker;
  }
  auto first = describe_job(rt, cmd, opts);
  if (!first)
    return 1;
  std::string shipped = "SHIPPED " + std::to_string(*first);
  if (mode == "ship-twice") {
    auto second = describe_job(rt, cmd, opts);
    if (!second)
      return 1;
    shipped += " " + std::to_string(*second);
  }
  say(shipped);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    // In a worker process this never returns.
    hvactor::runtime rt{argc, argv};
    try {
      return run_mode(rt, parse(rt.args()));
    } catch (const usage_error& e) {
      std::fprintf(stderr, "cluster_driver: %s\n", e.what());
      return 2;
    }
  } catch (...) {
    report_current_exception();
    return 1;
  }
}
