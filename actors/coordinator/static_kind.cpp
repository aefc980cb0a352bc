// A static job's kind (job_kind.hpp): one placement of the whole world,
// registration until every rank is in, calls on every rank or on one.

#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "actors/coordinator/coordinator_state.hpp"
#include "base/internal/caf_error.hpp"

namespace hvactor::detail {

using namespace proto;

namespace {

class static_kind final : public job_kind {
public:
  explicit static_kind(bool launch) : launch_(launch) {
  }

  const char* board_name() const override {
    return launch_ ? "run" : "executor";
  }

  const char* worker_noun() const override {
    return "rank";
  }

  void start(coord_actor self) override {
    auto& st = self->state;
    st.fixed.placement_deadline = caf::make_timestamp() + st.cfg.settings.placement_timeout;
    try_placement(self);
  }

  caf::error refuse_registration(const coordinator_state& st, const job_worker&) const override {
    if (st.ph != phase::registering)
      return make_error(error_kind::not_started, "the job is no longer starting");
    return {};
  }

  void registered(coord_actor self, job_worker& w) override {
    auto& st = self->state;
    if (st.fixed.roster.registered(w.id, w.hello.node_id, w.hello.pid)
        == static_roster::registration::complete)
      hand_out_env(self);
  }

  caf::result<call_results> call(coord_actor self, const call_request& req) override {
    auto& st = self->state;
    if (st.ph != phase::ready || st.failure)
      return not_ready_error(st, "run");
    call_waiter waiter;
    waiter.all = self->make_response_promise<call_results>();
    auto rp = waiter.all;
    std::vector<int> ranks(st.workers.size());
    for (int r = 0; r < st.size(); ++r)
      ranks[static_cast<size_t>(r)] = r;
    open_call(self, std::move(waiter), ranks, req);
    return rp;
  }

  caf::result<call_result> call_one(coord_actor self, int32_t rank,
                                    const call_request& req) override {
    auto& st = self->state;
    if (st.ph != phase::ready || st.failure)
      return not_ready_error(st, "run_remote");
    if (rank < 0 || rank >= st.size())
      return make_error(error_kind::invalid_argument,
                        fmt::format("rank {} does not exist (size {})", rank, st.size()));
    call_waiter waiter;
    waiter.single = true;
    waiter.one = self->make_response_promise<call_result>();
    auto rp = waiter.one;
    open_call(self, std::move(waiter), {rank}, req);
    return rp;
  }

  void exited(coord_actor self, const worker_exit& ex) override {
    auto& st = self->state;
    if (!ex.expected && ex.job_id == st.cfg.job_id && st.workers.count(ex.world_rank)
        && st.ph != phase::stopping && st.ph != phase::stopped)
      static_exited(self, ex);
  }

  void worker_lost(coord_actor self, int32_t id) override {
    static_worker_lost(self, id);
  }

  void failed(coord_actor) override {
    // Nothing more: the workers learn it from shutdown (their colocators
    // stop them), and a failed rank's peers from their broken collectives.
  }

  void stop_workers(coord_actor self) override {
    auto& st = self->state;
    for (auto& [id, w] : st.workers)
      if (w.registered)
        self->send(w.handle, stop_atom_v);
    std::vector<std::string> keys;
    for (auto& [key, c] : st.colocators)
      keys.push_back(key);
    for (auto& key : keys)
      stop_colocator(self, key);
  }

  void awaited(coord_actor) override {
  }

  int32_t world_size(const coordinator_state& st) const override {
    return st.size();
  }

  int32_t rank_of(const job_worker& w) const override {
    return w.id;
  }

  std::string worker_state(const coordinator_state& st, const job_worker& w) const override {
    if (st.ph == phase::stopped)
      return "exited";
    return w.registered ? "running" : "starting";
  }

  int32_t generation(const coordinator_state&) const override {
    return -1;
  }

  int32_t resets(const coordinator_state&) const override {
    return 0;
  }

private:
  bool launch_;
};

} // namespace

std::unique_ptr<job_kind> make_static_kind(bool launch) {
  return std::make_unique<static_kind>(launch);
}

std::unique_ptr<job_kind> make_job_kind(const coordinator_config& cfg) {
  if (cfg.options.min_workers)
    return make_elastic_kind(cfg.launch);
  return make_static_kind(cfg.launch);
}

} // namespace hvactor::detail
