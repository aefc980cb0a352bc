// An elastic job's kind (actors/coordinator/job_kind.hpp): generations of
// seats planned from the hosts found, one run at a time, workers that come
// and go (elastic_run.cpp, elastic_world.cpp, elastic_processes.cpp).

#include <memory>
#include <string>

#include <fmt/format.h>

#include "actors/coordinator/coordinator_state.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/knobs_jobs.hpp"

namespace hvactor::detail {

using namespace proto;

namespace {

class elastic_kind final : public job_kind {
public:
  explicit elastic_kind(bool launch) : launch_(launch) {
  }

  const char* board_name() const override {
    return launch_ ? "run-elastic" : "elastic";
  }

  const char* worker_noun() const override {
    return "worker";
  }

  void start(coord_actor self) override {
    elastic_start(self);
  }

  caf::error refuse_registration(const coordinator_state& st,
                                 const job_worker& w) const override {
    if (is_gone(st, w.id))
      return make_error(error_kind::not_started, "this worker was stopped");
    return {};
  }

  void registered(coord_actor self, job_worker& w) override {
    self->state.el.registry.registered(w.id);
    send_call(self, w.id);
  }

  caf::result<call_results> call(coord_actor self, const call_request& req) override {
    auto& st = self->state;
    if (st.ph != phase::ready || st.failure)
      return not_ready_error(st, "run");
    st.el.call = req;
    st.el.run_promise = self->make_response_promise<call_results>();
    st.el.run_pending = true;
    auto rp = st.el.run_promise;
    begin_run(self);
    return rp;
  }

  caf::result<call_result> call_one(coord_actor, int32_t, const call_request&) override {
    return elastic_only("execute_single");
  }

  void exited(coord_actor self, const worker_exit& ex) override {
    elastic_exited(self, ex);
  }

  void worker_lost(coord_actor self, int32_t id) override {
    auto& st = self->state;
    auto i = st.workers.find(id);
    auto reason = i == st.workers.end() ? std::string{} : i->second.down_reason;
    worker_failed(self, id,
                  reason.empty() ? std::string{"lost its connection to the driver"}
                                 : fmt::format("lost its connection to the driver ({}); its "
                                               "process did not exit within {} ms",
                                               reason, knobs::exit_report_grace.count()));
  }

  void failed(coord_actor self) override {
    for (auto& [id, w] : self->state.workers)
      stop_worker(self, id);
  }

  void stop_workers(coord_actor self) override {
    auto& st = self->state;
    for (auto& [id, w] : st.workers)
      stop_worker(self, id);
    if (st.el.finder)
      caf::anon_send_exit(st.el.finder, caf::exit_reason::user_shutdown);
  }

  void awaited(coord_actor self) override {
    // hvactor-run's elastic processes start when it waits for them.
    if (launch_ && self->state.ph == phase::ready)
      begin_run(self);
  }

  int32_t world_size(const coordinator_state& st) const override {
    return static_cast<int32_t>(st.el.seats.size());
  }

  int32_t rank_of(const job_worker& w) const override {
    return w.rank;
  }

  std::string worker_state(const coordinator_state& st, const job_worker& w) const override {
    auto* e = st.el.registry.find(w.id);
    if (e == nullptr)
      return "starting";
    switch (e->phase) {
      case elastic::worker_phase::starting:
        return "starting";
      case elastic::worker_phase::running:
        return w.returned ? "returned" : "running";
      case elastic::worker_phase::leaving:
        return "leaving";
      case elastic::worker_phase::gone:
        return "exited";
    }
    return "exited";
  }

  int32_t generation(const coordinator_state& st) const override {
    return st.el.generation;
  }

  int32_t resets(const coordinator_state& st) const override {
    return st.el.rules.resets();
  }

private:
  bool launch_;
};

} // namespace

std::unique_ptr<job_kind> make_elastic_kind(bool launch) {
  return std::make_unique<elastic_kind>(launch);
}

} // namespace hvactor::detail
