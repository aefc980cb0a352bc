#pragma once

#include <chrono>
#include <map>
#include <string>

#include <gloo/context.h>

#include "collectives/internal/rendezvous_client.hpp"

namespace hvactor::collectives {

/// After connectFullMesh over `client` under `prefix`: the addresses by
/// which Gloo may name each peer's pair towards this rank (`ctx`'s rank),
/// mapped to the peer's rank, for error messages. Two per peer: the
/// address the peer's socket has once connected (each rank publishes its
/// own under "<prefix>/pairs/<rank>", and reads the others'), and the one
/// the peer listened on for the pair (Gloo's own key "<prefix>/<rank>"): in
/// some pairs Debian's Gloo names a dead peer by the latter, and a survivor
/// of a dead process-set member said "which rank is not known" in about one
/// run of three of process_set_test. Throws what the client throws.
std::map<std::string, int> learn_peer_addresses(::gloo::Context& ctx, rendezvous_client& client,
                                                const std::string& prefix,
                                                std::chrono::milliseconds timeout);

} // namespace hvactor::collectives
