#pragma once

// Internal: negotiation by name (Horovod's controller.cc, written anew). An
// operation runs once every rank submitted it; ranks may submit in any
// order. The engine runs rounds; in each, every rank contributes the same
// number of words to one allreduce (min) and, only when needed, strings to
// an allgather; this class builds what a rank sends and decides, from what
// came back, what runs now. Every rank learns the same things in the same
// order, so every rank decides the same: which operations run, in which
// order, which fail. It performs no I/O, so it is tested as plain code.
//
// A round:
//   1. propose(): the header: the unnamed lane (see below), two flags and a
//      word per response-cache slot (1: pending here, 0: not, -1: this rank
//      submitted that name with another shape). The engine allreduces it
//      with min.
//   2. read(): what the round needs next: a check of the lane's common
//      prefix (lane_prefix()/read_lane_prefix()), its explanation
//      (lane_list()/explain_lane()), names (announcements()/learn()), and
//      how far each rank's lane got (progress()/read_progress(), only when
//      a rank waits long on an unnamed operation), each an exchange every
//      rank runs.
//   3. finish(): which local operations run now, in the order every rank
//      runs them, and which fail with which error.
//
// Named operations are matched by name: cached names by their slot's word,
// others by announcing name and shape once (every rank keeps the same table
// of who announced what). Unnamed ones ("allreduce.noname.3") form the
// lane: matched by call order, as the names say, with a fingerprint of
// their shapes instead of names (so a loop of unnamed allreduces costs one
// small allreduce per round).
//
// join (hvd::join, Horovod's): a rank out of data joins; it announces that
// with its names, and from then on counts as having submitted every
// allreduce: what every other rank submitted runs, the joined rank taking
// part with zeros (round_result::zeros; on the device for device
// allreduces). Other kinds (allgather, broadcast, alltoall,
// reducescatter) fail while a rank has joined, as in Horovod. Once every rank joined, the join is over (round_result::
// join_done) and every rank learns the last rank to join.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/engine/name_check.hpp"
#include "collectives/engine/operation.hpp"
#include "collectives/engine/response_cache.hpp"

namespace hvactor::collectives {

/// What a round decided for this rank.
struct round_result {
  /// Local operations (their ids) that run now, in the order every rank
  /// runs them.
  std::vector<uint64_t> ready;
  /// Local operations that fail, with the error every rank reports.
  std::vector<std::pair<uint64_t, std::exception_ptr>> failed;
  /// Operations this joined rank takes part in with zeros, by the ids
  /// (phantom_base and up) that `ready` lists them under.
  std::vector<std::pair<uint64_t, operation>> zeros;
  /// Every rank has joined: the join is over; `last_joined` is the rank
  /// that joined last (the highest of the last round's joiners).
  bool join_done = false;
  int last_joined = -1;
};

/// One rank's negotiation state. Not thread-safe: one thread at a time runs
/// a round (the engine's driver).
class negotiator {
public:
  /// `rank` of `size`, on `host` (named in errors); `cache_capacity`:
  /// HOROVOD_CACHE_CAPACITY (0: every round exchanges names).
  negotiator(int rank, int size, std::string host, size_t cache_capacity);

  /// A local operation waiting to run, known by `id` (unique, increasing).
  /// `lane`: an unnamed operation (named noname() by the caller), matched
  /// by call order. Throws std::invalid_argument when a pending operation
  /// already has the name. `op` is not copied: it must stay as it is until
  /// finish() or drop_all() returned `id`.
  void add(uint64_t id, const operation& op, bool lane);

  /// The name of the `n`-th unnamed operation of kind `k`:
  /// "allreduce.noname.3" (Horovod's).
  static std::string noname(op_kind k, uint64_t n);

  /// No local operation waits.
  bool idle() const noexcept {
    return local_.empty();
  }

  /// hvd::join(): this rank joins in the next round (announced with its
  /// names). Until every rank joined, it takes part in the others'
  /// allreduces with zeros.
  void join();

  /// This rank joined (or joins in the next round), and the join is not
  /// over.
  bool joined() const noexcept {
    return joining_ || joined_[static_cast<size_t>(rank_)];
  }

  /// The ids of the phantom operations in round_result::zeros start here.
  static constexpr uint64_t phantom_base = uint64_t{1} << 62;

  /// Step 1: this rank's header (same length on every rank). `abort`: this
  /// rank asks every rank to fail everything pending (stall shutdown);
  /// `leave`: this rank shuts down (its last round); `query`: this rank
  /// waits long on an unnamed operation and asks every rank how far its
  /// lane got (plan::progress), so that pending() names the ranks missing.
  std::vector<int64_t> propose(bool abort = false, bool leave = false, bool query = false);

  /// The fast path of a synchronous unnamed operation while nothing is
  /// pending here: the header propose() would build with `op` added.
  const std::vector<int64_t>& propose_solo(const operation& op);
  /// After propose_solo(): true when the reduced header says only "run
  /// it now" (the round is then over); false: call absorb_solo() and go on
  /// with read() as after propose().
  bool solo_agreed(std::span<const int64_t> reduced);
  void absorb_solo(uint64_t id, const operation& op); // as add()

