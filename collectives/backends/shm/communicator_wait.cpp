// The shared-memory communicator's waits (communicator.hpp): publishing a
// step, waiting for a peer's (spin, yield or sleep on its futex word, as the
// machine's load and the peer's CPU suggest), and failing a wait with the
// peer named.
#include "collectives/backends/shm/communicator.hpp"

#include <immintrin.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <optional>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/knobs_collectives.hpp"
#include "collectives/backends/shm/cpu_pin.hpp"
#include "collectives/backends/shm/short_slice.hpp"

namespace hvactor::collectives::shm {

namespace {

using clock_type = std::chrono::steady_clock;

static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == 4,
              "futex words must be plain 32-bit atomics");

} // namespace

void communicator::publish(word w, uint32_t step) {
  auto& mine = seg_->words(group_.local_rank, static_cast<int>(step & 1));
  auto& sleepers = seg_->sleepers(group_.local_rank);
  auto& value = w == word::posted ? mine.posted : mine.reduced;
  // Released, not sequentially consistent: a full fence here waited for
  // this line to come back from the peers that read it at step - 2 before
  // this rank could look at theirs (a fifth of a quiet 4-byte call). The
  // look at this word's sleepers follows the fence in wake_sleepers(),
  // after this rank's first look at its peers: by then the store has
  // left, and the fence costs little.
  value.store(step, std::memory_order_release);
  unwoken_ = &value;
  unwoken_sleepers_ = w == word::posted ? &sleepers.posted : &sleepers.reduced;
}

// The sleepers on the word publish() stored last: woken when there are
// any. A fence, then the count: paired with the fence in wait_one's sleep
// (the count raised, then the word read), either the sleeper sees the new
// value or this sees the sleeper, never neither. Called before this rank
// waits for long (wait_one) and after its waits of the step (wait_all): a
// peer sleeping on this rank's word has posted this step, so that this
// rank's waits end without it.
void communicator::wake_sleepers() {
  if (unwoken_ == nullptr)
    return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (unwoken_sleepers_->load(std::memory_order_relaxed) != 0) {
    // The sleeper keeps off this CPU (sleep_apart); beside a system call,
    // reading the CPU number costs nothing.
    note_cpu();
    futex_wake(*unwoken_, INT_MAX);
  }
  unwoken_ = nullptr;
}

void communicator::wait_all(word w, uint32_t step, const char* what) {
  for (int k = 0; k < group_.local_size; ++k)
    if (k != group_.local_rank)
      wait_one(k, w, step, what);
  wake_sleepers();
}

// A number that changes whenever any local rank publishes a step.
uint32_t communicator::progress() const {
  uint32_t sum = 0;
  for (int k = 0; k < group_.local_size; ++k)
    for (int set : {0, 1})
      sum += seg_->words(k, set).posted.load(std::memory_order_relaxed)
           + seg_->words(k, set).reduced.load(std::memory_order_relaxed);
  return sum;
}

void communicator::saw_preemption(clock_type::time_point now) {
  loaded_until_ = now + knobs::shm_load_memory;
}

