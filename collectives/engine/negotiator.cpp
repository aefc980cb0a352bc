// collectives::negotiator: its state (local operations, the lane's
// sequence, join), the header it proposes (step 1, and the solo fast path),
// what the reduced header asks for (step 2's plan), and the round's verdict
// (step 3: finish). The lane's exchanges are in negotiator_lane.cpp, the
// name table's in negotiator_names.cpp.
#include "collectives/engine/negotiator.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "collectives/engine/negotiation_header.hpp"
#include "collectives/engine/shape_check.hpp"

namespace hvactor::collectives {

using namespace negotiation_header;

negotiator::negotiator(int rank, int size, std::string host, size_t cache_capacity)
  : rank_(rank),
    size_(size),
    host_(std::move(host)),
    cache_(cache_capacity),
    joined_(static_cast<size_t>(size), false) {
}

void negotiator::join() {
  if (!joined())
    joining_ = true;
}

std::string negotiator::noname(op_kind k, uint64_t n) {
  // One allocation: it runs for every unnamed async allreduce.
  std::string_view kind = to_string(k);
  fmt::format_int number(n);
  std::string name;
  name.reserve(kind.size() + 8 + number.size());
  name.append(kind).append(".noname.").append(number.data(), number.size());
  return name;
}

void negotiator::add(uint64_t id, const operation& op, bool lane) {
  local_op l;
  l.lane = lane;
  if (lane) {
    l.seq = next_seq_++;
    lane_.push_back(id);
  } else {
    if (by_name_.count(op.name))
      throw std::invalid_argument(fmt::format(
        "hvd: {} was submitted while an operation of that name is still pending on rank {}; "
        "names must be unique among the operations in flight",
        describe(op), rank_));
    by_name_[op.name] = id;
  }
  l.op = &op;
  local_.emplace(id, std::move(l));
}

std::vector<int64_t> negotiator::propose(bool abort, bool leave, bool query) {
  std::vector<int64_t> w(fixed_words + cache_.words(), 0);
  // The lane: from its head, the consecutive unnamed operations.
  std::vector<const operation*> lane;
  lane.reserve(lane_.size());
  for (auto id : lane_)
    lane.push_back(local_.at(id).op);
  bool joined_here = joined();
  if (lane_.empty() && joined_here) {
    // A joined rank constrains no lane: the maximum of every lane word
    // (the others' run, or no run when no other rank has one).
    for (auto i : {head, neg_head, run, neg_run, print, neg_print})
      w[i] = no_constraint;
  } else if (lane_.empty()) {
    w[head] = no_lane;
    w[neg_head] = -no_lane;
  } else {
    auto s = local_.at(lane_.front()).seq;
    w[head] = s;
    w[neg_head] = -s;
    w[run] = static_cast<int64_t>(lane_.size());
    w[neg_run] = -w[run];
    auto f = shape_check::fingerprint(false, lane);
    w[print] = f;
    w[neg_print] = -f;
  }
  // Named operations: a cached name with the same shape is a 1 in its
  // slot; anything else is announced (and a cached name with another shape
  // frees its slot everywhere).
  announcing_.clear();
  for (auto& [id, l] : local_) {
    if (l.lane)
      continue;
    if (l.st == state::fresh) {
      auto slot = cache_.find(l.op->name);
      if (slot && same_shape(cache_.at(*slot), *l.op) && !l.invalidate) {
        l.st = state::cached;
        l.slot = *slot;
      } else {
        if (slot)
          w[fixed_words + *slot] = -1;
        l.st = state::named;
        l.invalidate = false;
        announcing_.push_back(id);
      }
    } else if (l.st == state::cached && l.invalidate) {
      w[fixed_words + l.slot] = -1;
      l.st = state::named;
      l.invalidate = false;
      announcing_.push_back(id);
      continue;
    }
    if (l.st == state::cached && w[fixed_words + l.slot] == 0)
      w[fixed_words + l.slot] = slot_pending;
  }
  if (joined_here)
    for (size_t s = 0; s < cache_.words(); ++s)
      if (w[fixed_words + s] == 0 && cache_.in_use(s) && !by_name_.count(cache_.at(s).name))
        w[fixed_words + s] = slot_joined;
  w[neg_announce] = announcing_.empty() && !joining_ ? 0 : -1;
  w[neg_joined] = joined_here ? -1 : 0;
  w[all_joined] = joined_here ? 1 : 0;
  w[neg_no_data] = -1;
  w[neg_abort] = abort ? -1 : 0;
  w[neg_next_seq] = -next_seq_;
  w[leaver] = leave ? rank_ : size_;
  w[neg_query] = query ? -1 : 0;
  proposed_ = w;
  return w;
}

const std::vector<int64_t>& negotiator::propose_solo(const operation& op) {
  solo_.assign(fixed_words + cache_.words(), 0);
  const operation* one = &op;
  auto f = shape_check::fingerprint(false, std::span<const operation* const>(&one, 1));
  solo_[head] = next_seq_;
  solo_[neg_head] = -next_seq_;
  solo_[run] = 1;
  solo_[neg_run] = -1;
  solo_[print] = f;
  solo_[neg_print] = -f;
  solo_[neg_next_seq] = -(next_seq_ + 1);
  solo_[leaver] = size_;
  solo_[neg_no_data] = -1;
  if (joined()) {
    solo_[neg_joined] = -1;
    solo_[all_joined] = 1;
  }
  return solo_;
}

bool negotiator::solo_agreed(std::span<const int64_t> r) {
  if (r[neg_abort] < 0 || r[leaver] < size_ || r[neg_announce] < 0 || r[neg_joined] < 0
      || r[neg_query] < 0 || r[head] != next_seq_
      || r[neg_head] != -next_seq_ || r[run] != 1 || r[neg_run] != -1
      || r[print] != -r[neg_print])
    return false;
  for (size_t s = fixed_words; s < r.size(); ++s)
    if (r[s] != 0)
      return false;
  ++next_seq_;
  ++tick_;
  return true;
}

void negotiator::absorb_solo(uint64_t id, const operation& op) {
  add(id, op, true);
  announcing_.clear();
}

negotiator::plan negotiator::read(std::span<const int64_t> reduced) {
  reduced_.assign(reduced.begin(), reduced.end());
  lane_run_ = 0;
  lane_zeros_.clear();
  lane_failed_ = false;
  lane_error_ = nullptr;
  completed_.clear();
  progress_.clear();
  plan p;
  p.leave = reduced_[leaver] < size_;
  p.leaver = p.leave ? static_cast<int>(reduced_[leaver]) : -1;
  p.abort = reduced_[neg_abort] < 0 || p.leave;
  agreed_next_seq_ = -reduced_[neg_next_seq];
  if (p.abort)
    return p;
  p.names = reduced_[neg_announce] < 0;
  p.progress = reduced_[neg_query] < 0;
  bool same_head = reduced_[head] == -reduced_[neg_head] && reduced_[head] != no_lane;
  if (same_head && reduced_[run] >= 1) {
    lane_run_ = static_cast<size_t>(reduced_[run]);
    bool same_print = reduced_[print] == -reduced_[neg_print];
    // Equal fingerprints of the whole runs (which cover their lengths):
    // the runs agree. Else the common prefix is compared, and explained
    // when it differs.
    p.lane_prefix = !same_print;
    p.lane_lists = reduced_[neg_joined] < 0;
  }
  return p;
}

// Every rank joined: the join is over, everywhere in the same round.
void negotiator::end_join() {
  joined_.assign(static_cast<size_t>(size_), false);
  joined_count_ = 0;
  last_joined_ = -1;
  joining_ = false;
}

round_result negotiator::finish(std::exception_ptr abort_error) {
  ++tick_;
  round_result out;
  auto forget = [&](uint64_t id) {
    auto i = local_.find(id);
    if (i == local_.end())
      return; // a joined rank's zeros
    if (!i->second.lane)
      by_name_.erase(i->second.op->name);
    local_.erase(i);
  };
  if (reduced_[neg_abort] < 0 || reduced_[leaver] < size_) {
    fail_all(abort_error, out);
    return out;
  }
  finish_cached(out);
  size_t lane_done = finish_lane(out);
  // 3. Names every rank has now announced, in the order they completed.
  for (auto& name : completed_) {
    auto i = table_.find(name);
    complete(name, i->second, out);
    table_.erase(i);
  }
  for (auto& id : out.ready)
    forget(id);
  for (auto& f : out.failed)
    forget(f.first);
  lane_.erase(lane_.begin(), lane_.begin() + static_cast<std::ptrdiff_t>(lane_done));
  lane_run_ = 0;
  completed_.clear();
  if (joined_count_ == size_) {
    out.join_done = true;
    out.last_joined = last_joined_;
    if (lane_.empty())
      next_seq_ = std::max(next_seq_, agreed_next_seq_);
    end_join();
  }
  return out;
}

// The round aborted or a rank leaves: everything pending fails with
// `error`, and the lane restarts where every rank agreed.
void negotiator::fail_all(std::exception_ptr error, round_result& out) {
  for (auto& [id, l] : local_)
    out.failed.emplace_back(id, error);
  local_.clear();
  by_name_.clear();
  lane_.clear();
  table_.clear();
  next_seq_ = agreed_next_seq_;
  end_join();
}

// Step 3, part 1: cached names every rank has pending (or has joined), by
// slot; a joined rank takes part in those it has not (id 0 here). Then the
// slots some rank invalidated are freed everywhere; who waits on one
// announces its name next round.
void negotiator::finish_cached(round_result& out) {
  std::vector<std::pair<size_t, uint64_t>> hits;
  for (auto& [id, l] : local_)
    if (l.st == state::cached && reduced_[fixed_words + l.slot] == slot_pending)
      hits.emplace_back(l.slot, id);
  if (joined()) {
    std::vector<bool> mine(cache_.words(), false);
    for (auto& h : hits)
      mine[h.first] = true;
    for (size_t s = 0; s < cache_.words(); ++s)
      if (reduced_[fixed_words + s] == slot_pending && !mine[s] && cache_.in_use(s))
        hits.emplace_back(s, 0);
  }
  std::sort(hits.begin(), hits.end());
  for (auto& [slot, id] : hits) {
    cache_.touch(slot, tick_);
    if (auto refused = refusal(cache_.at(slot))) {
      if (id != 0)
        out.failed.emplace_back(id, refused);
    } else if (id != 0) {
      out.ready.push_back(id);
    } else {
      take_part(cache_.at(slot), out);
    }
  }
  for (size_t s = 0; s < cache_.words(); ++s)
    if (reduced_[fixed_words + s] < 0)
      cache_.erase(s);
  for (auto& [id, l] : local_)
    if (l.st == state::cached && reduced_[fixed_words + l.slot] < 0)
      l.st = state::fresh;
}

// Step 3, part 2: the lane's agreed run (or its failure); a joined rank
// without unnamed operations takes part with zeros. Returns how many of
// this rank's lane entries the round settled.
size_t negotiator::finish_lane(round_result& out) {
  size_t lane_done = std::min(lane_run_, lane_.size());
  for (size_t i = 0; i < lane_done; ++i) {
    auto id = lane_[i];
    auto& op = *local_.at(id).op;
    if (lane_failed_)
      out.failed.emplace_back(id, lane_error_);
    else if (auto refused = refusal(op))
      out.failed.emplace_back(id, refused);
    else
      out.ready.push_back(id);
  }
  if (lane_done < lane_run_) {
    if (!lane_failed_)
      for (auto& op : lane_zeros_)
        if (!refusal(op))
          take_part(op, out);
    next_seq_ += static_cast<int64_t>(lane_run_);
  }
  return lane_done;
}

std::vector<uint64_t> negotiator::drop_all() {
  std::vector<uint64_t> ids;
  for (auto& [id, l] : local_)
    ids.push_back(id);
  local_.clear();
  by_name_.clear();
  lane_.clear();
  table_.clear();
  end_join();
  return ids;
}

std::vector<int> negotiator::announced_by(const std::string& name) const {
  std::vector<int> ranks;
  if (auto i = table_.find(name); i != table_.end())
    for (int r = 0; r < size_; ++r)
      if (i->second.seen[static_cast<size_t>(r)])
        ranks.push_back(r);
  return ranks;
}

void negotiator::read_progress(std::span<const int64_t> all) {
  progress_.assign(all.begin(), all.end());
}

std::vector<negotiator::waiting> negotiator::pending() const {
  std::vector<waiting> out;
  for (auto& [id, l] : local_) {
    waiting w{id, l.op->name.empty() ? describe(*l.op) : l.op->name, {}, false};
    if (l.lane && progress_.size() == static_cast<size_t>(size_)) {
      // A rank whose lane has not reached this operation's place in the
      // call order has not submitted it.
      w.known = true;
      for (int r = 0; r < size_; ++r)
        if (progress_[static_cast<size_t>(r)] <= l.seq && !joined_[static_cast<size_t>(r)])
          w.missing.push_back(r);
    } else if (l.st == state::named) {
      auto i = table_.find(l.op->name);
      if (i != table_.end()) {
        w.known = true;
        for (int r = 0; r < size_; ++r)
          if (!i->second.seen[static_cast<size_t>(r)] && !joined_[static_cast<size_t>(r)])
            w.missing.push_back(r);
      }
    }
    out.push_back(std::move(w));
  }
  return out;
}

std::vector<int> negotiator::not_joined() const {
  std::vector<int> out;
  if (!joined_[static_cast<size_t>(rank_)])
    return out;
  for (int r = 0; r < size_; ++r)
    if (!joined_[static_cast<size_t>(r)])
      out.push_back(r);
  return out;
}

void negotiator::uncache(uint64_t id) {
  if (auto i = local_.find(id); i != local_.end() && i->second.st == state::cached)
    i->second.invalidate = true;
}

} // namespace hvactor::collectives
