#include "base/internal/actor_system.hpp"
#include "base/internal/process_system.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <caf/io/middleman.hpp>
#include <caf/local_actor.hpp>
#include <caf/logger.hpp>
#include <fmt/format.h>

#include "base/internal/log.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/knobs_net.hpp"
#include "base/internal/quiet_scheduler.hpp"
#include "base/net/heartbeat.hpp"
#include "base/net/transport.hpp"

namespace hvactor {

void configure_actor_system(caf::actor_system_config& cfg, size_t max_threads,
                            const tls::config& tls) {
  register_error_category(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads", max_threads);
  // Idle scheduler threads sleep until work comes (CAF's wake every 10 ms,
  // or every relaxed-sleep-duration, to steal).
  quiet_scheduler::install(cfg);
  // Identical on every process (a one-sided setting drops healthy peers):
  // a frozen peer is dropped after knobs::connection_timeout plus up to a
  // tick, and every live connection gets bytes every tick, which the TLS
  // connection watchdog relies on. Ticks start with the first connection,
  // aligned across processes (base/net/heartbeat.hpp).
  heartbeat::configure(cfg);
  cfg.set("middleman.app-identifiers", std::vector<std::string>{"hvactor"});
  transport::configure(cfg, tls);
}

caf::scheduled_actor::exception_handler exit_with_error(std::string what) {
  return [what](caf::scheduled_actor*, std::exception_ptr& eptr) {
    std::string text = "unknown exception";
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      text = e.what();
    } catch (...) {
    }
    log::error("the {} failed: {}", what, text);
    return make_error(error_kind::generic, fmt::format("the {} failed: {}", what, text));
  };
}


namespace {

struct forced_exit_hooks {
  std::mutex mu;
  std::vector<std::function<void()>> hooks;
  bool ran = false;
};

forced_exit_hooks& exit_hooks() {
  static auto* hooks = new forced_exit_hooks; // never destroyed: used while exiting
  return *hooks;
}

// "caf.multiplexer (ep_poll), caf.worker (futex_wait_queue)": what the
// process's threads wait in, to tell which part of the system is stuck.
std::string thread_states() {
  std::string out;
  std::error_code ec;
  for (auto& task : std::filesystem::directory_iterator{"/proc/self/task", ec}) {
    auto read = [&](const char* name) {
      std::ifstream in{task.path() / name};
      std::string text;
      std::getline(in, text);
      return text;
    };
    out += fmt::format("{}{} ({})", out.empty() ? "" : ", ", read("comm"), read("wchan"));
  }
  return out;
}

} // namespace

void on_forced_exit(std::function<void()> hook) {
  auto& h = exit_hooks();
  std::lock_guard<std::mutex> guard{h.mu};
  h.hooks.push_back(std::move(hook));
}

void forced_exit(int code) {
  auto& h = exit_hooks();
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> guard{h.mu};
    if (!h.ran)
      hooks.swap(h.hooks);
    h.ran = true;
  }
  for (auto& hook : hooks)
    hook();
  std::fflush(nullptr);
  std::_Exit(code);
}

void destroy_bounded(std::unique_ptr<caf::actor_system>& sys, std::chrono::seconds limit) {
  struct teardown_state {
    std::mutex mtx;
    std::condition_variable cv;
    bool actors_done = false; // every actor ended: only CAF's own teardown is left
    bool done = false;
  };
  auto st = std::make_shared<teardown_state>();
  auto started = std::chrono::steady_clock::now();
  // CAF keeps the system's logger in a thread-local of the thread that
  // made the system, and ~actor_system waits for the logger's end: on the
  // teardown thread it waited for ever unless this thread lets go first.
  if (caf::logger::current_logger() == &sys->logger())
    caf::logger::set_current_actor_system(nullptr);
  std::thread teardown{[st, s = sys.release()] {
    s->await_all_actors_done();
    {
      std::lock_guard<std::mutex> lock{st->mtx};
      st->actors_done = true;
    }
    delete s;
    {
      std::lock_guard<std::mutex> lock{st->mtx};
      st->done = true;
    }
    st->cv.notify_all();
  }};
  std::unique_lock<std::mutex> lock{st->mtx};
  if (st->cv.wait_for(lock, limit, [&] { return st->done; })) {
    lock.unlock();
    teardown.join();
    log::debug("actor system stopped in {} ms",
               std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - started)
                 .count());
    return;
  }
  if (!st->actors_done) {
    log::error("actor system did not stop within {} s (an actor still runs; threads: {}); exiting",
               limit.count(), thread_states());
    forced_exit(1);
  }
  // Every actor ended; what hangs is CAF 0.17's own teardown of its
  // threads (a detached thread that misses its shutdown,
  // actor-framework#1196, fixed in CAF 0.18). Nothing of the program's is
  // left in it: the process goes on and its exit ends that thread.
  log::warn("the actor system's own teardown did not finish within {} s after every actor ended "
            "(threads: {}); going on without it",
            limit.count(), thread_states());
  lock.unlock();
  teardown.detach();
}

} // namespace hvactor

namespace hvactor::process_system {

namespace {

struct process_state {
  std::mutex mu;
  std::vector<configure_fn> types;
  std::weak_ptr<caf::actor_system> current;
  caf::actor_system* lent = nullptr;
};

process_state& global() {
  static auto* st = new process_state; // never destroyed: usable from static destructors
  return *st;
}

// Destroys a process system and its config once no share is left.
struct teardown {
  caf::actor_system_config* cfg;
  void operator()(caf::actor_system* sys) const {
    std::unique_ptr<caf::actor_system> owned{sys};
    destroy_bounded(owned, knobs::system_exit_limit);
    delete cfg;
  }
};

} // namespace

void add_types(configure_fn fn) {
  auto& st = global();
  std::lock_guard<std::mutex> lock{st.mu};
  if (std::find(st.types.begin(), st.types.end(), fn) == st.types.end())
    st.types.push_back(fn);
}

void apply_types(caf::actor_system_config& cfg) {
  auto& st = global();
  std::vector<configure_fn> fns;
  {
    std::lock_guard<std::mutex> lock{st.mu};
    fns = st.types;
  }
  for (auto fn : fns)
    fn(cfg);
}

share acquire() {
  auto& st = global();
  std::lock_guard<std::mutex> lock{st.mu};
  if (st.lent != nullptr)
    return share{st.lent, [](caf::actor_system*) {}};
  if (auto sys = st.current.lock())
    return sys;
  // A worker reaches its driver and the rendezvous store with its node's
  // TLS identity, if any (mutual TLS off loopback).
  auto tls = tls::from_env();
  tls::validate(tls);
  auto cfg = std::make_unique<caf::actor_system_config>();
  configure_actor_system(*cfg, threads, tls);
  for (auto fn : st.types)
    fn(*cfg);
  auto sys = std::make_unique<caf::actor_system>(*cfg);
  share out{sys.release(), teardown{cfg.release()}};
  st.current = out;
  return out;
}

std::shared_ptr<void> lend(caf::actor_system& sys) {
  auto& st = global();
  std::lock_guard<std::mutex> lock{st.mu};
  if (st.lent != nullptr)
    throw std::logic_error("process_system::lend: a system is lent already");
  st.lent = &sys;
  return std::shared_ptr<void>(&sys, [](void*) {
    auto& st = global();
    std::lock_guard<std::mutex> lock{st.mu};
    st.lent = nullptr;
  });
}

bool running() {
  auto& st = global();
  std::lock_guard<std::mutex> lock{st.mu};
  return st.lent != nullptr || !st.current.expired();
}

} // namespace hvactor::process_system
