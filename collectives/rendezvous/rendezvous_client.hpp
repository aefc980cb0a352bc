#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hvactor/tls.hpp"

namespace hvactor::collectives {

/// Blocking client of the coordinator's rendezvous_store, for one scope
/// ("<job>/<generation>"). Runs on the process's one actor system
/// (process_system: shared with the worker, the elastic and training
/// sessions and every other client; created by the first of them with the
/// process's TLS identity, so it works in any process, a program that
/// hvactor-run started included) and holds a share of it while it lives;
/// clients of one store share one connection. Every call is bounded
/// by a timeout; a key that does not appear in time throws
/// hvactor::rendezvous_timeout naming it, an unreachable store hvactor::error.
class rendezvous_client {
public:
  rendezvous_client(const std::string& host, uint16_t port, std::string scope,
                    std::chrono::milliseconds timeout);
  ~rendezvous_client();

  rendezvous_client(const rendezvous_client&) = delete;
  rendezvous_client& operator=(const rendezvous_client&) = delete;

  void set(const std::string& key, const std::vector<char>& value);

  /// set() bounded by `timeout` instead of the client's.
  void set(const std::string& key, const std::vector<char>& value,
           std::chrono::milliseconds timeout);

  /// The value of `key`, waiting up to `timeout` for it to be set.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);

  /// Sets every (key, value) in one request.
  void set_many(std::vector<std::pair<std::string, std::vector<char>>> entries);

  /// The values of `keys`, waiting up to `timeout` for all of them, in
  /// one request; a rendezvous_timeout names the keys still missing then.
  std::vector<std::vector<char>> get_many(const std::vector<std::string>& keys,
                                          std::chrono::milliseconds timeout);

  /// What gather() found: the values in the order of the keys asked for,
  /// and the indices of those not set by the timeout (their values empty).
  struct gathered {
    std::vector<std::vector<char>> values;
    std::vector<int> missing;
  };

  /// One round trip of a rendezvous: sets `entries`, then waits up to
  /// `timeout` for every key of `keys` and returns what is set then. A
  /// missing key is not an error here (the caller names whose it is); a
  /// closed scope or an unreachable store throws.
  gathered gather(std::vector<std::pair<std::string, std::vector<char>>> entries,
                  const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  /// Requests this process sent to rendezvous stores so far (every client;
  /// a watch's asks included), for measurements and tests.
  static uint64_t requests_sent();

  /// Removes `key` if it is set (nothing if not, or if the store is gone).
  void erase(const std::string& key);

  /// The value of each key of `keys` that is set now, in one request.
  std::vector<std::optional<std::string>> try_get_many(const std::vector<std::string>& keys);

  /// The value of `key` if it is set now.
  std::optional<std::vector<char>> try_get(const std::string& key);

  /// Returns once every key is set; throws rendezvous_timeout after `timeout`.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  /// Calls `on_set(value)` once, on one of the client's threads, when `key`
  /// is set (now or later); or `on_closed(why)` when the scope is closed
  /// first (the elastic driver closes a generation's scope when it
  /// supersedes it). The watch ends when the returned handle is destroyed,
  /// when the store goes away, or after either call.
  std::shared_ptr<void> watch(const std::string& key,
                              std::function<void(const std::vector<char>&)> on_set,
                              std::function<void(const std::string&)> on_closed = {});

  const std::string& scope() const {
    return scope_;
  }
  std::chrono::milliseconds timeout() const {
    return timeout_;
  }

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::string scope_;
  std::chrono::milliseconds timeout_;
};

} // namespace hvactor::collectives
