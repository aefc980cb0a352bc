#include "hvactor/errors.hpp"

namespace hvactor {

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
    case error_kind::generic:
      break;
  }
  throw error(message);
}

} // namespace hvactor
