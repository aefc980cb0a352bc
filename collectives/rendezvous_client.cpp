#include "hvactor/collectives/rendezvous_client.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "hvactor/collectives/rendezvous_protocol.hpp"
#include "hvactor/collectives/transport.hpp"
#include "hvactor/errors.hpp"
#include "hvactor/tls.hpp"

namespace hvactor::collectives {

void configure_actor_system(caf::actor_system_config& cfg, size_t max_threads,
                            const tls::config& tls) {
  using namespace std::chrono_literals;
  proto::register_rendezvous_types(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads", max_threads);
  cfg.set("work-stealing.aggressive-poll-attempts", size_t{0});
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
  // Identical on every process (a one-sided setting drops healthy peers):
  // a frozen peer is noticed within 2.5 s, and every live connection gets
  // bytes twice a second, which the TLS connection watchdog relies on.
  cfg.set("middleman.heartbeat-interval", caf::timespan{500ms});
  cfg.set("middleman.connection-timeout", caf::timespan{2s});
  cfg.set("middleman.app-identifiers", std::vector<std::string>{"hvactor"});
  transport::configure(cfg, tls);
}

struct rendezvous_client::impl {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  proto::rendezvous_store store;
  std::string where;

  // Turns a failed request into the hvactor error it carries.
  [[noreturn]] void fail(const caf::error& err, const std::string& what) {
    if (err.category() == proto::error_category) {
      std::string text = err.context().match_element<std::string>(0)
                           ? err.context().get_as<std::string>(0)
                           : caf::to_string(err);
      throw_error(static_cast<error_kind>(err.code()), text);
    }
    throw error(fmt::format("rendezvous store at {}: {} failed: {}", where, what,
                            sys->render(err)));
  }

  template <class T, class... Ts>
  T request(std::chrono::milliseconds timeout, const std::string& what, Ts&&... xs) {
    caf::scoped_actor self{*sys};
    T out{};
    // The store answers a timed get/wait itself; the extra second covers
    // the round trip so its (clearer) error wins.
    self->request(store, timeout + std::chrono::seconds(1), std::forward<Ts>(xs)...)
      .receive([&](T& value) { out = std::move(value); },
               [&](caf::error& err) { fail(err, what); });
    return out;
  }
};

rendezvous_client::rendezvous_client(const std::string& host, uint16_t port, std::string scope,
                                     std::chrono::milliseconds timeout)
  : impl_(std::make_unique<impl>()), scope_(std::move(scope)), timeout_(timeout) {
  // A worker reaches the store with its node's TLS identity, if any.
  auto tls = tls::from_env();
  tls::validate(tls);
  configure_actor_system(impl_->cfg, 2, tls);
  impl_->sys = std::make_unique<caf::actor_system>(impl_->cfg);
  impl_->where = fmt::format("{}:{}", host, port);
  auto found = transport::connect(*impl_->sys, host, port, timeout);
  if (!found)
    throw error(fmt::format("cannot reach the rendezvous store at {} (HOROVOD_GLOO_RENDEZVOUS_ADDR/"
                            "PORT) within {} ms: {}",
                            impl_->where, timeout.count(), impl_->sys->render(found.error())));
  impl_->store = caf::actor_cast<proto::rendezvous_store>(std::move(*found));
}

rendezvous_client::~rendezvous_client() {
  impl_->store = nullptr;
}

void rendezvous_client::set(const std::string& key, const std::vector<char>& value) {
  impl_->request<bool>(timeout_, "set '" + key + "'", proto::set_atom_v, scope_, key, value);
}

std::vector<char> rendezvous_client::get(const std::string& key,
                                         std::chrono::milliseconds timeout) {
  return impl_->request<std::vector<char>>(timeout, "get '" + key + "'", proto::get_atom_v, scope_,
                                           key, caf::timespan{timeout});
}

std::optional<std::vector<char>> rendezvous_client::try_get(const std::string& key) {
  try {
    return get(key, std::chrono::milliseconds{1});
  } catch (const rendezvous_timeout&) {
    return std::nullopt;
  }
}

void rendezvous_client::wait(const std::vector<std::string>& keys,
                             std::chrono::milliseconds timeout) {
  impl_->request<bool>(timeout, "wait", proto::wait_atom_v, scope_, proto::key_list{keys},
                       caf::timespan{timeout});
}

} // namespace hvactor::collectives
