#include "hvactor/executor.hpp"

#include <unistd.h>

#include <filesystem>

#include <caf/io/middleman.hpp>
#include <fmt/format.h>

#include "hvactor/actors/coordinator.hpp"
#include "hvactor/actors/rendezvous_store.hpp"
#include "hvactor/collectives/transport.hpp"
#include "hvactor/system_config.hpp"
#include "runtime_impl.hpp"

namespace hvactor {

using namespace proto;
using namespace std::chrono_literals;

enum class executor_phase { created, started, stopped };

struct executor::impl {
  runtime::impl& rt;
  hvactor::settings settings;
  executor_options options;
  executor_phase phase = executor_phase::created;
  coordinator coord;
  rendezvous_store store;
  uint16_t coord_port = 0;
  uint16_t store_port = 0;
  job_info job;
  executor::event_callback on_event;

  caf::actor_system& sys() {
    return *rt.sys;
  }

  void require_started(const char* what) const {
    if (phase == executor_phase::created)
      throw not_started(fmt::format("{}: call start() first", what));
    if (phase == executor_phase::stopped)
      throw not_started(fmt::format("{}: the executor was shut down", what));
  }

  uint16_t publish(const caf::actor& handle, const char* what) {
    auto port = transport::publish(sys(), handle, 0, rt.bind_host);
    if (!port)
      throw error(fmt::format("cannot publish the job's {} on {}: {}", what, rt.bind_host,
                              sys().render(port.error())));
    if (rt.watchdog)
      rt.watchdog->watch(*port);
    return *port;
  }

  void teardown() {
    for (auto port : {coord_port, store_port})
      if (port != 0 && rt.watchdog)
        rt.watchdog->unwatch(port);
    if (coord_port != 0)
      transport::unpublish(sys(), caf::actor_cast<caf::actor>(coord), coord_port);
    if (store_port != 0)
      transport::unpublish(sys(), caf::actor_cast<caf::actor>(store), store_port);
    coord_port = store_port = 0;
    if (coord)
      caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
    if (store)
      caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
    coord = nullptr;
    store = nullptr;
  }
};

executor::executor(runtime& rt, settings s, executor_options opts) {
  validate(opts);
  impl_.reset(new impl{*rt.impl_, s, std::move(opts)});
  if (impl_->options.min_workers)
    throw std::invalid_argument("elastic jobs (min_workers/max_workers) are not supported by this "
                                "build yet; set num_workers or num_hosts");
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
  cfg.registry = st.rt.registry;
  cfg.executable = st.rt.executable;
  cfg.binary_hash = st.rt.binary_hash;
  cfg.on_event = st.on_event;
  cfg.args = st.rt.original_args;
  st.coord = spawn_coordinator(st.sys(), cfg);
  st.store = spawn_rendezvous_store(st.sys());
  st.phase = executor_phase::started;
  caf::error failure;
  try {
    st.coord_port = st.publish(caf::actor_cast<caf::actor>(st.coord), "coordinator");
    st.store_port = st.publish(caf::actor_cast<caf::actor>(st.store), "rendezvous store");
    auto endpoint = fmt::format("{}:{}", st.rt.bind_host, st.coord_port);
    // The coordinator bounds placement and registration itself; this outer
    // bound only catches a coordinator that stopped answering.
    // Shipping is bounded per chunk only: allow 10 MB/s for the binary.
    std::error_code ec;
    auto binary = std::filesystem::file_size(st.rt.executable, ec);
    auto shipping = std::chrono::seconds(ec ? 0 : static_cast<long>(binary / 10'000'000));
    auto bound = st.settings.placement_timeout + 2 * st.settings.timeout + 30s + shipping;
    caf::scoped_actor self{st.sys()};
    self->request(st.coord, bound, start_atom_v, endpoint, st.rt.bind_host, st.store_port)
      .receive([&](job_info& info) { st.job = std::move(info); },
               [&](caf::error& err) { failure = err; });
  } catch (...) {
    shutdown_quietly();
    throw;
  }
  if (failure) {
    shutdown_quietly();
    throw_caf_error(failure, "start()");
  }
}

void executor::shutdown_quietly() noexcept {
  // The error that made start() fail is the one the user needs.
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
  caf::error failure;
  {
    caf::scoped_actor self{st.sys()};
    self->request(st.coord, st.settings.timeout + 10s, shutdown_atom_v)
      .receive([](bool) {}, [&](caf::error& err) { failure = err; });
  }
  st.teardown();
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
  // The coordinator bounds each worker's call by call_timeout and names the
  // rank; the driver's own bound only catches a coordinator gone silent.
  return impl_->settings.call_timeout + impl_->settings.timeout;
}

std::vector<std::vector<char>> executor::call_all(const detail::call_data& call) {
  auto& st = *impl_;
  st.require_started("run");
  std::vector<std::vector<char>> out;
  caf::error failure;
  caf::scoped_actor self{st.sys()};
  self->request(st.coord, st.settings.call_timeout + st.settings.timeout, call_atom_v,
                call_request{call.invoker, call.target, call.args})
    .receive(
      [&](call_results& res) {
        out.reserve(res.results.size());
        for (auto& r : res.results)
          out.push_back(std::move(r.payload));
      },
      [&](caf::error& err) { failure = err; });
  if (failure)
    throw_caf_error(failure, "run");
  return out;
}

std::vector<char> executor::call_one(int rank, const detail::call_data& call) {
  auto& st = *impl_;
  st.require_started("execute_single");
  std::vector<char> out;
  caf::error failure;
  caf::scoped_actor self{st.sys()};
  self->request(st.coord, st.settings.call_timeout + st.settings.timeout, call_one_atom_v, static_cast<int32_t>(rank),
                call_request{call.invoker, call.target, call.args})
    .receive([&](call_result& res) { out = std::move(res.payload); },
             [&](caf::error& err) { failure = err; });
  if (failure)
    throw_caf_error(failure, "execute_single");
  return out;
}

std::vector<std::shared_ptr<detail::pending_result>>
executor::call_async(const detail::call_data& call) {
  auto& st = *impl_;
  st.require_started("run_remote");
  std::vector<std::shared_ptr<detail::pending_result>> out;
  auto coord = st.coord;
  auto timeout = st.settings.call_timeout + st.settings.timeout;
  call_request req{call.invoker, call.target, call.args};
  for (int rank = 0; rank < num_workers(); ++rank) {
    auto state = std::make_shared<detail::pending_result>();
    out.push_back(state);
    st.sys().spawn([=](caf::event_based_actor* self) {
      self->request(coord, timeout, call_one_atom_v, static_cast<int32_t>(rank), req)
        .then([=](call_result& res) { state->set_value(std::move(res.payload)); },
              [=](caf::error& err) {
                try {
                  throw_caf_error(err, "run_remote");
                } catch (...) {
                  state->set_error(std::current_exception());
                }
              });
    });
  }
  return out;
}

} // namespace hvactor
