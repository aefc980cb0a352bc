#include "hvactor/collectives/rendezvous_protocol.hpp"

namespace hvactor::proto {

void register_rendezvous_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::hvactor_rendezvous>();
  cfg.add_error_category(error_category, [](uint8_t code, caf::atom_value, const caf::message& ctx) {
    std::string text = "hvactor error " + std::to_string(code);
    if (ctx.match_element<std::string>(0))
      text += ": " + ctx.get_as<std::string>(0);
    return text;
  });
}

caf::error make_error(int kind, std::string message, int32_t rank) {
  return caf::error{static_cast<uint8_t>(kind), error_category,
                    caf::make_message(std::move(message), rank)};
}

} // namespace hvactor::proto
