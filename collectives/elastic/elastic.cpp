// hvd::elastic: the worker side of an elastic job (elastic.hpp,
// internal/elastic_session.hpp).

#include "hvactor/elastic.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <cstring>

#include <fmt/format.h>

#include "collectives/elastic/elastic_session.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/knobs_elastic.hpp"
#include "base/internal/log.hpp"
#include "collectives/rendezvous/rendezvous_client.hpp"

namespace hvactor::hvd::elastic {

namespace detail {

namespace {

// The process's elastic session: one store client for the job's elastic
// scope, kept across resets.
struct session {
  std::mutex mu;
  std::unique_ptr<collectives::rendezvous_client> client;
  std::string job;
  std::string worker;
  /// The generation to wait for next, and the one joined last.
  int next = 0;
  int current = -1;
  std::atomic<int> update{0};
  std::shared_ptr<void> watch;
  reset_timing timing;
  // check_host_updates' agreement (every rank's copy is the same): the
  // checks to skip before the next broadcast, and on rank 0 the pace of
  // checks since the last broadcast.
  int skip = 0;
  int checks_since = 0;
  std::chrono::steady_clock::time_point last_broadcast;
};

session& global() {
  static session* s = new session; // never destroyed, like hvd's state
  return *s;
}

std::vector<char> bytes(const std::string& text) {
  return {text.begin(), text.end()};
}

std::string text(const std::vector<char>& b) {
  return {b.begin(), b.end()};
}

std::chrono::milliseconds wait_limit() {
  return std::chrono::milliseconds{env::get_int64(env::elastic_wait_ms, 600'000 + 30'000)};
}

// Connects the session's client once (the caller holds the mutex).
collectives::rendezvous_client& client(session& s) {
  if (s.client)
    return *s.client;
  auto addr = env::get(env::rendezvous_addr).value_or("");
  auto port = env::get_int(env::rendezvous_port, 0);
  auto scope = env::get(env::rendezvous_scope).value_or("");
  auto slash = scope.rfind('/');
  if (addr.empty() || port <= 0 || slash == std::string::npos)
    throw error(fmt::format("hvd::init: an elastic job needs {}, {} and {} (\"<job>/<gen>\")",
                            env::rendezvous_addr, env::rendezvous_port, env::rendezvous_scope));
  s.job = scope.substr(0, slash);
  s.worker = env::get(env::elastic_worker).value_or("");
  s.next = env::get_int(env::elastic_generation, 0);
  s.client = std::make_unique<collectives::rendezvous_client>(
    addr, static_cast<uint16_t>(port), s.job + "/elastic", std::chrono::milliseconds{30'000});
  return *s.client;
}

[[noreturn]] void leave_removed(int gen) {
  log::info("elastic: this worker was removed from the job in generation {}; leaving", gen);
  std::fflush(nullptr);
  ::_exit(0);
}

} // namespace

bool enabled() {
  return env::get(env::elastic).value_or("") == "1" && env::get(env::elastic_worker).has_value();
}

taken_assignment take_assignment() {
  auto& s = global();
  std::lock_guard<std::mutex> lk{s.mu};
  auto& c = client(s);
  auto value = c.get(elastic_protocol::assign_key(s.worker, s.next), wait_limit());
  int gen = s.next;
  // Skip generations superseded meanwhile.
  if (auto latest = c.try_get(elastic_protocol::latest_key(s.worker))) {
    int newest = std::atoi(text(*latest).c_str());
    if (newest > gen) {
      gen = newest;
      value = c.get(elastic_protocol::assign_key(s.worker, gen), wait_limit());
    }
  }
  s.next = gen + 1;
  s.timing.assigned = std::chrono::steady_clock::now();
  auto where = elastic_protocol::decode(value);
  if (where.removed)
    leave_removed(gen);
  return {gen, where, fmt::format("{}/{}", s.job, gen)};
}

void joined(int gen, int rank) {
  auto& s = global();
  std::lock_guard<std::mutex> lk{s.mu};
  auto& c = client(s);
  s.current = gen;
  s.update = 0;
  s.timing.connected = std::chrono::steady_clock::now();
  s.skip = 0;
  s.checks_since = 0;
  s.last_broadcast = s.timing.connected;
  c.set(elastic_protocol::joined_key(gen, s.worker), {});
  if (rank == 0)
    s.watch = c.watch(elastic_protocol::changed_key(gen), [&s](const std::vector<char>& v) {
      s.update = std::atoi(text(v).c_str());
    });
}

void request_reset(int gen, const std::string& why) {
  auto& s = global();
  std::lock_guard<std::mutex> lk{s.mu};
  if (!s.client || gen < 0)
    return;
  try {
    s.client->set(elastic_protocol::reset_key(gen), bytes(why));
  } catch (const std::exception& e) {
    log::debug("elastic: could not ask for a reset: {}", e.what()); // the scope moved on
  }
}

void left() {
  auto& s = global();
  std::lock_guard<std::mutex> lk{s.mu};
  s.watch.reset();
  s.update = 0;
}

int take_update() {
  return global().update.exchange(0);
}

// The first broadcast carries the size and up to this many words of data:
// a small state (counters, an epoch) is synced with one collective, which
// at 64 ranks on loaded hosts is a few hundred ms of every reset.
constexpr size_t sync_frame_words = 128;

void broadcast_bytes(std::vector<char>& data, int root) {
  bool me = hvd::rank() == root;
  // hvd has no byte type: whole int64 words, the last one padded.
  std::vector<int64_t> frame(sync_frame_words, 0);
  constexpr size_t inline_bytes = (sync_frame_words - 1) * sizeof(int64_t);
  if (me) {
    frame[0] = static_cast<int64_t>(data.size());
    std::memcpy(frame.data() + 1, data.data(), std::min(data.size(), inline_bytes));
  }
  hvd::broadcast(std::span<int64_t>(frame), root);
  int64_t n = frame[0];
  if (n < 0)
    throw collective_error(
      fmt::format("hvd::elastic: root rank {} announced {} bytes of state", root, n), root);
  auto size = static_cast<size_t>(n);
  size_t head = std::min(size, inline_bytes);
  size_t rest = size - head;
  std::vector<int64_t> words((rest + 7) / 8);
  if (me && rest > 0)
    std::memcpy(words.data(), data.data() + head, rest);
  if (!words.empty())
    hvd::broadcast(std::span<int64_t>(words), root);
  data.resize(size);
  if (head > 0)
    std::memcpy(data.data(), frame.data() + 1, head);
  if (rest > 0)
    std::memcpy(data.data() + head, words.data(), rest);
}

void run_loop(state& st, const std::function<void()>& attempt) {
  if (!hvd::is_initialized())
    hvd::init();
  bool skip_sync = false;
  bool reset = false;
  for (;;) {
    try {
      if (!skip_sync)
        st.sync();
      if (reset)
        global().timing.synced = std::chrono::steady_clock::now();
      attempt();
      return;
    } catch (const hosts_updated_interrupt& e) {
      log::debug("elastic: hosts changed ({}); resetting", static_cast<int>(e.update()));
      skip_sync = e.skip_sync();
    } catch (const collective_error& e) {
      log::info("elastic: collectives failed ({}); restoring the last commit", e.what());
      request_reset(generation(), e.what());
      st.restore();
      skip_sync = false;
    }
    reset = true;
    global().timing.failed = std::chrono::steady_clock::now();
    hvd::shutdown();
    hvd::init();
    st.on_reset();
  }
}

} // namespace detail

hosts_updated_interrupt::hosts_updated_interrupt(host_update update)
  : error(fmt::format("the elastic job's hosts changed ({})",
                      update == host_update::removed ? "removed"
                      : update == host_update::added ? "added"
                                                     : "added and removed")),
    update_(update) {
}

void check_host_updates() {
  if (!detail::enabled() || !hvd::is_initialized())
    return;
  // A broadcast per check would cost a small collective per step (Horovod
  // does that). Instead rank 0 tells every rank with each broadcast how
  // many checks to skip before the next one, so that they come about every
  // knobs::elastic_check_interval: every rank skips the same checks, and a
  // change is seen at most that much later.
  auto& s = detail::global();
  if (s.skip > 0) {
    --s.skip;
    return;
  }
  int32_t msg[2] = {0, 0};
  if (hvd::rank() == 0) {
    auto now = std::chrono::steady_clock::now();
    msg[0] = detail::take_update();
    double per_check = std::chrono::duration<double>(now - s.last_broadcast).count()
                       / std::max(1, s.checks_since);
    double interval = std::chrono::duration<double>(knobs::elastic_check_interval).count();
    msg[1] = s.checks_since == 0 || per_check <= 0
               ? 0
               : static_cast<int32_t>(std::clamp(interval / per_check - 1, 0.0, 1000.0));
    s.last_broadcast = now;
  }
  hvd::broadcast(std::span<int32_t>(msg, 2), 0);
  s.skip = msg[1];
  s.checks_since = s.skip + 1;
  if (msg[0] != 0)
    throw hosts_updated_interrupt(static_cast<host_update>(msg[0]));
}

reset_timing last_reset() {
  return detail::global().timing;
}

int generation() {
  return std::max(0, detail::global().current);
}

void state::commit() {
  save();
  check_host_updates();
}

void state::check_host_updates() {
  elastic::check_host_updates();
}

void state::register_reset_callback(std::function<void()> fn) {
  callbacks_.push_back(std::move(fn));
}

void state::on_reset() {
  for (auto& fn : callbacks_)
    fn();
}

} // namespace hvactor::hvd::elastic
