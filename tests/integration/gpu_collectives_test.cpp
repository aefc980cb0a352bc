// hvd collectives on device memory, in real worker processes.
//
// Always (ctest `gpu_collectives_test`): without a usable GPU, every device
// call fails with an error that says why ("built without CUDA/NCCL", or the
// CUDA runtime's reason) and host collectives keep working.
// On a GPU machine (ctest `gpu_collectives_gpu`, label `gpu`; exits 77 =
// skipped, with the reason, when no device is present): NCCL at 1 rank, the
// host-staged path at 2 ranks on one GPU, fusion of device tensors.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/backends/devices.hpp"
#include <hvactor/hvactor.hpp>

#ifdef HVACTOR_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace hvd = hvactor::hvd;
using namespace std::chrono_literals;

namespace {

hvactor::runtime* rt = nullptr;

/// In a worker: what a device call says when there is no GPU backend.
std::vector<std::string> device_call_without_gpu() {
  hvd::init();
  std::vector<std::string> out{hvd::gpu_available() ? "available" : "unavailable",
                               hvd::gpu_backend()};
  try {
    hvd::allreduce(hvd::device_span<float>{nullptr, 0}, hvd::op::sum, nullptr);
    out.push_back("no error");
  } catch (const hvactor::error& e) {
    out.push_back(e.what());
  }
  // Host collectives are unaffected.
  std::vector<float> x{1.0f};
  hvd::allreduce(std::span<float>(x), hvd::op::sum);
  out.push_back(std::to_string(static_cast<int>(x[0])));
  hvd::shutdown();
  return out;
}

std::vector<std::string> run_on(int workers, std::vector<std::string> (*fn)()) {
  hvactor::executor ex{*rt, hvactor::executor::create_settings({.timeout = 20s}),
                       {.num_workers = workers}};
  ex.start();
  auto all = ex.run(fn);
  ex.shutdown();
  return all.front();
}

#ifdef HVACTOR_TEST_CUDA
/// In a worker: device allreduce (sum, average), fused async allreduces,
/// allgather and broadcast; returns "ok <backend>" or what went wrong.
std::vector<std::string> device_collectives() {
  hvd::init();
  std::vector<std::string> out{hvd::gpu_backend()};
  auto fail = [&](const std::string& what) { out.push_back("FAIL " + what); };
  int n = hvd::size(), r = hvd::rank();
  const size_t count = 1 << 16;
  float* d = nullptr;
  cudaMalloc(&d, count * sizeof(float) * (n + 1));
  std::vector<float> h(count, float(r + 1)), back(count * n);
  cudaMemcpy(d, h.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  hvd::allreduce(hvd::device_span<float>{d, count}, hvd::op::sum, nullptr);
  cudaMemcpy(back.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost);
  if (back[0] != float(n * (n + 1) / 2) || back[count - 1] != back[0])
    fail("sum: " + std::to_string(back[0]));
  cudaMemcpy(d, h.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  hvd::allreduce(hvd::device_span<float>{d, count}, hvd::op::average, nullptr);
  cudaMemcpy(back.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost);
  if (back[0] != float(n + 1) / 2.0f)
    fail("average: " + std::to_string(back[0]));
  // 20 fused tensors of different sizes.
  std::vector<float*> ts;
  std::vector<hvd::handle> hs;
  for (int i = 0; i < 20; ++i) {
    float* t = nullptr;
    size_t len = 100 + 37 * i;
    cudaMalloc(&t, len * sizeof(float));
    std::vector<float> v(len, float(i + r));
    cudaMemcpy(t, v.data(), len * sizeof(float), cudaMemcpyHostToDevice);
    ts.push_back(t);
    hs.push_back(hvd::allreduce_async(hvd::device_span<float>{t, len}, hvd::op::sum,
                                      "t" + std::to_string(i), nullptr));
  }
  for (int i = 0; i < 20; ++i) {
    hvd::synchronize(hs[i]);
    float got = 0;
    cudaMemcpy(&got, ts[i] + 99, sizeof(float), cudaMemcpyDeviceToHost);
    float want = float(n * i + n * (n - 1) / 2);
    if (got != want)
      fail("fused tensor " + std::to_string(i) + ": " + std::to_string(got));
    cudaFree(ts[i]);
  }
  cudaMemcpy(d, h.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  hvd::allgather(hvd::device_span<const float>{d, count},
                 hvd::device_span<float>{d + count, count * n}, nullptr);
  cudaMemcpy(back.data(), d + count, count * n * sizeof(float), cudaMemcpyDeviceToHost);
  for (int q = 0; q < n; ++q)
    if (back[q * count] != float(q + 1))
      fail("allgather part " + std::to_string(q));
  hvd::broadcast(hvd::device_span<float>{d, count}, n - 1, nullptr);
  cudaMemcpy(back.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost);
  if (back[0] != float(n))
    fail("broadcast: " + std::to_string(back[0]));
  cudaFree(d);
  hvd::shutdown();
  if (out.size() == 1)
    out.push_back("ok");
  return out;
}
#endif

} // namespace

TEST_SUITE("gpu_collectives") {

TEST_CASE("without a usable GPU a device call fails saying why, and host collectives still work") {
  auto probe = hvactor::collectives::probe_devices();
  if (probe.count > 0) {
    MESSAGE("this machine has " << probe.count << " GPU(s); covered by the gpu label");
    return;
  }
  auto out = run_on(2, &device_call_without_gpu);
  REQUIRE(out.size() == 4);
  CHECK(out[0] == "unavailable");
  CHECK(out[1].rfind("none: ", 0) == 0);
  if (hvactor::collectives::built_with_cuda())
    CHECK(out[2].find("no usable GPU") != std::string::npos);
  else
    CHECK(out[2].find("built without CUDA/NCCL") != std::string::npos);
  CHECK(out[2].find("hvd::allreduce on device memory") != std::string::npos);
  CHECK(out[3] == "2");
}

TEST_CASE("HVACTOR_GPU_OPERATIONS: a bad value fails hvd::init saying so; NCCL or GLOO asked for "
          "where a rank has no GPU fail it saying why; NONE gives no device backend") {
  auto init_error = [](const std::string& value) -> std::string {
    hvactor::executor ex{*rt, hvactor::executor::create_settings({.timeout = 20s}),
                         {.num_workers = 2, .extra_env_vars = {{"HVACTOR_GPU_OPERATIONS", value}}}};
    ex.start();
    std::string what = "no error";
    try {
      ex.run(&device_call_without_gpu);
    } catch (const std::exception& e) {
      what = e.what();
    }
    ex.shutdown();
    return what;
  };
  CHECK(init_error("sideways").find("HVACTOR_GPU_OPERATIONS='sideways' must be auto, NCCL, GLOO "
                                    "or NONE") != std::string::npos);
  if (hvactor::collectives::probe_devices().count > 0) {
    MESSAGE("this machine has a GPU: NCCL/GLOO/NONE are covered by torch_gpu_test");
    return;
  }
  auto nccl = init_error("nccl");
  INFO(nccl);
  if (hvactor::collectives::built_with_cuda())
    CHECK(nccl.find("HVACTOR_GPU_OPERATIONS=NCCL, but rank 0 has no usable GPU") != std::string::npos);
  else
    CHECK(nccl.find("HVACTOR_GPU_OPERATIONS=NCCL, but hvactor was built without CUDA/NCCL")
          != std::string::npos);
  CHECK(init_error("GLOO").find("HVACTOR_GPU_OPERATIONS=GLOO, but") != std::string::npos);
  CHECK(init_error("NONE") == "no error");
}

#ifdef HVACTOR_TEST_CUDA
TEST_CASE("gpu: NCCL at one rank reduces, fuses, gathers and broadcasts device memory") {
  auto out = run_on(1, &device_collectives);
  INFO((out.size() > 1 ? out[1] : std::string{}));
  CHECK(out[0] == "nccl");
  CHECK(out.back() == "ok");
}

TEST_CASE("gpu: two ranks on one GPU take the host-staged path (or NCCL when it accepts them)") {
  auto out = run_on(2, &device_collectives);
  INFO("backend: " << out[0] << (out.size() > 1 ? "; " + out[1] : std::string{}));
  CHECK((out[0] == "host-staged" || out[0] == "nccl"));
  CHECK(out.back() == "ok");
}
#endif

} // TEST_SUITE

int main(int argc, char** argv) {
  // In a worker process this never returns: workers run this same binary.
  hvactor::runtime runtime{argc, argv, {.num_cpus = 4, .node_id = "gpu-test-node"}};
  rt = &runtime;
  bool gpu_only = false;
  for (auto& a : runtime.args())
    gpu_only = gpu_only || a == "--gpu-only";
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  if (gpu_only) {
    auto probe = hvactor::collectives::probe_devices();
    if (probe.count == 0) {
      std::printf("SKIPPED: no CUDA device on this machine: %s\n", probe.reason.c_str());
      return 77;
    }
    ctx.setOption("test-case", "gpu:*");
  }
  return ctx.run();
}
