#pragma once

/// Horovod's hvd.elastic for C++ (horovod/common/elastic.py): state that
/// survives a change of the world, and the loop that resets the collectives
/// when a peer dies or the job's hosts change.
///
/// In an elastic job (HOROVOD_ELASTIC=1, set by the coordinator), hvd::init()
/// takes this worker's rank in the newest generation of the world from the
/// job's rendezvous store, and hvd::elastic::run() keeps the user's function
/// going across generations:
/// - before each attempt, state.sync() broadcasts the state from rank 0 (the
///   oldest surviving worker, which holds the last commit);
/// - a collective_error (a peer died) restores the last commit, then resets;
/// - a hosts_updated_interrupt (raised by commit() or check_host_updates()
///   on every rank at the same step) resets without restoring, and skips the
///   next sync when hosts were only removed;
/// - a reset is hvd::shutdown(); hvd::init() on the new generation, then the
///   state's reset callbacks.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "hvactor/errors.hpp"
#include "hvactor/hvd.hpp"
#include "hvactor/serialization.hpp"

namespace hvactor::hvd::elastic {

/// What changed in the job's hosts (Horovod's HostUpdateResult).
enum class host_update : int32_t { none = 0, removed = 1, added = 2, mixed = 3 };

/// The job's hosts changed: every rank raises it at the same step.
class hosts_updated_interrupt : public error {
public:
  explicit hosts_updated_interrupt(host_update update);
  host_update update() const noexcept {
    return update_;
  }
  /// Only hosts were removed: the survivors' state is current, no sync.
  bool skip_sync() const noexcept {
    return update_ == host_update::removed;
  }

private:
  host_update update_;
};

/// Checks for host changes without saving (rank 0 learns them from the
/// driver and broadcasts them). Collective: every rank calls it at the same
/// step. Throws hosts_updated_interrupt on every rank when hosts changed.
void check_host_updates();

/// When the phases of this process's last reset ended (steady_clock; all
/// default before the first reset): for logs and benchmarks.
struct reset_timing {
  /// run() caught the collective_error or hosts_updated_interrupt.
  std::chrono::steady_clock::time_point failed;
  /// The new generation's assignment arrived from the driver.
  std::chrono::steady_clock::time_point assigned;
  /// hvd::init connected the new world.
  std::chrono::steady_clock::time_point connected;
  /// state.sync() returned (or was skipped): the user's function runs again.
  std::chrono::steady_clock::time_point synced;
};
reset_timing last_reset();

/// The generation of the world this process joined last (0 before hvd::init
/// in an elastic job; static jobs stay at 0).
int generation();

/// Base of elastic state (horovod.common.elastic.State).
class state {
public:
  virtual ~state() = default;

  /// Saves the state in memory, then check_host_updates().
  void commit();
  /// Back to the last commit.
  virtual void restore() = 0;
  /// Makes every rank's state rank 0's (a collective).
  virtual void sync() = 0;
  /// Saves the current values as the last commit (commit() without check).
  virtual void save() = 0;
  void check_host_updates();
  /// `fn` runs after every reset, in registration order.
  void register_reset_callback(std::function<void()> fn);
  /// Runs the reset callbacks (hvd::elastic::run calls it).
  void on_reset();

private:
  std::vector<std::function<void()>> callbacks_;
};

namespace detail {
/// Broadcasts `bytes` from `root` (any length; every rank gets root's).
void broadcast_bytes(std::vector<char>& bytes, int root = 0);
} // namespace detail

/// State made of values CAF can serialize (std types, containers, structs
/// with `inspect`), held in the object: `st.value<0>()`, or `st.get<T>()`
/// when the type is unique.
template <class... Ts>
class object_state : public state {
public:
  explicit object_state(Ts... xs) : values_(std::move(xs)...), saved_(values_) {
  }

  template <size_t I>
  auto& value() {
    return std::get<I>(values_);
  }
  template <class T>
  T& get() {
    return std::get<T>(values_);
  }
  std::tuple<Ts...>& values() {
    return values_;
  }

  void save() override {
    saved_ = values_;
  }
  void restore() override {
    values_ = saved_;
  }
  void sync() override {
    std::vector<char> bytes;
    if (hvd::rank() == 0)
      bytes = std::apply([](auto&... xs) { return hvactor::detail::pack(xs...); }, values_);
    detail::broadcast_bytes(bytes);
    values_ = hvactor::detail::unpack<Ts...>(bytes);
    saved_ = values_;
  }

private:
  std::tuple<Ts...> values_;
  std::tuple<Ts...> saved_;
};

namespace detail {
/// One attempt after another until `attempt` returns (see the file comment).
void run_loop(state& st, const std::function<void()>& attempt);
} // namespace detail

/// Runs `fn(st)` with Horovod's elastic loop; returns what fn returns. Calls
/// hvd::init() first when the collectives are not initialized.
template <class State, class F>
auto run(State& st, F&& fn) {
  using R = std::invoke_result_t<F&, State&>;
  if constexpr (std::is_void_v<R>) {
    detail::run_loop(st, [&] { fn(st); });
  } else {
    std::optional<R> out;
    detail::run_loop(st, [&] { out.emplace(fn(st)); });
    return std::move(*out);
  }
}

} // namespace hvactor::hvd::elastic
