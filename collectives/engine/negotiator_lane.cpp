// collectives::negotiator, the unnamed lane's exchanges in step 2: the
// fingerprint of its agreed prefix, and when the ranks' prefixes differ, the
// lists that explain how; a joined rank learns from the lists what it takes
// part in with zeros.
#include "collectives/engine/negotiator.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "collectives/engine/negotiation_header.hpp"
#include "collectives/engine/shape_check.hpp"

namespace hvactor::collectives {

using namespace negotiation_header;

std::vector<int64_t> negotiator::lane_prefix() const {
  if (lane_.size() < lane_run_) // joined, without unnamed operations: no constraint
    return {no_constraint, no_constraint};
  std::vector<const operation*> prefix;
  for (size_t i = 0; i < lane_run_; ++i)
    prefix.push_back(local_.at(lane_[i]).op);
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
  for (size_t i = 0; i < std::min(lane_run_, lane_.size()); ++i) {
    prefix.ops.push_back(*local_.at(lane_[i]).op);
    prefix.ops.back().name.clear();
  }
  return name_check::encode(prefix);
}

void negotiator::explain_lane(const std::vector<std::string>& lists) {
  std::vector<op_list> decoded;
  for (size_t r = 0; r < lists.size(); ++r)
    decoded.push_back(name_check::decode(lists[r], static_cast<int>(r)));
  // A joined rank without unnamed operations has an empty list: it takes
  // the first full one's place, so that only the others are compared.
  auto full = std::find_if(decoded.begin(), decoded.end(),
                           [&](const op_list& l) { return l.ops.size() >= lane_run_; });
  if (full != decoded.end()) {
    auto model = *full;
    for (auto& l : decoded)
      if (l.ops.empty())
        l = model;
  }
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

void negotiator::read_lane_lists(const std::vector<std::string>& lists) {
  if (lane_failed_ || lane_.size() >= lane_run_)
    return;
  for (size_t r = 0; r < lists.size(); ++r) {
    auto list = name_check::decode(lists[r], static_cast<int>(r));
    if (list.ops.size() >= lane_run_) {
      list.ops.resize(lane_run_);
      lane_zeros_ = std::move(list.ops);
      return;
    }
  }
}

} // namespace hvactor::collectives
