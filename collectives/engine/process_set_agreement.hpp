#pragma once

// Internal: adding and removing a process set is decided on every rank
// alike, before anything changes (hvd::add_process_set,
// remove_process_set, hvd::init with sets). Every rank sends what it was
// asked and what it holds; from every rank's part, each decides the same:
// go on, or the same refusal everywhere, naming what each rank passed. A
// rank that refused alone, before the exchange, would leave the others'
// exchange to pair with its next collective. Plain code.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace hvactor::collectives {

/// One rank's part in adding a set.
struct set_proposal {
  /// Where the rank runs (its node's key: the members on one node share
  /// memory).
  int64_t node = 0;
  /// The set that already has these ranks on that rank (0: none).
  int held = 0;
  /// The ranks it passed, sorted.
  std::vector<int> ranks;
};

/// Words for the allgather: {node, held, count, ranks...}; every rank's
/// words, concatenated in rank order, decode() back.
std::vector<int64_t> encode(const set_proposal& p);

/// Every rank's proposal from the allgather's concatenation; throws
/// collective_error naming the rank when the words are not `size`
/// proposals (ranks that run different hvactor builds).
std::vector<set_proposal> decode_proposals(std::span<const int64_t> words, int size);

/// The error every rank throws instead of adding the set (std::invalid_argument's
/// text, "hvd::<call>: ..."), or "" to add it: the ranks passed different
/// lists, a list that is no set of the job's ranks (empty, out of range, a
/// rank twice), or ranks that some rank already has as a set.
std::string add_refusal(const std::vector<set_proposal>& all, int job_size, const char* call);

/// One rank's part in removing a set: the id it passed (0: the global set;
/// -1: a set never added, or removed), and whether it holds that set.
struct set_removal {
  int id = -1;
  bool held = false;
};

/// What every rank does with a removal.
struct removal_decision {
  /// Non-empty: every rank throws std::invalid_argument with it (the
  /// ranks passed different sets).
  std::string refusal;
  /// Remove the set where it is held (a rank without it has nothing to do).
  bool remove = false;
  /// remove_process_set's result, the same everywhere: true when every
  /// rank held the set.
  bool removed = false;
};

/// `sets`: the sets this rank knows (id -> ranks), to name them.
removal_decision decide_removal(const std::vector<set_removal>& all,
                                const std::map<int, std::vector<int>>& sets);

} // namespace hvactor::collectives
