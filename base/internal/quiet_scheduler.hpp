#pragma once

// Internal: hvactor's CAF scheduler (quiet_scheduler.cpp), CAF 0.17's work
// stealing without its timed polling. An idle thread sleeps until work is
// given to it, and is never woken by a clock.
//
// Why: CAF's idle worker threads wake every relaxed-sleep-duration (10 ms by
// default, then 1 s in hvactor) only to look for work to steal. One wake
// costs 20-70 us of CPU on the project's VM; every process has one thread
// per core (nodes) or two (workers), so an idle 128-node cluster (257
// processes on 2 cores) spent about 1.3 % of a core on it, and a node of a
// 64-core machine would wake 64 times a second.
//
// Work still moves between threads: a job from outside the scheduler (the
// network, the clock, a scoped_actor) goes to a sleeping thread when there
// is one; a job queued behind another (internal_enqueue, an actor that used
// up its throughput) wakes a sleeping thread to steal it; a thread looks in
// every other queue before it sleeps. What it gives up: a single job sent
// from a handler that then runs long waits for that handler (CAF stole it
// within the relaxed sleep). Handlers never block (STYLE.md).

#include <caf/actor_system_config.hpp>

namespace hvactor::quiet_scheduler {

/// Makes `cfg`'s actor system use this scheduler ("scheduler.max-threads"
/// threads, as CAF's); call before the system is created.
void install(caf::actor_system_config& cfg);

} // namespace hvactor::quiet_scheduler
