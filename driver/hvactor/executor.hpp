#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "hvactor/call_data.hpp"
#include "hvactor/code_registry.hpp"
#include "hvactor/errors.hpp"
#include "hvactor/future.hpp"
#include "hvactor/runtime.hpp"
#include "hvactor/settings.hpp"

namespace hvactor {

namespace detail {

template <class... Ts>
struct type_list {};

/// Signature of plain functions and (captureless) lambdas.
template <class F>
struct fn_traits : fn_traits<decltype(&F::operator())> {};

template <class R, class... A>
struct fn_traits<R (*)(A...)> {
  using result_type = R;
  using pointer = R (*)(A...);
  using signature = R(A...);
  using params = type_list<A...>;
};

template <class R, class C, class... A>
struct fn_traits<R (C::*)(A...) const> : fn_traits<R (*)(A...)> {};

template <class R, class C, class... A>
struct fn_traits<R (C::*)(A...)> : fn_traits<R (*)(A...)> {};

/// Signature of member functions of the executable.
template <class Pmf>
struct member_traits;

template <class R, class T, class... A>
struct member_traits<R (T::*)(A...)> {
  using result_type = R;
  using object = T;
  using params = type_list<A...>;
  using invoker = member_invoker<R (T::*)(A...), R, T, A...>;
};

template <class R, class T, class... A>
struct member_traits<R (T::*)(A...) const> {
  using result_type = R;
  using object = T;
  using params = type_list<A...>;
  using invoker = member_invoker<R (T::*)(A...) const, R, T, A...>;
};

template <class... Params, class... Args>
std::vector<char> pack_args(type_list<Params...>, Args&&... xs) {
  static_assert(sizeof...(Params) == sizeof...(Args),
                "hvactor: wrong number of arguments for the remote function");
  std::tuple<std::decay_t<Params>...> values{std::forward<Args>(xs)...};
  return std::apply([](auto&... ys) { return pack(ys...); }, values);
}

template <class F>
auto to_pointer(F f) {
  using pointer = typename fn_traits<F>::pointer;
  static_assert(std::is_convertible_v<F, pointer>,
                "hvactor: remote functions must be plain functions, member functions or "
                "captureless lambdas");
  return static_cast<pointer>(f);
}

template <class Params>
struct drop_first;

template <class T, class... A>
struct drop_first<type_list<T, A...>> {
  using first = T;
  using rest = type_list<A...>;
};

/// A call for run(): plain function or captureless lambda.
template <class F, class... Args>
call_data make_free_call(F f, Args&&... xs) {
  using traits = fn_traits<F>;
  auto fp = to_pointer(f);
  return {free_invoker<typename traits::signature>::key,
          encode_code_address(reinterpret_cast<const void*>(fp)),
          pack_args(typename traits::params{}, std::forward<Args>(xs)...)};
}

/// A call for execute(): member function, or function taking the executable.
template <class F, class... Args>
call_data make_object_call(F f, Args&&... xs) {
  if constexpr (std::is_member_function_pointer_v<F>) {
    using traits = member_traits<F>;
    return {traits::invoker::key, encode_member(f),
            pack_args(typename traits::params{}, std::forward<Args>(xs)...)};
  } else {
    using traits = fn_traits<F>;
    using split = drop_first<typename traits::params>;
    static_assert(std::is_lvalue_reference_v<typename split::first>,
                  "hvactor: execute() functions take the executable by reference first");
    auto fp = to_pointer(f);
    return {object_invoker<typename traits::signature>::key,
            encode_code_address(reinterpret_cast<const void*>(fp)),
            pack_args(typename split::rest{}, std::forward<Args>(xs)...)};
  }
}

template <class F>
struct object_call_result {
  using type = typename fn_traits<F>::result_type;
};

template <class F>
  requires std::is_member_function_pointer_v<F>
struct object_call_result<F> {
  using type = typename member_traits<F>::result_type;
};

template <class R>
std::vector<R> decode_all(const std::vector<std::vector<char>>& payloads) {
  std::vector<R> out;
  out.reserve(payloads.size());
  for (auto& p : payloads)
    out.push_back(std::get<0>(unpack<R>(p)));
  return out;
}

} // namespace detail

/// Starts and drives a group of Horovod workers (horovod.ray.RayExecutor).
///
/// Every call blocks until every worker answered and returns results in
/// world-rank order; a worker that raised or died makes it throw
/// worker_error naming the rank, node, pid and the cause.
class executor {
public:
  /// `settings` with the caller's overrides (RayExecutor.create_settings).
  static settings create_settings(settings s = {}) {
    return s;
  }

