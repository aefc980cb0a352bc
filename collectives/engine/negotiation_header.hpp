#pragma once

// Internal: the layout of the negotiation header (collectives::negotiator):
// its fixed words and the values of a response-cache slot's word, shared by
// the negotiator's files. Every rank sends the same number of words; the
// engine reduces them with min.

#include <cstddef>
#include <cstdint>
#include <limits>

#include "collectives/engine/negotiator.hpp"

namespace hvactor::collectives::negotiation_header {

// A rank with no unnamed operation pending proposes this lane head: never
// equal to a real one, so the lane waits.
inline constexpr int64_t no_lane = int64_t{1} << 60;

// What a joined rank without unnamed operations proposes for every lane
// word: above any value, so the minimum is the other ranks'.
inline constexpr int64_t no_constraint = std::numeric_limits<int64_t>::max();

// Header words (negated ones carry a maximum through the min).
enum word : size_t {
  head,         // the lane's first sequence number
  neg_head,     //
  run,          // unnamed operations pending from there
  neg_run,      //
  print,        // fingerprint of the whole run
  neg_print,    //
  neg_announce, // -1: some rank announces names
  neg_abort,    // -1: some rank asks to fail everything pending
  neg_next_seq, // -(next sequence number): the lane restarts there after an abort
  leaver,       // the lowest rank that shuts down (size: none)
  neg_joined,   // -1: some rank has joined (hvd::join)
  all_joined,   // 1: every rank has joined
  neg_no_data,  // -1: some rank's exchange carries no data (see data_word)
  neg_query,    // -1: some rank waits long on an unnamed operation: every rank says
                // how far its lane got (negotiator::progress()), so that the stall
                // inspector names the ranks missing
};
static_assert(negotiator::fixed_words == 14);
static_assert(negotiator::data_word == neg_no_data);

// A cache slot's word: this rank has the name pending (1), has not (0),
// submitted it with another shape (-1), or has joined and stands in for it
// with zeros (2). The name runs when the minimum is 1: every rank has it or
// has joined, and some rank has it.
inline constexpr int64_t slot_pending = 1;
inline constexpr int64_t slot_joined = 2;

} // namespace hvactor::collectives::negotiation_header
