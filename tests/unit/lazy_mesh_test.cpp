// Gloo's pairs connected on first use (lazy_mesh, peer_addresses.hpp) and
// the peers each collective needs (mesh_peers.hpp): every relation is
// symmetric (both ends of a pair connect it in the same operation); n
// in-process ranks on loopback connect only what a ring allreduce and then
// recursive doubling need, and both run exactly; a rank waiting for a peer
// that never connects is released at once by close_unconnected() (what a
// peer's announced failure calls), with the checkpoint's exception.

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <gloo/allreduce.h>
#include <gloo/transport/tcp/device.h>

#include "collectives/backends/gloo/doubling.hpp"
#include "collectives/backends/gloo/mesh_peers.hpp"
#include "collectives/backends/gloo/peer_abort.hpp"
#include "collectives/backends/gloo/peer_addresses.hpp"
#include "in_process_ranks.hpp"

using namespace std::chrono_literals;
using namespace hvactor::collectives;
using hvactor::test::on_every_rank;
namespace hvd = hvactor::hvd;

namespace {

// n ranks whose pairs listen and whose cards every rank holds; none
// connected.
struct ranks {
  std::vector<std::shared_ptr<abortable_context>> ctx;
  std::vector<std::shared_ptr<lazy_mesh>> mesh;
  std::vector<mesh_card> cards;

  explicit ranks(int n) : cards(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r) {
      ::gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      std::shared_ptr<::gloo::transport::Device> dev = ::gloo::transport::tcp::CreateDevice(attr);
      ctx.push_back(std::make_shared<abortable_context>(r, n, std::make_shared<peer_abort>()));
      ctx.back()->setTimeout(10s);
      ctx.back()->connect(dev, 10s, [&](::gloo::transport::Context& tc) {
        cards[static_cast<size_t>(r)] = create_pairs(tc, "node-" + std::to_string(r));
      });
    }
    for (int r = 0; r < n; ++r)
      mesh.push_back(std::make_shared<lazy_mesh>(*ctx[static_cast<size_t>(r)]->transport(),
                                                 ctx[static_cast<size_t>(r)]->transport(), r,
                                                 cards, 5s));
  }
};

template <class Peers>
void check_symmetric(int n, Peers peers_of) {
  for (int r = 0; r < n; ++r)
    for (int q : peers_of(r)) {
      CAPTURE(r);
      CAPTURE(q);
      REQUIRE(q >= 0);
      REQUIRE(q < n);
      CHECK(q != r);
      auto back = peers_of(q);
      CHECK(std::find(back.begin(), back.end(), r) != back.end());
    }
}

} // namespace

TEST_SUITE("lazy_mesh") {

TEST_CASE("ring, broadcast (every root), barrier and all are symmetric relations; the tree and "
          "the barrier take about log2(n) peers") {
  for (int n = 1; n <= 70; ++n) {
    CAPTURE(n);
    check_symmetric(n, [n](int r) { return mesh_peers::ring(r, n); });
    check_symmetric(n, [n](int r) { return mesh_peers::barrier(r, n); });
    check_symmetric(n, [n](int r) { return mesh_peers::all(r, n); });
    for (int root = 0; root < n; ++root)
      check_symmetric(n, [n, root](int r) { return mesh_peers::broadcast(r, n, root); });
    for (int r = 0; r < n; ++r) {
      CHECK(mesh_peers::ring(r, n).size() == static_cast<size_t>(std::min(n - 1, 2)));
      CHECK(mesh_peers::all(r, n).size() == static_cast<size_t>(n - 1));
      CHECK(mesh_peers::broadcast(r, n, 0).size() <= 7);
      CHECK(mesh_peers::barrier(r, n).size() <= 14);
    }
  }
  // Gloo's tree from root 2 of 6: virtual ranks 0-1, 0-2, 1-3, 0-4, 1-5.
  CHECK(mesh_peers::broadcast(2, 6, 2) == std::vector<int>{3, 4, 0});
  CHECK(mesh_peers::broadcast(1, 6, 2) == std::vector<int>{3});
}

TEST_CASE("6 ranks connect only the ring's pairs for a ring allreduce, then doubling's, and "
          "both sum exactly") {
  const int n = 6;
  ranks job{n};
  std::vector<std::vector<int>> data(n);
  on_every_rank(n, [&](int r) {
    auto i = static_cast<size_t>(r);
    job.mesh[i]->ensure(mesh_peers::ring(r, n));
    data[i] = {r, 10 * r};
    ::gloo::AllreduceOptions opts(job.ctx[i]);
    opts.setOutput<int>(job.ctx[i]->createUnboundBuffer(data[i].data(), 2 * sizeof(int)));
    opts.setReduceFunction([](void* c, const void* a, const void* b, size_t k) {
      for (size_t e = 0; e < k; ++e)
        static_cast<int*>(c)[e] = static_cast<const int*>(a)[e] + static_cast<const int*>(b)[e];
    });
    opts.setTimeout(5s);
    ::gloo::allreduce(opts);
  });
  for (int r = 0; r < n; ++r) {
    CHECK(data[static_cast<size_t>(r)] == std::vector<int>{15, 150});
    CHECK(job.mesh[static_cast<size_t>(r)]->connected() == 2);
  }
  std::vector<int64_t> sums(n);
  on_every_rank(n, [&](int r) {
    auto i = static_cast<size_t>(r);
    job.mesh[i]->ensure(doubling_peers(r, n));
    sums[i] = r + 1;
    std::vector<std::byte> scratch;
    doubling_allreduce(job.ctx[i], &sums[i], 1, hvd::dtype::int64, hvd::op::sum, scratch, 7, 5s);
  });
  for (int r = 0; r < n; ++r) {
    CHECK(sums[static_cast<size_t>(r)] == 21);
    CHECK(job.mesh[static_cast<size_t>(r)]->connected() < static_cast<size_t>(n - 1) + (r < 2));
  }
}

TEST_CASE("a rank waiting for a peer that never connects is released by close_unconnected() "
          "with the checkpoint's exception") {
  ranks job{2};
  // Both listen on 127.0.0.1: the rank whose port compares smaller (as
  // Gloo compares them: in network byte order, read as a number) accepts
  // and waits; the other never calls ensure().
  auto raw = [](int port) { return htons(static_cast<uint16_t>(port)); };
  int listener = raw(job.cards[0].ports[1]) < raw(job.cards[1].ports[0]) ? 0 : 1;
  auto started = std::chrono::steady_clock::now();
  std::atomic<bool> raised{false};
  auto checkpoint = [&] {
    if (raised)
      throw std::runtime_error("announced");
  };
  auto waiter = std::async(std::launch::async, [&] {
    return job.mesh[static_cast<size_t>(listener)]->ensure({1 - listener}, checkpoint);
  });
  std::this_thread::sleep_for(300ms);
  raised = true;
  for (auto& m : job.mesh)
    m->close_unconnected();
  REQUIRE(waiter.wait_for(3s) == std::future_status::ready);
  CHECK_THROWS_WITH(waiter.get(), "announced");
  CHECK(std::chrono::steady_clock::now() - started < 3s);
}

} // TEST_SUITE