  /// Validates `opts` (std::invalid_argument with API.md's messages).
  executor(runtime& rt, settings s, executor_options opts);
  ~executor();

  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;

  /// Reserves resources (all-or-nothing, retried until placement_timeout),
  /// starts the workers and hands every worker its Horovod environment.
  void start();

  /// start(), then constructs T(args...) in every worker after its
  /// environment is set (so T's constructor may call hvd::init()).
  template <class T, class... Args>
  void start(Args&&... args) {
    require_static("start<T>() (an executable class)");
    start();
    detail::call_data call{detail::ctor_invoker<T, std::decay_t<Args>...>::key, "",
                           detail::pack_args(detail::type_list<std::decay_t<Args>...>{},
                                             std::forward<Args>(args)...)};
    call_all(call);
  }

  /// Runs `fn(args...)` on every worker. Elastic jobs: on every worker
  /// that joins while it runs; returns when one worker returned (the
  /// others get a grace to return too) with the successful workers'
  /// values in final rank order, or throws when every worker failed.
  template <class F, class... Args>
  auto run(F fn, Args&&... args) {
    using R = typename detail::fn_traits<F>::result_type;
    auto payloads = call_all(detail::make_free_call(fn, std::forward<Args>(args)...));
    if constexpr (!std::is_void_v<R>)
      return detail::decode_all<R>(payloads);
  }

  /// Runs `fn(args...)` on every worker without waiting; one future per rank.
  template <class F, class... Args>
  auto run_remote(F fn, Args&&... args) {
    using R = typename detail::fn_traits<F>::result_type;
    auto states = call_async(detail::make_free_call(fn, std::forward<Args>(args)...));
    std::vector<future<R>> out;
    for (auto& st : states)
      out.emplace_back(st, call_timeout());
    return out;
  }

  /// Runs `fn` on every worker's executable object: a member function of
  /// T, or a function taking T& first.
  template <class F, class... Args>
  auto execute(F fn, Args&&... args) {
    using R = typename detail::object_call_result<F>::type;
    require_static("execute");
    auto payloads = call_all(detail::make_object_call(fn, std::forward<Args>(args)...));
    if constexpr (!std::is_void_v<R>)
      return detail::decode_all<R>(payloads);
  }

  /// execute() on rank 0 only; returns its bare result.
  template <class F, class... Args>
  auto execute_single(F fn, Args&&... args) {
    using R = typename detail::object_call_result<F>::type;
    auto payload = call_one(0, detail::make_object_call(fn, std::forward<Args>(args)...));
    if constexpr (!std::is_void_v<R>)
      return std::get<0>(detail::unpack<R>(payload));
  }

  /// Stops every worker and releases every reservation; idempotent.
  void shutdown();

  /// Number of workers (world size) of this job.
  int num_workers() const noexcept;

  /// Node id of every rank, in rank order (after start()).
  std::vector<std::string> worker_nodes() const;

  /// Process id of every rank, in rank order (after start()).
  std::vector<int> worker_pids() const;

  /// Bytes of the driver's binary that start() sent to nodes lacking it
  /// (0 on an embedded cluster, and when every node had it cached).
  uint64_t shipped_bytes() const;

  /// Receives every hvactor::log::event a worker emits, with its rank, in
  /// arrival order (the ray_logger callbacks of horovod.ray). Set it before
  /// start(); it runs on one of the runtime's threads, one event at a time.
  using event_callback =
    std::function<void(int rank, const std::map<std::string, std::string>& fields)>;
  void on_event(event_callback cb);

  struct impl;

private:
  /// The layers built on the executor (hvactor::train, horovod_runner)
  /// reach its job through this (internal/executor_access.hpp).
  friend struct executor_access;

  std::vector<std::vector<char>> call_all(const detail::call_data& call);
  std::vector<char> call_one(int rank, const detail::call_data& call);
  std::vector<std::shared_ptr<detail::pending_result>> call_async(const detail::call_data& call);
  std::chrono::milliseconds call_timeout() const;
  void shutdown_quietly() noexcept;
  /// Throws std::logic_error in an elastic job (Horovod's elastic mode runs
  /// functions only).
  void require_static(const char* what) const;

  std::unique_ptr<impl> impl_;
};

} // namespace hvactor
