#include "driver/internal/launcher.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <stdexcept>

#include <caf/all.hpp>
#include <fmt/chrono.h>
#include <fmt/format.h>

#include "driver/internal/output_printer.hpp"
#include "collectives/observe/timeline_files.hpp"
#include "hvactor/event.hpp"
#include "base/internal/file_digest.hpp"
#include "base/internal/program_libraries.hpp"
#include "base/internal/log.hpp"
#include "base/internal/process.hpp"
#include "driver/internal/job_session.hpp"
#include "base/internal/env_names.hpp"
#include "actors/protocol/system_config.hpp"
#include "driver/internal/runtime_impl.hpp"

namespace hvactor {

using namespace proto;

namespace {

namespace fs = std::filesystem;

executor_options slots_of(const launch_options& o) {
  executor_options x;
  if (o.min_np) {
    x.min_workers = o.min_np;
    x.max_workers = o.max_np;
    if (!x.max_workers && o.np > 0)
      x.max_workers = o.np; // horovodrun: -np is where an elastic job starts
    x.reset_limit = o.reset_limit;
    x.cooldown_range = o.cooldown_range;
    if (o.elastic_timeout)
      x.elastic_timeout = std::chrono::seconds(*o.elastic_timeout);
    if (!o.discovery_script.empty())
      x.discovery = discovery::script(o.discovery_script, o.slots_per_host);
  } else if (o.num_hosts || o.per_host) {
    x.num_hosts = o.num_hosts;
    x.num_workers_per_host = o.per_host;
  } else {
    x.num_workers = o.np;
  }
  x.cpus_per_worker = o.cpus_per_worker;
  if (o.gpus_per_worker > 0) {
    x.use_gpu = true;
    x.gpus_per_worker = o.gpus_per_worker;
  }
  x.extra_env_vars = o.env;
  return x;
}

} // namespace

struct launcher::impl {
  runtime::impl& rt;
  settings s;
  launch_options o;
  std::string program;
  std::shared_ptr<output_printer> printer;
};

namespace {

// --timeline with every rank on this machine (embedded cluster): join the
// ranks' files into the one the user named ("a file of every rank" stays
// beside it). On a cluster each node keeps its ranks' files.
void merge_local_timelines(const launcher::impl& st) {
  auto it = st.o.env.find(env::timeline);
  if (it == st.o.env.end() || !st.rt.local_agent)
    return;
  int size = st.o.np > 0 ? st.o.np : st.o.num_hosts.value_or(1) * st.o.per_host.value_or(1);
  auto files = collectives::timeline_files(it->second, size);
  std::vector<std::string> present;
  for (auto& f : files)
    if (fs::exists(f))
      present.push_back(f);
  if (present.empty())
    return;
  auto merged = it->second.find("{rank}") == std::string::npos
                  ? it->second + ".merged"
                  : fs::path(it->second).replace_filename("timeline.merged.json").string();
  try {
    collectives::merge_timelines(present, merged);
    // Rank 0's file becomes the whole job's when the user named one file.
    if (it->second.find("{rank}") == std::string::npos)
      fs::rename(merged, it->second);
    fmt::print(stderr, "hvactor-run: timeline of {} ranks in {}\n", present.size(),
               it->second.find("{rank}") == std::string::npos ? it->second : merged);
  } catch (const std::exception& e) {
    fmt::print(stderr, "hvactor-run: could not merge the timelines: {}\n", e.what());
  }
}

} // namespace

launcher::launcher(runtime& rt, settings s, launch_options opts) {
  if (!opts.min_np && (opts.max_np || !opts.discovery_script.empty() || opts.reset_limit
                       || opts.cooldown_range || opts.elastic_timeout))
    throw std::invalid_argument("--max-np, --host-discovery-script, --reset-limit, "
                                "--blacklist-cooldown-range and --elastic-timeout need --min-np "
                                "(an elastic job)");
  if (opts.min_np && (opts.num_hosts || opts.per_host))
    throw std::invalid_argument("--num-hosts/--per-host cannot be combined with --min-np");
  if (opts.program.empty())
    throw std::invalid_argument("no program given (hvactor-run -np N -- PROGRAM)");
  if (opts.num_hosts && opts.per_host && opts.np > 0
      && int64_t{opts.np} != int64_t{*opts.num_hosts} * *opts.per_host)
    throw std::invalid_argument(fmt::format("-np {} does not match --num-hosts {} x --per-host {}",
                                            opts.np, *opts.num_hosts, *opts.per_host));
  validate(slots_of(opts));
  auto program = find_program(opts.program);
  auto printer = std::make_shared<output_printer>(
    opts.output_dir, opts.timestamps,
    std::max({opts.np, opts.min_np.value_or(0), opts.max_np.value_or(0)}));
  impl_.reset(new impl{*rt.impl_, s, std::move(opts), std::move(program), std::move(printer)});
}

launcher::~launcher() = default;

int launcher::run(stop_request& stop) {
  auto& st = *impl_;
  coordinator_config cfg;
  cfg.job_id = fmt::format("run-{}-{}", ::getpid(), st.rt.next_job++);
  cfg.settings = st.s;
  cfg.options = slots_of(st.o);
  cfg.registry = st.rt.registry_for_job(wait_bound(st.s.placement_timeout));
  cfg.executable = st.program;
  cfg.args.push_back(st.program);
  cfg.args.insert(cfg.args.end(), st.o.args.begin(), st.o.args.end());
  // Nodes that cache binaries get the program shipped, like a driver's.
  if (!st.rt.binary_hash.empty()) {
    cfg.binary_hash = sha256_file(st.program);
    cfg.libraries = program_libraries(st.program);
  }
  cfg.launch = true;
  cfg.node_order = st.o.node_order;
  auto printer = st.printer;
  cfg.on_output = [printer](int rank, int stream, const std::string& line) {
    printer->line(rank, stream, line);
  };
  cfg.on_event = [printer](int rank, const std::map<std::string, std::string>& kv) {
    printer->event(rank, kv);
  };
  std::unique_ptr<job_session> session;
  try {
    session = std::make_unique<job_session>(st.rt, std::move(cfg));
  } catch (const std::exception& e) {
    fmt::print(stderr, "hvactor-run: {}\n", e.what());
    return 1;
  }
  auto shutdown = [&] {
    if (auto err = session->shutdown())
      log::warn("not every rank stopped cleanly: {}", describe(err));
  };
  // The job's end arrives as one answer; the main thread sleeps until it
  // or a stop comes (`stop` outlives the job: hvactor-run's, static).
  auto ended = std::make_shared<std::promise<caf::expected<job_exit>>>();
  auto outcome = ended->get_future();
  session->launch([ended, &stop](caf::expected<job_exit> out) {
    ended->set_value(std::move(out));
    stop.notify();
  });
  auto job_ended = [&] {
    return outcome.wait_for(std::chrono::seconds{0}) == std::future_status::ready;
  };
  stop.wait(job_ended);
  if (!job_ended()) {
    // A stop: hvactor-run's signal waiter bounds it (and the teardown of
    // the cluster it brought up) even when a write to our own output
    // blocks: tools/hvactor_run/main.cpp.
    int sig = stop.signal();
    fmt::print(stderr, "hvactor-run: received signal {}: stopping every rank\n", sig);
    shutdown();
    return 128 + sig;
  }
  auto out = outcome.get();
  shutdown(); // stops the ranks still running (none when all exited)
  session.reset();
  merge_local_timelines(st);
  if (!out) {
    fmt::print(stderr, "hvactor-run: {}\n", describe(out.error()));
    return 1;
  }
  if (out->ok)
    return 0;
  fmt::print(stderr, "hvactor-run: {}\n", out->message);
  // pid 0: the rank never started, and its message already says why.
  if (!out->stderr_tail.empty() && out->pid != 0)
    fmt::print(stderr, "hvactor-run: last stderr lines of rank {}:\n  {}\n", out->rank,
               fmt::join(out->stderr_tail, "\n  "));
  if (out->rank < 0)
    return 1;
  return out->signal != 0 ? 128 + out->signal : (out->exit_code > 0 ? out->exit_code : 1);
}

} // namespace hvactor
