#include "actors/internal/rendezvous_store.hpp"

#include <map>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"

namespace hvactor {

namespace {

using namespace proto;

struct pending_wait {
  std::string scope;
  std::vector<std::string> keys;
  caf::timespan timeout;
  // Exactly one of the two is used: a get answers the value of keys[0].
  caf::typed_response_promise<std::vector<char>> get_promise;
  caf::typed_response_promise<bool> wait_promise;
  bool is_get = false;
};

struct store_state {
  std::map<std::string, std::map<std::string, std::vector<char>>> scopes;
  /// Closed scopes and why (close_atom).
  std::map<std::string, std::string> closed;
  std::map<uint64_t, pending_wait> pending;
  uint64_t next_id = 1;
  static inline const char* name = "rendezvous_store";

  bool has(const std::string& scope, const std::string& key) const {
    auto s = scopes.find(scope);
    return s != scopes.end() && s->second.count(key) > 0;
  }

  std::vector<std::string> missing(const pending_wait& w) const {
    std::vector<std::string> out;
    for (auto& k : w.keys)
      if (!has(w.scope, k))
        out.push_back(k);
    return out;
  }
};

using store_actor = rendezvous_store::stateful_pointer<store_state>;

// Answers every pending wait whose keys are all present now.
void settle(store_actor self) {
  auto& st = self->state;
  for (auto i = st.pending.begin(); i != st.pending.end();) {
    auto& w = i->second;
    if (!st.missing(w).empty()) {
      ++i;
      continue;
    }
    if (w.is_get)
      w.get_promise.deliver(st.scopes[w.scope][w.keys[0]]);
    else
      w.wait_promise.deliver(true);
    i = st.pending.erase(i);
  }
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
    if (i->second.is_get)
      i->second.get_promise.deliver(closed_error(scope, why));
    else
      i->second.wait_promise.deliver(closed_error(scope, why));
    i = st.pending.erase(i);
  }
}

rendezvous_store::behavior_type store_impl(store_actor self) {
  self->set_exception_handler(exit_with_error("rendezvous store"));
  return {
    [=](set_atom, const std::string& scope, const std::string& key,
        std::vector<char>& value) -> caf::result<bool> {
      if (auto c = self->state.closed.find(scope); c != self->state.closed.end())
        return closed_error(scope, c->second);
      self->state.scopes[scope][key] = std::move(value);
      settle(self);
      return true;
    },
    [=](get_atom, const std::string& scope, const std::string& key,
        caf::timespan timeout) -> caf::result<std::vector<char>> {
      auto& st = self->state;
      if (auto c = st.closed.find(scope); c != st.closed.end())
        return closed_error(scope, c->second);
      if (st.has(scope, key))
        return st.scopes[scope][key];
      auto id = st.next_id++;
      auto& w = st.pending[id];
      w.scope = scope;
      w.keys = {key};
      w.timeout = timeout;
      w.is_get = true;
      w.get_promise = self->make_response_promise<std::vector<char>>();
      self->delayed_send(self, timeout, expire_atom_v, id);
      return w.get_promise;
    },
    [=](wait_atom, const std::string& scope, const key_list& keys,
        caf::timespan timeout) -> caf::result<bool> {
      auto& st = self->state;
      if (auto c = st.closed.find(scope); c != st.closed.end())
        return closed_error(scope, c->second);
      auto id = st.next_id++;
      auto& w = st.pending[id];
      w.scope = scope;
      w.keys = keys.keys;
      w.timeout = timeout;
      if (st.missing(w).empty()) {
        st.pending.erase(id);
        return true;
      }
      w.wait_promise = self->make_response_promise<bool>();
      self->delayed_send(self, timeout, expire_atom_v, id);
      return w.wait_promise;
    },
    [=](drop_atom, const std::string& scope) { self->state.scopes.erase(scope); },
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
    [=](expire_atom, uint64_t id) {
      auto& st = self->state;
      auto i = st.pending.find(id);
      if (i == st.pending.end())
        return;
      auto err = timeout_error(i->second, st.missing(i->second));
      if (i->second.is_get)
        i->second.get_promise.deliver(err);
      else
        i->second.wait_promise.deliver(err);
      st.pending.erase(i);
    },
  };
}

} // namespace

proto::rendezvous_store spawn_rendezvous_store(caf::actor_system& sys) {
  return sys.spawn(store_impl);
}

} // namespace hvactor
