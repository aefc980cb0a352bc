// hvactor's Gloo full mesh (collectives/backends/gloo/peer_addresses.hpp): a card
// reads back; a connect refused at first (the peer's node not reachable
// yet) is retried until it succeeds, and the mesh then carries an
// allreduce; a peer that never becomes reachable fails by the deadline,
// named with its address. Two in-process ranks on two loopback addresses
// (127.0.0.2 connects, 127.0.0.1 accepts); a late listener on a socket
// bound early (connects to it are refused until it listens) stands
// between them and forwards both ways.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <gloo/allreduce.h>
#include <gloo/transport/tcp/device.h>

#include "collectives/backends/gloo/peer_abort.hpp"
#include "collectives/backends/gloo/peer_addresses.hpp"

using namespace std::chrono_literals;
using namespace hvactor::collectives;

namespace {

// A socket bound on 127.0.0.1 that does not listen yet: connects to its
// port are refused (ECONNREFUSED) until listen_and_forward().
struct late_listener {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  std::vector<std::thread> threads;

  late_listener() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }

  // After `delay`: listens, accepts one connection and splices it to
  // 127.0.0.1:`to` both ways until either side closes.
  void listen_and_forward(std::chrono::milliseconds delay, int to) {
    threads.emplace_back([this, delay, to] {
      std::this_thread::sleep_for(delay);
      ::listen(fd, 1);
      int in = ::accept(fd, nullptr, nullptr);
      int out = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(to));
      if (in < 0 || ::connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
        return;
      auto pump = [](int from, int into) {
        char buf[65536];
        for (ssize_t n; (n = ::read(from, buf, sizeof buf)) > 0;)
          if (::write(into, buf, static_cast<size_t>(n)) != n)
            break;
        ::shutdown(into, SHUT_WR);
      };
      std::thread back{pump, out, in};
      pump(in, out);
      back.join();
      ::close(in);
      ::close(out);
    });
  }

  ~late_listener() {
    ::shutdown(fd, SHUT_RDWR);
    for (auto& t : threads)
      t.join();
    ::close(fd);
  }
};

std::shared_ptr<::gloo::transport::Device> device_on(const char* ip) {
  ::gloo::transport::tcp::attr attr;
  attr.hostname = ip;
  return ::gloo::transport::tcp::CreateDevice(attr);
}

} // namespace

TEST_SUITE("full_mesh") {

TEST_CASE("a card reads back as it was written; text of another size is refused") {
  mesh_card card{.host = "node-b", .hostname = "b", .ip = "198.18.0.22", .ports = {51601, 0, 7}};
  auto back = decode_card(encode(card), 3);
  CHECK(back.host == "node-b");
  CHECK(back.hostname == "b");
  CHECK(back.ip == "198.18.0.22");
  CHECK(back.ports == card.ports);
  CHECK_THROWS_AS(decode_card(encode(card), 4), std::invalid_argument);
  CHECK_THROWS_AS(decode_card("", 1), std::invalid_argument);
}

TEST_CASE("a refused connect is retried until the peer is reachable, and the mesh then works") {
  late_listener gate; // outlives the contexts, whose closing ends its forwarding
  std::vector<std::shared_ptr<::gloo::transport::Device>> dev{device_on("127.0.0.1"),
                                                              device_on("127.0.0.2")};
  std::vector<std::shared_ptr<abortable_context>> ctx;
  for (int r = 0; r < 2; ++r) {
    ctx.push_back(std::make_shared<abortable_context>(r, 2, std::make_shared<peer_abort>()));
    ctx.back()->setTimeout(10s);
  }
  std::promise<mesh_card> cards_of[2];
  std::vector<mesh_card> mine(2);
  auto deadline = std::chrono::steady_clock::now() + 8s;
  auto run = [&](int r) {
    ctx[r]->connect(dev[r], 8s, [&, r](::gloo::transport::Context& tc) {
      mine[r] = create_pairs(tc, "node-" + std::to_string(r));
      cards_of[r].set_value(mine[r]);
      auto peer = cards_of[1 - r].get_future().get();
      std::vector<mesh_card> cards(2);
      cards[r] = mine[r];
      cards[1 - r] = peer;
      if (r == 1) { // the connecting side sees the gate's port, refused for 400 ms
        gate.listen_and_forward(400ms, peer.ports[1]);
        cards[0].ports[1] = gate.port;
      }
      connect_pairs(tc, r, cards, deadline);
    });
  };
  auto started = std::chrono::steady_clock::now();
  auto r0 = std::async(std::launch::async, run, 0);
  auto r1 = std::async(std::launch::async, run, 1);
  REQUIRE(r1.wait_for(10s) == std::future_status::ready);
  REQUIRE(r0.wait_for(10s) == std::future_status::ready);
  r1.get();
  r0.get();
  CHECK(std::chrono::steady_clock::now() - started >= 400ms);
  std::vector<std::vector<int>> data{{1, 2}, {10, 20}};
  auto reduce = [&](int r) {
    ::gloo::AllreduceOptions opts(ctx[r]);
    opts.setOutput<int>(ctx[r]->createUnboundBuffer(data[r].data(), 2 * sizeof(int)));
    opts.setReduceFunction([](void* c, const void* a, const void* b, size_t n) {
      for (size_t i = 0; i < n; ++i)
        static_cast<int*>(c)[i] = static_cast<const int*>(a)[i] + static_cast<const int*>(b)[i];
    });
    opts.setTimeout(5s);
    ::gloo::allreduce(opts);
  };
  auto a0 = std::async(std::launch::async, reduce, 0);
  reduce(1);
  a0.get();
  CHECK(data[0] == std::vector<int>{11, 22});
  CHECK(data[1] == std::vector<int>{11, 22});
}

TEST_CASE("a peer that never becomes reachable fails by the deadline, named with its address") {
  auto dev = device_on("127.0.0.2");
  auto tc = dev->createContext(1, 2);
  tc->setTimeout(5s);
  auto card1 = create_pairs(*tc, "node-1");
  late_listener never; // bound, never listening
  mesh_card card0{.host = "node-0", .hostname = "x", .ip = "127.0.0.1", .ports = {0, never.port}};
  auto started = std::chrono::steady_clock::now();
  try {
    connect_pairs(*tc, 1, {card0, card1}, started + 1500ms);
    FAIL("connect_pairs did not throw");
  } catch (const mesh_unreachable& e) {
    std::string what = e.what();
    CAPTURE(what);
    CHECK(e.rank == 0);
    CHECK(e.address == "127.0.0.1:" + std::to_string(never.port));
    CHECK(what.find("rank 0 (node-0) at 127.0.0.1:" + std::to_string(never.port)) != std::string::npos);
    CHECK(what.find("Connection refused") != std::string::npos);
    CHECK(what.find("attempts over") != std::string::npos);
  }
  auto took = std::chrono::steady_clock::now() - started;
  CHECK(took >= 500ms);
  CHECK(took < 3s);
}

} // TEST_SUITE
