#pragma once

// The elastic driver's answer to "where is worker W in generation G", in
// one place for both sides: the coordinator encodes it into the rendezvous
// store (assign/<worker>/<gen>, elastic_session.hpp), hvd::init decodes it
// and connects with it as a value (nothing goes through the environment).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/internal/rank_layout.hpp"

namespace hvactor::elastic_protocol {

/// A worker's place in a generation's world, or its removal.
struct assignment : rank_layout {
  /// Not in this generation's world: the worker leaves (exit 0).
  bool removed = false;
};

/// An assignment that removes its worker.
assignment removal();

/// The keys of an elastic generation's store scope, named here once for
/// both sides: the coordinator writes a worker's assignment and the latest
/// generation it has one in, and a generation's changes; workers write that
/// they joined a generation, or ask for a reset of it.
std::string assign_key(const std::string& worker, int generation);
std::string latest_key(const std::string& worker);
std::string joined_key(int generation, const std::string& worker);
std::string changed_key(int generation);
std::string reset_key(int generation);

/// A tag byte (1: assigned, 2: removed) and, when assigned, the six numbers
/// as little-endian int32 in the order of the struct.
std::vector<char> encode(const assignment& a);

/// The assignment in `bytes`; throws hvactor::error naming what is wrong (a
/// wrong length or tag, a rank outside its size).
assignment decode(std::span<const char> bytes);

} // namespace hvactor::elastic_protocol
