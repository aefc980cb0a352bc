// hvactor's CAF heartbeat: CAF's ticks, started at aligned instants
// (heartbeat.hpp).
#include "base/net/heartbeat.hpp"

#include <chrono>
#include <mutex>

#include <caf/atom.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/send.hpp>
#include <caf/settings.hpp>

#include "base/internal/knobs_net.hpp"

namespace hvactor::heartbeat {

namespace {

// Our settings ride in the system's config, beside CAF's (turned off).
constexpr const char* interval_key = "hvactor.heartbeat-interval";
constexpr const char* timeout_key = "hvactor.connection-timeout";

// The registry name that marks a system whose ticks run.
const caf::atom_value started_name = caf::atom("hvhbeat");

std::mutex& start_mutex() {
  static auto* mtx = new std::mutex; // never destroyed: used from static destructors
  return *mtx;
}

} // namespace

void configure(caf::actor_system_config& cfg, caf::timespan interval, caf::timespan timeout) {
  cfg.set("middleman.heartbeat-interval", caf::timespan{0});
  cfg.set("middleman.connection-timeout", caf::timespan{0});
  // Not CAF's options (set() refuses unknown names): straight into the
  // content that sys.config() reads.
  caf::put(cfg.content, interval_key, interval);
  caf::put(cfg.content, timeout_key, timeout);
}

void configure(caf::actor_system_config& cfg) {
  configure(cfg, caf::timespan{knobs::heartbeat_interval}, caf::timespan{knobs::connection_timeout});
}

void start(caf::actor_system& sys) {
  auto interval = caf::get_or(sys.config(), interval_key, caf::timespan{0});
  auto timeout = caf::get_or(sys.config(), timeout_key, caf::timespan{0});
  if (interval.count() <= 0 || !sys.has_middleman())
    return;
  std::lock_guard<std::mutex> guard{start_mutex()};
  if (sys.registry().get(started_name) != nullptr)
    return;
  // Created by the middleman's start; found here, never created.
  auto basp = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  sys.registry().put(started_name, caf::actor_cast<caf::strong_actor_ptr>(basp));
  // The broker's tick handler sends the heartbeats, drops peers silent for
  // `timeout`, and schedules the next tick at `first` + k * `interval`.
  auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  auto into_interval = std::chrono::duration_cast<caf::timespan>(since_epoch) % interval;
  auto first = sys.clock().now() + (interval - into_interval);
  caf::anon_send(basp, caf::tick_atom_v, first, interval, timeout);
}

bool started(caf::actor_system& sys) {
  std::lock_guard<std::mutex> guard{start_mutex()};
  return sys.registry().get(started_name) != nullptr;
}

} // namespace hvactor::heartbeat
