// hvd's device collectives added by issue 59, in real worker processes
// (ctest `gpu_ops_test`, label gpu; exits 77 = skipped, with the reason,
// without a CUDA device or in a build without CUDA): reducescatter of
// device memory (rows that split evenly and unevenly, sync and async),
// alltoall with uneven splits (sync and async), op::adasum on device memory
// against the same data reduced on the host, and hvd::join() with device
// allreduces (the joined rank's zeros on the device; the average divides
// by every rank, as Horovod). At 1 and 2 ranks, on NCCL and on the
// host-staged path (HVACTOR_GPU_OPERATIONS=GLOO, or 2 ranks sharing a GPU).

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
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

#ifdef HVACTOR_TEST_CUDA

// A float buffer on the GPU, filled from and read back to the host.
struct device_floats {
  float* p = nullptr;
  size_t n = 0;
  explicit device_floats(const std::vector<float>& h) : n(h.size()) {
    cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float));
    cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  }
  explicit device_floats(size_t count) : device_floats(std::vector<float>(count, -1.0f)) {
  }
  ~device_floats() {
    cudaFree(p);
  }
  device_floats(const device_floats&) = delete;
  device_floats& operator=(const device_floats&) = delete;
  std::vector<float> host() const {
    std::vector<float> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
  }
};

struct findings {
  std::vector<std::string> lines;
  void expect(bool ok, const std::string& what) {
    lines.push_back((ok ? "ok " : "FAIL ") + what);
  }
};

// rows x 3 floats, element (i, j) = (rank + 1) * (i + 1): the sum over
// ranks is n(n+1)/2 * (i + 1), so a wrong slice shows.
std::vector<float> scatter_rows(int rows, int r) {
  std::vector<float> h(static_cast<size_t>(rows) * 3);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < 3; ++j)
      h[static_cast<size_t>(i * 3 + j)] = float(r + 1) * float(i + 1);
  return h;
}

// This rank's rows of a reducescatter of `rows` rows (Horovod's split).
std::pair<int, int> my_rows(int rows, int r, int n) {
  int first = 0;
  for (int k = 0; k < r; ++k)
    first += rows / n + (k < rows % n ? 1 : 0);
  return {first, rows / n + (r < rows % n ? 1 : 0)};
}

void reducescatter_case(findings& f, int rows, bool async, hvd::op o) {
  int r = hvd::rank(), n = hvd::size();
  auto [first, mine] = my_rows(rows, r, n);
  device_floats in(scatter_rows(rows, r)), out(static_cast<size_t>(mine) * 3);
  auto count = static_cast<size_t>(rows) * 3;
  if (async) {
    auto h = hvd::detail::device_reducescatter_async(in.p, count, 3, out.p, hvd::dtype::float32, o,
                                                     "rs." + std::to_string(rows), nullptr);
    hvd::synchronize(h);
  } else {
    hvd::detail::device_reducescatter(in.p, count, 3, out.p, hvd::dtype::float32, o, nullptr);
  }
  auto got = out.host();
  bool ok = true;
  float ranks = o == hvd::op::average ? float(n) : 1.0f;
  for (int i = 0; i < mine; ++i)
    for (int j = 0; j < 3; ++j)
      ok = ok && std::abs(got[static_cast<size_t>(i * 3 + j)]
                          - float(n * (n + 1) / 2) * float(first + i + 1) / ranks) < 1e-4f;
  f.expect(ok, "reducescatter of " + std::to_string(rows) + " rows" + (async ? " (async)" : "")
                 + (o == hvd::op::average ? " average" : " sum"));
}

// Rank r sends q + 1 elements 100 r + q to rank q, so it receives r + 1
// from each rank q, valued 100 q + r.
void alltoall_case(findings& f, bool async) {
  int r = hvd::rank(), n = hvd::size();
  std::vector<float> h;
  std::vector<int64_t> sends;
  for (int q = 0; q < n; ++q) {
    sends.push_back(q + 1);
    for (int k = 0; k <= q; ++k)
      h.push_back(float(100 * r + q));
  }
  device_floats in(h);
  float* out = nullptr;
  size_t received = 0;
  hvd::detail::device_allocator allocate = [&](std::span<const int64_t> counts) -> void* {
    for (auto c : counts)
      received += static_cast<size_t>(c);
    cudaMalloc(&out, std::max<size_t>(received, 1) * sizeof(float));
    return out;
  };
  std::vector<int64_t> counts;
  if (async) {
    auto result = std::make_shared<hvd::detail::async_result>();
    auto hd = hvd::detail::device_alltoall_async(in.p, h.size(), sends, hvd::dtype::float32,
                                                 "a2a", nullptr, allocate, result);
    hvd::synchronize(hd);
    counts = result->counts;
  } else {
    counts = hvd::detail::device_alltoall(in.p, h.size(), sends, hvd::dtype::float32, nullptr,
                                          allocate);
  }
  std::vector<float> got(received);
  cudaMemcpy(got.data(), out, received * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(out);
  bool ok = counts.size() == static_cast<size_t>(n) && received == static_cast<size_t>(n * (r + 1));
  size_t at = 0;
  for (int q = 0; ok && q < n; ++q) {
    ok = counts[static_cast<size_t>(q)] == r + 1;
    for (int k = 0; ok && k <= r; ++k)
      ok = got[at++] == float(100 * q + r);
  }
  f.expect(ok, std::string{"alltoall with uneven splits"} + (async ? " (async)" : ""));
}

// op::adasum on the GPU equals op::adasum of the same data on the host.
void adasum_case(findings& f) {
  int r = hvd::rank();
  std::vector<float> h(1000);
  for (size_t i = 0; i < h.size(); ++i)
    h[i] = std::sin(float(i) * 0.01f * float(r + 1)) + 0.1f * float(r);
  device_floats d(h);
  hvd::allreduce(hvd::device_span<float>{d.p, d.n}, hvd::op::adasum, nullptr);
  hvd::allreduce(std::span<float>(h), hvd::op::adasum);
  auto got = d.host();
  float worst = 0;
  for (size_t i = 0; i < h.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - h[i]));
  f.expect(worst <= 1e-6f, "adasum on the GPU equals the host's (largest difference "
                             + std::to_string(worst) + ")");
}

