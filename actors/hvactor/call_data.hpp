#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace hvactor::detail {

/// A remote call ready to send: an invoker (argument and result types)
/// applied to a target (which function), with the serialized arguments.
/// Travels to the workers as is.
struct call_data {
  std::string invoker;
  std::string target;
  std::vector<char> args;
  /// The driver's direct call this is (its sequence number, echoed in the
  /// result so that a late answer to an earlier call is told apart); 0
  /// for the coordinator's calls.
  uint64_t seq = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_data& x) {
  return f(caf::meta::type_name("call_data"), x.invoker, x.target, x.args, x.seq);
}

} // namespace hvactor::detail