// Spins from `start` (the wait's first clock read) until `value` reaches `step`
// (true) or for `budget` (false),
// yielding instead when `yielding` (more ranks than cores: the awaited rank
// may need this core). A gap between clock reads (or a yield that long
// during which no local rank moved on) means this thread lost its core to
// another thread meanwhile: the machine is loaded, and the wait goes on
// spinning for the loaded budget only.
bool communicator::spin_for(std::atomic<uint32_t>& value, uint32_t step,
                            clock_type::time_point start, std::chrono::nanoseconds budget,
                            bool yielding, const char* what, int k) {
  auto last = start;
  auto end = last + budget;
  uint32_t seen = yielding ? progress() : 0; // read only while yielding (hot path)
  auto moved_on = start;
  for (;;) {
    uint32_t before = 0;
    if (yielding) {
      before = progress();
      if (before != seen) {
        seen = before;
        moved_on = last;
      } else if (oversubscribed_ && last - moved_on > std::chrono::microseconds{200}) {
        // Yields hand the cores between local ranks: a step that long with
        // none of them moving on waits for a foreign process.
        if (last >= loaded_until_ && !bulk_ && last - moved_on > knobs::shm_starved_oversubscribed)
          saw_preemption(last);
        if (last < loaded_until_) {
          join_cpu_of(k);
          moved_on = last;
        }
      }
      ::sched_yield();
      if (reached(value.load(std::memory_order_acquire), step))
        return true;
    } else {
      for (int i = 0; i < 64; ++i) {
        _mm_pause();
        if (reached(value.load(std::memory_order_acquire), step)) {
          // A long wait may end in its first look after this thread got
          // its core back: the gap says so all the same. Two ranks that
          // spin on one CPU otherwise each wait out the other's slice at
          // every step (1-3 ms a call), never seeing the machine loaded.
          if (last - start > knobs::shm_spin_loaded) {
            auto now = clock_type::now();
            if (now - last > knobs::shm_preempted)
              saw_preemption(now);
          }
          return true;
        }
      }
    }
    check_abort(what);
    auto now = clock_type::now();
    // A long yield that let another local rank move on gave the core to
    // that rank (the point of yielding), not to a busy thread.
    if (now - last > (oversubscribed_ ? knobs::shm_preempted_oversubscribed
                                      : knobs::shm_preempted)
        && (!yielding || progress() == before)) {
      saw_preemption(now);
      // A yield that long feeds a thread that keeps the core to the end
      // of its slice: wait without yielding for a while (wait_one).
      if (yielding && oversubscribed_ && now - last >= knobs::shm_yield_lost)
        yields_lost_until_ = now + knobs::shm_load_memory;
      end = std::min(end, now + knobs::shm_spin_loaded);
      yielding = false;
    }
    if (now >= end)
      return false;
    last = now;
  }
}

// Notes the CPU this rank waits on; whether rank `k` last waited there
// too. Two unbound ranks that wake each other end up on one CPU (the
// waker's: wake-affine), each step then a sleep and a wake-up there (2
// ranks under a load that forks short processes: 30-35 us a small call). If so, and at most every shm_move_interval, this rank moves to
// another CPU it may run on (its affinity without this CPU for a moment,
// then as it was): two ranks that yield to each other on one CPU stay
// there, every step a context switch, while the other CPUs run the load.
bool communicator::shares_cpu_with(int k) {
  int cpu = note_cpu();
  if (cpu < 0)
    return false;
  auto mine = static_cast<uint32_t>(cpu) + 1;
  if (seg_->words(k, 0).cpu.load(std::memory_order_relaxed) != mine)
    return false;
  auto now = clock_type::now();
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (now - last_move_ > std::chrono::milliseconds{10}
      && ::sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) > 1
      && CPU_ISSET(cpu, &allowed)) {
    last_move_ = now;
    cpu_set_t elsewhere = allowed;
    CPU_CLR(cpu, &elsewhere);
    if (::sched_setaffinity(0, sizeof(elsewhere), &elsewhere) == 0) {
      ::sched_setaffinity(0, sizeof(allowed), &allowed);
      note_cpu(); // else the peer, about to sleep, takes it for here still
      return false;
    }
  }
  return true;
}

// The CPU this thread runs on (-1: unknown), noted in this rank's words
// for its peers (shares_cpu_with, join_cpu_of).
int communicator::note_cpu() {
  int cpu = ::sched_getcpu();
  if (cpu >= 0)
    seg_->words(group_.local_rank, 0).cpu.store(static_cast<uint32_t>(cpu) + 1,
                                                std::memory_order_relaxed);
  return cpu;
}

// Before a sleep on a loaded machine (a wait of this rank lost its core
// lately), with a core for every local rank: pins this thread
// (while it sleeps: `pin`'s life) to its CPU, or, when another local rank
// noted that CPU last, to one no local rank noted. A wake-up otherwise
// puts the sleeper on its waker's CPU when the other CPUs run a load
// (wake-affine), and there the two ranks take turns at every step: 2
// ranks under a load that forks short processes sat on one CPU for
// hundreds of milliseconds at 60-130 us per small call instead of 0.3-0.5.
// The waker noted its CPU (publish).
void communicator::sleep_apart(std::optional<cpu_pin>& pin) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  int cpu = ::sched_getcpu();
  if (cpu < 0 || ::sched_getaffinity(0, sizeof(allowed), &allowed) != 0
      || CPU_COUNT(&allowed) < group_.local_size)
    return;
  cpu_set_t taken;
  CPU_ZERO(&taken);
  for (int k = 0; k < group_.local_size; ++k) {
    uint32_t theirs = seg_->words(k, 0).cpu.load(std::memory_order_relaxed);
    if (k != group_.local_rank && theirs != 0 && theirs <= CPU_SETSIZE)
      CPU_SET(static_cast<int>(theirs - 1), &taken);
  }
  if (CPU_ISSET(cpu, &taken) || !CPU_ISSET(cpu, &allowed)) {
    int free = -1;
    for (int c = 0; c < CPU_SETSIZE && free < 0; ++c)
      if (CPU_ISSET(c, &allowed) && !CPU_ISSET(c, &taken))
        free = c;
    if (free < 0)
      return;
    cpu = free;
  }
  seg_->words(group_.local_rank, 0).cpu.store(static_cast<uint32_t>(cpu) + 1,
                                              std::memory_order_relaxed);
  pin.emplace(allowed, cpu);
}

