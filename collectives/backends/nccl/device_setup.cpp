// CUDA builds: GPU detection and the device half of hvd::init.

#include <cuda_runtime.h>
#include <nccl.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>

#include "collectives/backends/device_setup.hpp"
#include "base/internal/env_names.hpp"
#include "cuda_check.hpp"
#include "device_backend.hpp"
#include "collectives/backends/devices.hpp"
#include "hvactor/errors.hpp"
#include "base/internal/log.hpp"

namespace hvactor::collectives {

bool built_with_cuda() noexcept {
  return true;
}

device_probe probe_devices() {
  int count = 0;
  auto rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    return {0, fmt::format("{} ({})", cudaGetErrorString(rc), cudaGetErrorName(rc))};
  }
  if (count == 0)
    return {0, "the CUDA runtime sees no device (CUDA_VISIBLE_DEVICES empty?)"};
  return {count, {}};
}

void wait_for_stream(hvd::cuda_stream stream) {
  auto rc = cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream));
  if (rc != cudaSuccess) {
    cudaGetLastError();
    throw error(fmt::format("hvd: waiting for the caller's CUDA stream failed: {} ({})",
                            cudaGetErrorString(rc), cudaGetErrorName(rc)));
  }
}

std::shared_ptr<void> record_ready(hvd::cuda_stream stream) {
  cudaEvent_t ev = nullptr;
  auto rc = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (rc == cudaSuccess) {
    rc = cudaEventRecord(ev, reinterpret_cast<cudaStream_t>(stream));
    if (rc != cudaSuccess)
      cudaEventDestroy(ev);
  }
  if (rc != cudaSuccess) {
    cudaGetLastError();
    throw error(fmt::format("hvd: recording an event on the caller's CUDA stream failed: {} ({})",
                            cudaGetErrorString(rc), cudaGetErrorName(rc)));
  }
  return {ev, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }};
}

int current_device() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

void restore_device(int device) {
  if (device >= 0)
    cudaSetDevice(device);
}

namespace {

int nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return v;
}

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

ncclUniqueId exchange_id(const topology& t, rendezvous_client* client, const std::string& key,
                         std::chrono::milliseconds timeout) {
  ncclUniqueId id{};
  if (t.rank == 0)
    cuda::check(ncclGetUniqueId(&id), "ncclGetUniqueId", t, -1);
  if (t.size == 1 || client == nullptr)
    return id;
  if (t.rank == 0) {
    client->set(key, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    auto bytes = client->get(key, timeout);
    if (bytes.size() != sizeof(id.internal))
      throw error(fmt::format("hvd::init: the NCCL id under '{}' has {} bytes, expected {}", key,
                              bytes.size(), sizeof(id.internal)));
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }
  return id;
}

// Every rank's "ok <machine>|<bus id>" or "none <reason>" (`mine` here).
// First one small allreduce (recursive doubling's log2(n) steps) finds the
// lowest rank without a usable GPU; on a machine without GPUs that is all,
// and that rank's reason comes with a broadcast: the other ranks' entries
// stay empty. Only when every rank has one do the ranks gather each
// other's bus ids (two allgathers, Gloo's ring: at 32 ranks on 2 cores
// about 400 ms of every hvd::init and elastic reset, when every rank had
// none).
std::vector<std::string> gpus_of_every_rank(const topology& t, hvd::detail::engine& eng,
                                            const std::string& mine) {
  std::vector<std::string> all(static_cast<size_t>(t.size));
  eng.run({.kind = op_kind::setup, .name = "gpu devices"}, [&](backend& b) {
    int64_t first_without = mine.rfind("none ", 0) == 0 ? t.rank : t.size;
    b.allreduce(&first_without, 1, hvd::dtype::int64, hvd::op::min);
    if (first_without >= t.size) {
      all = eng.gather_strings(mine);
      return;
    }
    std::array<int32_t, 64> why{};
    if (first_without == t.rank)
      std::memcpy(why.data(), mine.data(), std::min(mine.size(), sizeof(why) - 1));
    b.broadcast(why.data(), why.size(), hvd::dtype::int32, static_cast<int>(first_without));
    reinterpret_cast<char*>(why.data())[sizeof(why) - 1] = '\0';
    all[static_cast<size_t>(first_without)] = reinterpret_cast<const char*>(why.data());
  });
  return all;
}

} // namespace

