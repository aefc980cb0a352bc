// Recursive doubling (collectives/backends/gloo/doubling.hpp), the allreduce and
// allgather of small messages among many ranks: n in-process ranks on loopback, each with its
// own Gloo device and hvactor's mesh. Every rank ends with the exact sum of
// integers, the same min, and the same bits of a float sum whose order of
// additions changes its value, for n = 2 to 9 (powers of two and the ranks
// beyond one, which hand their buffer over first); the peers each rank
// talks to are a symmetric relation, log2(n) of them. The negotiation
// header's exchange across nodes (issue 55): headers min-reduced, a small
// allreduce's data in the same messages, reduced only where every rank
// sent some.

#include <algorithm>
#include <cstring>
#include <future>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <gloo/transport/tcp/device.h>

#include "collectives/backends/gloo/doubling.hpp"
#include "collectives/backends/gloo/peer_abort.hpp"
#include "collectives/backends/gloo/peer_addresses.hpp"
#include "gloo_mesh.hpp"
#include "header_exchange_case.hpp"
#include "in_process_ranks.hpp"

using namespace std::chrono_literals;
using namespace hvactor::collectives;
using hvactor::test::check_header_exchange;
using hvactor::test::mesh_of;
using hvactor::test::on_every_rank;
namespace hvd = hvactor::hvd;


TEST_SUITE("doubling") {

TEST_CASE("each rank's peers are log2 of the ranks, and every pair is seen from both ends") {
  for (int n = 1; n <= 130; ++n) {
    CAPTURE(n);
    int p = 1;
    while (p * 2 <= n)
      p *= 2;
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      auto peers = doubling_peers(r, n);
      int logp = 0;
      for (int q = p; q > 1; q /= 2)
        ++logp;
      CHECK(peers.size() == static_cast<size_t>(r >= p ? 1 : logp + (r + p < n ? 1 : 0)));
      for (int q : peers) {
        CHECK(q >= 0);
        CHECK(q < n);
        CHECK(q != r);
        auto back = doubling_peers(q, n);
        CHECK(std::find(back.begin(), back.end(), r) != back.end());
      }
    }
  }
}

TEST_CASE("every rank gets the exact integer sum, the min, and the same float bits, for 2 to 9 "
          "ranks") {
  for (int n = 2; n <= 9; ++n) {
    CAPTURE(n);
    auto ctx = mesh_of(n);
    std::vector<std::vector<int64_t>> ints(static_cast<size_t>(n));
    std::vector<std::vector<float>> floats(static_cast<size_t>(n)), mins(static_cast<size_t>(n));
    on_every_rank(n, [&](int r) {
      auto i = static_cast<size_t>(r);
      ints[i] = {r + 1, -1000 * r, int64_t{1} << 40};
      // 1e8 + 1 + ... - 1e8: the order of the additions shows in the bits.
      floats[i] = {r == 0 ? 1e8f : r == 1 ? -1e8f : 1.0f + 0.1f * static_cast<float>(r),
                   0.1f * static_cast<float>(r)};
      mins[i] = {static_cast<float>(10 - r), static_cast<float>(r)};
      std::vector<std::byte> scratch;
      auto& c = ctx[i];
      doubling_allreduce(c, ints[i].data(), 3, hvd::dtype::int64, hvd::op::sum, scratch, 1, 5s);
      doubling_allreduce(c, floats[i].data(), 2, hvd::dtype::float32, hvd::op::sum, scratch, 2, 5s);
      doubling_allreduce(c, mins[i].data(), 2, hvd::dtype::float32, hvd::op::min, scratch, 3, 5s);
    });
    int64_t sum = n * (n + 1) / 2;
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      auto i = static_cast<size_t>(r);
      CHECK(ints[i] == std::vector<int64_t>{sum, -1000 * sum + 1000 * n, int64_t{n} << 40});
      CHECK(std::memcmp(floats[i].data(), floats[0].data(), 2 * sizeof(float)) == 0);
      CHECK(mins[i] == std::vector<float>{static_cast<float>(11 - n), 0.0f});
    }
    // The first element's value depends on the order (1e8 swallows the
    // small terms added to it): only its bits must agree; the second sums
    // without loss.
    CHECK(floats[0][1] == doctest::Approx(0.05 * n * (n - 1)).epsilon(1e-5));
  }
}

TEST_CASE("every rank gets every rank's block in rank order by doubling_allgatherv, for 2 to 9 "
          "ranks, blocks of 0 to 300 bytes") {
  for (int n = 2; n <= 9; ++n) {
    CAPTURE(n);
    auto ctx = mesh_of(n);
    // Rank r's block: (r * 37) % 301 bytes (rank 0 and some others empty),
    // each byte r + 1.
    std::vector<size_t> bytes;
    std::string expected;
    for (int r = 0; r < n; ++r) {
      bytes.push_back(static_cast<size_t>(r * 37 % 301) * (r % 3 == 1 ? 0 : 1));
      expected += std::string(bytes.back(), static_cast<char>(r + 1));
    }
    std::vector<std::string> got(static_cast<size_t>(n));
    on_every_rank(n, [&](int r) {
      auto i = static_cast<size_t>(r);
      std::string mine(bytes[i], static_cast<char>(r + 1));
      got[i].assign(expected.size(), '\0');
      doubling_allgatherv(ctx[i], mine.data(), got[i].data(), bytes, 4, 5s);
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(got[static_cast<size_t>(r)] == expected);
    }
  }
}

TEST_CASE("the header exchange min-reduces headers and reduces the data only when every rank "
          "sent some, for 2 to 9 ranks") {
  for (int n = 2; n <= 9; ++n) {
    CAPTURE(n);
    auto ctx = mesh_of(n);
    for (int alone : {-1, 0, n - 1}) { // the rank that sends its header alone (-1: none)
      CAPTURE(alone);
      check_header_exchange(n, alone, [&](int r, std::vector<int64_t>& header,
                                          std::vector<float>* data,
                                          std::vector<std::byte>& frame) {
        std::vector<std::byte> scratch;
        auto combine = [&](void* d, size_t bytes, size_t, const doubling_fold& fold,
                           const std::function<size_t()>&) {
          doubling_combine(ctx[static_cast<size_t>(r)], d, bytes, fold, scratch, 5, 5s);
        };
        doubling_header_exchange(combine, header.data(), header.size(), 2,
                                 data ? data->data() : nullptr, data ? data->size() : 0,
                                 hvd::dtype::float32, hvd::op::sum, frame);
      });
    }
  }
}

TEST_CASE("a peer that never takes part fails the wait within the timeout") {
  auto ctx = mesh_of(4);
  auto started = std::chrono::steady_clock::now();
  on_every_rank(3, [&](int r) { // rank 3 stays away
    int64_t x = r;
    std::vector<std::byte> scratch;
    CHECK_THROWS(doubling_allreduce(ctx[static_cast<size_t>(r)], &x, 1, hvd::dtype::int64,
                                    hvd::op::sum, scratch, 1, 500ms));
  });
  CHECK(std::chrono::steady_clock::now() - started < 5s);
}

} // TEST_SUITE
