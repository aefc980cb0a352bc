#include "actors/node/rendezvous_store.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/log.hpp"

namespace hvactor {

namespace {

using namespace proto;

enum class wait_kind : uint8_t { get, wait, gather };

/// A request that waits for keys. Exactly one promise is used, by kind.
struct pending_wait {
  std::string scope;
  std::vector<std::string> keys;
  caf::timespan timeout;
  wait_kind kind = wait_kind::wait;
  /// How many of `keys` were not set when last counted.
  size_t remaining = 0;
  caf::typed_response_promise<std::vector<char>> get_promise;
  caf::typed_response_promise<bool> wait_promise;
  caf::typed_response_promise<kv_found> gather_promise;
};

// A key in one scope, as the index of waiters names it.
std::string slot(const std::string& scope, const std::string& key) {
  std::string out;
  out.reserve(scope.size() + key.size() + 1);
  out.append(scope).push_back('\0');
  out.append(key);
  return out;
}

// Waiters are found by the key they miss, so a set costs the waiters of
// that key, not a scan of every waiter and every key it waits for (a
// rendezvous of N ranks each waiting for N keys was N^3 work at the store).
struct store_state {
  std::map<std::string, std::map<std::string, std::vector<char>>> scopes;
  /// Closed scopes and why (close_atom).
  std::map<std::string, std::string> closed;
  std::map<uint64_t, pending_wait> pending;
  /// slot(scope, key) -> the pending waits that miss that key.
  std::unordered_map<std::string, std::vector<uint64_t>> waiters;
  uint64_t next_id = 1;
  static inline const char* name = "rendezvous_store";

  const std::vector<char>* find(const std::string& scope, const std::string& key) const {
    auto s = scopes.find(scope);
    if (s == scopes.end())
      return nullptr;
    auto k = s->second.find(key);
    return k == s->second.end() ? nullptr : &k->second;
  }

  std::vector<std::string> missing(const pending_wait& w) const {
    std::vector<std::string> out;
    for (auto& k : w.keys)
      if (find(w.scope, k) == nullptr)
        out.push_back(k);
    return out;
  }

  // Takes `id` off the lists of the keys `w` misses.
  void delist(uint64_t id, const pending_wait& w) {
    for (auto& k : w.keys) {
      auto i = waiters.find(slot(w.scope, k));
      if (i == waiters.end())
        continue;
      std::erase(i->second, id);
      if (i->second.empty())
        waiters.erase(i);
    }
  }

