#pragma once

// Internal: the device half of hvd::init (nccl/device_setup.cpp in CUDA
// builds, device_none.cpp otherwise).

#include <chrono>
#include <memory>
#include <string>

#include "collectives/engine/engine.hpp"
#include "collectives/backends/backend.hpp"
#include "collectives/rendezvous/rendezvous_client.hpp"
#include "hvactor/hvd.hpp"

namespace hvactor::collectives {

struct device_setup {
  /// nullptr when the job has no device backend.
  std::unique_ptr<backend> device;
  /// "nccl", "host-staged", or "none: <why>".
  std::string description;
  /// The CUDA device the backend runs on; -1 without one.
  int gpu = -1;
};

/// Runs on every rank inside hvd::init, after the host engine is up: ranks
/// exchange what GPU they got (through `eng`) and agree on NCCL, the
/// host-staged path, or none. `client` (the rendezvous store; nullptr in a
/// job of one) carries the ncclUniqueId under `prefix`.
device_setup setup_devices(const topology& t, hvd::detail::engine& eng,
                           rendezvous_client* client, const std::string& prefix,
                           std::chrono::milliseconds timeout);

/// HVACTOR_GPU_OPERATIONS, upper-cased: "AUTO" (also unset or empty),
/// "NCCL", "GLOO" or "NONE"; hvactor::error naming the value otherwise
/// (device_choice.cpp).
std::string gpu_operations();

/// The calling thread's current CUDA device (-1 without CUDA); device
/// backends switch it to their GPU, and hvd's calls put it back.
int current_device();
void restore_device(int device);

/// Blocks until the work queued on `stream` finished (so a device
/// collective reads what the caller's kernels wrote); no-op without CUDA.
void wait_for_stream(hvd::cuda_stream stream);

/// A CUDA event recorded on `stream` now, on the caller's current device
/// (destroyed with the last owner): what an async device collective waits
/// for on the GPU instead of blocking the caller (a gradient hook) until
/// its stream drained. Null without CUDA.
std::shared_ptr<void> record_ready(hvd::cuda_stream stream);

} // namespace hvactor::collectives
