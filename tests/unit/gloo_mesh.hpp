#pragma once

// n in-process ranks of a Gloo mesh on loopback, each with its own device,
// connected by hvactor's mesh (peer_addresses.hpp), for unit tests of
// Gloo algorithms.

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <gloo/transport/tcp/device.h>

#include "collectives/backends/gloo/peer_abort.hpp"
#include "collectives/backends/gloo/peer_addresses.hpp"

namespace hvactor::test {

/// n connected contexts, built by n threads that swap their cards.
inline std::vector<std::shared_ptr<collectives::abortable_context>> mesh_of(int n) {
  std::vector<std::shared_ptr<collectives::abortable_context>> ctx;
  std::vector<std::promise<collectives::mesh_card>> card(static_cast<size_t>(n));
  std::vector<std::shared_future<collectives::mesh_card>> seen;
  for (auto& c : card)
    seen.push_back(c.get_future().share());
  for (int r = 0; r < n; ++r) {
    ctx.push_back(std::make_shared<collectives::abortable_context>(r, n, std::make_shared<collectives::peer_abort>()));
    ctx.back()->setTimeout(std::chrono::seconds{10});
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  std::vector<std::future<void>> done;
  for (int r = 0; r < n; ++r)
    done.push_back(std::async(std::launch::async, [&, r] {
      ::gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      std::shared_ptr<::gloo::transport::Device> dev = ::gloo::transport::tcp::CreateDevice(attr);
      ctx[static_cast<size_t>(r)]->connect(dev, std::chrono::seconds{10}, [&](::gloo::transport::Context& tc) {
        card[static_cast<size_t>(r)].set_value(collectives::create_pairs(tc, "node-" + std::to_string(r)));
        std::vector<collectives::mesh_card> cards;
        for (auto& s : seen)
          cards.push_back(s.get());
        collectives::connect_pairs(tc, r, cards, deadline);
      });
    }));
  for (auto& d : done) {
    REQUIRE(d.wait_for(std::chrono::seconds{15}) == std::future_status::ready);
    d.get();
  }
  return ctx;
}

} // namespace hvactor::test
