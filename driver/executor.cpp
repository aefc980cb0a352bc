// The executor: the calls of hvactor::executor. The job's lifecycle (actors,
// ports, start bound, shutdown, teardown) is job_session's.

#include "hvactor/executor.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "driver/internal/executor_access.hpp"
#include "driver/internal/job_session.hpp"
#include "actors/protocol/system_config.hpp"

namespace hvactor {

using namespace proto;

enum class executor_phase { created, started, stopped };

struct executor::impl {
  runtime::impl& rt;
  hvactor::settings settings;
  executor_options options;
  executor_phase phase = executor_phase::created;
  std::unique_ptr<job_session> session;
  job_info job;
  executor::event_callback on_event;
  // Set by executor_access before start().
  bool driver_only = false;
  int32_t output = output_inherit;
  std::function<void(int, int, const std::string&)> on_output;
  /// The registry the job was placed through (its dashboard).
  proto::node_registry registry;

  void require_started(const char* what) const {
    if (phase == executor_phase::created)
      throw not_started(fmt::format("{}: call start() first", what));
    if (phase == executor_phase::stopped)
      throw not_started(fmt::format("{}: the executor was shut down", what));
  }

  /// The coordinator bounds each worker's call by call_timeout and names
  /// the rank; the driver's own bound only catches a coordinator gone silent.
  std::chrono::milliseconds call_bound() const {
    return wait_bound(settings.call_timeout) + wait_bound(settings.timeout);
  }
};

executor::executor(runtime& rt, settings s, executor_options opts) {
  validate(opts);
  validate(s);
  impl_.reset(new impl{*rt.impl_, s, std::move(opts)});
}

void executor::require_static(const char* what) const {
  if (impl_->options.min_workers)
    throw std::logic_error(fmt::format("Elastic mode does not support {}: its workers come and "
                                       "go. Please use run() instead.",
                                       what));
}

executor::~executor() {
  try {
    shutdown();
  } catch (const std::exception&) {
    // A destructor must not throw; shutdown already logged what failed.
  }
}

void executor::start() {
  auto& st = *impl_;
  if (st.phase == executor_phase::started)
    throw error("start(): this executor was already started");
  if (st.phase == executor_phase::stopped)
    throw not_started("start(): the executor was shut down; create a new executor");
  coordinator_config cfg;
  cfg.job_id = fmt::format("job-{}-{}", ::getpid(), st.rt.next_job++);
  cfg.settings = st.settings;
  cfg.options = st.options;
  cfg.registry = st.driver_only
                   ? st.rt.driver_registry()
                   : st.rt.registry_for_job(wait_bound(st.settings.placement_timeout));
  st.registry = cfg.registry;
  cfg.output = st.output;
  cfg.on_output = st.on_output;
  cfg.executable = st.rt.executable;
  cfg.binary_hash = st.rt.binary_hash;
  cfg.libraries = st.rt.libraries;
  cfg.on_event = st.on_event;
  cfg.args = st.rt.original_args;
  st.session = std::make_unique<job_session>(st.rt, std::move(cfg));
  st.phase = executor_phase::started;
  auto info = st.session->start();
  if (!info) {
    // The error that made start() fail is the one the user needs.
    shutdown_quietly();
    throw_caf_error(info.error(), "start()");
  }
  st.job = std::move(*info);
}

void executor::shutdown_quietly() noexcept {
  try {
    shutdown();
  } catch (const std::exception&) {
  }
}

void executor::shutdown() {
  auto& st = *impl_;
  if (st.phase != executor_phase::started) {
    st.phase = executor_phase::stopped;
    return;
  }
  st.phase = executor_phase::stopped;
  auto failure = st.session->shutdown();
  st.session.reset();
  if (failure)
    throw_caf_error(failure, "shutdown()");
}

int executor::num_workers() const noexcept {
  auto& o = impl_->options;
  if (o.num_workers)
    return *o.num_workers;
  if (o.num_hosts)
    return *o.num_hosts * o.num_workers_per_host.value_or(1);
  return impl_->job.size;
}

std::vector<std::string> executor::worker_nodes() const {
  impl_->require_started("worker_nodes");
  return impl_->job.nodes;
}

void executor::on_event(event_callback cb) {
  if (impl_->phase != executor_phase::created)
    throw std::logic_error("executor::on_event: set the callback before start()");
  impl_->on_event = std::move(cb);
}

uint64_t executor::shipped_bytes() const {
  // Still readable after shutdown(): it describes the start() that ran.
  if (impl_->phase == executor_phase::created)
    throw not_started("shipped_bytes: call start() first");
  return impl_->job.shipped_bytes;
}

std::vector<int> executor::worker_pids() const {
  impl_->require_started("worker_pids");
  return {impl_->job.pids.begin(), impl_->job.pids.end()};
}

std::chrono::milliseconds executor::call_timeout() const {
  return impl_->call_bound();
}

std::vector<std::vector<char>> executor::call_all(const detail::call_data& call) {
  auto& st = *impl_;
  st.require_started("run");
  auto res = st.session->call_all(call, st.call_bound());
  if (!res)
    throw_caf_error(res.error(), "run");
  return std::move(res->payloads);
}

std::vector<char> executor::call_one(int rank, const detail::call_data& call) {
  auto& st = *impl_;
  require_static("execute_single");
  st.require_started("execute_single");
  auto res = st.session->ask<call_result>(st.call_bound(), call_one_atom_v,
                                          static_cast<int32_t>(rank), call);
  if (!res)
    throw_caf_error(res.error(), "execute_single");
  return std::move(res->payload);
}

std::vector<std::shared_ptr<detail::pending_result>>
executor::call_async(const detail::call_data& call) {
  auto& st = *impl_;
  require_static("run_remote");
  st.require_started("run_remote");
  std::vector<std::shared_ptr<detail::pending_result>> out;
  for (int rank = 0; rank < num_workers(); ++rank)
    out.push_back(std::make_shared<detail::pending_result>());
  // One helper actor sends every rank's call and fills each future as its
  // answer arrives; it ends with the last answer.
  auto coord = st.session->coordinator();
  auto timeout = st.call_bound();
  st.session->system().spawn([=](caf::event_based_actor* self) {
    for (size_t rank = 0; rank < out.size(); ++rank) {
      auto state = out[rank];
      self->request(coord, timeout, call_one_atom_v, static_cast<int32_t>(rank), call)
        .then([=](call_result& res) { state->set_value(std::move(res.payload)); },
              [=](caf::error& err) {
                try {
                  throw_caf_error(err, "run_remote");
                } catch (...) {
                  state->set_error(std::current_exception());
                }
              });
    }
  });
  return out;
}

void executor_access::run_on_driver_only(executor& ex) {
  ex.impl_->driver_only = true;
}

void executor_access::set_output(executor& ex, int32_t mode,
                                 std::function<void(int, int, const std::string&)> on_output) {
  if (ex.impl_->phase != executor_phase::created)
    throw std::logic_error("executor_access::set_output: before start()");
  ex.impl_->output = mode;
  ex.impl_->on_output = std::move(on_output);
}

job_session& executor_access::session(executor& ex) {
  ex.impl_->require_started("the job's session");
  return *ex.impl_->session;
}

proto::node_registry executor_access::board(executor& ex) {
  return ex.impl_->registry;
}

const proto::job_info& executor_access::job(executor& ex) {
  ex.impl_->require_started("the job");
  return ex.impl_->job;
}

} // namespace hvactor
