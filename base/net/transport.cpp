#include "base/net/transport.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string_view>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include "base/internal/log.hpp"
#include "base/internal/ask.hpp"
#include "hvactor/tls.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/knobs_net.hpp"
#include "base/net/heartbeat.hpp"
#include "base/net/port_guard.hpp"

#include <fmt/format.h>

namespace hvactor::transport {

void configure(caf::actor_system_config& cfg, const tls::config& tls) {
  if (!tls.enabled())
    return;
  // openssl_error_queue.cpp must win symbol lookup over libssl.
  Dl_info where{};
  if (::dladdr(::dlsym(RTLD_DEFAULT, "SSL_read"), &where) == 0 || where.dli_fname == nullptr
      || std::string_view{where.dli_fname}.find("hvactor_base") == std::string_view::npos)
    log::warn("SSL_read resolves to {}, not hvactor's wrapper: a TLS peer that disconnects "
              "abruptly may drop other connections (link libhvactor_base before libssl)",
              where.dli_fname ? where.dli_fname : "?");
  cfg.load<caf::openssl::manager>();
  tls::apply(tls, cfg);
}

void guard_ports(const tls::config& tls, bool insecure) {
  // port_guard.cpp must win symbol lookup over libc, or nothing is checked.
  Dl_info where{};
  if (::dladdr(::dlsym(RTLD_DEFAULT, "accept"), &where) == 0 || where.dli_fname == nullptr
      || std::string_view{where.dli_fname}.find("hvactor_base") == std::string_view::npos)
    throw std::runtime_error(fmt::format(
      "accept() resolves to {}, not hvactor's port guard, so this process could not refuse "
      "unauthenticated peers; link libhvactor_base before libc",
      where.dli_fname ? where.dli_fname : "?"));
  port_guard::policy p;
  p.same_user = !tls.enabled() && !insecure;
  p.check_frames = !tls.enabled();
  p.check_connects = p.same_user;
  p.max_message_bytes = static_cast<uint32_t>(std::clamp<int64_t>(
    env::get_int64(env::max_message_bytes, knobs::max_message_bytes), 1,
    std::numeric_limits<uint32_t>::max()));
  p.max_connections = static_cast<size_t>(std::max<int64_t>(
    1, env::get_int64(env::max_connections_per_port,
                      static_cast<int64_t>(knobs::max_connections_per_port))));
  port_guard::configure(p);
}

bool secure(caf::actor_system& sys) {
  return sys.has_openssl_manager();
}

caf::actor connector(caf::actor_system& sys) {
  heartbeat::start(sys);
  if (secure(sys))
    return caf::actor_cast<caf::actor>(sys.openssl_manager().actor_handle());
  return caf::actor_cast<caf::actor>(sys.middleman().actor_handle());
}

caf::expected<uint16_t> publish(caf::actor_system& sys, const caf::actor& whom, uint16_t port,
                                const std::string& bind) {
  heartbeat::start(sys);
  const char* in = bind.empty() ? nullptr : bind.c_str();
  auto got = secure(sys) ? caf::openssl::publish(whom, port, in, true)
                         : sys.middleman().publish(whom, port, in, true);
  if (got)
    port_guard::watch(*got);
  return got;
}

void unpublish(caf::actor_system& sys, const caf::actor& whom, uint16_t port) {
  port_guard::unwatch(port);
  if (!secure(sys)) {
    sys.middleman().unpublish(whom, port);
    return;
  }
  // caf::openssl::unpublish in 0.17.6 drops `whom` from the request; ask
  // the OpenSSL middleman actor directly.
  auto done = ask<>(sys, sys.openssl_manager().actor_handle(), knobs::unpublish_timeout,
                    caf::unpublish_atom_v, whom.address(), port);
  if (!done)
    log::debug("unpublishing port {} failed: {}", port, caf::to_string(done.error()));
}

caf::expected<caf::strong_actor_ptr> connect(caf::actor_system& sys, const std::string& host,
                                             uint16_t port, std::chrono::milliseconds timeout) {
  auto ask_connect = [&](std::chrono::milliseconds bound) {
    return ask<caf::node_id, caf::strong_actor_ptr, std::set<std::string>>(
      sys, connector(sys), bound, caf::connect_atom::value, host, port);
  };
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto found = ask_connect(timeout);
  // CAF 0.17.6 stamps a client connection "last seen" at the clock's epoch
  // until the server's handshake arrives (basp_broker, connect_atom), so a
  // heartbeat tick in between drops it at once with connection_timeout: a
  // busy server (a worker loading its model) loses the race. Such a drop
  // says nothing about the peer; try again while time is left.
  while (!found && found.error() == caf::sec::connection_timeout) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left < std::chrono::milliseconds{10})
      break;
    log::debug("connecting to {}:{}: dropped during the handshake (connection_timeout); "
               "trying again",
               host, port);
    found = ask_connect(left);
  }
  if (!found) {
    // A timed-out ask leaves its connect running in the middleman actor
    // (CAF 0.17). If the handshake then completes while the caller's
    // actor system goes down (an error path destroying it at once),
    // ~actor_system waits for the middleman actor's thread for ever
    // (rendezvous_client_failure_test: 1 attempt in 20 at a 0 ms timeout).
    // The same connect again joins the pending one and is answered with it:
    // once it is, nothing is in flight. The caller still gets its timeout.
    if (found.error() == caf::sec::request_timeout)
      ask_connect(knobs::connect_settle);
    return std::move(found.error());
  }
  if (auto& ptr = std::get<1>(*found))
    return std::move(ptr);
  return caf::make_error(caf::sec::no_actor_published_at_port, port);
}

} // namespace hvactor::transport
