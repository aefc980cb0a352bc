#pragma once

#include <cstddef>
#include <vector>

#include <hvactor/runtime.hpp>

/// `allreduce --gpu`: hvd::allreduce on device memory (NCCL, or the
/// host-staged path when ranks share a GPU) at each world size in `nps`,
/// message sizes min_bytes..max_bytes (powers of 4), with the same sizes on
/// host memory (Gloo) measured in the same workers as the peer column.
/// Prints the device, driver, NCCL version and backend, then nccl-tests'
/// columns. Returns the process exit code (0 also when no GPU is present:
/// it says so and measures nothing).
int run_gpu_benchmark(hvactor::runtime& rt, const std::vector<int>& nps, size_t min_bytes,
                      size_t max_bytes, double budget_ms);
