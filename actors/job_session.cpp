#include "internal/job_session.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "internal/rendezvous_store.hpp"
#include "internal/log.hpp"
#include "internal/knobs.hpp"
#include "internal/system_config.hpp"
#include "internal/transport.hpp"

namespace hvactor {

using namespace proto;

namespace {

std::chrono::milliseconds start_bound_of(const coordinator_config& cfg) {
  std::error_code ec;
  auto bytes = std::filesystem::file_size(cfg.executable, ec);
  auto shipping = std::chrono::milliseconds(
    ec ? 0 : static_cast<int64_t>(bytes / (knobs::shipping_bytes_per_second / 1000)));
  return cfg.settings.placement_timeout + 2 * cfg.settings.timeout + knobs::start_slack
         + shipping;
}

} // namespace

job_session::job_session(runtime::impl& rt, coordinator_config cfg)
  : rt_(rt), settings_(cfg.settings), start_bound_(start_bound_of(cfg)) {
  bool registers = !cfg.launch;
  coord_ = spawn_coordinator(system(), std::move(cfg));
  store_ = spawn_rendezvous_store(system());
  try {
    store_port_ = publish(caf::actor_cast<caf::actor>(store_), "rendezvous store");
    if (registers)
      coord_port_ = publish(caf::actor_cast<caf::actor>(coord_), "coordinator");
  } catch (...) {
    close();
    throw;
  }
  caller_.emplace(system());
}

job_session::~job_session() {
  close();
}

uint16_t job_session::publish(const caf::actor& whom, const char* what) {
  auto port = transport::publish(system(), whom, 0, rt_.bind_host);
  if (!port)
    throw error(fmt::format("cannot publish the job's {} on {}: {}", what, rt_.bind_host,
                            system().render(port.error())));
  if (rt_.watchdog)
    rt_.watchdog->watch(*port);
  return *port;
}

caf::expected<job_info> job_session::start() {
  auto endpoint = coord_port_ != 0 ? fmt::format("{}:{}", rt_.bind_host, coord_port_)
                                   : std::string{};
  // The coordinator bounds placement, shipping and registration itself;
  // this bound only catches a coordinator that stopped answering.
  return ask<job_info>(start_bound_, start_atom_v, endpoint, rt_.bind_host, store_port_);
}

void job_session::launch(std::function<void(caf::expected<job_exit>)> done) {
  auto coord = coord_;
  auto bound = start_bound_;
  auto finish_bound = settings_.call_timeout;
  auto endpoint = rt_.bind_host;
  auto port = store_port_;
  launch_waiter_ = system().spawn([=](caf::event_based_actor* self) {
    self->request(coord, bound, start_atom_v, std::string{}, endpoint, port)
      .then(
        [=](const job_info&) {
          // The coordinator answers `finished` once every process exited;
          // the request bound only catches a coordinator gone silent.
          self->request(coord, finish_bound, finished_atom_v)
            .then([=](job_exit& out) { done(std::move(out)); },
                  [=](caf::error& err) { done(std::move(err)); });
        },
        [=](caf::error& err) { done(std::move(err)); });
  });
}

caf::error job_session::shutdown() {
  if (closed_ || !coord_)
    return {};
  auto stopped = ask<bool>(settings_.timeout + knobs::shutdown_slack, shutdown_atom_v);
  return stopped ? caf::error{} : std::move(stopped.error());
}

void job_session::close() noexcept {
  if (closed_)
    return;
  closed_ = true;
  try {
    caller_.reset();
    if (launch_waiter_)
      caf::anon_send_exit(launch_waiter_, caf::exit_reason::user_shutdown);
    for (auto port : {coord_port_, store_port_})
      if (port != 0 && rt_.watchdog)
        rt_.watchdog->unwatch(port);
    if (coord_port_ != 0)
      transport::unpublish(system(), caf::actor_cast<caf::actor>(coord_), coord_port_);
    if (store_port_ != 0)
      transport::unpublish(system(), caf::actor_cast<caf::actor>(store_), store_port_);
    if (coord_)
      caf::anon_send_exit(coord_, caf::exit_reason::user_shutdown);
    if (store_)
      caf::anon_send_exit(store_, caf::exit_reason::user_shutdown);
  } catch (const std::exception& e) {
    log::warn("closing job: {}", e.what());
  }
  launch_waiter_ = nullptr;
  coord_ = nullptr;
  store_ = nullptr;
  coord_port_ = store_port_ = 0;
}

} // namespace hvactor
