#pragma once

#include <caf/actor_system.hpp>

#include "actors/protocol/interfaces.hpp"

namespace hvactor {

/// Spawns the key-value store behind hvd::init's rendezvous (the Gloo
/// mesh's cards, the NCCL unique id, failure announcements). Keys live in
/// scopes ("<job>/<generation>/<prefix>"); a get or wait on a missing key
/// is answered when the key is set, or fails with a rendezvous_timeout
/// error naming the missing keys; a gather sets keys and answers many in
/// one request (what is set at its timeout, with the missing ones' indices).
/// A set costs the waits that miss that key, not a scan of every wait.
proto::rendezvous_store spawn_rendezvous_store(caf::actor_system& sys);

} // namespace hvactor
