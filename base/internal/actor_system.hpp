#pragma once

// Internal: the CAF actor system as every hvactor process runs it, and the
// one way to block on a request at the API edge.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/attachable.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/expected.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/sec.hpp>

#include "hvactor/tls.hpp"
#include "base/internal/knobs.hpp"

namespace hvactor {

/// Settings every hvactor actor system shares: the middleman, a scheduler
/// tuned for latency (idle threads block instead of polling with 50 us
/// sleeps; notes/caf-0.17.md section 3), heartbeats identical on every
/// process so that a frozen peer is noticed, the hvactor error category, and
/// mutual TLS when `tls` is enabled (validate it first: tls::validate).
/// Layers above add their message types.
void configure_actor_system(caf::actor_system_config& cfg, size_t max_threads,
                            const tls::config& tls = {});

/// Destroys `sys` (~actor_system waits for every actor) but ends the process
/// with exit code 1 if an actor still runs after `limit`: a stuck actor must
/// never hang a program's or a node's exit. The error names the threads
/// still running, and the forced-exit hooks run before the exit. When every
/// actor ended and only CAF's own teardown hangs (CAF 0.17 now and then
/// misses a detached thread's shutdown), it warns and returns, leaving that
/// thread to the process's exit.
void destroy_bounded(std::unique_ptr<caf::actor_system>& sys, std::chrono::seconds limit);

/// Adds `hook` to what runs, once, on this process's thread that forces an
/// exit (forced_exit): what must not be left behind when the process ends
/// without unwinding, such as the nodes hvactor-run started over ssh.
void on_forced_exit(std::function<void()> hook);

/// Runs the forced-exit hooks (the first caller only; a second waits for
/// nothing and exits), flushes stdio and ends the process with `code`.
[[noreturn]] void forced_exit(int code);

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

/// An exception handler for a long-lived actor (set_exception_handler): a
/// handler that throws ends the actor (CAF); this logs the exception and
/// makes its exit reason one of hvactor's errors naming `what`, which every
/// exit_watch waiting on the actor passes on as is.
caf::scheduled_actor::exception_handler exit_with_error(std::string what);

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
