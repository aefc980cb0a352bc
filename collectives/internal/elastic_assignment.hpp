#pragma once

// The elastic driver's answer to "where is worker W in generation G", in
// one place for both sides: the coordinator encodes it into the rendezvous
// store (assign/<worker>/<gen>, elastic_session.hpp), hvd::init decodes it
// and connects with it as a value (nothing goes through the environment).

#include <cstdint>
#include <span>
#include <vector>

namespace hvactor::elastic_protocol {

struct assignment {
  /// Not in this generation's world: the worker leaves (exit 0).
  bool removed = false;
  int32_t rank = 0;
  int32_t size = 1;
  int32_t local_rank = 0;
  int32_t local_size = 1;
  int32_t cross_rank = 0;
  int32_t cross_size = 1;
};

/// A tag byte (1: assigned, 2: removed) and, when assigned, the six numbers
/// as little-endian int32 in the order of the struct.
std::vector<char> encode(const assignment& a);

/// The assignment in `bytes`; throws hvactor::error naming what is wrong (a
/// wrong length or tag, a rank outside its size).
assignment decode(std::span<const char> bytes);

} // namespace hvactor::elastic_protocol
