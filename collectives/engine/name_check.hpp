#pragma once

// Internal: the name check of every negotiation round (the negotiator's
// lanes; once opt-in as HVACTOR_CHECK_NAMES, now always on). Before an
// operation (or a batch of queued allreduces) runs, every rank shows the
// others what it is about to run;
// all of them stop with one clear error at the first difference, instead
// of corrupting tensors or hanging inside the backend. The engine exchanges
// the lists (encode, gather, decode); this class only decides, so it is
// tested as plain code.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives/engine/operation.hpp"

namespace hvactor::collectives {

/// What one rank is about to run.
struct op_list {
  /// True: queued async allreduces, of which the ranks run a common prefix
  /// now (timing decides how many each rank has queued); false: one
  /// operation that runs alone.
  bool batch = false;
  std::vector<operation> ops;
};

/// Compares every rank's op_list and numbers the operations checked.
/// Not thread-safe (the engine calls it from the thread that runs the
/// operation, one at a time).
class name_check {
public:
  /// `rank` and `host`: this process, named in messages.
  name_check(int rank, std::string host) : rank_(rank), host_(std::move(host)) {
  }

  /// Given every rank's list (index = rank), returns how many operations
  /// run now: for batches the length of the lists' common prefix, for a
  /// single operation 1; 0 when every list is empty. Throws
  /// collective_error at the first position (within what runs now) where a
  /// rank r differs from rank 0, naming the operation's number, both ranks
  /// and both sides; a batch against a single operation differs at once.
  size_t agree(const std::vector<op_list>& lists);

  /// Operations agreed on so far; the next one is number checked().
  uint64_t checked() const noexcept {
    return checked_;
  }

  /// `list` as bytes for the exchange between ranks (fixed-width
  /// little-endian fields, names as length and bytes).
  static std::string encode(const op_list& list);

  /// encode()'s inverse; throws collective_error naming `from_rank` when
  /// the bytes are not an encoded list.
  static op_list decode(std::string_view bytes, int from_rank);

private:
  int rank_;
  std::string host_;
  uint64_t checked_ = 0;
};

} // namespace hvactor::collectives
