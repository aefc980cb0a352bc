#pragma once

// Internal: the collectives' thresholds, sizes and waits; one of the knob files
// (base/internal/knobs.hpp lists them), each value named once with the reason
// for it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/internal/knobs_net.hpp"

namespace hvactor::knobs {

using namespace std::chrono_literals;

// -- collectives ---------------------------------------------------------------------

/// Horovod's tensor fusion defaults (HOROVOD_FUSION_THRESHOLD,
/// HOROVOD_CYCLE_TIME): one Gloo call for up to 128 MiB of gradients, a
/// batch waits at most 1 ms to grow.
inline constexpr size_t default_fusion_threshold = size_t{128} << 20;
inline constexpr auto default_cycle_time = 1ms;

/// HOROVOD_GLOO_TIMEOUT_SECONDS when unset (Horovod's 30 s), and the
/// largest value accepted: longest_wait, beyond which waits are clamped.
inline constexpr int64_t default_gloo_timeout_seconds = 30;
/// A rank with no collective pending joins a negotiation round this often
/// (at most a quarter of the job's timeout), so that peers waiting in one
/// never reach the transport's timeout.
inline constexpr auto negotiation_heartbeat = std::chrono::milliseconds{1000};
/// HOROVOD_CACHE_CAPACITY's default and bound (a round sends a word per slot).
inline constexpr uint64_t default_cache_capacity = 1024;
inline constexpr uint64_t max_cache_capacity = 1u << 20;
inline constexpr int64_t max_gloo_timeout_seconds =
  std::chrono::duration_cast<std::chrono::seconds>(longest_wait).count();

/// A waiter gives up on the engine after twice the job's timeout plus this:
/// every transfer under it has its own timeout, so reaching it means the
/// engine is stuck (reported as a bug, never a hang).
inline constexpr auto engine_wait_slack = 10s;

/// The rendezvous store answers a timed get/wait itself; the client waits
/// this much longer so that the store's clearer error wins.
inline constexpr auto store_round_trip = 1s;

/// A watch on a rendezvous key (rank 0's wait for the driver's host
/// updates) asks again this often: the store holds a wait this long.
inline constexpr auto store_watch_period = 60s;

/// Shared-memory collectives (collectives/backends/shm/): each local rank owns two
/// slots of this many bytes in its node's segment (one written while the
/// other is read). Smaller when the job's fusion threshold is (never below
/// the minimum); the segment's pages are only backed once touched: a quiet
/// job touches a chunk of each slot (shm_chunk_bytes), a loaded one more
/// (shm_loaded_chunk_bytes), one whose synchronisation points stall whole
/// slots (shm_stalled_step).
inline constexpr size_t shm_slot_bytes = size_t{8} << 20;
inline constexpr size_t shm_min_slot_bytes = size_t{64} << 10;

/// A collective moves its data in chunks of this much (at most a slot),
/// two synchronisation points each for an allreduce: small enough that 4
/// ranks' chunks stay in the caches of this VM (2 MiB chunks made a quiet
/// 64 MiB allreduce of 4 ranks 1.6-1.8x slower).
inline constexpr size_t shm_chunk_bytes = size_t{512} << 10;

/// An allreduce whose ranks saw their cores taken (the loaded waits)
/// moves chunks of this much (at most a slot): every synchronisation point
/// may then cost a wake-up behind a busy thread, and 4 times fewer of them
/// pay more than the caches lose.
inline constexpr size_t shm_loaded_chunk_bytes = size_t{2} << 20;

/// A loaded rank with more local ranks than cores whose waits at a
/// chunk's two synchronisation points took this long together says so
/// with its next post, and the next chunk is a whole slot. 4 ranks on 2
/// cores under a busy thread per core wait 2-3 ms per point (a busy
/// thread's slice): whole 8 MiB slots made their 8-64 MiB allreduces
/// 1.4-1.7x faster than 2 MiB chunks, and changed nothing under a load of
/// short processes. With a core per rank, 8 MiB chunks were up to 2x
/// slower than 2 MiB ones under either load.
inline constexpr auto shm_stalled_step = std::chrono::milliseconds{2};

/// An allreduce of this many bytes or more (communicator::bulk_) takes
/// no local rank's standing still for shm_starved_oversubscribed as a
/// sign of load: its steps may take that long on a quiet machine.
inline constexpr size_t shm_short_slice_bytes = size_t{2} << 20;

/// A waiting rank spins this long on a sequence word before it sleeps on
/// the word's futex (when every local rank has a core of its own; with
/// more ranks than cores it yields instead: the rank it waits for needs
/// the core). Longer than a sleeping core's wake-up: with 50 us, two ranks
/// fell into a convoy on this VM, each waking the other ~55 us late, every
/// small allreduce 50-100 us instead of 0.4 (hvactor-bench found it).
inline constexpr auto shm_spin = std::chrono::microseconds{1000};

/// The most a rank spins after short waits that had to sleep (the spin
/// grows while they do): on this VM a sleeping rank sometimes wakes ~1 ms
/// late, and two ranks then fell into a convoy at 1 ms per step, each
/// spinning out just before the other woke (hvactor-bench --peer mpi
/// found it: allreduce p50 1 ms instead of 1 us at some sizes).
inline constexpr auto shm_spin_max = std::chrono::microseconds{16000};

/// A gap this long between two clock reads of a spinning rank (or a long
/// sched_yield) means a busy thread took its core: the machine is loaded.
inline constexpr auto shm_preempted = std::chrono::microseconds{200};

/// The same with more local ranks than cores, where ranks take each
/// other's cores all the time: only a gap this long says a foreign thread
/// ran (a busy thread's slice; a local rank's share of a step of up to 2
/// MiB takes less). With 200 us, 4 quiet ranks on 2 cores took each other
/// for busy threads and moved to the loaded waits and chunks, a quiet 4
/// MiB allreduce then 0.9-3.5 ms instead of about 1. A share of a whole
/// 8 MiB slot (shm_stalled_step) may take longer, which can only keep an
/// allreduce that stalled loaded: 4 ranks looping on 64 MiB allreduces
/// were back at their quiet 22 ms per call the second after a busy thread
/// per core stopped.
inline constexpr auto shm_preempted_oversubscribed = std::chrono::microseconds{1000};

/// With more local ranks than cores, a yielding wait during which no local
/// rank moved on for this long (outside an allreduce of 2 MiB or more,
/// whose steps may take that long) also says a foreign process holds a
/// core: the ranks take turns within microseconds otherwise. 4 ranks on 2
/// cores under a load that forks short processes, split between the
/// cores, took 1.5-2.3 ms per 4-byte call for up to 4 s (each step waited
/// for the load's slice on the other core) and never saw a gap of
/// shm_preempted_oversubscribed between two yields; seeing this, a waiter
/// moves to the CPU of the rank it waits for (join_cpu_of), and the ranks
/// were on one core at 4 us per call within 200-400 calls.
inline constexpr auto shm_starved_oversubscribed = std::chrono::milliseconds{1};

/// With more local ranks than cores, a yield that lost the core this long
/// (no local rank moved on meanwhile) stops the rank's waits from yielding
/// for shm_load_memory: they spin shm_spin_loaded and sleep. A busy thread
/// that gets the core keeps it to the end of a 4 ms tick (4 ranks on 2
/// cores, a busy thread per core, 3 runs: 4 B 2.0-2.1 -> 0.14-0.32 ms a
/// call, 16 KiB 3.6-4.5 -> 0.03-0.44 ms, 4 MiB 15-17 -> 8.5-10.2 ms); a
/// shell loop's /bin/true gives it back within 0.7-0.9 ms, and there
/// yields keep the ranks on one core (4-byte calls at 8-17 us as before;
/// never yielding when loaded, 104-134 us). 1 ms was no better.
inline constexpr auto shm_yield_lost = std::chrono::milliseconds{2};

/// After such a gap, waits take the loaded strategy for this long (spin
/// shm_spin_loaded, then sleep); a later gap extends it.
inline constexpr auto shm_load_memory = std::chrono::milliseconds{250};

/// How long a waiting rank spins on a loaded machine before it sleeps, in a
/// small call with more local ranks than cores (shm_spin_loaded_apart
/// otherwise; a spin that ends later than this also checks its last gap):
/// long enough for a peer that runs at the same time to answer, short
/// enough that a rank whose peer waits for a core keeps its share of its
/// own (a ping-pong between two processes pinned to the 2 cores of this
/// VM, each core with two busy threads: spin 20 us then sleep 0.3 us per
/// step; spin without sleeping, as Open MPI does, 1.4-2.8 us; yield
/// instead of spinning, over 1 ms).
inline constexpr auto shm_spin_loaded = std::chrono::microseconds{20};

/// The same in a loaded allreduce of shm_long_wait_bytes or more
/// (communicator::long_waits_) with more local ranks than cores (otherwise
/// shm_spin_loaded_apart, as long), whose steps each copy and reduce up to a
/// loaded chunk: a peer that runs is seldom 20 us behind there, and a
/// sleep at every step, pinned to its CPU (sleep_apart), left the rank
/// waiting for a wake-up on a core the load held. 2 ranks, a shell loop
/// starting /bin/true on each core, 400 calls of 16 MiB: 10.3-12.9 ms per
/// call with 20 us and pinned sleeps, 6.5-7.6 ms with 150 us and
/// unpinned ones (4 MiB: 2.2-3.1 ms against 1.4-1.5); a busy thread per
/// core: alike (7.5-9.4 against 7.3-8.4 ms).
inline constexpr auto shm_spin_loaded_bulk = std::chrono::microseconds{150};

/// How long a loaded wait spins before it sleeps when every local rank has a
/// core of its own (no more local ranks than cores), whatever the call's
/// size; shm_spin_loaded is for more local ranks than cores, where a
/// spinning rank may hold the core the awaited one needs. Most of a loaded
/// run of small calls is a few dozen calls of milliseconds (a peer without
/// a core); a rank that slept after 20 us, pinned to its CPU (sleep_apart),
/// also waited for that CPU when woken. 2 ranks on the 2 cores of this VM,
/// 20,000 calls per size, the library swapped in turn, medians of 8
/// rounds, mean us per call at 4 B / 64 B / 1 KiB / 16 KiB (2026-12-02):
/// a shell loop starting /bin/true on each core, 20 us 3.5 / 2.9 / 4.0 /
/// 24.5, 150 us 2.5 / 2.2 / 3.9 / 17.8; a busy thread per core, 20 us 1.9 /
/// 2.1 / 3.0 / 15.7, 150 us 1.9 / 1.7 / 2.9 / 16.3. 300 us was alike, 50
/// and 100 us in between.
inline constexpr auto shm_spin_loaded_apart = std::chrono::microseconds{150};

/// From this size on an allreduce's loaded waits spin shm_spin_loaded_bulk
/// (above). Under the forking load, 2,000 calls of 1 MiB took 607-649 us
/// each from 2 MiB on and 339-406 us from 128 KiB on (256 KiB: 70-154
/// against 64-84 us); 32-128 KiB and a busy thread per core showed no
/// difference either way.
inline constexpr size_t shm_long_wait_bytes = size_t{128} << 10;

/// With more local ranks than cores, a quiet wait yields (to the local
/// rank that needs the core) for up to this long before it sleeps: a step
/// of a large allreduce takes milliseconds there, and a futex wake-up per
/// step doubled a 64 MiB allreduce of 4 ranks on 2 cores (22 to 70 ms).
inline constexpr auto shm_yield = std::chrono::milliseconds{50};

/// While a rank sleeps on a peer's word, its thread asks the scheduler for
/// slices this short (Linux 6.12+ EEVDF: sched_attr's sched_runtime, 100 us
/// the least; older kernels ignore it): woken, it may preempt the running
/// thread instead of waiting out its 1.4 ms slice, with the same share of
/// the core. 4 ranks, 64 MiB, one busy thread per core: 74 against 105 ms
/// per allreduce; two: 75-121 against 242-252 ms.
inline constexpr auto shm_wake_slice = std::chrono::microseconds{100};

/// A sleeping rank wakes this often to check the abort word and its peer.
inline constexpr auto shm_sleep_slice = 20ms;

/// Allreduces up to this size (per rank) take the one-step path: every
/// rank copies all of its data in and reduces every rank's copy; larger
/// ones reduce-scatter then allgather (each rank reduces one slice).
inline constexpr size_t shm_small_bytes = size_t{16} << 10;

} // namespace hvactor::knobs
