#include "hvactor/errors.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

#include "base/internal/caf_error.hpp"

namespace hvactor {

const char* to_string(error_kind kind) noexcept {
  switch (kind) {
    case error_kind::placement_timeout:
      return "placement_timeout";
    case error_kind::rendezvous_timeout:
      return "rendezvous_timeout";
    case error_kind::worker_error:
      return "worker_error";
    case error_kind::node_lost:
      return "node_lost";
    case error_kind::not_started:
      return "not_started";
    case error_kind::invalid_argument:
      return "invalid_argument";
    case error_kind::collective_error:
      return "collective_error";
    case error_kind::generic:
      return "error";
    case error_kind::elastic_timeout:
      return "elastic_timeout";
    case error_kind::reset_limit_exceeded:
      return "reset_limit_exceeded";
  }
  return "error";
}

void throw_error(error_kind kind, const std::string& message, int rank) {
  switch (kind) {
    case error_kind::placement_timeout:
      throw placement_timeout(message);
    case error_kind::rendezvous_timeout:
      throw rendezvous_timeout(message);
    case error_kind::worker_error:
      throw worker_error(message, rank);
    case error_kind::node_lost:
      throw node_lost(message);
    case error_kind::not_started:
      throw not_started(message);
    case error_kind::invalid_argument:
      throw std::invalid_argument(message);
    case error_kind::collective_error:
      throw collective_error(message, rank);
    case error_kind::elastic_timeout:
      throw elastic_timeout(message);
    case error_kind::reset_limit_exceeded:
      throw reset_limit_exceeded(message);
    case error_kind::generic:
      break;
  }
  throw error(message);
}

caf::error make_error(error_kind kind, std::string message, int32_t rank) {
  return caf::error{static_cast<uint8_t>(kind), error_category,
                    caf::make_message(std::move(message), rank)};
}

std::string describe(const caf::error& err) {
  if (err.category() == error_category && err.context().match_element<std::string>(0))
    return err.context().get_as<std::string>(0);
  return caf::to_string(err);
}

void throw_caf_error(const caf::error& err, const std::string& context) {
  if (!err)
    throw error(context + ": failed without an error (an internal bug; please report it)");
  if (err.category() == error_category) {
    int rank = -1;
    if (err.context().match_element<int32_t>(1))
      rank = err.context().get_as<int32_t>(1);
    throw_error(static_cast<error_kind>(err.code()), describe(err), rank);
  }
  if (err == caf::sec::request_timeout)
    throw error(context + ": no answer in time (request_timeout)");
  throw error(context + ": " + caf::to_string(err));
}

void register_error_category(caf::actor_system_config& cfg) {
  auto render = [](uint8_t code, caf::atom_value, const caf::message& ctx) {
    std::string text = to_string(static_cast<error_kind>(code));
    if (ctx.match_element<std::string>(0))
      text += ": " + ctx.get_as<std::string>(0);
    return text;
  };
  cfg.add_error_category(error_category, render);
}

} // namespace hvactor
