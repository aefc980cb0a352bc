// op::average on device memory: divide by the number of ranks after a sum.
// Integer types truncate toward zero, as the host path does. And the scale
// factors (hvd::scale_factors), as Horovod's ScaleBufferCudaImpl: float32
// by (float)factor, float16 by the factor as a float16, float64 and
// integers by the double.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_check.hpp"

namespace hvactor::collectives::cuda {

namespace {

template <class T, class D>
__global__ void divide(T* x, size_t n, D divisor) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{blockDim.x} * gridDim.x)
    x[i] = static_cast<T>(x[i] / divisor);
}

__global__ void divide_bf16(__nv_bfloat16* x, size_t n, float divisor) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{blockDim.x} * gridDim.x)
    x[i] = __float2bfloat16(__bfloat162float(x[i]) / divisor);
}

__global__ void divide_half(__half* x, size_t n, float divisor) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{blockDim.x} * gridDim.x)
    x[i] = __float2half(__half2float(x[i]) / divisor);
}

template <class T, class F>
__global__ void times(T* x, size_t n, F factor) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{blockDim.x} * gridDim.x)
    x[i] = static_cast<T>(static_cast<F>(x[i]) * factor);
}

__global__ void times_bf16(__nv_bfloat16* x, size_t n, float factor) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{blockDim.x} * gridDim.x)
    x[i] = __float2bfloat16(__bfloat162float(x[i]) * factor);
}

__global__ void times_half(__half* x, size_t n, float factor) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{blockDim.x} * gridDim.x)
    x[i] = __float2half(__half2float(x[i]) * factor);
}

unsigned blocks_for(size_t n) {
  size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 4096 ? (b == 0 ? 1 : b) : 4096);
}

} // namespace

bool launch_scale(void* data, size_t n, hvd::dtype t, int divisor, cudaStream_t stream) {
  if (n == 0 || divisor <= 1)
    return false;
  auto blocks = blocks_for(n);
  switch (t) {
    case hvd::dtype::float32:
      divide<<<blocks, 256, 0, stream>>>(static_cast<float*>(data), n, float(divisor));
      break;
    case hvd::dtype::float64:
      divide<<<blocks, 256, 0, stream>>>(static_cast<double*>(data), n, double(divisor));
      break;
    case hvd::dtype::int32:
      divide<<<blocks, 256, 0, stream>>>(static_cast<int32_t*>(data), n, int32_t(divisor));
      break;
    case hvd::dtype::int64:
      divide<<<blocks, 256, 0, stream>>>(static_cast<int64_t*>(data), n, int64_t(divisor));
      break;
    case hvd::dtype::float16:
      divide_half<<<blocks, 256, 0, stream>>>(static_cast<__half*>(data), n, float(divisor));
      break;
    case hvd::dtype::bfloat16:
      divide_bf16<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(data), n, float(divisor));
      break;
    case hvd::dtype::boolean: // no average of bools (refused by hvd::allreduce)
      return false;
    // Small integers divide in int (no wrap of a divisor beyond their range).
    case hvd::dtype::uint8:
      divide<<<blocks, 256, 0, stream>>>(static_cast<uint8_t*>(data), n, int(divisor));
      break;
    case hvd::dtype::int8:
      divide<<<blocks, 256, 0, stream>>>(static_cast<int8_t*>(data), n, int(divisor));
      break;
    case hvd::dtype::int16:
      divide<<<blocks, 256, 0, stream>>>(static_cast<int16_t*>(data), n, int(divisor));
      break;
  }
  return true;
}

bool launch_multiply(void* data, size_t n, hvd::dtype t, double factor, cudaStream_t stream) {
  if (n == 0 || factor == 1.0)
    return false;
  auto blocks = blocks_for(n);
  switch (t) {
    case hvd::dtype::float32:
      times<<<blocks, 256, 0, stream>>>(static_cast<float*>(data), n, float(factor));
      break;
    case hvd::dtype::float64:
      times<<<blocks, 256, 0, stream>>>(static_cast<double*>(data), n, factor);
      break;
    case hvd::dtype::int32:
      times<<<blocks, 256, 0, stream>>>(static_cast<int32_t*>(data), n, factor);
      break;
    case hvd::dtype::int64:
      times<<<blocks, 256, 0, stream>>>(static_cast<int64_t*>(data), n, factor);
      break;
    case hvd::dtype::uint8:
      times<<<blocks, 256, 0, stream>>>(static_cast<uint8_t*>(data), n, factor);
      break;
    case hvd::dtype::int8:
      times<<<blocks, 256, 0, stream>>>(static_cast<int8_t*>(data), n, factor);
      break;
    case hvd::dtype::int16:
      times<<<blocks, 256, 0, stream>>>(static_cast<int16_t*>(data), n, factor);
      break;
    case hvd::dtype::float16:
      // Horovod's kernel multiplies by the factor as a float16.
      times_half<<<blocks, 256, 0, stream>>>(static_cast<__half*>(data), n,
                                             __half2float(__float2half(float(factor))));
      break;
    case hvd::dtype::bfloat16:
      times_bf16<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(data), n, float(factor));
      break;
    case hvd::dtype::boolean:
      return false;
  }
  return true;
}

} // namespace hvactor::collectives::cuda
