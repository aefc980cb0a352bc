#include "internal/negotiator.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "internal/shape_check.hpp"

namespace hvactor::collectives {

namespace {

// A rank with no unnamed operation pending proposes this lane head: never
// equal to a real one, so the lane waits.
constexpr int64_t no_lane = int64_t{1} << 60;

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
};
static_assert(negotiator::fixed_words == 10);

} // namespace

negotiator::negotiator(int rank, int size, std::string host, size_t cache_capacity)
  : rank_(rank), size_(size), host_(std::move(host)), cache_(cache_capacity) {
}

std::string negotiator::noname(op_kind k, uint64_t n) {
  return std::string{to_string(k)} + ".noname." + std::to_string(n);
}

void negotiator::add(uint64_t id, operation op, bool lane) {
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
  l.op = std::move(op);
  local_.emplace(id, std::move(l));
}

std::vector<int64_t> negotiator::propose(bool abort, bool leave) {
  std::vector<int64_t> w(fixed_words + cache_.words(), 0);
  // The lane: from its head, the consecutive unnamed operations.
  std::vector<const operation*> lane;
  lane.reserve(lane_.size());
  for (auto id : lane_)
    lane.push_back(&local_.at(id).op);
  if (lane_.empty()) {
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
      auto slot = cache_.find(l.op.name);
      if (slot && same_shape(cache_.at(*slot), l.op) && !l.invalidate) {
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
      w[fixed_words + l.slot] = 1;
  }
  w[neg_announce] = announcing_.empty() ? 0 : -1;
  w[neg_abort] = abort ? -1 : 0;
  w[neg_next_seq] = -next_seq_;
  w[leaver] = leave ? rank_ : size_;
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
  return solo_;
}

bool negotiator::solo_agreed(std::span<const int64_t> r) {
  if (r[neg_abort] < 0 || r[leaver] < size_ || r[neg_announce] < 0 || r[head] != next_seq_
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
  lane_failed_ = false;
  lane_error_ = nullptr;
  completed_.clear();
  plan p;
  p.leave = reduced_[leaver] < size_;
  p.leaver = p.leave ? static_cast<int>(reduced_[leaver]) : -1;
  p.abort = reduced_[neg_abort] < 0 || p.leave;
  agreed_next_seq_ = -reduced_[neg_next_seq];
  if (p.abort)
    return p;
  p.names = reduced_[neg_announce] < 0;
  bool same_head = reduced_[head] == -reduced_[neg_head] && reduced_[head] != no_lane;
  if (same_head && reduced_[run] >= 1) {
    lane_run_ = static_cast<size_t>(reduced_[run]);
    bool same_print = reduced_[print] == -reduced_[neg_print];
    // Equal fingerprints of the whole runs (which cover their lengths):
    // the runs agree. Else the common prefix is compared, and explained
    // when it differs.
    p.lane_prefix = !same_print;
  }
  return p;
}

std::vector<int64_t> negotiator::lane_prefix() const {
  std::vector<const operation*> prefix;
  for (size_t i = 0; i < lane_run_; ++i)
    prefix.push_back(&local_.at(lane_[i]).op);
  auto f = shape_check::fingerprint(false, prefix);
  return {f, -f};
}

bool negotiator::read_lane_prefix(std::span<const int64_t> reduced) {
  lane_failed_ = reduced[0] != -reduced[1];
  return lane_failed_;
}

std::string negotiator::lane_list() const {
  // Unnamed: the messages name the operations by kind and shape, as the
  // caller wrote them.
  op_list prefix{false, {}};
  for (size_t i = 0; i < lane_run_; ++i) {
    prefix.ops.push_back(local_.at(lane_[i]).op);
    prefix.ops.back().name.clear();
  }
  return name_check::encode(prefix);
}

void negotiator::explain_lane(const std::vector<std::string>& lists) {
  std::vector<op_list> decoded;
  for (size_t r = 0; r < lists.size(); ++r)
    decoded.push_back(name_check::decode(lists[r], static_cast<int>(r)));
  try {
    shape_check::explain(decoded, rank_, host_);
    throw collective_error(fmt::format(
      "hvd: the ranks' unnamed collectives differ (their fingerprints do), but their lists look "
      "alike on rank {} ({}); do all ranks run the same hvactor build?",
      rank_, host_));
  } catch (...) {
    lane_error_ = std::current_exception();
  }
}

std::string negotiator::announcements() const {
  op_list mine{false, {}};
  mine.ops.reserve(announcing_.size());
  for (auto id : announcing_)
    mine.ops.push_back(local_.at(id).op);
  return name_check::encode(mine);
}

void negotiator::learn(const std::vector<std::string>& all) {
  for (size_t r = 0; r < all.size(); ++r) {
    auto list = name_check::decode(all[r], static_cast<int>(r));
    for (auto& op : list.ops) {
      auto& e = table_[op.name];
      if (e.seen.empty()) {
        e.seen.assign(static_cast<size_t>(size_), false);
        e.by_rank.resize(static_cast<size_t>(size_));
      }
      if (e.seen[r])
        continue; // cannot happen: names are unique per rank in flight
      e.seen[r] = true;
      e.by_rank[r] = std::move(op);
      if (++e.count == size_)
        completed_.push_back(e.by_rank[r].name);
    }
  }
}

// Every rank announced `name`: it runs, or fails everywhere when two ranks
// gave it different shapes.
void negotiator::complete(const std::string& name, entry& e, round_result& out) {
  auto mine = by_name_.at(name);
  std::vector<op_list> lists;
  lists.reserve(e.by_rank.size());
  bool agree = true;
  for (auto& op : e.by_rank) {
    lists.push_back({false, {op}});
    agree = agree && same_shape(op, e.by_rank[0]);
  }
  if (agree) {
    out.ready.push_back(mine);
    if (cache_.capacity() > 0) {
      auto placed = cache_.insert(e.by_rank[0], tick_);
      // A name evicted from its slot: whoever waits on it announces it.
      if (placed.evicted)
        if (auto i = by_name_.find(*placed.evicted); i != by_name_.end()) {
          auto& l = local_.at(i->second);
          if (l.st == state::cached)
            l.st = state::fresh;
        }
    }
    return;
  }
  try {
    shape_check::explain(lists, rank_, host_);
  } catch (...) {
    out.failed.emplace_back(mine, std::current_exception());
  }
}

round_result negotiator::finish(std::exception_ptr abort_error) {
  ++tick_;
  round_result out;
  auto forget = [&](uint64_t id) {
    auto i = local_.find(id);
    if (!i->second.lane)
      by_name_.erase(i->second.op.name);
    local_.erase(i);
  };
  if (reduced_[neg_abort] < 0 || reduced_[leaver] < size_) {
    for (auto& [id, l] : local_)
      out.failed.emplace_back(id, abort_error);
    local_.clear();
    by_name_.clear();
    lane_.clear();
    table_.clear();
    next_seq_ = agreed_next_seq_;
    return out;
  }
  // 1. Cached names every rank has pending, by slot.
  std::vector<std::pair<size_t, uint64_t>> hits;
  for (auto& [id, l] : local_)
    if (l.st == state::cached && reduced_[fixed_words + l.slot] == 1)
      hits.emplace_back(l.slot, id);
  std::sort(hits.begin(), hits.end());
  for (auto& [slot, id] : hits) {
    cache_.touch(slot, tick_);
    out.ready.push_back(id);
  }
  // Slots some rank invalidated: freed everywhere; who waits on one
  // announces its name next round.
  for (size_t s = 0; s < cache_.words(); ++s)
    if (reduced_[fixed_words + s] < 0)
      cache_.erase(s);
  for (auto& [id, l] : local_)
    if (l.st == state::cached && reduced_[fixed_words + l.slot] < 0)
      l.st = state::fresh;
  // 2. The lane's agreed run (or its failure).
  for (size_t i = 0; i < lane_run_; ++i) {
    auto id = lane_[i];
    if (lane_failed_)
      out.failed.emplace_back(id, lane_error_);
    else
      out.ready.push_back(id);
  }
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
  lane_.erase(lane_.begin(), lane_.begin() + static_cast<std::ptrdiff_t>(lane_run_));
  lane_run_ = 0;
  completed_.clear();
  return out;
}

std::vector<uint64_t> negotiator::drop_all() {
  std::vector<uint64_t> ids;
  for (auto& [id, l] : local_)
    ids.push_back(id);
  local_.clear();
  by_name_.clear();
  lane_.clear();
  table_.clear();
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

std::vector<negotiator::waiting> negotiator::pending() const {
  std::vector<waiting> out;
  for (auto& [id, l] : local_) {
    waiting w{id, l.op.name.empty() ? describe(l.op) : l.op.name, {}, false};
    if (l.st == state::named) {
      auto i = table_.find(l.op.name);
      if (i != table_.end()) {
        w.known = true;
        for (int r = 0; r < size_; ++r)
          if (!i->second.seen[static_cast<size_t>(r)])
            w.missing.push_back(r);
      }
    }
    out.push_back(std::move(w));
  }
  return out;
}

void negotiator::uncache(uint64_t id) {
  if (auto i = local_.find(id); i != local_.end() && i->second.st == state::cached)
    i->second.invalidate = true;
}

} // namespace hvactor::collectives
