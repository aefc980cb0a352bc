// collectives::negotiator, the table of named operations: this rank's
// announcements, learning every rank's (and who joins), completing a name
// that every rank announced (it runs, or fails everywhere naming both
// shapes), and what a joined rank refuses or takes part in with zeros.
#include "collectives/engine/negotiator.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "collectives/engine/shape_check.hpp"

namespace hvactor::collectives {

namespace {

// Announcements start with this byte: 'J' when the rank joins this round.
constexpr char joins = 'J';
constexpr char stays = '-';

} // namespace

std::string negotiator::announcements() const {
  op_list mine{false, {}};
  mine.ops.reserve(announcing_.size());
  for (auto id : announcing_)
    mine.ops.push_back(*local_.at(id).op);
  return (joining_ ? joins : stays) + name_check::encode(mine);
}

bool negotiator::every_rank_has(const entry& e) const {
  for (size_t r = 0; r < e.seen.size(); ++r)
    if (!e.seen[r] && !joined_[r])
      return false;
  return true;
}

void negotiator::learn(const std::vector<std::string>& all) {
  // Joins first: a name every other rank announced this round runs now.
  bool new_joiners = false;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty() || (all[r][0] != joins && all[r][0] != stays))
      throw collective_error(fmt::format(
        "hvd: rank {} sent a negotiation message that is not one, seen on rank {} ({}); do all "
        "ranks run the same hvactor build?",
        r, rank_, host_));
    if (all[r][0] == joins && !joined_[r]) {
      joined_[r] = true;
      ++joined_count_;
      last_joined_ = static_cast<int>(r);
      new_joiners = true;
    }
  }
  joining_ = false;
  for (size_t r = 0; r < all.size(); ++r) {
    auto list = name_check::decode(std::string_view(all[r]).substr(1), static_cast<int>(r));
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
      ++e.count;
      if (!e.done && every_rank_has(e)) {
        e.done = true;
        completed_.push_back(e.by_rank[r].name);
      }
    }
  }
  if (new_joiners) {
    // Names that waited only on the new joiners, in an order every rank
    // shares.
    std::vector<std::string> more;
    for (auto& [name, e] : table_)
      if (!e.done && every_rank_has(e)) {
        e.done = true;
        more.push_back(name);
      }
    std::sort(more.begin(), more.end());
    completed_.insert(completed_.end(), more.begin(), more.end());
  }
}

// Why `op` cannot run while some rank has joined (Horovod's messages), or
// nullptr.
std::exception_ptr negotiator::refusal(const operation& op) const {
  if (joined_count_ == 0 || op.kind == op_kind::allreduce || op.kind == op_kind::barrier)
    return nullptr;
  std::string who;
  for (int r = 0; r < size_; ++r)
    if (joined_[static_cast<size_t>(r)])
      who += (who.empty() ? "" : ", ") + std::to_string(r);
  auto what = std::string{to_string(op.kind)};
  what[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(what[0])));
  return std::make_exception_ptr(collective_error(fmt::format(
    "hvd: {} failed on rank {} ({}): {} is not supported with Join at this time (rank{} {} "
    "called hvd::join(), and joined ranks take part only in allreduces, with zeros, and in "
    "barriers)",
    describe(op), rank_, host_, what, joined_count_ > 1 ? "s" : "", who)));
}

// This joined rank takes part in `op` with zeros.
void negotiator::take_part(const operation& op, round_result& out) {
  auto id = next_phantom_++;
  out.zeros.emplace_back(id, op);
  out.ready.push_back(id);
}

// Every rank announced `name`: it runs, or fails everywhere when two ranks
// gave it different shapes.
void negotiator::complete(const std::string& name, entry& e, round_result& out) {
  auto i = by_name_.find(name);
  bool have = i != by_name_.end();
  auto mine = have ? i->second : 0;
  // Joined ranks that did not submit it compare as the first that did.
  size_t first = 0;
  while (!e.seen[first])
    ++first;
  const auto& model = e.by_rank[first];
  std::vector<op_list> lists;
  lists.reserve(e.by_rank.size());
  bool agree = true;
  for (size_t r = 0; r < e.by_rank.size(); ++r) {
    const auto& op = e.seen[r] ? e.by_rank[r] : model;
    lists.push_back({false, {op}});
    agree = agree && same_shape(op, model);
  }
  if (agree) {
    if (auto refused = refusal(model)) {
      if (have)
        out.failed.emplace_back(mine, refused);
      return;
    }
    if (have)
      out.ready.push_back(mine);
    else if (joined())
      take_part(model, out);
    if (cache_.capacity() > 0) {
      auto placed = cache_.insert(model, tick_);
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
    if (have)
      out.failed.emplace_back(mine, std::current_exception());
  }
}

} // namespace hvactor::collectives
