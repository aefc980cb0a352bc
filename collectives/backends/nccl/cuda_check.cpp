#include "cuda_check.hpp"

#include <thread>

#include <fmt/format.h>

#include "base/internal/knobs_elastic.hpp"
#include "hvactor/errors.hpp"

namespace hvactor::collectives::cuda {

std::string where(const topology& t, int device) {
  return fmt::format("rank {} of {} on node '{}', GPU {}", t.rank, t.size, t.host, device);
}

void check(cudaError_t rc, const char* what, const topology& t, int device) {
  if (rc == cudaSuccess)
    return;
  cudaGetLastError(); // clear a sticky-free error so the next call reports its own
  throw collective_error(
    fmt::format("{} on {}: {} ({})", what, where(t, device), cudaGetErrorString(rc),
                cudaGetErrorName(rc)));
}

void check(ncclResult_t rc, const char* what, const topology& t, int device) {
  if (rc == ncclSuccess)
    return;
  const char* last = ncclGetLastError(nullptr);
  throw collective_error(fmt::format("{} on {}: {}{}{}", what, where(t, device),
                                     ncclGetErrorString(rc), last && *last ? ": " : "",
                                     last ? last : ""));
}

void poll_pause::operator()() {
  if (std::chrono::steady_clock::now() - start_ < knobs::device_spin)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(knobs::device_poll);
}

ncclDataType_t nccl_type(hvd::dtype t) {
  switch (t) {
    case hvd::dtype::float32:
      return ncclFloat32;
    case hvd::dtype::float64:
      return ncclFloat64;
    case hvd::dtype::int32:
      return ncclInt32;
    case hvd::dtype::int64:
      return ncclInt64;
    case hvd::dtype::float16:
      return ncclFloat16;
    case hvd::dtype::uint8:
    case hvd::dtype::boolean: // reduced with max (or) and min (and): nccl_backend.cpp
      return ncclUint8;
    case hvd::dtype::int8:
      return ncclInt8;
    case hvd::dtype::bfloat16:
      return ncclBfloat16;
    case hvd::dtype::int16:
      // NCCL has no 16-bit integer type: gathers and broadcasts move bytes
      // (nccl_backend.cpp); an int16 reduction has no NCCL form.
      throw collective_error("hvd: NCCL has no int16 reduction; reduce int16 device memory as "
                             "int32 (LibTorch's CUDA tensors do so), or run with "
                             "HVACTOR_GPU_OPERATIONS=GLOO");
  }
  throw std::invalid_argument("hvd: unknown dtype");
}

ncclRedOp_t nccl_op(hvd::op o) {
  switch (o) {
    case hvd::op::sum:
    case hvd::op::average: // the caller divides afterwards
      return ncclSum;
    case hvd::op::product:
      return ncclProd;
    case hvd::op::min:
      return ncclMin;
    case hvd::op::max:
      return ncclMax;
    case hvd::op::adasum: // refused for device memory before anything is queued
      break;
  }
  throw std::invalid_argument("hvd: unknown reduction");
}

} // namespace hvactor::collectives::cuda