// More ranks than cores on a loaded machine, and no local rank moved on
// for a while: the awaited rank k is likely queued behind another process
// on its CPU, where this rank's yields do not reach. Moves to k's CPU (at
// most every 10 ms): there a yield lets k run.
void communicator::join_cpu_of(int k) {
  auto now = clock_type::now();
  uint32_t theirs = seg_->words(k, 0).cpu.load(std::memory_order_relaxed);
  int cpu = ::sched_getcpu();
  if (theirs == 0 || cpu < 0 || theirs == static_cast<uint32_t>(cpu) + 1
      || now - last_move_ < std::chrono::milliseconds{10})
    return;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0
      || !CPU_ISSET(static_cast<int>(theirs - 1), &allowed))
    return;
  last_move_ = now;
  cpu_set_t there;
  CPU_ZERO(&there);
  CPU_SET(static_cast<int>(theirs - 1), &there);
  if (::sched_setaffinity(0, sizeof(there), &there) == 0)
    ::sched_setaffinity(0, sizeof(allowed), &allowed);
}

void communicator::wait_one(int k, word w, uint32_t step, const char* what) {
  auto& words = seg_->words(k, static_cast<int>(step & 1));
  auto& value = w == word::posted ? words.posted : words.reduced;
  if (reached(value.load(std::memory_order_acquire), step))
    return;
  // A peer one core away posts within a few hundred nanoseconds in a loop
  // of small synchronous calls: look again before the first clock read
  // (two reads were a tenth of such a call). Not when the peer may need
  // this core: then yielding at once is what lets it post.
  if (!oversubscribed_)
    for (int i = 0; i < 16; ++i) {
      _mm_pause();
      if (reached(value.load(std::memory_order_acquire), step))
        return;
    }
  wake_sleepers();
  auto start = clock_type::now();
  bool loaded = start < loaded_until_;
  if (oversubscribed_ && loaded)
    note_cpu();
  // On a peer's CPU, spinning keeps it off: yield (shares_cpu_with). Only
  // when loaded: the CPU number costs a third of a quiet 4-byte call.
  // With more local ranks than cores a wait yields (the awaited rank may
  // need this core), unless a yield lately lost the core for
  // shm_yield_lost: a yield moves the yielder's deadline back (EEVDF), and
  // a busy thread then keeps the core to the end of its slice, a whole 4 ms
  // tick at HZ 250 (4 ranks on 2 cores, a busy thread per core: about 2 ms
  // per 4-byte call). A sleeper, woken, preempts it instead (short_slice).
  // Short processes (a shell loop) end sooner: there the yields gather
  // the ranks on one core (join_cpu_of), where they pass it among
  // themselves (sleeping there, 4-byte calls took 100 us, not 10).
  bool yielding = oversubscribed_ ? start >= yields_lost_until_ : loaded && shares_cpu_with(k);
  if (loaded && !yielding) {
    auto budget = long_waits_      ? knobs::shm_spin_loaded_bulk
                  : oversubscribed_ ? knobs::shm_spin_loaded
                                    : knobs::shm_spin_loaded_apart;
    if (spin_for(value, step, start, budget, false, what, k))
      return;
  } else {
    // Yielding costs nothing while only local ranks want the cores (they
    // are who gets them): yield for as long as the peer may take to post.
    auto budget = yielding ? std::max<std::chrono::nanoseconds>(spin_, knobs::shm_yield) : spin_;
    if (spin_for(value, step, start, budget, yielding, what, k)) {
      if (spin_ > knobs::shm_spin && clock_type::now() - start < knobs::shm_spin)
        spin_ -= spin_ / 64;
      return;
    }
    loaded = start < loaded_until_;
  }
  auto& sleepers = seg_->sleepers(k);
  auto& waiting = w == word::posted ? sleepers.posted : sleepers.reduced;
  auto deadline = start + timeout_;
  auto slice = std::chrono::duration_cast<std::chrono::nanoseconds>(knobs::shm_sleep_slice);
  short_slice wake_soon;
  // Pinned, a bulk step's sleeper waits for the load on its CPU when
  // the other is free: the short waits of small calls only.
  std::optional<cpu_pin> apart;
  if (loaded && !oversubscribed_ && !long_waits_)
    sleep_apart(apart);
  for (int round = 1;; ++round) {
    waiting.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst); // wake_sleepers' pair
    uint32_t seen = value.load(std::memory_order_seq_cst);
    if (!reached(seen, step))
      futex_wait(value, seen, slice.count());
    waiting.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(value.load(std::memory_order_acquire), step)) {
      // Slept, but not for long: the peer was late by about a wake-up, not
      // busy elsewhere. Spin longer next time so that one of us stays awake.
      if (!loaded && clock_type::now() - start < 4 * spin_)
        spin_ = std::min<std::chrono::nanoseconds>(2 * spin_, knobs::shm_spin_max);
      return;
    }
    check_abort(what);
    check_peer(k, round % 5 == 0, deadline, what);
  }
}

