#include "hvactor/system_config.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <caf/io/middleman.hpp>

#include "hvactor/actors/interfaces.hpp"
#include "hvactor/collectives/rendezvous_client.hpp"
#include "hvactor/errors.hpp"
#include "hvactor/log.hpp"

namespace hvactor {

void configure_system(caf::actor_system_config& cfg, size_t max_threads,
                      const tls::config& tls) {
  if (max_threads == 0)
    max_threads = std::max<size_t>(2, std::thread::hardware_concurrency());
  collectives::configure_actor_system(cfg, max_threads, tls);
  proto::register_types(cfg);
}

std::string describe(const caf::error& err) {
  if (err.category() == proto::error_category && err.context().match_element<std::string>(0))
    return err.context().get_as<std::string>(0);
  return caf::to_string(err);
}

void throw_caf_error(const caf::error& err, const std::string& context) {
  if (err.category() == proto::error_category) {
    int rank = -1;
    if (err.context().match_element<int32_t>(1))
      rank = err.context().get_as<int32_t>(1);
    throw_error(static_cast<error_kind>(err.code()), describe(err), rank);
  }
  if (err == caf::sec::request_timeout)
    throw error(context + ": no answer in time (request_timeout)");
  throw error(context + ": " + caf::to_string(err));
}

} // namespace hvactor

namespace hvactor {

void destroy_bounded(std::unique_ptr<caf::actor_system>& sys, std::chrono::seconds limit) {
  std::mutex mtx;
  std::condition_variable cv;
  bool done = false;
  std::thread guard{[&] {
    std::unique_lock<std::mutex> lock{mtx};
    if (!cv.wait_for(lock, limit, [&] { return done; })) {
      log::error("actor system did not stop within {} s; exiting", limit.count());
      std::fflush(nullptr);
      std::_Exit(1);
    }
  }};
  sys.reset();
  {
    std::lock_guard<std::mutex> lock{mtx};
    done = true;
  }
  cv.notify_all();
  guard.join();
}

} // namespace hvactor
