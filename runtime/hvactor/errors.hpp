#pragma once

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

/// Error kinds as they travel between actors, mapped back to the classes
/// above at the API edge.
enum class error_kind : int {
  generic = 0,
  placement_timeout = 1,
  rendezvous_timeout = 2,
  worker_error = 3,
  node_lost = 4,
  not_started = 5,
  invalid_argument = 6,
};

/// Throws the exception class of `kind` with `message`.
[[noreturn]] void throw_error(error_kind kind, const std::string& message, int rank = -1);

} // namespace hvactor
