// The coordinator's calls: one request per rank, results in world-rank
// order, the first failure held back briefly so that a dying rank's own
// exit report wins over its peers' broken collectives.

#include <fmt/format.h>

#include "coordinator_state.hpp"
#include "hvactor/system_config.hpp"

namespace hvactor::detail {

using namespace proto;
using namespace std::chrono_literals;

namespace {

/// How long a failed call waits before answering: when one rank dies, its
/// peers often fail first (their collective breaks), and the dead rank's
/// exit report is the error the user needs.
constexpr auto call_error_grace = 250ms;

// Keeps the first failure of call `id` and answers it after a grace period
// (see call_error_grace); a job failure in between answers the call first.
void hold_error(coord_actor self, uint64_t id, caf::error err) {
  auto i = self->state.calls.find(id);
  if (i == self->state.calls.end() || i->second.first_error)
    return;
  i->second.first_error = std::move(err);
  self->delayed_send(self, call_error_grace, expire_atom_v, call_timer_base + id);
}

} // namespace

void dispatch(coord_actor self, uint64_t id, int rank, const call_request& req) {
  auto& st = self->state;
  self->request(st.workers[rank].handle, st.cfg.settings.call_timeout, call_atom_v, req)
    .then(
      [=](call_result& res) {
        auto& st = self->state;
        auto i = st.calls.find(id);
        if (i == st.calls.end())
          return;
        auto& call = i->second;
        if (call.first_error)
          return;
        if (!res.ok) {
          hold_error(self, id,
                     hv_error(error_kind::worker_error,
                              fmt::format("remote call on {} raised: {}", worker_label(st, rank),
                                          res.error),
                              rank));
          return;
        }
        if (call.single) {
          call.one.deliver(std::move(res));
          st.calls.erase(i);
          return;
        }
        call.results[rank] = std::move(res);
        if (--call.remaining == 0) {
          call.all.deliver(call_results{std::move(call.results)});
          st.calls.erase(i);
        }
      },
      [=](caf::error& err) {
        auto& st = self->state;
        auto i = st.calls.find(id);
        if (i == st.calls.end())
          return;
        hold_error(self, id,
                   hv_error(error_kind::worker_error,
                            fmt::format("remote call on {} failed: {}", worker_label(st, rank),
                                        describe(err)),
                            rank));
      });
}

} // namespace hvactor::detail
