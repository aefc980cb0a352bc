#include "internal/system_config.hpp"

#include <algorithm>
#include <thread>

#include "internal/interfaces.hpp"

namespace hvactor {

void configure_system(caf::actor_system_config& cfg, size_t max_threads,
                      const tls::config& tls) {
  if (max_threads == 0)
    max_threads = std::max<size_t>(2, std::thread::hardware_concurrency());
  configure_actor_system(cfg, max_threads, tls);
  proto::register_rendezvous_types(cfg);
  proto::register_types(cfg);
}

} // namespace hvactor
