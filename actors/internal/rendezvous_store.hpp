#pragma once

#include <caf/actor_system.hpp>

#include "actors/internal/interfaces.hpp"

namespace hvactor {

/// Spawns the key-value store that backs Gloo's rendezvous::Store and the
/// NCCL unique id. Keys live in scopes ("<job>/<generation>/<prefix>"); a
/// get or wait on a missing key is answered when the key is set, or fails
/// with a rendezvous_timeout error naming the missing keys.
proto::rendezvous_store spawn_rendezvous_store(caf::actor_system& sys);

} // namespace hvactor
