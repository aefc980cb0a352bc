// The Gloo loop pacer (base/net/loop_pacer.cpp) with a real Gloo TCP device
// and a two-rank context in this process: the device's loop thread sleeps
// while idle (Gloo alone wakes it every 10 ms: 100 times a second), and
// tearing the context and the device down is still prompt (unregistering a
// socket and joining the loop wait for a tick of the loop, which the pacer
// gives them at once); and the loop does not spin while a rank's thread,
// preempted on the same core, holds a pair's lock (Gloo skips such events
// and comes straight back: without the pacer about 5 % of the exchanges
// below took a 4 ms scheduler tick or more).

#include "base/net/loop_pacer.hpp"

#include <dirent.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

using namespace std::chrono_literals;

namespace {

/// Voluntary context switches of every thread of this process so far.
long wakeups() {
  long sum = 0;
  DIR* dir = ::opendir("/proc/self/task");
  REQUIRE(dir != nullptr);
  while (auto* e = ::readdir(dir)) {
    if (e->d_name[0] == '.')
      continue;
    std::ifstream status{std::string{"/proc/self/task/"} + e->d_name + "/status"};
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0)
        sum += std::stol(line.substr(line.find(':') + 1));
  }
  ::closedir(dir);
  return sum;
}

// Two ranks of one process connected through `store` on `device`.
std::vector<std::shared_ptr<::gloo::rendezvous::Context>>
two_ranks(::gloo::rendezvous::HashStore& store,
          std::shared_ptr<::gloo::transport::Device>& device) {
  std::vector<std::shared_ptr<::gloo::rendezvous::Context>> ctx(2);
  std::vector<std::thread> connect;
  for (int r = 0; r < 2; ++r)
    connect.emplace_back([&, r] {
      ctx[r] = std::make_shared<::gloo::rendezvous::Context>(r, 2);
      ctx[r]->setTimeout(10s);
      ctx[r]->connectFullMesh(store, device);
    });
  for (auto& t : connect)
    t.join();
  return ctx;
}

} // namespace

TEST_SUITE("loop pacer") {

TEST_CASE("an idle Gloo device's loop sleeps, and its context and device still go at once") {
  ::gloo::rendezvous::HashStore store;
  ::gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = ::gloo::transport::tcp::CreateDevice(attr);
  auto ctx = two_ranks(store, device);
  std::this_thread::sleep_for(1200ms); // past the busy window of the connects
  CHECK(hvactor::loop_pacer::paced_loops() >= 1);
  auto before = wakeups();
  std::this_thread::sleep_for(1s);
  auto woke = wakeups() - before;
  MESSAGE("wake-ups of this process's threads in 1 s with an idle Gloo device: " << woke);
  CHECK(woke < 50); // Gloo's loop alone: about 100

  auto started = std::chrono::steady_clock::now();
  ctx.clear();
  device.reset();
  auto took = std::chrono::steady_clock::now() - started;
  MESSAGE("the contexts and the device went in "
          << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  CHECK(took < 300ms); // a tick per unregistered socket: an idle wait each without the wake-up
  CHECK(hvactor::loop_pacer::paced_loops() == 0); // the loop's epoll set was closed
}

TEST_CASE("a Gloo device destroyed long after its last context still goes at once") {
  ::gloo::rendezvous::HashStore store;
  ::gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = ::gloo::transport::tcp::CreateDevice(attr);
  two_ranks(store, device); // connected, then destroyed
  // Past the busy window of the sockets' removal: the loop sleeps its idle
  // wait, and only the join of its thread wakes it.
  std::this_thread::sleep_for(hvactor::loop_pacer::busy_window + 300ms);
  auto started = std::chrono::steady_clock::now();
  device.reset();
  auto took = std::chrono::steady_clock::now() - started;
  MESSAGE("the device went in " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                << " ms");
  CHECK(took < 100ms); // the idle wait (5 s) without the wake-up at the join
}

TEST_CASE("Gloo's loop does not spin away a core while a rank's thread holds a pair's lock") {
  // Two processes (a rank each, with its own device and loop thread) on
  // one core, as on a node with one core per rank.
  cpu_set_t before_pin;
  REQUIRE(::sched_getaffinity(0, sizeof before_pin, &before_pin) == 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &before_pin)) {
      CPU_SET(c, &one);
      break;
    }
  char dir[] = "/tmp/hvactor-pacer-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  constexpr int exchanges = 3000;
  // Exchanges of 4 bytes with the other rank; the count that took 3.5 ms or
  // more (a 4 ms scheduler tick), or -1 on an error.
  auto run_rank = [&](int rank) -> int {
    try {
      ::gloo::rendezvous::FileStore store{dir};
      ::gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = ::gloo::transport::tcp::CreateDevice(attr);
      auto ctx = std::make_shared<::gloo::rendezvous::Context>(rank, 2);
      ctx->setTimeout(10s);
      ctx->connectFullMesh(store, device);
      float mine = 1, theirs = 0;
      auto out = ctx->createUnboundBuffer(&mine, sizeof mine);
      auto in = ctx->createUnboundBuffer(&theirs, sizeof theirs);
      int stalls = 0;
      for (int i = 0; i < exchanges; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        in->recv(1 - rank, 7);
        out->send(1 - rank, 7);
        out->waitSend(10s);
        in->waitRecv(10s);
        if (std::chrono::steady_clock::now() - t0 > 3500us)
          ++stalls;
      }
      return stalls;
    } catch (const std::exception&) {
      return -1;
    }
  };
  REQUIRE(::sched_setaffinity(0, sizeof one, &one) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0)
    ::_exit(run_rank(1) < 0 ? 2 : 0);
  int stalls = run_rank(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::sched_setaffinity(0, sizeof before_pin, &before_pin);
  std::filesystem::remove_all(dir);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  MESSAGE("exchanges of rank 0 that took 3.5 ms or more: " << stalls << " of " << exchanges);
  REQUIRE(stalls >= 0);
  CHECK(stalls < exchanges / 100); // Gloo alone: about 5 %
}

} // TEST_SUITE
