#include "collectives/engine/process_set_agreement.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "hvactor/errors.hpp"

namespace hvactor::collectives {

namespace {

// "rank 0" or "ranks 1, 2".
std::string ranks_named(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "));
}

// Ranks grouped by what they sent, groups in the order of their first rank:
// "rank 0 passed X, ranks 1, 2 passed Y".
template <class Key, class Text>
std::string grouped(const std::vector<Key>& keys, Text text) {
  std::vector<std::pair<Key, std::vector<int>>> groups;
  for (size_t r = 0; r < keys.size(); ++r) {
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const auto& group) { return group.first == keys[r]; });
    if (g == groups.end())
      groups.push_back({keys[r], {static_cast<int>(r)}});
    else
      g->second.push_back(static_cast<int>(r));
  }
  std::string out;
  for (auto& [key, ranks] : groups)
    out += fmt::format("{}{} passed {}", out.empty() ? "" : ", ", ranks_named(ranks), text(key));
  return out;
}

// Why `ranks` (sorted) is no set of the job's ranks, or "".
std::string invalid(const std::vector<int>& ranks, int size, const char* call) {
  if (ranks.empty())
    return fmt::format("hvd::{}: a process set needs at least one rank", call);
  if (ranks.front() < 0 || ranks.back() >= size)
    return fmt::format("hvd::{}: ranks {} are not all ranks of the job (size {})", call,
                       fmt::join(ranks, ", "), size);
  if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end())
    return fmt::format("hvd::{}: ranks {} name a rank twice", call, fmt::join(ranks, ", "));
  return {};
}

} // namespace

std::vector<int64_t> encode(const set_proposal& p) {
  std::vector<int64_t> words{p.node, p.held, static_cast<int64_t>(p.ranks.size())};
  words.insert(words.end(), p.ranks.begin(), p.ranks.end());
  return words;
}

std::vector<set_proposal> decode_proposals(std::span<const int64_t> words, int size) {
  std::vector<set_proposal> all;
  size_t at = 0;
  for (int r = 0; r < size; ++r) {
    if (words.size() - at < 3 || words[at + 2] < 0
        || static_cast<uint64_t>(words[at + 2]) > words.size() - at - 3)
      throw collective_error(fmt::format(
        "hvd: rank {} sent no process set proposal that this build reads ({} words left); do all "
        "ranks run the same hvactor build?",
        r, words.size() - at));
    set_proposal p;
    p.node = words[at];
    p.held = static_cast<int>(words[at + 1]);
    auto count = static_cast<size_t>(words[at + 2]);
    for (size_t i = 0; i < count; ++i)
      p.ranks.push_back(static_cast<int>(words[at + 3 + i]));
    at += 3 + count;
    all.push_back(std::move(p));
  }
  return all;
}

std::string add_refusal(const std::vector<set_proposal>& all, int job_size, const char* call) {
  auto same_list = [&](const set_proposal& p) { return p.ranks == all.front().ranks; };
  if (!std::all_of(all.begin(), all.end(), same_list)) {
    std::vector<std::pair<std::vector<int>, int>> passed;
    for (auto& p : all)
      passed.emplace_back(p.ranks, p.held);
    return fmt::format(
      "hvd::{}: every rank must pass the same ranks: {}", call,
      grouped(passed, [](const std::pair<std::vector<int>, int>& k) {
        return (k.first.empty() ? std::string{"no ranks"} : fmt::format("{}", fmt::join(k.first, ", ")))
               + (k.second > 0 ? fmt::format(" (process set {} there)", k.second) : "");
      }));
  }
  const auto& ranks = all.front().ranks;
  if (auto why = invalid(ranks, job_size, call); !why.empty())
    return why;
  std::vector<int> holders, others;
  for (size_t r = 0; r < all.size(); ++r)
    (all[r].held > 0 ? holders : others).push_back(static_cast<int>(r));
  if (holders.empty())
    return {};
  auto held = all[static_cast<size_t>(holders.front())].held;
  bool same_id = std::all_of(all.begin(), all.end(), [&](auto& p) { return p.held == held; });
  if (same_id)
    return fmt::format("hvd::{}: Attempted to add a duplicate process set: process set {} (ranks {})",
                       call, held, fmt::join(ranks, ", "));
  std::vector<int> ids;
  for (auto& p : all)
    ids.push_back(p.held);
  return fmt::format(
    "hvd::{}: Attempted to add a duplicate process set: ranks {} are a process set on {} only "
    "({}); the ranks' sets differ, call hvd::shutdown() and hvd::init() to start again alike",
    call, fmt::join(ranks, ", "), ranks_named(holders),
    grouped(ids, [](int id) { return id > 0 ? fmt::format("process set {}", id) : "none"; }));
}

removal_decision decide_removal(const std::vector<set_removal>& all,
                                const std::map<int, std::vector<int>>& sets) {
  removal_decision d;
  int id = all.front().id;
  if (!std::all_of(all.begin(), all.end(), [&](auto& r) { return r.id == id; })) {
    std::vector<int> ids;
    for (auto& r : all)
      ids.push_back(r.id);
    d.refusal = fmt::format(
      "hvd::remove_process_set: every rank must remove the same process set: {}",
      grouped(ids, [&](int k) -> std::string {
        if (k == 0)
          return "the global process set";
        auto i = sets.find(k);
        if (k < 0 || i == sets.end())
          return k < 0 ? "a process set never added, or removed" : fmt::format("process set {}", k);
        return fmt::format("process set {} (ranks {})", k, fmt::join(i->second, ", "));
      }));
    return d;
  }
  if (id <= 0)
    return d;
  d.remove = true;
  d.removed = std::all_of(all.begin(), all.end(), [](auto& r) { return r.held; });
  return d;
}

} // namespace hvactor::collectives
