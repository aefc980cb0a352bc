#include "collectives/rendezvous/rendezvous_protocol.hpp"

namespace hvactor::proto {

void register_rendezvous_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::hvactor_rendezvous>();
}

} // namespace hvactor::proto
