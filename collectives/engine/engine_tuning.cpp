// Autotune in the engine (HOROVOD_AUTOTUNE). Rank 0 scores what finishes
// (collectives::parameter_manager) and proposes values; while tuning,
// every round's header ends with five words: rank 0 writes its proposal,
// the others the largest int64, and the header's min-allreduce hands rank
// 0's to everyone. So every rank adopts new values after the same
// exchange (the fusion threshold before the round's batches are planned),
// and stops appending the words after the exchange that says tuning is
// over. Without autotune nothing is appended.
#include <limits>

#include <fmt/format.h>

#include "base/internal/log.hpp"
#include "collectives/engine/engine.hpp"
#include "collectives/api/hvd_calls.hpp"

namespace hvactor::hvd::detail {

namespace {

constexpr size_t tail_words = 5;
constexpr int64_t none = std::numeric_limits<int64_t>::max();

} // namespace

void engine::start_tuning() {
  if (!opts_.autotune.enabled)
    return;
  auto [ar, ag] = backend_->hierarchical_switches();
  tuned_ = {.fusion_threshold = static_cast<int64_t>(opts_.fusion_threshold),
            .cycle_time_us = opts_.cycle_time.count(),
            .hierarchical_allreduce = ar,
            .hierarchical_allgather = ag,
            .active = true};
  tuning_ = true;
  if (topo_.rank == 0)
    tuner_ = std::make_unique<collectives::parameter_manager>(opts_.autotune, tuned_,
                                                              backend_->hierarchical_tunable());
}

size_t engine::tuning_words() const noexcept {
  return tuning_ && topo_.size > 1 ? tail_words : 0;
}

void engine::append_tuning(std::vector<int64_t>& header) const {
  if (tuning_words() == 0)
    return;
  if (!tuner_) {
    header.insert(header.end(), tail_words, none);
    return;
  }
  const auto& p = tuner_->proposal();
  header.insert(header.end(), {p.fusion_threshold, p.cycle_time_us, p.hierarchical_allreduce ? 1 : 0,
                               p.hierarchical_allgather ? 1 : 0, p.active ? 1 : 0});
}

void engine::adopt_tuning(std::vector<int64_t>& header, bool exchanged) {
  auto n = tuning_words();
  if (n == 0)
    return;
  const int64_t* t = header.data() + header.size() - n;
  collectives::tuned_params p{.fusion_threshold = t[0],
                              .cycle_time_us = t[1],
                              .hierarchical_allreduce = t[2] == 1,
                              .hierarchical_allgather = t[3] == 1,
                              .active = t[4] == 1};
  bool from_rank0 = t[0] != none;
  header.resize(header.size() - n);
  if (exchanged)
    ++tune_exchanges_;
  if (exchanged && from_rank0 && !(p == tuned_))
    apply_tuning(p);
}

void engine::apply_tuning(const collectives::tuned_params& p) {
  tuned_ = p;
  auto threshold = static_cast<size_t>(std::max<int64_t>(p.fusion_threshold, 0));
  planner_.set_threshold(threshold);
  fusion_.set_threshold(threshold);
  {
    std::lock_guard<std::mutex> lk{mu_};
    opts_.cycle_time = std::chrono::microseconds(std::max<int64_t>(p.cycle_time_us, 0));
  }
  backend_->set_hierarchical(p.hierarchical_allreduce, p.hierarchical_allgather);
  tuning_ = p.active;
  {
    std::lock_guard<std::mutex> lk{mu_};
    tune_history_.push_back(fmt::format("exchange {}: {}{}", tune_exchanges_,
                                        collectives::parameter_manager::describe(p),
                                        p.active ? "" : " final"));
  }
  log::debug("hvd autotune on rank {}: {} {}", topo_.rank,
             collectives::parameter_manager::describe(p), p.active ? "(trying)" : "(final)");
}

std::vector<std::string> engine::tuning_history() {
  std::lock_guard<std::mutex> lk{mu_};
  return tune_history_;
}

void engine::observe_tuning(const collectives::operation& op, bool lane) {
  if (!tuner_ || !tuning_)
    return;
  // An unnamed tensor is known by what it is: its name changes every call.
  auto key = lane ? fmt::format("{}/{}/{}", static_cast<int>(op.kind), static_cast<int>(op.type),
                                op.count)
                  : op.name;
  auto bytes = static_cast<int64_t>(op.count * size_of(op.type));
  if (tuner_->observe(key, bytes, std::chrono::steady_clock::now()) && topo_.size == 1)
    apply_tuning(tuner_->proposal());
}

} // namespace hvactor::hvd::detail

namespace hvactor::hvd::detail {

std::vector<std::string> autotune_history() {
  return global_engine("autotune_history").tuning_history();
}

} // namespace hvactor::hvd::detail
