#include "internal/actor_system.hpp"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/io/middleman.hpp>

#include "internal/log.hpp"
#include "internal/caf_error.hpp"
#include "internal/knobs.hpp"
#include "internal/transport.hpp"

namespace hvactor {

void configure_actor_system(caf::actor_system_config& cfg, size_t max_threads,
                            const tls::config& tls) {
  register_error_category(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads", max_threads);
  cfg.set("work-stealing.aggressive-poll-attempts", size_t{0});
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
  // Identical on every process (a one-sided setting drops healthy peers):
  // a frozen peer is noticed within 2.5 s, and every live connection gets
  // bytes twice a second, which the TLS connection watchdog relies on.
  cfg.set("middleman.heartbeat-interval", caf::timespan{knobs::heartbeat_interval});
  cfg.set("middleman.connection-timeout", caf::timespan{knobs::connection_timeout});
  cfg.set("middleman.app-identifiers", std::vector<std::string>{"hvactor"});
  transport::configure(cfg, tls);
}

void destroy_bounded(std::unique_ptr<caf::actor_system>& sys, std::chrono::seconds limit) {
  std::mutex mtx;
  std::condition_variable cv;
  bool done = false;
  std::thread guard{[&] {
    std::unique_lock<std::mutex> lock{mtx};
    if (!cv.wait_for(lock, limit, [&] { return done; })) {
      log::error("actor system did not stop within {} s; exiting", limit.count());
      std::fflush(nullptr);
      std::_Exit(1);
    }
  }};
  sys.reset();
  {
    std::lock_guard<std::mutex> lock{mtx};
    done = true;
  }
  cv.notify_all();
  guard.join();
}

} // namespace hvactor
