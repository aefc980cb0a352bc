// The small-message lane (issue 55, collectives/backends/gloo/small_lane.hpp): the
// negotiation header's exchange across nodes over Gloo pairs in sync mode,
// read on the calling thread with a polling window (base/net/recv_spin.hpp).
// The window itself over a socket pair: a message that comes during it or
// after it is read whole, a wake-up descriptor ends a wait at once with
// ECONNABORTED, the timeout with EAGAIN, and reads outside a scope block as
// before. The lane over n in-process ranks: the same headers and data as
// the exchange over Gloo's ordinary pairs, for 2 to 9 ranks and several
// rounds; a raised abort ends a read that waits for a rank that stays away
// at once, a peer that never answers fails it by the timeout, and one that
// closes fails it at once, each naming the peer.

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <gloo/common/error.h>

#include "base/net/recv_spin.hpp"
#include "collectives/backends/gloo/doubling.hpp"
#include "collectives/backends/gloo/small_lane.hpp"
#include "gloo_mesh.hpp"
#include "header_exchange_case.hpp"
#include "in_process_ranks.hpp"

using namespace std::chrono_literals;
using namespace hvactor::collectives;
using hvactor::test::check_header_exchange;
using hvactor::test::mesh_of;
using hvactor::test::on_every_rank;
namespace hvd = hvactor::hvd;
namespace recv_spin = hvactor::recv_spin;
using clock_type = std::chrono::steady_clock;

namespace {

struct socket_pair {
  int fd[2] = {-1, -1};
  socket_pair() {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd) == 0);
  }
  ~socket_pair() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
};

struct event_fd {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ~event_fd() {
    ::close(fd);
  }
};

// Lanes over every rank's doubling peers of `ctx` (one abort each).
struct lanes {
  std::vector<std::shared_ptr<peer_abort>> abort;
  std::vector<std::unique_ptr<small_lane>> lane;
  lanes(const std::vector<std::shared_ptr<abortable_context>>& ctx,
        std::chrono::milliseconds timeout) {
    int n = static_cast<int>(ctx.size());
    for (int r = 0; r < n; ++r) {
      auto& c = ctx[static_cast<size_t>(r)];
      std::map<int, ::gloo::transport::Pair*> pairs;
      for (int peer : doubling_peers(r, n))
        pairs[peer] = c->transport()->getPair(peer).get();
      abort.push_back(std::make_shared<peer_abort>());
      lane.push_back(std::make_unique<small_lane>(
        c, std::move(pairs), lane_capacity, abort.back(), timeout,
        [](int peer) { return "<rank " + std::to_string(peer) + "'s address>"; }));
    }
  }
};

// rank r's lane exchanging one header of `words` words with `data`.
void exchange(small_lane& lane, int n, int r, std::vector<int64_t>& header, size_t data_word,
              std::vector<float>* data, std::vector<std::byte>& frame) {
  auto combine = [&](void* d, size_t bytes, size_t words, const doubling_fold& fold,
                     const std::function<size_t()>& sending) {
    lane.combine(n, r, d, bytes, words, fold, sending);
  };
  doubling_header_exchange(combine, header.data(), header.size(), data_word,
                           data ? data->data() : nullptr, data ? data->size() : 0,
                           hvd::dtype::float32, hvd::op::sum, frame);
}

} // namespace

