#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace hvactor {

/// Base of every error hvactor throws at its API edge.
class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Resources could not be reserved within `settings::placement_timeout`.
class placement_timeout : public error {
public:
  using error::error;
};

/// Workers or collective peers did not arrive within `settings::timeout`.
class rendezvous_timeout : public error {
public:
  using error::error;
};

/// A remote call threw, or a worker process died.
class worker_error : public error {
public:
  worker_error(const std::string& what, int rank = -1) : error(what), rank_(rank) {
  }
  /// World rank of the failing worker, -1 if not known.
  int rank() const noexcept {
    return rank_;
  }

private:
  int rank_;
};

/// A node left the cluster while a job was using it.
class node_lost : public error {
public:
  using error::error;
};

/// A collective operation failed on this rank: a peer died or stopped
/// answering within the timeout, or the ranks disagreed on what to run. The
/// collectives stay unusable until hvd::shutdown() and hvd::init().
class collective_error : public error {
public:
  collective_error(const std::string& what, int peer = -1) : error(what), peer_(peer) {
  }
  /// World rank of the peer involved, -1 if not known.
  int peer() const noexcept {
    return peer_;
  }

private:
  int peer_;
};

/// A call before `start()` or after `shutdown()`.
class not_started : public error {
public:
  using error::error;
};

/// An elastic job did not find `min_workers` slots within
/// `executor_options::elastic_timeout`; names the slots it saw.
class elastic_timeout : public error {
public:
  using error::error;
};

/// An elastic job reset more often than `executor_options::reset_limit`.
class reset_limit_exceeded : public error {
public:
  using error::error;
};

/// Error kinds as they travel between actors (as caf::error codes), mapped
/// back to the classes above at the API edge. They start at 1: CAF, like
/// LevelDB's Status, reads code 0 as "no error", so a kind 0 would turn a
/// failure into a success on its way.
enum class error_kind : uint8_t {
  placement_timeout = 1,
  rendezvous_timeout = 2,
  worker_error = 3,
  node_lost = 4,
  not_started = 5,
  invalid_argument = 6,
  collective_error = 7,
  /// hvactor::error itself: none of the above.
  generic = 8,
  elastic_timeout = 9,
  reset_limit_exceeded = 10,
};

/// Every kind, in code order (tests and the error category's renderer).
inline constexpr error_kind all_error_kinds[] = {
  error_kind::placement_timeout, error_kind::rendezvous_timeout, error_kind::worker_error,
  error_kind::node_lost,         error_kind::not_started,        error_kind::invalid_argument,
  error_kind::collective_error,  error_kind::generic,            error_kind::elastic_timeout,
  error_kind::reset_limit_exceeded,
};

/// "placement_timeout", "worker_error", ...
const char* to_string(error_kind kind) noexcept;

/// Throws the exception class of `kind` with `message`.
[[noreturn]] void throw_error(error_kind kind, const std::string& message, int rank = -1);

} // namespace hvactor
