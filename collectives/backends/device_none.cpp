// Builds without CUDA/NCCL: no device backend, so every hvd call on device
// memory throws "built without CUDA/NCCL" (hvd.cpp).

#include <fmt/format.h>

#include "base/internal/env_names.hpp"
#include "collectives/backends/device_setup.hpp"
#include "hvactor/errors.hpp"
#include "collectives/backends/devices.hpp"
#include "hvactor/hvd.hpp"

namespace hvactor::collectives {

bool built_with_cuda() noexcept {
  return false;
}

device_probe probe_devices() {
  return {0, "built without CUDA/NCCL"};
}

device_setup setup_devices(const topology&, hvd::detail::engine&, rendezvous_client*,
                           const std::string&, std::chrono::milliseconds) {
  auto choice = gpu_operations();
  if (choice == "NCCL" || choice == "GLOO")
    throw error(fmt::format("hvd::init: {}={}, but hvactor was built without CUDA/NCCL",
                            env::gpu_operations, choice));
  return {nullptr, "none: built without CUDA/NCCL"};
}

void wait_for_stream(hvd::cuda_stream) {
}

std::shared_ptr<void> record_ready(hvd::cuda_stream) {
  return nullptr;
}

int current_device() {
  return -1;
}

void restore_device(int) {
}

} // namespace hvactor::collectives
