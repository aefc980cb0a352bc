#pragma once

// Internal: the one CAF actor system of an hvactor process (CAF's
// exec_main: one system per process). A worker serves its driver's calls,
// joins the collectives' rendezvous store, runs an elastic session and a
// training session, all on this one system: one scheduler, one middleman,
// one connection to the driver's node.

#include <cstddef>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>


namespace hvactor::process_system {

/// Adds a layer's message types (or other settings) to the process system.
using configure_fn = void (*)(caf::actor_system_config&);

/// Registers `fn` for every process system created from now on
/// (idempotent). Layers register from a static initializer of their
/// library (see registrar), so that the system has every loaded layer's
/// types whichever layer creates it first.
void add_types(configure_fn fn);

/// Applies every add_types function to `cfg` (a system the process creates
/// itself, as hvactor::runtime does, gets every loaded layer's types).
void apply_types(caf::actor_system_config& cfg);

/// add_types at static initialization: `const registrar r{&fn};`.
struct registrar {
  explicit registrar(configure_fn fn) {
    add_types(fn);
  }
};

/// A share of the process system; the system lives while any share does.
using share = std::shared_ptr<caf::actor_system>;

/// Scheduler threads of the process system: a worker's actors only relay
/// calls and rendezvous messages; the work runs on the caller's threads.
inline constexpr size_t threads = 2;

/// The process system, created on first use: configure_actor_system with
/// `threads` scheduler threads and the process's TLS
/// identity from the environment (tls::from_env: mutual TLS when the node
/// handed one down, else plain), plus every add_types. It publishes nothing
/// by itself, so it needs no connection watchdog; a process that publishes
/// on it (a driver) runs its own. When the last share is dropped the system
/// is destroyed, bounded by knobs::system_exit_limit (the process ends with
/// exit code 1 when an actor keeps it alive longer); a later acquire()
/// creates a new one. Throws hvactor::error naming the files when the TLS
/// identity in the environment is not usable. Thread-safe.
share acquire();

/// While the returned guard lives, acquire() hands out `sys` (a process
/// that owns a system already, as hvactor::runtime does) instead of
/// creating one; `sys` must outlive every share taken meanwhile. Only one
/// system can be lent at a time (std::logic_error otherwise).
std::shared_ptr<void> lend(caf::actor_system& sys);

/// True while a process system exists (created or lent).
bool running();

} // namespace hvactor::process_system
