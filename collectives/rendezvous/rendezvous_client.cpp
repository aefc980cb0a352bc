#include "collectives/rendezvous/rendezvous_client.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "collectives/rendezvous/rendezvous_knobs.hpp"
#include "collectives/rendezvous/rendezvous_protocol.hpp"
#include "hvactor/errors.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "base/net/transport.hpp"
#include "base/internal/knobs_collectives.hpp"
#include "base/internal/process_system.hpp"

namespace hvactor::collectives {

namespace {

// The store's messages are part of every process system that loads this
// library, whichever layer creates it.
const process_system::registrar rendezvous_types{&proto::register_rendezvous_types};

std::atomic<uint64_t> requests{0};

// HVACTOR_RENDEZVOUS_TRACE set: every request's time, on stderr.
bool tracing() {
  static const bool on = [] {
    auto* v = std::getenv(knobs::rendezvous_trace_env);
    return v != nullptr && *v != '\0' && std::string_view{v} != "0";
  }();
  return on;
}

} // namespace

struct rendezvous_client::impl {
  /// The process's actor system, shared with the worker, the elastic
  /// session and every other client.
  process_system::share sys;
  proto::rendezvous_store store;
  std::string where;

  template <class T, class... Ts>
  T request(std::chrono::milliseconds timeout, const std::string& what, Ts&&... xs) {
    // The store answers a timed get/wait itself; the extra second covers
    // the round trip so its (clearer) error wins.
    ++requests;
    auto t0 = std::chrono::steady_clock::now();
    auto out = ask<T>(*sys, store, timeout + knobs::store_round_trip, std::forward<Ts>(xs)...);
    if (tracing())
      std::fprintf(stderr, "hvactor rendezvous trace: pid %d %s: %s in %.1f ms\n",
                   static_cast<int>(::getpid()), what.c_str(),
                   out ? "answered" : sys->render(out.error()).c_str(),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                     .count());
    if (out)
      return std::move(*out);
    if (out.error().category() == error_category)
      throw_caf_error(out.error(), what);
    throw error(fmt::format("rendezvous store at {}: {} failed: {}", where, what,
                            sys->render(out.error())));
  }
};

rendezvous_client::rendezvous_client(const std::string& host, uint16_t port, std::string scope,
                                     std::chrono::milliseconds timeout)
  : impl_(std::make_unique<impl>()), scope_(std::move(scope)), timeout_(timeout) {
  // A worker reaches the store with its node's TLS identity, if any: the
  // process system's (process_system::acquire).
  impl_->sys = process_system::acquire();
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

uint64_t rendezvous_client::requests_sent() {
  return requests.load();
}

void rendezvous_client::set(const std::string& key, const std::vector<char>& value) {
  set(key, value, timeout_);
}

void rendezvous_client::set(const std::string& key, const std::vector<char>& value,
                            std::chrono::milliseconds timeout) {
  impl_->request<bool>(timeout, "set '" + key + "'", proto::set_atom_v, scope_, key, value);
}

std::vector<char> rendezvous_client::get(const std::string& key,
                                         std::chrono::milliseconds timeout) {
  return impl_->request<std::vector<char>>(timeout, "get '" + key + "'", proto::get_atom_v, scope_,
                                           key, caf::timespan{timeout});
}

void rendezvous_client::erase(const std::string& key) {
  try {
    impl_->request<std::vector<char>>(std::chrono::milliseconds{0}, "erase '" + key + "'",
                                      proto::take_atom_v, scope_, key);
  } catch (const std::exception&) {
    // Not set, or no store: nothing to remove.
  }
}

std::vector<std::optional<std::string>>
rendezvous_client::try_get_many(const std::vector<std::string>& keys) {
  auto got = gather({}, keys, std::chrono::milliseconds{1});
  std::vector<std::optional<std::string>> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    out[i] = std::string(got.values[i].begin(), got.values[i].end());
  for (int i : got.missing)
    out[static_cast<size_t>(i)].reset();
  return out;
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

void rendezvous_client::set_many(std::vector<std::pair<std::string, std::vector<char>>> entries) {
  gather(std::move(entries), {}, timeout_);
}

std::vector<std::vector<char>> rendezvous_client::get_many(const std::vector<std::string>& keys,
                                                           std::chrono::milliseconds timeout) {
  auto got = gather({}, keys, timeout);
  if (got.missing.empty())
    return std::move(got.values);
  std::vector<std::string> names;
  for (int i : got.missing)
    names.push_back(keys[static_cast<size_t>(i)]);
  throw rendezvous_timeout(fmt::format("rendezvous scope '{}': key(s) [{}] never set within {} ms",
                                       scope_, fmt::join(names, ", "), timeout.count()));
}

rendezvous_client::gathered
rendezvous_client::gather(std::vector<std::pair<std::string, std::vector<char>>> entries,
                          const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  proto::kv_batch batch;
  for (auto& [key, value] : entries) {
    batch.keys.push_back(key);
    batch.values.push_back(std::move(value));
  }
  auto what = fmt::format("gather of {} key(s){}", keys.size(),
                          keys.empty() ? std::string{} : " from '" + keys.front() + "'");
  auto found = impl_->request<proto::kv_found>(timeout, what, proto::gather_atom_v, scope_,
                                               std::move(batch), proto::key_list{keys},
                                               caf::timespan{timeout});
  return {std::move(found.values), std::vector<int>(found.missing.begin(), found.missing.end())};
}

namespace {

// Asks for the key again every watch period: a store wait is bounded.
struct watch_state {
  static inline const char* name = "rendezvous_watch";
};

} // namespace

std::shared_ptr<void>
rendezvous_client::watch(const std::string& key,
                         std::function<void(const std::vector<char>&)> on_set,
                         std::function<void(const std::string&)> on_closed) {
  auto store = impl_->store;
  auto scope = scope_;
  auto sys = impl_->sys; // the watch may outlive this client
  auto watcher = impl_->sys->spawn([=](caf::stateful_actor<watch_state>* self) -> caf::behavior {
    auto ask = [=] {
      ++requests;
      auto asked = std::chrono::steady_clock::now();
      self->request(store, knobs::store_watch_period + knobs::store_round_trip, proto::get_atom_v,
                    scope, key, caf::timespan{knobs::store_watch_period})
        .then(
          [=](const std::vector<char>& value) {
            on_set(value);
            self->quit();
          },
          [=](caf::error& err) {
            bool in_hvactor = err.category() == error_category
                              && err.code() == static_cast<uint8_t>(error_kind::rendezvous_timeout);
            // The store answers a waiting get early only when its scope
            // was closed: the key can never be set then (asking again
            // would spin).
            bool expired = std::chrono::steady_clock::now() - asked
                           >= knobs::store_watch_period / 2;
            // A busy store (or connection) that answered late: the watch
            // must not end silently while the store is still there.
            bool late = err == caf::sec::request_timeout;
            if ((in_hvactor && expired) || late) {
              self->send(self, int32_t{0}); // not set yet: ask again
              return;
            }
            if (in_hvactor && on_closed)
              on_closed(describe(err));
            self->quit(err);
          });
    };
    ask();
    return {[=](int32_t) { ask(); }};
  });
  // The handle keeps the system alive until the watcher was told to quit.
  return std::shared_ptr<void>(new caf::actor(watcher), [sys](void* p) {
    auto* a = static_cast<caf::actor*>(p);
    caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
    delete a;
  });
}

} // namespace hvactor::collectives