// A sleeping wait's look at peer k (abort word aside): fails when k's
// process is gone (`look_up`: every few rounds) or the deadline passed.
void communicator::check_peer(int k, bool look_up, clock_type::time_point deadline,
                              const char* what) {
  // The colocator normally raises the abort word; a process gone without
  // it (no colocator) is found here.
  if (look_up && ::kill(group_.pids[static_cast<size_t>(k)], 0) != 0 && errno == ESRCH) {
    // Said in the abort word as the colocator would (a set's own segment
    // has none), so that the other local peers name the dead rank, not
    // this one, which leaves next.
    seg_->raise_abort(group_.pids[static_cast<size_t>(k)], abort_reason::exited);
    fail(fmt::format("{} failed on rank {} of {} ({}): peer rank {} (pid {}) on this node no "
                     "longer exists [shared memory]. The collectives stay unusable until "
                     "hvd::shutdown() and hvd::init()",
                     what, group_.rank, group_.size, group_.host, group_.ranks[k],
                     group_.pids[k]),
         k);
  }
  if (clock_type::now() >= deadline)
    fail(fmt::format("{} failed on rank {} of {} ({}): peer rank {} (pid {}) on this node did "
                     "not take part within {:g} s [shared memory]; it stalls or runs a "
                     "different collective. The collectives stay unusable until "
                     "hvd::shutdown() and hvd::init()",
                     what, group_.rank, group_.size, group_.host, group_.ranks[k],
                     group_.pids[k], static_cast<double>(timeout_.count()) / 1000.0),
         k);
}

void communicator::check_abort(const char* what) {
  auto& h = seg_->header();
  uint32_t pid = h.abort_pid.load(std::memory_order_acquire);
  if (pid == 0 || pid == foreign_abort_)
    return;
  for (int k = 0; k < group_.local_size; ++k) {
    if (k == group_.local_rank || static_cast<uint32_t>(group_.pids[k]) != pid)
      continue;
    bool exited = h.abort_why.load() == static_cast<uint32_t>(abort_reason::exited);
    fail(fmt::format("{} failed on rank {} of {} ({}): peer rank {} (pid {}) on this node {} "
                     "[shared memory]. The collectives stay unusable until hvd::shutdown() and "
                     "hvd::init()",
                     what, group_.rank, group_.size, group_.host, group_.ranks[k], pid,
                     exited ? "died (its node saw it exit)"
                            : "left the collective: its own operation failed (see its error)"),
         k);
  }
  foreign_abort_ = pid;
}

void communicator::fail(const std::string& msg, int peer_local) {
  broken_ = msg;
  leave();
  throw collective_error(msg, group_.ranks[static_cast<size_t>(peer_local)]);
}

} // namespace hvactor::collectives::shm
