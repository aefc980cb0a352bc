// The coordinator's calls: one request per rank, answers collected in
// world-rank order by call_fanin, the first failure held back briefly so
// that a dying rank's own exit report wins over its peers' broken
// collectives.

#include <fmt/format.h>

#include "actors/coordinator/coordinator_state.hpp"
#include "base/internal/actor_system.hpp"
#include "actors/protocol/system_config.hpp"

namespace hvactor::detail {

using namespace proto;

namespace {

void answer(coord_actor self, uint64_t id) {
  auto& st = self->state;
  auto payloads = st.fixed.calls.take_results(id);
  auto i = st.fixed.call_waiters.find(id);
  if (i == st.fixed.call_waiters.end())
    return;
  auto waiter = std::move(i->second);
  st.fixed.call_waiters.erase(i);
  if (waiter.single)
    waiter.one.deliver(call_result{true, std::move(payloads.front()), {}});
  else
    waiter.all.deliver(call_results{std::move(payloads)});
}

void deliver(call_waiter& waiter, const caf::error& err) {
  if (waiter.single)
    waiter.one.deliver(err);
  else
    waiter.all.deliver(err);
}

void failed(coord_actor self, uint64_t id, caf::error err) {
  if (self->state.fixed.calls.on_error(id, std::move(err)) == call_fanin::next::hold_error)
    self->delayed_send(self, self->state.fixed.calls.grace(), call_grace_atom_v, id);
}

} // namespace

uint64_t open_call(coord_actor self, call_waiter waiter, const std::vector<int>& ranks,
                   const call_request& req) {
  auto& st = self->state;
  auto id = st.fixed.next_call++;
  st.fixed.calls.open(id, ranks.size());
  st.fixed.call_waiters.emplace(id, std::move(waiter));
  for (size_t slot = 0; slot < ranks.size(); ++slot) {
    int rank = ranks[slot];
    self->request(st.workers[rank].handle, wait_bound(st.cfg.settings.call_timeout), call_atom_v,
                  req)
      .then(
        [=](call_result& res) {
          auto& st = self->state;
          if (!res.ok) {
            failed(self, id, call_raised(worker_label(st, rank), res.error, rank));
            return;
          }
          if (st.fixed.calls.on_result(id, slot, std::move(res.payload)) == call_fanin::next::answer)
            answer(self, id);
        },
        [=](caf::error& err) {
          auto& st = self->state;
          auto who = worker_label(st, rank);
          failed(self, id,
                 err == caf::sec::request_timeout
                   ? call_timed_out(who, st.cfg.settings.call_timeout, rank)
                   : call_failed(who, err, rank));
        });
  }
  return id;
}

void fail_calls(coord_actor self, const caf::error& err) {
  auto& st = self->state;
  st.fixed.calls.close_all();
  for (auto& [id, waiter] : st.fixed.call_waiters)
    deliver(waiter, err);
  st.fixed.call_waiters.clear();
}

void call_grace_passed(coord_actor self, uint64_t id) {
  auto& st = self->state;
  auto err = st.fixed.calls.take_error(id);
  auto i = st.fixed.call_waiters.find(id);
  if (!err || i == st.fixed.call_waiters.end())
    return;
  deliver(i->second, err);
  st.fixed.call_waiters.erase(i);
}

} // namespace hvactor::detail
