// hvactor::train's progress actor published on the driver's address for
// one attempt, and the registration of train's message types
// (internal/train_progress.hpp).

#include "train/internal/train_progress.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/log.hpp"
#include "base/internal/process_system.hpp"
#include "base/net/transport.hpp"

namespace hvactor::train {

namespace {

std::shared_ptr<data_link::server> open_data_link(const std::string& bind, const tls::config& tls,
                                                  progress_config& cfg) {
  data_link::server::options o;
  o.host = bind;
  o.tls = tls;
  o.io_timeout = cfg.ticket_bound;
  auto link = std::make_shared<data_link::server>(std::move(o));
  cfg.data = link;
  return link;
}

} // namespace

published_progress::published_progress(caf::actor_system& sys, progress_config cfg,
                                       const std::string& bind, const tls::config& tls)
  : sys_(sys),
    data_(open_data_link(bind, tls, cfg)),
    actor_(spawn_train_progress(sys, std::move(cfg))) {
  auto port = transport::publish(sys_, caf::actor_cast<caf::actor>(actor_), 0, bind);
  if (!port) {
    caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
    throw error(fmt::format("train: cannot publish the run's progress actor on {}: {}", bind,
                            sys_.render(port.error())));
  }
  port_ = *port;
  if (transport::secure(sys_)) {
    watchdog_ = std::make_unique<connection_watchdog>(connection_watchdog::options{});
    watchdog_->watch(port_);
  }
}

published_progress::~published_progress() {
  try {
    if (watchdog_)
      watchdog_->unwatch(port_);
    transport::unpublish(sys_, caf::actor_cast<caf::actor>(actor_), port_);
  } catch (const std::exception& e) {
    log::warn("train: closing the progress actor's port: {}", e.what());
  }
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
  // It may still be removing old checkpoints: the fit returns once the run
  // directory holds only what it keeps.
  caf::scoped_actor self{sys_};
  self->monitor(actor_);
  self->receive([](const caf::down_msg&) {},
                caf::after(knobs::system_exit_limit) >> [] {
                  log::warn("train: the progress actor did not stop within the bound");
                });
}

void register_train_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::hvactor_train>();
}

namespace {

// Every system of the process carries hvactor::train's messages
// (process_system.hpp).
const process_system::registrar train_types{&register_train_types};

} // namespace

} // namespace hvactor::train
