// The announcement that stops every rank's Gloo waits once one rank's call
// failed (collectives/backends/gloo/peer_abort.hpp): its text, the first
// announcement winning, and raise() waking a ring allreduce that waits on
// Gloo's own scratch buffer (two in-process ranks over loopback TCP). Its
// effect on whole jobs is in collectives_failure_test and
// cluster_failure_test.

#include <chrono>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include "collectives/backends/gloo/peer_abort.hpp"

using hvactor::collectives::abortable_context;
using hvactor::collectives::announcement;
using hvactor::collectives::parse_announcement;
using hvactor::collectives::peer_abort;
using hvactor::collectives::peer_announced_failure;

TEST_SUITE("peer_abort") {

TEST_CASE("an announcement reads back as its announcer and culprit; anything else is refused") {
  int a = 0, c = 0;
  REQUIRE(parse_announcement(announcement(2, 3), a, c));
  CHECK(a == 2);
  CHECK(c == 3);
  REQUIRE(parse_announcement(announcement(0, -1), a, c));
  CHECK(a == 0);
  CHECK(c == -1);
  for (const char* bad : {"", "2", "2 ", " 2 3", "2 3 ", "2  3", "x 3", "2 y", "2 3x",
                          "99999999999999999999 1", "1 99999999999999999999", "2\n3"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_announcement(bad, a, c));
  }
}

TEST_CASE("once raised, every check throws the first announcement; later ones change nothing") {
  peer_abort abort;
  CHECK_NOTHROW(abort.check());
  abort.raise(1, 3);
  abort.raise(2, 0);
  abort.raise("the generation ended");
  for (int i = 0; i < 2; ++i) {
    try {
      abort.check();
      FAIL("check() did not throw");
    } catch (const peer_announced_failure& e) {
      CHECK(e.announcer == 1);
      CHECK(e.culprit == 3);
      CHECK(std::string{e.what()} == "rank 1 announced that the collectives failed");
    }
  }
  peer_abort ended;
  ended.raise("rendezvous scope 'job/3' was closed");
  try {
    ended.check();
    FAIL("check() did not throw");
  } catch (const peer_announced_failure& e) {
    CHECK(e.announcer == -1);
    CHECK(std::string{e.what()} == "rendezvous scope 'job/3' was closed");
  }
}

TEST_CASE("raise() wakes a ring allreduce waiting on a silent peer inside Gloo's own buffers") {
  using namespace std::chrono_literals;
  // Rank 1 connects and then never calls: rank 0's ring waits in its
  // reduce-scatter on Gloo's scratch buffer, which the abortable context
  // made too. Without raise() it would wait out its 30 s timeout.
  ::gloo::rendezvous::HashStore store;
  ::gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = ::gloo::transport::tcp::CreateDevice(attr);
  std::vector<std::shared_ptr<peer_abort>> abort{std::make_shared<peer_abort>(),
                                                std::make_shared<peer_abort>()};
  std::vector<std::shared_ptr<abortable_context>> ctx(2);
  std::vector<std::thread> connect;
  for (int r = 0; r < 2; ++r)
    connect.emplace_back([&, r] {
      ctx[r] = std::make_shared<abortable_context>(r, 2, abort[r]);
      ctx[r]->setTimeout(30s);
      ctx[r]->connect(store, device);
    });
  for (auto& t : connect)
    t.join();
  std::vector<float> data(1 << 20, 1.0f); // 4 MiB: the ring
  auto started = std::chrono::steady_clock::now();
  auto call = std::async(std::launch::async, [&] {
    ::gloo::AllreduceOptions opts(ctx[0]);
    opts.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
    opts.setOutput<float>(ctx[0]->createUnboundBuffer(data.data(), data.size() * sizeof(float)));
    opts.setReduceFunction([](void* c, const void* a, const void* b, size_t n) {
      auto* out = static_cast<float*>(c);
      for (size_t i = 0; i < n; ++i)
        out[i] = static_cast<const float*>(a)[i] + static_cast<const float*>(b)[i];
    });
    opts.setTimeout(30s);
    ::gloo::allreduce(opts);
  });
  std::this_thread::sleep_for(300ms);
  REQUIRE(call.wait_for(0s) == std::future_status::timeout); // waiting on rank 1
  abort[0]->raise("peer rank 1 is unreachable", 1);
  REQUIRE(call.wait_for(5s) == std::future_status::ready);
  auto took = std::chrono::steady_clock::now() - started;
  CHECK_THROWS_AS(call.get(), peer_announced_failure);
  CHECK(took < 5s);
  try {
    abort[0]->check();
    FAIL("check() did not throw");
  } catch (const peer_announced_failure& e) {
    CHECK(e.culprit == 1);
    CHECK(std::string{e.what()} == "peer rank 1 is unreachable");
  }
}

} // TEST_SUITE
