#pragma once

#include <caf/actor_system.hpp>

#include "actors/protocol/interfaces.hpp"

namespace hvactor {

/// Spawns the cluster's membership actor (on the head, or in-process for an
/// embedded cluster and for simulations). It keeps every joined node's
/// latest node_info, monitors each agent and drops a node whose agent goes
/// away (process death at once, a frozen or cut-off node through CAF's
/// heartbeat timeout). A node that joins under an id already present
/// replaces the old entry when the old agent no longer answers, and is
/// refused while it does (two live nodes never share an id).
proto::node_registry spawn_node_registry(caf::actor_system& sys);

} // namespace hvactor
