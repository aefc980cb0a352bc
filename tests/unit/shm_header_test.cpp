// The shared-memory solo round (communicator::allreduce_with_header): the
// negotiation header min-reduced and the data reduced in one step, with the
// header's digest and small data in each rank's words line. Ranks are
// threads of this process on one segment; every case runs many steps, so
// that both sets of the line and of the slots are used. Threads check with
// CHECK (a REQUIRE would leave the other ranks waiting for their peer).

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include "collectives/backends/shm/communicator.hpp"
#include "shm_group.hpp"

namespace shm = hvactor::collectives::shm;
namespace hvd = hvactor::hvd;
using namespace std::chrono_literals;

namespace {

constexpr size_t words = 14, data_word = 9;

} // namespace

TEST_SUITE("shared-memory solo round") {

TEST_CASE("equal headers: every rank keeps its header and gets the sum, inline (<= 16 B) and "
          "from the slots (larger), step after step") {
  for (int n : {2, 3, 4}) {
    for (size_t count : {size_t{1}, size_t{4}, size_t{5}, size_t{300}}) {
      auto comms = hvactor::test::shm_group(n);
      hvactor::test::on_every_rank(n, [&](int k) {
        for (int step = 0; step < 200; ++step) {
          std::vector<int64_t> header(words, step);
          header[data_word] = -1;
          std::vector<float> data(count);
          for (size_t i = 0; i < count; ++i)
            data[i] = static_cast<float>(k + 1) * static_cast<float>(i + 1 + step);
          int seen = 0;
          bool done = comms[static_cast<size_t>(k)]->allreduce_with_header(
            header.data(), words, data_word, data.data(), count, hvd::dtype::float32, hvd::op::sum,
            [&](std::span<const int64_t> h) {
              ++seen;
              return h[0] == step;
            });
          CHECK(done);
          CHECK(seen == 1);
          CHECK(header[0] == step);
          CHECK(header[data_word] == 0);
          float ranks_sum = static_cast<float>(n * (n + 1) / 2);
          for (size_t i = 0; i < count; ++i)
            CHECK(data[i] == ranks_sum * static_cast<float>(i + 1 + step));
        }
      });
    }
  }
}

TEST_CASE("headers that differ are min-reduced on every rank; data not accepted stays as it was") {
  const int n = 3;
  auto comms = hvactor::test::shm_group(n);
  std::mt19937_64 seed{11};
  std::vector<uint64_t> seeds(200);
  for (auto& s : seeds)
    s = seed();
  hvactor::test::on_every_rank(n, [&](int k) {
    for (size_t step = 0; step < seeds.size(); ++step) {
      // The same random headers on every rank, but rank step % n lowers one
      // word (every other step): the min must be that rank's.
      std::mt19937_64 rng{seeds[step]};
      std::vector<int64_t> header(words);
      for (auto& w : header)
        w = static_cast<int64_t>(rng() % 1000);
      header[data_word] = -1;
      auto want = header;
      size_t low = 1 + rng() % (words - 1);
      if (low == data_word)
        low = 0;
      bool differs = step % 2 == 0;
      if (differs) {
        want[low] -= 7;
        if (static_cast<size_t>(k) == step % n)
          header[low] -= 7;
      }
      want[data_word] = 0;
      float x = static_cast<float>(k + 1);
      bool done = comms[static_cast<size_t>(k)]->allreduce_with_header(
        header.data(), words, data_word, &x, 1, hvd::dtype::float32, hvd::op::sum,
        [&](std::span<const int64_t>) { return !differs; });
      CHECK(done);
      CHECK(header == want);
      CHECK(x == (differs ? static_cast<float>(k + 1) : 6.0f));
    }
  });
}

TEST_CASE("a rank that exchanges its header alone (a plain min allreduce) meets the others' "
          "solo round in the same step: all get the min, nobody takes the data") {
  const int n = 3;
  auto comms = hvactor::test::shm_group(n);
  hvactor::test::on_every_rank(n, [&](int k) {
    for (int step = 0; step < 100; ++step) {
      std::vector<int64_t> header(words, 50 + step);
      header[data_word] = -1;
      auto& c = *comms[static_cast<size_t>(k)];
      if (k == step % n) {
        c.allreduce(header.data(), words, hvd::dtype::int64, hvd::op::min);
        CHECK(header[data_word] == -1);
      } else {
        float x = 2.0f;
        bool accepted = false;
        CHECK(c.allreduce_with_header(header.data(), words, data_word, &x, 1,
                                        hvd::dtype::float32, hvd::op::sum,
                                        [&](std::span<const int64_t> h) {
                                          accepted = h[data_word] == 0;
                                          return true;
                                        }));
        CHECK_FALSE(accepted);
        CHECK(header[data_word] == -1);
        CHECK(x == 2.0f);
      }
      CHECK(header[0] == 50 + step);
    }
  });
}

} // TEST_SUITE
