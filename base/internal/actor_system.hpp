#pragma once

// Internal: the CAF actor system as every hvactor process runs it, and the
// exit hooks; ask.hpp, which it includes, is how to block on a request.

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
#include "base/internal/ask.hpp"

namespace hvactor {

/// Settings every hvactor actor system shares: the middleman, a scheduler
/// tuned for latency (idle threads block instead of polling with 50 us
/// sleeps; docs/development/platform-notes.md, "CAF 0.17: scheduler polling
/// and latency"), heartbeats identical on every process so that a frozen
/// peer is noticed, the hvactor error category, and
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

/// An exception handler for a long-lived actor (set_exception_handler): a
/// handler that throws ends the actor (CAF); this logs the exception and
/// makes its exit reason one of hvactor's errors naming `what`, which every
/// exit_watch waiting on the actor passes on as is.
caf::scheduled_actor::exception_handler exit_with_error(std::string what);


} // namespace hvactor
