#pragma once

// Internal: the one way to block on a request at the API edge (ask), the
// wait bounds every blocking wait uses, and exit_watch, which fails a
// blocking wait when the actor it waits on terminates.

#include <algorithm>
#include <chrono>
#include <tuple>
#include <utility>

#include <caf/actor_cast.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/expected.hpp>
#include <caf/message_id.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/sec.hpp>

#include "base/internal/knobs_net.hpp"

namespace hvactor {


/// `d` clamped to knobs::longest_wait and to zero: safe to hand to CAF.
inline std::chrono::milliseconds wait_bound(std::chrono::milliseconds d) {
  return std::clamp(d, std::chrono::milliseconds::zero(),
                    std::chrono::duration_cast<std::chrono::milliseconds>(knobs::longest_wait));
}

/// `now + d`, with `d` clamped as by wait_bound (no overflow).
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point now,
                                                           std::chrono::milliseconds d) {
  return now + wait_bound(d);
}

/// The time left until `deadline`, never negative.
inline std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point deadline) {
  auto left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero())
    return std::chrono::milliseconds::zero();
  return std::chrono::ceil<std::chrono::milliseconds>(left);
}

/// While it lives, answers request `answer_id` (a response id) of `caller`
/// with an error when `target` terminates first. A blocking wait for one
/// answer sees nothing but that answer (a down_msg is not one), so this is
/// how it learns that the actor it waits on is gone: an actor killed by an
/// exception in a handler never answers the request it was handling.
/// Detaches itself when destroyed.
class exit_watch {
public:
  exit_watch(const caf::strong_actor_ptr& target, caf::strong_actor_ptr caller,
             caf::message_id answer_id);
  ~exit_watch();

  exit_watch(const exit_watch&) = delete;
  exit_watch& operator=(const exit_watch&) = delete;

private:
  caf::strong_actor_ptr target_;
  const void* token_ = nullptr;
};


/// The error an exit_watch answers with: `reason` itself when it is one of
/// hvactor's (an actor that failed with a clear error), else "the actor
/// 'name' terminated: reason".
caf::error exited_error(const char* name, const caf::error& reason);

namespace detail {

template <class... Rs>
struct reply {
  using type = std::tuple<Rs...>;
};
template <class R>
struct reply<R> {
  using type = R;
};
template <>
struct reply<> {
  using type = void;
};

} // namespace detail

/// The reply of a request answered with `Rs...`: void, R, or a tuple.
template <class... Rs>
using reply_t = typename detail::reply<Rs...>::type;

/// Sends `xs...` to `whom` from `self` and blocks until the answer (of
/// types `Rs...`) or an error arrives, at most `timeout` (then
/// caf::sec::request_timeout). API edge only: never inside a handler.
///
/// The receive, not the request, carries the bound: CAF 0.17 implements a
/// request timeout as a delayed message that stays in a blocking actor's
/// mailbox after the answer came first, so a blocking actor reused for many
/// calls got slower with every call (20,000 calls: 50 us -> 600 us each,
/// measured). Only a call that timed out leaves its late answer behind.
template <class... Rs, class Handle, class... Ts>
caf::expected<reply_t<Rs...>> ask(caf::blocking_actor& self, const Handle& whom,
                                  std::chrono::milliseconds timeout, Ts&&... xs) {
  caf::expected<reply_t<Rs...>> out{caf::sec::request_timeout};
  // No request timeout on purpose: the receive below is bounded (see above).
  auto handle = self.request(whom, caf::infinite, std::forward<Ts>(xs)...);
  exit_watch watch{caf::actor_cast<caf::strong_actor_ptr>(whom), self.ctrl(), handle.id()};
  caf::blocking_actor::accept_one_cond until_one;
  self.varargs_receive(
    until_one, handle.id(),
    [&](Rs&... values) {
      if constexpr (sizeof...(Rs) == 0)
        out = caf::expected<void>{};
      else if constexpr (sizeof...(Rs) == 1)
        out = std::move(values...);
      else
        out = std::make_tuple(std::move(values)...);
    },
    [&](caf::error& err) { out = std::move(err); },
    caf::after(wait_bound(timeout)) >> [] {});
  return out;
}

/// ask() from a fresh blocking actor of `sys`.
template <class... Rs, class Handle, class... Ts>
caf::expected<reply_t<Rs...>> ask(caf::actor_system& sys, const Handle& whom,
                                  std::chrono::milliseconds timeout, Ts&&... xs) {
  caf::scoped_actor self{sys};
  return ask<Rs...>(*self, whom, timeout, std::forward<Ts>(xs)...);
}

} // namespace hvactor
