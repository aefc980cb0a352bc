#pragma once

#include <vector>

#include <hvactor/runtime.hpp>

/// `allreduce --timeline-overhead`: what HOROVOD_TIMELINE costs. First the
/// timeline's own cost per event (record on the caller, format + write on
/// the writer thread). Then, at each world size in `nps`, small-message
/// allreduces (4 KiB and 1 MiB float; hvd::allreduce, and allreduce_async +
/// synchronize, which adds the engine's QUEUE and NEGOTIATE spans) run a
/// fixed number of times (`iters` at 4 KiB, a tenth of it at 1 MiB) with
/// the timeline off, on, and off again (the A/A control, this machine's
/// noise floor), in rotating order over `rounds` rounds: (1) as users run
/// it, HOROVOD_TIMELINE through extra_env_vars, a fresh executor each; (2)
/// in the same workers, hvd::init() with and without it, 4x the rounds.
/// Prints ops/s off and on, the throughput lost (median and quartiles over
/// rounds) beside the A/A difference, rank 0's per-call p50 off and on, and
/// the CPU the timeline adds per call; then whether every file the timeline
/// wrote is a closed JSON array. Returns the process exit code.
int run_timeline_overhead(hvactor::runtime& rt, const std::vector<int>& nps, int rounds,
                          int iters, int timeout_s);