// The last rank joins at once; the others reduce on the device (a sum and
// a queued average), the joined rank taking part with device zeros.
void join_case(findings& f) {
  int r = hvd::rank(), n = hvd::size();
  if (n > 1 && r == n - 1) {
    f.expect(hvd::join() == 0, "join returns the last rank to join (0)");
    return;
  }
  device_floats s(std::vector<float>(64, float(r + 1))), a(std::vector<float>(32, float(r + 1)));
  hvd::allreduce(hvd::device_span<float>{s.p, s.n}, hvd::op::sum, nullptr);
  auto h = hvd::allreduce_async(hvd::device_span<float>{a.p, a.n}, hvd::op::average, "joined.avg",
                                nullptr);
  hvd::synchronize(h);
  int active = n > 1 ? n - 1 : 1;
  float sum = float(active * (active + 1) / 2);
  f.expect(s.host()[63] == sum, "device sum with a joined rank: " + std::to_string(s.host()[63]));
  f.expect(std::abs(a.host()[31] - sum / float(n)) < 1e-6f,
           "device average with a joined rank divides by every rank: "
             + std::to_string(a.host()[31]));
  f.expect(hvd::join() == 0, "join returns the last rank to join (0)");
}

std::vector<std::string> device_ops() {
  hvd::init();
  findings f;
  f.lines.push_back(hvd::gpu_backend());
  int n = hvd::size();
  for (bool async : {false, true}) {
    reducescatter_case(f, 4 * n, async, hvd::op::sum); // rows split evenly
    reducescatter_case(f, 2 * n + 1, async, hvd::op::average); // unevenly
    alltoall_case(f, async);
  }
  adasum_case(f);
  join_case(f);
  hvd::shutdown();
  return f.lines;
}

std::vector<std::vector<std::string>> run_on(int workers, const std::string& ops) {
  hvactor::executor ex{*rt, hvactor::executor::create_settings({.timeout = 60s}),
                       {.num_workers = workers,
                        .extra_env_vars = {{"HVACTOR_GPU_OPERATIONS", ops}}}};
  ex.start();
  auto all = ex.run(&device_ops);
  ex.shutdown();
  return all;
}

#endif

} // namespace

TEST_SUITE("gpu_ops") {

#ifdef HVACTOR_TEST_CUDA
TEST_CASE("gpu: reducescatter, alltoall, Adasum and join on device memory at 1 and 2 ranks, "
          "on NCCL and on the host-staged path") {
  for (int n : {1, 2})
    for (const char* ops : {"auto", "GLOO"}) {
      auto all = run_on(n, ops);
      for (size_t r = 0; r < all.size(); ++r) {
        auto& lines = all[r];
        REQUIRE(!lines.empty());
        INFO(n << " ranks, HVACTOR_GPU_OPERATIONS=" << ops << ", rank " << r << ", backend "
               << lines[0]);
        if (std::string{ops} == "GLOO")
          CHECK(lines[0] == "host-staged");
        else
          CHECK((lines[0] == "nccl" || lines[0] == "host-staged"));
        for (size_t i = 1; i < lines.size(); ++i) {
          INFO(lines[i]);
          CHECK(lines[i].rfind("ok ", 0) == 0);
        }
      }
    }
}
#endif

} // TEST_SUITE

int main(int argc, char** argv) {
  // In a worker process this never returns: workers run this same binary.
  hvactor::runtime runtime{argc, argv, {.num_cpus = 4, .node_id = "gpu-ops-test-node"}};
  rt = &runtime;
#ifndef HVACTOR_TEST_CUDA
  std::printf("SKIPPED: hvactor was built without CUDA/NCCL\n");
  return 77;
#else
  auto probe = hvactor::collectives::probe_devices();
  if (probe.count == 0) {
    std::printf("SKIPPED: no CUDA device on this machine: %s\n", probe.reason.c_str());
    return 77;
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
#endif
}