  // Counts the keys `id` misses and files it under each; 0: none.
  size_t enlist(uint64_t id, pending_wait& w) {
    w.remaining = 0;
    for (auto& k : w.keys)
      if (find(w.scope, k) == nullptr) {
        waiters[slot(w.scope, k)].push_back(id);
        ++w.remaining;
      }
    return w.remaining;
  }
};

using store_actor = rendezvous_store::stateful_pointer<store_state>;

kv_found found(const store_state& st, const pending_wait& w) {
  kv_found out;
  out.values.resize(w.keys.size());
  for (size_t i = 0; i < w.keys.size(); ++i) {
    if (auto* v = st.find(w.scope, w.keys[i]))
      out.values[i] = *v;
    else
      out.missing.push_back(static_cast<int32_t>(i));
  }
  return out;
}

caf::error timeout_error(const pending_wait& w, const std::vector<std::string>& missing) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(w.timeout).count();
  return make_error(error_kind::rendezvous_timeout,
                    fmt::format("rendezvous scope '{}': key(s) [{}] never set within {} ms",
                                w.scope, fmt::join(missing, ", "), ms));
}

caf::error closed_error(const std::string& scope, const std::string& why) {
  return make_error(error_kind::rendezvous_timeout,
                    fmt::format("rendezvous scope '{}' was closed: {}", scope, why));
}

// Answers `w`: with what is set (a gather), or the value / true.
void deliver(const store_state& st, pending_wait& w) {
  switch (w.kind) {
    case wait_kind::get:
      w.get_promise.deliver(*st.find(w.scope, w.keys[0]));
      break;
    case wait_kind::wait:
      w.wait_promise.deliver(true);
      break;
    case wait_kind::gather:
      w.gather_promise.deliver(found(st, w));
      break;
  }
}

void fail(pending_wait& w, const caf::error& err) {
  switch (w.kind) {
    case wait_kind::get:
      w.get_promise.deliver(err);
      break;
    case wait_kind::wait:
      w.wait_promise.deliver(err);
      break;
    case wait_kind::gather:
      w.gather_promise.deliver(err);
      break;
  }
}

// `key` of `scope` was set for the first time: the waits that missed it
// count one key fewer; those that miss none now are answered.
void key_arrived(store_actor self, const std::string& scope, const std::string& key) {
  auto& st = self->state;
  auto i = st.waiters.find(slot(scope, key));
  if (i == st.waiters.end())
    return;
  auto ids = std::move(i->second);
  st.waiters.erase(i);
  for (auto id : ids) {
    auto p = st.pending.find(id);
    if (p == st.pending.end() || --p->second.remaining > 0)
      continue;
    // A key counted as set may have been taken since: count again.
    if (st.enlist(id, p->second) > 0)
      continue;
    deliver(st, p->second);
    st.pending.erase(p);
  }
}

void set_key(store_actor self, const std::string& scope, const std::string& key,
             std::vector<char>&& value) {
  auto& keys = self->state.scopes[scope];
  auto [at, fresh] = keys.insert_or_assign(key, std::move(value));
  log::debug("rendezvous store: set '{}' in '{}' ({} bytes)", key, scope, at->second.size());
  if (fresh)
    key_arrived(self, scope, key);
}

// Drops `scope` and fails every wait on it with `why`; later calls on it
// fail the same way.
void close_scope(store_actor self, const std::string& scope, const std::string& why) {
  auto& st = self->state;
  st.scopes.erase(scope);
  st.closed[scope] = why;
  for (auto i = st.pending.begin(); i != st.pending.end();) {
    if (i->second.scope != scope) {
      ++i;
      continue;
    }
    fail(i->second, closed_error(scope, why));
    st.delist(i->first, i->second);
    i = st.pending.erase(i);
  }
}

// Files a wait for `keys`, some of which are missing (the handlers answer
// at once when none is).
template <class T>
caf::typed_response_promise<T> wait_for(store_actor self, wait_kind kind, const std::string& scope,
                                        std::vector<std::string> keys, caf::timespan timeout,
                                        caf::typed_response_promise<T> pending_wait::*promise) {
  auto& st = self->state;
  auto id = st.next_id++;
  auto& w = st.pending[id];
  w.scope = scope;
  w.keys = std::move(keys);
  w.timeout = timeout;
  w.kind = kind;
  w.*promise = self->template make_response_promise<T>();
  st.enlist(id, w);
  self->delayed_send(self, timeout, expire_atom_v, id);
  return w.*promise;
}

void expire(store_actor self, uint64_t id) {
  auto& st = self->state;
  auto i = st.pending.find(id);
  if (i == st.pending.end())
    return;
  auto& w = i->second;
  auto missing = st.missing(w);
  log::debug("rendezvous store: a wait in '{}' expired; missing [{}]", w.scope,
             fmt::join(missing, ", "));
  if (w.kind == wait_kind::gather)
    deliver(st, w);
  else
    fail(w, timeout_error(w, missing));
  st.delist(id, w);
  st.pending.erase(i);
}

rendezvous_store::behavior_type store_impl(store_actor self) {
  self->set_exception_handler(exit_with_error("rendezvous store"));
  auto refused = [=](const std::string& scope) -> std::optional<caf::error> {
    if (auto c = self->state.closed.find(scope); c != self->state.closed.end())
      return closed_error(scope, c->second);
    return std::nullopt;
  };
  return {
    [=](set_atom, const std::string& scope, const std::string& key,
        std::vector<char>& value) -> caf::result<bool> {
      if (auto err = refused(scope))
        return *err;
      set_key(self, scope, key, std::move(value));
      return true;
    },
    [=](get_atom, const std::string& scope, const std::string& key,
        caf::timespan timeout) -> caf::result<std::vector<char>> {
      if (auto err = refused(scope))
        return *err;
      if (auto* v = self->state.find(scope, key))
        return *v;
      return wait_for(self, wait_kind::get, scope, {key}, timeout, &pending_wait::get_promise);
    },
    [=](wait_atom, const std::string& scope, const key_list& keys,
        caf::timespan timeout) -> caf::result<bool> {
      if (auto err = refused(scope))
        return *err;
      pending_wait now{.scope = scope, .keys = keys.keys};
      if (self->state.missing(now).empty())
        return true;
      return wait_for(self, wait_kind::wait, scope, keys.keys, timeout,
                      &pending_wait::wait_promise);
    },
    [=](gather_atom, const std::string& scope, kv_batch& batch, const key_list& keys,
        caf::timespan timeout) -> caf::result<kv_found> {
      if (auto err = refused(scope))
        return *err;
      if (batch.keys.size() != batch.values.size())
        return make_error(error_kind::invalid_argument,
                          fmt::format("rendezvous gather in '{}': {} keys but {} values", scope,
                                      batch.keys.size(), batch.values.size()));
      for (size_t i = 0; i < batch.keys.size(); ++i)
        set_key(self, scope, batch.keys[i], std::move(batch.values[i]));
      pending_wait now{.scope = scope, .keys = keys.keys};
      if (self->state.missing(now).empty())
        return found(self->state, now);
      return wait_for(self, wait_kind::gather, scope, keys.keys, timeout,
                      &pending_wait::gather_promise);
    },
    [=](take_atom, const std::string& scope,
        const std::string& key) -> caf::result<std::vector<char>> {
      auto s = self->state.scopes.find(scope);
      if (s == self->state.scopes.end() || s->second.count(key) == 0)
        return make_error(error_kind::rendezvous_timeout,
                          fmt::format("rendezvous scope '{}': key '{}' is not set", scope, key));
      auto value = std::move(s->second[key]);
      s->second.erase(key);
      return value;
    },
    [=](close_atom, const std::string& scope, const std::string& why) {
      close_scope(self, scope, why);
    },
    [=](expire_atom, uint64_t id) { expire(self, id); },
  };
}

} // namespace

proto::rendezvous_store spawn_rendezvous_store(caf::actor_system& sys) {
  return sys.spawn(store_impl);
}

} // namespace hvactor