  /// What the round needs after the header came back.
  struct plan {
    /// Exchange lane_prefix() (allreduce, min), then read_lane_prefix().
    bool lane_prefix = false;
    /// Exchange announcements() (allgather), then learn().
    bool names = false;
    /// Some rank asked to abort: finish() fails everything pending.
    bool abort = false;
    /// Some rank has joined and the lane runs: exchange lane_list()
    /// (allgather) and call read_lane_lists(), so that joined ranks learn
    /// what they take part in.
    bool lane_lists = false;
    /// Some rank shuts down (the lowest: leaver): finish() fails
    /// everything pending, and no round follows.
    bool leave = false;
    int leaver = -1;
    /// Some rank asked who is missing (propose's `query`): exchange
    /// progress() (allgather, one word per rank), then read_progress().
    bool progress = false;
  };
  plan read(std::span<const int64_t> reduced);

  /// The lane's agreed prefix, fingerprinted: {f, -f}.
  std::vector<int64_t> lane_prefix() const;
  /// Returns true when the ranks' lane lists differ: then exchange
  /// lane_list() (allgather) and call explain_lane().
  bool read_lane_prefix(std::span<const int64_t> reduced);
  /// The lane's agreed prefix, encoded (name_check::encode).
  std::string lane_list() const;
  /// Given every rank's lane_list(), fails the prefix with the message.
  void explain_lane(const std::vector<std::string>& lists);
  /// Given every rank's lane_list() while some rank has joined: a joined
  /// rank without unnamed operations takes part in the lane with zeros.
  void read_lane_lists(const std::vector<std::string>& lists);

  /// How many unnamed operations this rank has submitted (its lane's next
  /// sequence number).
  int64_t progress() const noexcept {
    return next_seq_;
  }
  /// Given every rank's progress() (index = rank): until the next read(),
  /// pending() names the ranks that have not submitted each unnamed
  /// operation.
  void read_progress(std::span<const int64_t> all);

  /// This rank's new names and shapes, encoded.
  std::string announcements() const;
  /// Given every rank's announcements() (index = rank), updates the table.
  void learn(const std::vector<std::string>& all);

  /// Step 3. `abort_error`: the error pending operations fail with when the
  /// round aborts or a rank leaves.
  round_result finish(std::exception_ptr abort_error = nullptr);

  /// Fails everything pending (the transport failed): returns the ids.
  std::vector<uint64_t> drop_all();

  /// The ranks that announced `name` (ascending), when the table has it.
  std::vector<int> announced_by(const std::string& name) const;

  /// Names pending here and what each waits on, for the stall inspector:
  /// {name, ranks that have not submitted it, known}. A named operation's
  /// ranks are known once it was announced (not while it is cached: see
  /// uncache()); an unnamed one's in the round that exchanged progress()
  /// (plan::progress). A joined rank is never missing.
  struct waiting {
    uint64_t id;
    std::string name;
    std::vector<int> missing;
    bool known = false;
  };
  std::vector<waiting> pending() const;

  /// While this rank has joined (hvd::join) and the join is not over: the
  /// ranks that have not joined, as every rank knows them; empty before
  /// this rank's join was announced.
  std::vector<int> not_joined() const;

  /// Moves the cached operation `id` back to announcing its name (and
  /// invalidates its slot everywhere), so that the table says who is
  /// missing (the stall inspector asks for it).
  void uncache(uint64_t id);

  const response_cache& cache() const noexcept {
    return cache_;
  }

  /// Header words before the cache's.
  static constexpr size_t fixed_words = 14;
  /// The header word that says whether every rank's exchange carries its
  /// data: propose() and propose_solo() set it to -1; a backend that sends
  /// the solo operation's data with the header sets it to 0
  /// (backend::allreduce_with_header). Only when the reduced word is 0 did
  /// every rank send data, so that the data's reduction is valid.
  static constexpr size_t data_word = 12;

private:
  enum class state : uint8_t { fresh, named, cached };
  struct local_op {
    const operation* op = nullptr;
    bool lane = false;
    int64_t seq = 0;
    state st = state::fresh;
    size_t slot = 0;
    bool invalidate = false;
  };
  struct entry {
    std::vector<operation> by_rank;
    std::vector<bool> seen;
    int count = 0;
    bool done = false;
  };

  void complete(const std::string& name, entry& e, round_result& out);
  bool every_rank_has(const entry& e) const;
  std::exception_ptr refusal(const operation& op) const;
  void take_part(const operation& op, round_result& out);
  void end_join();
  // finish()'s steps.
  void fail_all(std::exception_ptr error, round_result& out);
  void finish_cached(round_result& out);
  size_t finish_lane(round_result& out);

  int rank_;
  int size_;
  std::string host_;
  response_cache cache_;
  std::map<uint64_t, local_op> local_;
  std::unordered_map<std::string, uint64_t> by_name_;
  std::deque<uint64_t> lane_;
  int64_t next_seq_ = 0;
  std::unordered_map<std::string, entry> table_;
  uint64_t tick_ = 0;
  // join: requested here, not yet announced; who joined (every rank's
  // copy is the same), how many, the last one; ids of phantoms.
  bool joining_ = false;
  std::vector<bool> joined_;
  int joined_count_ = 0;
  int last_joined_ = -1;
  uint64_t next_phantom_ = phantom_base;

  // This round.
  std::vector<uint64_t> announcing_;
  std::vector<int64_t> proposed_;
  std::vector<int64_t> solo_;
  std::vector<int64_t> reduced_;
  size_t lane_run_ = 0;
  // A joined rank without unnamed operations: the lane's run, as zeros.
  std::vector<operation> lane_zeros_;
  bool lane_failed_ = false;
  // Every rank's progress(), when this round exchanged it; else empty.
  std::vector<int64_t> progress_;
  std::exception_ptr lane_error_;
  bool abort_ = false;
  int64_t agreed_next_seq_ = 0;
  std::vector<std::string> completed_;
};

} // namespace hvactor::collectives