device_setup setup_devices(const topology& t, hvd::detail::engine& eng,
                           rendezvous_client* client, const std::string& prefix,
                           std::chrono::milliseconds timeout) {
  auto choice = gpu_operations();
  if (choice == "NONE")
    return {nullptr, fmt::format("none: {}=NONE", env::gpu_operations)};
  auto probe = probe_devices();
  int device = -1;
  std::string mine;
  if (probe.count > 0) {
    device = t.local_rank % probe.count;
    char bus[64] = {0};
    cuda::check(cudaDeviceGetPCIBusId(bus, sizeof(bus), device), "cudaDeviceGetPCIBusId", t,
                device);
    // The machine, not the node id: two hvactor-nodes on one machine may
    // both offer GPU 0 (NCCL's own duplicate check hashes the hostname).
    char machine[256] = {0};
    ::gethostname(machine, sizeof(machine) - 1);
    mine = fmt::format("ok {}|{}", machine, bus);
  } else {
    mine = "none " + probe.reason;
  }
  // Every rank decides from the same facts, so all pick the same path.
  auto all = gpus_of_every_rank(t, eng, mine);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].rfind("none ", 0) != 0)
      continue;
    auto why = fmt::format("rank {} has no usable GPU ({})", r, all[r].substr(5));
    if (choice != "AUTO") // asked for by name: an error, not a silent fallback
      throw error(fmt::format("hvd::init: {}={}, but {}", env::gpu_operations, choice, why));
    return {nullptr, "none: " + why};
  }
  std::map<std::string, size_t> owner;
  std::string shared;
  for (size_t r = 0; r < all.size() && shared.empty(); ++r) {
    auto [it, fresh] = owner.emplace(all[r].substr(3), r);
    if (!fresh)
      shared = fmt::format("ranks {} and {} share GPU {}", it->second, r, all[r].substr(3));
  }
  bool multi_rank_ok = env_is(env::nccl_multi_rank_gpu, "1") && nccl_version() >= 23000;
  bool nccl_refuses = !shared.empty() && !multi_rank_ok && std::getenv(env::nccl_hostid) == nullptr;
  if (nccl_refuses && choice == "NCCL")
    throw error(fmt::format("hvd::init: {}=NCCL, but {}: NCCL {} refuses two ranks on one GPU",
                            env::gpu_operations, shared, nccl_version()));
  if (choice == "GLOO") {
    log::debug("hvd: {}=GLOO: device collectives take the host-staged path", env::gpu_operations);
    return {cuda::make_staged_backend(t, device, eng.host_backend(), timeout), "host-staged",
            device};
  }
  if (nccl_refuses) {
    if (t.rank == 0)
      log::info("hvd: {}; NCCL {} refuses two ranks on one GPU (NCCL < 2.30, or "
                "NCCL_MULTI_RANK_GPU_ENABLE unset), so device collectives take the host-staged "
                "path (device -> host, Gloo, host -> device)",
                shared, nccl_version());
    return {cuda::make_staged_backend(t, device, eng.host_backend(), timeout), "host-staged",
            device};
  }
  auto id = exchange_id(t, client, prefix + "/nccl-id", timeout);
  auto b = cuda::make_nccl_backend(t, device, id, eng.host_backend(), timeout);
  log::debug("hvd: NCCL {} on GPU {} ({})", nccl_version(), device, mine.substr(3));
  return {std::move(b), "nccl", device};
}

} // namespace hvactor::collectives
