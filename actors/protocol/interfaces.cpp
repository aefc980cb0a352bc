#include "actors/protocol/interfaces.hpp"

namespace hvactor::proto {

void register_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::hvactor>();
  cfg.add_message_types<caf::id_block::hvactor_handles>();
}

} // namespace hvactor::proto