TEST_SUITE("small lane") {

TEST_CASE("a read in a polling window gets a message sent during the window or after it") {
  socket_pair sp;
  event_fd wake;
  for (auto delay : {0us, 50us, 20000us}) {
    CAPTURE(delay.count());
    std::thread writer{[&] {
      std::this_thread::sleep_for(delay);
      REQUIRE(::write(sp.fd[1], "hello", 5) == 5);
    }};
    char buf[16] = {};
    ssize_t n;
    {
      recv_spin::scope spin{100us, wake.fd, 5000ms};
      n = ::recv(sp.fd[0], buf, sizeof buf, 0);
    }
    writer.join();
    CHECK(n == 5);
    CHECK(std::string(buf, 5) == "hello");
  }
  CHECK(recv_spin::current() == nullptr);
}

TEST_CASE("a wake-up ends a read's wait at once with ECONNABORTED, the timeout with EAGAIN") {
  socket_pair sp;
  event_fd wake;
  std::thread waker{[&] {
    std::this_thread::sleep_for(100ms);
    uint64_t one = 1;
    REQUIRE(::write(wake.fd, &one, sizeof one) == sizeof one);
  }};
  char buf[4];
  auto t0 = clock_type::now();
  ssize_t n;
  int err;
  {
    recv_spin::scope spin{100us, wake.fd, 30000ms};
    n = ::recv(sp.fd[0], buf, sizeof buf, 0);
    err = errno;
  }
  waker.join();
  CHECK(n == -1);
  CHECK(err == ECONNABORTED);
  CHECK(clock_type::now() - t0 < 2s);

  event_fd quiet;
  t0 = clock_type::now();
  {
    recv_spin::scope spin{100us, quiet.fd, 300ms};
    n = ::recv(sp.fd[0], buf, sizeof buf, 0);
    err = errno;
  }
  auto took = clock_type::now() - t0;
  CHECK(n == -1);
  CHECK(err == EAGAIN);
  CHECK(took >= 300ms);
  CHECK(took < 3s);
}

TEST_CASE("scopes nest, and a read outside any scope or with MSG_DONTWAIT is libc's") {
  socket_pair sp;
  char buf[4];
  {
    recv_spin::scope outer{100us, -1, 1000ms};
    {
      recv_spin::scope inner{10us, -1, 200ms};
      CHECK(recv_spin::current() == &inner);
    }
    CHECK(recv_spin::current() == &outer);
    auto t0 = clock_type::now();
    CHECK(::recv(sp.fd[0], buf, sizeof buf, MSG_DONTWAIT) == -1);
    CHECK(errno == EAGAIN);
    CHECK(clock_type::now() - t0 < 100ms);
  }
  CHECK(recv_spin::current() == nullptr);
  // Outside a scope a blocking read blocks until the peer writes.
  std::thread writer{[&] {
    std::this_thread::sleep_for(50ms);
    REQUIRE(::write(sp.fd[1], "x", 1) == 1);
  }};
  CHECK(::recv(sp.fd[0], buf, sizeof buf, 0) == 1);
  writer.join();
}

TEST_CASE("the lane's header exchange gives what Gloo's ordinary pairs give, for 2 to 9 ranks") {
  for (int n = 2; n <= 9; ++n) {
    CAPTURE(n);
    auto ctx = mesh_of(n);
    lanes l{ctx, 10s};
    for (int alone : {-1, 0, n - 1, -1}) { // the rank sending its header alone (-1: none)
      CAPTURE(alone);
      check_header_exchange(n, alone, [&](int r, std::vector<int64_t>& header,
                                          std::vector<float>* data,
                                          std::vector<std::byte>& frame) {
        exchange(*l.lane[static_cast<size_t>(r)], n, r, header, 2, data, frame);
      });
    }
  }
}

TEST_CASE("the lane carries up to lane_data_bytes of data with the header, for 2 to 9 ranks, "
          "with ranks that send their header alone or other data") {
  for (int n = 2; n <= 9; ++n) {
    CAPTURE(n);
    auto ctx = mesh_of(n);
    lanes l{ctx, 10s};
    const size_t most = lane_data_bytes / sizeof(float);
    CHECK(most * sizeof(float) + 5 * sizeof(int64_t) <= lane_capacity);
    for (size_t count : {size_t{300}, most, size_t{1000}, most}) { // 1.2 KiB up to the bound
      CAPTURE(count);
      for (int alone : {-1, 0, n - 1}) {
        CAPTURE(alone);
        check_header_exchange(
          n, alone,
          [&](int r, std::vector<int64_t>& header, std::vector<float>* data,
              std::vector<std::byte>& frame) {
            exchange(*l.lane[static_cast<size_t>(r)], n, r, header, 2, data, frame);
          },
          count);
      }
    }
    // Ranks with different data (different operations: their headers
    // differ too) meet in the same steps; every header comes back
    // min-reduced, and the lane is in step for the next exchange.
    on_every_rank(n, [&](int r) {
      std::vector<int64_t> header{r, 0};
      std::vector<float> data(r % 2 == 0 ? most : 10, 1.0f);
      std::vector<std::byte> frame;
      exchange(*l.lane[static_cast<size_t>(r)], n, r, header, 1, &data, frame);
      CHECK(header == std::vector<int64_t>{0, 0});
    });
    check_header_exchange(n, -1, [&](int r, std::vector<int64_t>& header,
                                     std::vector<float>* data, std::vector<std::byte>& frame) {
      exchange(*l.lane[static_cast<size_t>(r)], n, r, header, 2, data, frame);
    });
  }
}

TEST_CASE("a message over the lane's capacity is refused before anything is sent") {
  auto ctx = mesh_of(2);
  lanes l{ctx, 10s};
  std::vector<std::byte> big(lane_capacity + 1);
  auto fold = [](const void*, bool) {};
  auto sending = [&] { return big.size(); };
  CHECK_THROWS_AS(l.lane[0]->combine(2, 0, big.data(), big.size(), 0, fold, sending),
                  std::invalid_argument);
  // The lane still works: nothing went out.
  on_every_rank(2, [&](int r) {
    std::vector<int64_t> header{r, 0, -1};
    std::vector<std::byte> frame;
    exchange(*l.lane[static_cast<size_t>(r)], 2, r, header, 2, nullptr, frame);
    CHECK(header == std::vector<int64_t>{0, 0, -1});
  });
}

TEST_CASE("a raised abort ends a lane read that waits for an absent rank at once") {
  auto ctx = mesh_of(2);
  lanes l{ctx, 30s};
  std::thread raiser{[&] {
    std::this_thread::sleep_for(200ms);
    l.abort[0]->raise("the driver ended the generation");
  }};
  auto t0 = clock_type::now();
  std::vector<int64_t> header{1, 2, -1};
  std::vector<std::byte> frame;
  CHECK_THROWS_AS(exchange(*l.lane[0], 2, 0, header, 2, nullptr, frame), peer_announced_failure);
  raiser.join();
  CHECK(clock_type::now() - t0 < 3s);
  // Raised already: the next call fails before it sends anything.
  CHECK_THROWS_AS(exchange(*l.lane[0], 2, 0, header, 2, nullptr, frame), peer_announced_failure);
}

TEST_CASE("a lane peer that never answers fails the read by the timeout, one that closes at "
          "once, naming the peer") {
  {
    auto ctx = mesh_of(2);
    lanes l{ctx, 500ms};
    auto t0 = clock_type::now();
    std::vector<int64_t> header{1, 2, -1};
    std::vector<std::byte> frame;
    std::string what;
    try {
      exchange(*l.lane[0], 2, 0, header, 2, nullptr, frame);
    } catch (const ::gloo::IoException& e) {
      what = e.what();
    }
    auto took = clock_type::now() - t0;
    CHECK(what.find("Read timeout") != std::string::npos);
    CHECK(what.find("lane with rank 1 <rank 1's address>") != std::string::npos);
    CHECK(took >= 450ms);
    CHECK(took < 5s);
  }
  {
    auto ctx = mesh_of(2);
    lanes l{ctx, 30s};
    std::thread closer{[&] {
      std::this_thread::sleep_for(200ms);
      l.lane[1].reset();
      ctx[1].reset();
    }};
    auto t0 = clock_type::now();
    std::vector<int64_t> header{1, 2, -1};
    std::vector<std::byte> frame;
    CHECK_THROWS_WITH_AS(exchange(*l.lane[0], 2, 0, header, 2, nullptr, frame),
                         doctest::Contains("lane with rank 1"), ::gloo::IoException);
    closer.join();
    CHECK(clock_type::now() - t0 < 5s);
  }
}

} // TEST_SUITE
