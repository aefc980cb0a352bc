#include "tools/cluster/readiness.hpp"

#include <algorithm>
#include <memory>
#include <set>
#include <thread>

#include "tools/cluster/registry_probe.hpp"

namespace hvactor::cluster {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

// One poll: the state of `expected` on the head, through `probe` (made, or
// made again after a failure, here).
readiness poll(std::unique_ptr<registry_probe>& probe, const std::string& address,
               const tls::config& tls, const std::vector<std::string>& expected,
               std::chrono::seconds connect_limit) {
  readiness r;
  std::set<std::string> listed;
  try {
    if (!probe)
      probe = std::make_unique<registry_probe>(address, tls, connect_limit);
    if (auto ids = probe->node_ids()) {
      r.head_answered = true;
      listed = {ids->begin(), ids->end()};
    } else {
      r.head_error = "the head did not answer within 5 s";
    }
  } catch (const std::exception& e) {
    probe.reset(); // not listening yet, or gone: connect again next time
    r.head_error = e.what();
  }
  for (auto& id : expected)
    (listed.count(id) ? r.joined : r.missing).push_back(id);
  return r;
}

} // namespace

readiness wait_for_nodes(const std::string& address, const tls::config& tls,
                         const std::vector<std::string>& expected,
                         std::chrono::milliseconds timeout, const between_polls& between) {
  auto deadline = clock_type::now() + timeout;
  std::unique_ptr<registry_probe> probe;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - clock_type::now());
    auto r = poll(probe, address, tls, expected, std::clamp<std::chrono::seconds>(left, 1s, 5s));
    if (r.ready() || clock_type::now() >= deadline)
      return r;
    if (between)
      between(r, 200ms);
    else
      std::this_thread::sleep_for(200ms);
  }
}

} // namespace hvactor::cluster
