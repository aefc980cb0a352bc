#pragma once

// Internal: the actor system of a process that runs hvactor's actors.

#include <cstddef>

#include <caf/actor_system_config.hpp>

#include "hvactor/tls.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"

namespace hvactor {

/// configure_actor_system (the settings every hvactor process shares, TLS
/// when `tls` is enabled) plus every message type of the actors layer and
/// the rendezvous store's. `max_threads` 0: one per core, at least two.
void configure_system(caf::actor_system_config& cfg, size_t max_threads = 0,
                      const tls::config& tls = {});

} // namespace hvactor
