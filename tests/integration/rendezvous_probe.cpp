// The client side of rendezvous_client_failure_test: constructs a
// rendezvous client that must fail (a store it cannot reach in time) again
// and again, in one process, so that the error path's clean-up (the
// client's actor system going down with a connect still in flight) runs
// every time.
//   rendezvous_probe HOST PORT TIMEOUT_MS COUNT
// prints "failed I MS" after each attempt that threw hvactor::error (I from
// 1, MS how long the attempt took, clean-up included), "connected I" after
// one that did not, and exits 0. A hang shows as the lines stopping.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <hvactor/errors.hpp>

#include "collectives/rendezvous/rendezvous_client.hpp"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: rendezvous_probe HOST PORT TIMEOUT_MS COUNT\n");
    return 2;
  }
  std::string host = argv[1];
  auto port = static_cast<uint16_t>(std::atoi(argv[2]));
  std::chrono::milliseconds timeout{std::atoll(argv[3])};
  int count = std::atoi(argv[4]);
  for (int i = 1; i <= count; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      hvactor::collectives::rendezvous_client client{host, port, "probe/0", timeout};
      std::printf("connected %d\n", i);
    } catch (const hvactor::error& e) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
      std::printf("failed %d %lld\n", i, static_cast<long long>(ms));
      if (i == 1)
        std::fprintf(stderr, "%s\n", e.what());
    }
    std::fflush(stdout);
  }
  return 0;
}
