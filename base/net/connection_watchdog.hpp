#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include <sys/types.h>

#include "base/internal/knobs_net.hpp"

namespace hvactor {

/// Shuts down stalled or hostile connections on this process's listening
/// ports.
///
/// Why: CAF 0.17's OpenSSL module has no handshake timeout, and a TCP peer
/// that connects and sends nothing pins a CAF thread at 100 % CPU for as
/// long as it stays connected. hvactor enables CAF heartbeats (every 4 s)
/// on every process, so an authenticated connection receives bytes at least
/// that often; an accepted connection that received nothing for
/// `idle_limit` is a stalled or hostile handshake.
///
/// A background thread scans /proc/self/fd every `period` for TCP sockets
/// whose local port is watched and that are not listening, and calls
/// shutdown(SHUT_RDWR) on those idle longer than `idle_limit`, and on the
/// idlest ones beyond `max_connections` per port. It scans only while a
/// connection may still need it: from a watch() or an accept in this
/// process (connection_accepted) until every watched connection has
/// proved itself (its TLS handshake completed, and it received data after
/// it was `idle_limit` old: a live CAF peer, whose heartbeats keep it
/// busy, and which CAF itself drops when it falls silent) and no port is
/// over its limit. Scanning every 2 s whatever happened, the thread of an
/// idle node cost 0.5 wake-ups a second plus the scan. It never closes a
/// descriptor: CAF owns it, sees EOF and closes it itself. Idle time is
/// TCP_INFO's tcpi_last_data_recv, or for a connection that never received
/// a byte the time since the watchdog first saw it; connections are keyed by
/// (fd, inode), so a reused fd number is a new connection.
class connection_watchdog {
public:
  /// Limits and scan period.
  struct options {
    /// A connection with no data received for this long is shut down.
    std::chrono::milliseconds idle_limit{knobs::watchdog_idle_limit};
    /// Time between two scans.
    std::chrono::milliseconds period{knobs::watchdog_period};
    /// Connections kept per watched port; the idlest beyond it are shut down.
    size_t max_connections = knobs::watchdog_max_connections;
  };

  /// Starts the scanning thread. Throws std::invalid_argument for a
  /// non-positive idle_limit or period, or max_connections == 0.
  explicit connection_watchdog(options opts);

  /// Stops and joins the thread, within about one scan.
  ~connection_watchdog();

  connection_watchdog(const connection_watchdog&) = delete;
  connection_watchdog& operator=(const connection_watchdog&) = delete;

  /// Watches accepted connections on local port `port`. Thread-safe.
  void watch(uint16_t port);

  /// Stops watching `port`. Thread-safe.
  void unwatch(uint16_t port);

  /// Connections shut down so far.
  size_t shut_down_count() const noexcept;

  /// Runs one scan now, on the calling thread. Thread-safe. True when a
  /// watched connection has not proved itself yet, or a port is over its
  /// limit: the thread scans again after `period`.
  bool scan_once();

  /// A connection was accepted in this process: every watchdog scans
  /// until it proved itself (port_guard's accept calls it). Thread-safe.
  static void connection_accepted();

  /// Whether the thread scans periodically now (for tests).
  bool scanning() const;

private:
  using connection_key = std::pair<int, ino_t>;
  using clock = std::chrono::steady_clock;

  void run();
  void wake();

  const options opts_;
  mutable std::mutex mtx_;             // guards ports_, stop_ and active_
  std::condition_variable cv_;
  std::set<uint16_t> ports_;
  bool stop_ = false;
  bool active_ = true;                 // scan periodically
  std::mutex scan_mtx_;                // one scan at a time; guards first_seen_ and proven_
  std::map<connection_key, clock::time_point> first_seen_;
  std::set<connection_key> proven_;
  std::atomic<size_t> shut_down_{0};
  std::thread thread_;                 // last: starts after the members above
};

} // namespace hvactor
