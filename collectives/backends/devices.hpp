#pragma once

#include <string>

namespace hvactor::collectives {

/// What the CUDA runtime reports about this process's GPUs.
struct device_probe {
  /// Devices visible (after CUDA_VISIBLE_DEVICES); 0 when none or no CUDA.
  int count = 0;
  /// Why `count` is 0 ("built without CUDA/NCCL", "CUDA driver version is
  /// insufficient ...", ...); empty when count > 0.
  std::string reason;
};

/// True when hvactor was built with the CUDA toolkit and NCCL.
bool built_with_cuda() noexcept;

/// Asks the CUDA runtime how many devices this process sees. Node agents
/// use it to offer their GPUs when no --num-gpus / --gpu-ids is given.
device_probe probe_devices();

} // namespace hvactor::collectives
