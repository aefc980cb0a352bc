#pragma once

// Internal: every CUDA runtime and NCCL call of hvactor goes through these,
// so a failure is an hvactor::collective_error naming the call, the rank and
// the library's own reason.

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <string>

#include "collectives/backends/backend.hpp"

namespace hvactor::collectives::cuda {

/// "rank 2 of 4 on node 'n1', GPU 1"
std::string where(const topology& t, int device);

/// Throws collective_error("<what> on <where>: <cudaGetErrorString>").
void check(cudaError_t rc, const char* what, const topology& t, int device);

/// Throws collective_error("<what> on <where>: <ncclGetErrorString>
/// (<ncclGetLastError>)").
void check(ncclResult_t rc, const char* what, const topology& t, int device);

/// The pause between two polls of one wait: yields the core for the first
/// knobs::device_spin, then sleeps knobs::device_poll per poll.
class poll_pause {
public:
  void operator()();

private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

/// ncclDataType_t of `t`.
ncclDataType_t nccl_type(hvd::dtype t);

/// ncclRedOp_t of `o` (never op::average: the caller divides).
ncclRedOp_t nccl_op(hvd::op o);

/// Divides `count` elements at device `data` by `divisor` on `stream`
/// (integer types truncate, as on the host); scale.cu. False when nothing
/// was launched (empty, or divisor <= 1).
bool launch_scale(void* data, size_t count, hvd::dtype t, int divisor, cudaStream_t stream);

/// Multiplies `count` elements at device `data` by `factor` on `stream`
/// (backend::multiply's rules: integers static_cast<T>(x * factor), 16-bit
/// floats through float); scale.cu. False when nothing was launched
/// (empty, factor 1, or bool).
bool launch_multiply(void* data, size_t count, hvd::dtype t, double factor, cudaStream_t stream);

} // namespace hvactor::collectives::cuda
