#include "tools/cluster/head_address.hpp"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/net/net.hpp"

namespace hvactor::cluster {

using clock_type = std::chrono::steady_clock;

// The address the head listens on: one the nodes can reach. A lookup of a
// name DNS does not know takes a while and an allocation may list 65536
// names, so only the first few nodes and this host's name are resolved, in
// parallel, all within `limit`. The lookups cannot be cancelled: each runs
// on a detached thread that owns what it touches.
head_address choose_head_address(const std::vector<std::string>& all_nodes,
                                 const std::string& given, std::chrono::seconds limit) {
  if (!given.empty())
    return {given, "from --bind"};
  constexpr size_t node_probes = 3;
  std::vector<std::string> names(all_nodes.begin(),
                                 all_nodes.begin()
                                   + static_cast<long>(std::min(node_probes, all_nodes.size())));
  size_t nodes = names.size();
  names.push_back(net::host_name()); // the fallback, last
  struct lookups {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> address, failure;
    std::vector<bool> done;
  };
  auto l = std::make_shared<lookups>();
  l->address.resize(names.size());
  l->failure.resize(names.size());
  l->done.resize(names.size());
  for (size_t i = 0; i < names.size(); ++i)
    std::thread{[l, i, name = names[i]] {
      std::string address, failure;
      try {
        address = net::local_address_towards(name);
      } catch (const std::exception& e) {
        failure = e.what();
      }
      std::lock_guard<std::mutex> lk{l->mu};
      l->address[i] = std::move(address);
      l->failure[i] = std::move(failure);
      l->done[i] = true;
      l->cv.notify_all();
    }}.detach();
  auto nodes_tried = [&] {
    return fmt::format("{}{}", fmt::join(names.begin(), names.begin() + static_cast<long>(nodes), ", "),
                       all_nodes.size() > nodes ? fmt::format(" (the first {} of {} nodes)", nodes,
                                                                all_nodes.size())
                                                  : "");
  };
  std::unique_lock<std::mutex> lk{l->mu};
  auto deadline = clock_type::now() + limit;
  for (;;) {
    bool nodes_done = true;
    for (size_t i = 0; i < nodes; ++i) {
      if (l->done[i] && !l->address[i].empty())
        return {l->address[i], "the address of this host that reaches " + names[i]};
      nodes_done = nodes_done && l->done[i];
    }
    bool timed_out = clock_type::now() >= deadline;
    const auto& self = names.back();
    if (nodes_done || timed_out) {
      if (!l->address.back().empty())
        return {l->address.back(),
                fmt::format("{} {} here; the address of this host's name {}", nodes_tried(),
                            timed_out ? fmt::format("did not resolve within {} s", limit.count())
                                      : std::string{"do not resolve"},
                            self)};
      if (l->done.back() || timed_out) {
        std::vector<std::string> why;
        for (size_t i = 0; i < names.size(); ++i)
          why.push_back(l->done[i] ? l->failure[i] : names[i] + ": no answer");
        throw error(fmt::format("cannot choose the head's address within {} s: neither the "
                                "nodes {} nor this host's name {} resolve to an address here ({}); "
                                "pass --bind ADDRESS (an address of this host the nodes reach)",
                                limit.count(), nodes_tried(), self, fmt::join(why, "; ")));
      }
    }
    l->cv.wait_until(lk, deadline);
  }
}

} // namespace hvactor::cluster
