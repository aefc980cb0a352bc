#pragma once

// Internal: the CAF heartbeat of hvactor's processes (heartbeat.cpp).
//
// CAF 0.17's BASP broker sends a heartbeat on every connection at each tick
// and drops a peer it has heard nothing from for the connection timeout.
// CAF starts the ticks when its middleman starts, at a phase of its own in
// every process; hvactor starts them itself, on its first publish or
// connect, at whole multiples of knobs::heartbeat_interval on the system
// clock. Every process of a cluster then ticks at the same instants (as
// closely as their clocks agree), so that a head or a driver with hundreds
// of connections receives their heartbeats in one burst, a few wake-ups,
// instead of one wake-up each spread over the interval.

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/timespan.hpp>


namespace hvactor::heartbeat {

/// Turns CAF's own ticks off in `cfg` and asks for hvactor's: a tick every
/// `interval`, dropping peers silent for `timeout` (knobs::heartbeat_interval
/// and knobs::connection_timeout in every hvactor process; tests set others).
void configure(caf::actor_system_config& cfg, caf::timespan interval, caf::timespan timeout);

/// configure() with hvactor's knobs.
void configure(caf::actor_system_config& cfg);

/// Starts `sys`'s ticks if configure() asked for them and they have not
/// started yet (once per actor system). Thread-safe; never blocks, so it
/// may run inside a handler. transport::publish and transport::connector
/// call it: a process has no connection before one of them ran.
void start(caf::actor_system& sys);

/// Whether `sys`'s ticks run (for tests).
bool started(caf::actor_system& sys);

} // namespace hvactor::heartbeat
