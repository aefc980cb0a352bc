#include "actors/protocol/system_config.hpp"

#include <algorithm>
#include <thread>

#include "actors/protocol/interfaces.hpp"
#include "base/internal/process_system.hpp"

namespace hvactor {

namespace {

void register_actor_types(caf::actor_system_config& cfg) {
  proto::register_types(cfg);
}

// A worker's process system carries the actors' messages (the driver's
// calls, registration) beside the store's (collectives registers those).
const process_system::registrar actor_types{&register_actor_types};

} // namespace

void configure_system(caf::actor_system_config& cfg, size_t max_threads,
                      const tls::config& tls) {
  if (max_threads == 0)
    max_threads = std::max<size_t>(2, std::thread::hardware_concurrency());
  configure_actor_system(cfg, max_threads, tls);
  // Every loaded layer's messages: the store's (collectives), the actors'
  // (above), hvactor::train's (train_progress.cpp).
  process_system::apply_types(cfg);
}

} // namespace hvactor
