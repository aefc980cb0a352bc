// The hvd calls whose result is a new buffer or that run queued:
// allgather, alltoall and reducescatter (synchronous and async; alltoall
// and reducescatter also on device memory), the async broadcast. Each is
// described by typed fields and a body that runs on the backend of its
// memory; the async ones hand the same body to the engine's queue, where
// it is negotiated by name (or call order) like every other operation.
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "collectives/api/hvd_calls.hpp"
#include "collectives/backends/device_setup.hpp"
#include "collectives/engine/peer_counts.hpp"
#include "hvactor/errors.hpp"

namespace hvactor::hvd::detail {

namespace {

using collectives::op_kind;
using body = std::function<void(collectives::backend&)>;

size_t ranks_of(const engine& eng) {
  return static_cast<size_t>(eng.topo().size);
}

// Every rank's announcement (count, dtype) for a collective whose sizes
// differ per rank; call inside the body.
std::vector<int64_t> announced(collectives::backend& b, size_t n, size_t count, dtype t) {
  auto mine = collectives::announce(count, t);
  std::vector<int64_t> table(n * mine.size());
  std::vector<size_t> pairs(n, mine.size());
  b.allgatherv(mine.data(), table.data(), pairs, dtype::int64);
  return table;
}

// Counts and dtypes first; the result is sized from the peers' counts, so
// each is checked before the data phase writes a byte.
body allgather_body(const void* data, size_t count, dtype t, std::shared_ptr<async_result> r,
                   size_t n) {
  return [=](collectives::backend& b) {
    auto checked =
      collectives::check_allgather_counts(announced(b, n, count, t), "hvd::allgather");
    r->bytes.resize(checked.total_bytes);
    b.allgatherv(data, r->bytes.data(), checked.counts, t);
  };
}

// The counts sent to each rank, checked before anything is queued.
std::vector<int64_t> alltoall_sends(size_t count, std::span<const int64_t> send_counts,
                                    size_t n) {
  std::vector<int64_t> sends;
  if (send_counts.empty()) {
    if (count % n != 0)
      throw std::invalid_argument(fmt::format(
        "hvd::alltoall: {} elements do not split into {} equal parts; pass send_counts", count, n));
    sends.assign(n, static_cast<int64_t>(count / n));
    return sends;
  }
  sends.assign(send_counts.begin(), send_counts.end());
  int64_t sum = 0;
  for (auto c : sends)
    sum += c < 0 ? -1'000'000'000'000 : c;
  if (sends.size() != n || sum != static_cast<int64_t>(count))
    throw std::invalid_argument(fmt::format(
      "hvd::alltoall: send_counts [{}] must have size() = {} non-negative entries summing to "
      "the {} elements sent",
      fmt::join(sends, ", "), n, count));
  return sends;
}

// Where a device alltoall's result goes: the caller's allocation, sized
// from the received counts; and what its data waits for on the GPU.
struct device_target {
  collectives::backend* host = nullptr; // the announcements travel here
  device_allocator allocate;
  std::shared_ptr<void> ready;
};

// What each rank sends here, and its dtype, checked before the result is
// sized from it; then the data. A device alltoall announces through the
// host backend (the counts are host memory) and receives into the
// caller's allocation.
body alltoall_body(const void* data, std::vector<int64_t> sends, dtype t,
                   std::shared_ptr<async_result> r, int me, device_target dev = {}) {
  return [=](collectives::backend& b) {
    auto n = sends.size();
    std::vector<int64_t> words, table(n * collectives::announcement_words);
    for (auto c : sends) {
      auto w = collectives::announce(static_cast<size_t>(c), t);
      words.insert(words.end(), w.begin(), w.end());
    }
    std::vector<int64_t> pairs(n, collectives::announcement_words);
    auto& words_on = dev.host ? *dev.host : b;
    words_on.alltoallv(words.data(), pairs, table.data(), pairs, dtype::int64);
    auto checked =
      collectives::check_alltoall_counts(table, t, me, "hvd::alltoall");
    r->counts.assign(checked.counts.begin(), checked.counts.end());
    void* out = nullptr;
    if (dev.allocate) {
      out = dev.allocate(r->counts);
      b.wait_ready(dev.ready);
    } else {
      r->bytes.resize(checked.total_bytes);
      out = r->bytes.data();
    }
    b.alltoallv(data, sends, out, r->counts, t);
  };
}

void check_reducescatter(dtype t, op o, scale_factors f, const char* call) {
  if (o != op::sum && o != op::average)
    throw std::invalid_argument(fmt::format(
      "hvd::{}: Reducescatter currently only supports AVERAGE and SUM (got op::{})", call,
      to_string(o)));
  check_reduction(t, o, call, f);
}

collectives::operation reducescatter_op(size_t count, dtype t, op o, scale_factors f,
                                        std::string name, bool device = false) {
  return {.kind = op_kind::reducescatter,
          .type = t,
          .count = count,
          .reduction = o,
          .prescale = f.prescale_factor,
          .postscale = f.postscale_factor,
          .device = device,
          .name = std::move(name)};
}

// The input is copied into the backend's scratch (it is const, and the
// reduction overwrites what it reduces), prescaled there, reduced and
// scattered; this rank's part lands in `out` (or in r->bytes when `r` is
// set), then is averaged and postscaled.
body reducescatter_body(const void* in, size_t count, size_t row, void* out, dtype t, op o,
                        scale_factors f, std::shared_ptr<async_result> r,
                        const collectives::topology& topo, std::shared_ptr<void> ready = {}) {
  return [=](collectives::backend& b) {
    b.wait_ready(ready); // a device call queued after the caller's stream
    auto counts = reducescatter_counts(count, row, topo.size);
    auto me = static_cast<size_t>(topo.rank);
    auto esz = size_of(t);
    void* dst = out;
    if (r) {
      r->bytes.resize(counts[me] * esz);
      dst = r->bytes.data();
    }
    if (count == 0)
      return;
    auto* buf = b.scratch(count * esz);
    b.copy(buf, in, count * esz);
    b.multiply(buf, count, t, f.prescale_factor);
    b.reducescatter(buf, count, counts, topo.rank, t, collectives::backend_reduction(o), dst);
    collectives::apply_average(b, dst, counts[me], t, o, topo.size, f.postscale_factor);
  };
}

} // namespace

std::vector<size_t> reducescatter_counts(size_t count, size_t row, int ranks) {
  if (row == 0 || count % row != 0 || ranks < 1)
    throw std::invalid_argument(fmt::format(
      "hvd::reducescatter: {} elements are not rows of {} over {} ranks", count, row, ranks));
  auto n = static_cast<size_t>(ranks);
  size_t rows = count / row;
  std::vector<size_t> counts(n);
  for (size_t r = 0; r < n; ++r)
    counts[r] = (rows / n + (r < rows % n ? 1 : 0)) * row;
  return counts;
}

std::vector<char> allgather(const void* data, size_t count, dtype t) {
  auto& eng = engine_for("allgather");
  auto r = std::make_shared<async_result>();
  eng.run({.kind = op_kind::allgather, .type = t, .count = count},
          allgather_body(data, count, t, r, ranks_of(eng)));
  return std::move(r->bytes);
}

handle allgather_async(const void* data, size_t count, dtype t, std::string name,
                       const std::shared_ptr<async_result>& result) {
  auto& eng = engine_for("allgather_async");
  return handle{eng.submit_run(
    {.kind = op_kind::allgather, .type = t, .count = count, .name = std::move(name)},
    allgather_body(data, count, t, result, ranks_of(eng)))};
}

void allgather_into(const void* in, size_t count, void* out, size_t out_count, dtype t) {
  auto& eng = engine_for("allgather");
  auto n = ranks_of(eng);
  if (out_count != count * n)
    throw std::invalid_argument(fmt::format(
      "hvd::allgather: out holds {} elements; {} ranks x {} need {}", out_count, n, count, count * n));
  eng.run({.kind = op_kind::allgather, .type = t, .count = count}, [&](collectives::backend& b) {
    // The counts first (8 bytes per rank): a rank with another count fails
    // on every rank instead of corrupting `out`.
    auto counts = collectives::check_allgather_counts(announced(b, n, count, t), "hvd::allgather")
                    .counts;
    for (size_t r = 0; r < n; ++r)
      if (counts[r] != count)
        throw std::invalid_argument(fmt::format(
          "hvd::allgather into a buffer: every rank must pass the same count (rank {} passed {}, "
          "this rank {})", r, counts[r], count));
    std::vector<size_t> sizes(n, count);
    b.allgatherv(in, out, sizes, t);
  });
}

void broadcast(void* data, size_t count, dtype t, int root) {
  auto& eng = engine_for("broadcast");
  root = engine_root(root, "broadcast");
  eng.run({.kind = op_kind::broadcast, .type = t, .count = count, .root = root},
          [&](collectives::backend& b) { b.broadcast(data, count, t, root); });
}

handle broadcast_async(void* data, size_t count, dtype t, int root, std::string name,
                       std::shared_ptr<void> keep_alive) {
  auto& eng = engine_for("broadcast_async");
  root = engine_root(root, "broadcast_async");
  return handle{eng.submit_run(
    {.kind = op_kind::broadcast, .type = t, .count = count, .root = root, .name = std::move(name)},
    [=, keep = std::move(keep_alive)](collectives::backend& b) { b.broadcast(data, count, t, root); })};
}

std::vector<char> alltoall(const void* data, size_t count, std::span<const int64_t> send_counts,
                           dtype t, std::vector<int64_t>* recv_counts) {
  auto& eng = engine_for("alltoall");
  auto r = std::make_shared<async_result>();
  eng.run({.kind = op_kind::alltoall, .type = t, .count = count},
          alltoall_body(data, alltoall_sends(count, send_counts, ranks_of(eng)), t, r,
                        eng.topo().rank));
  if (recv_counts)
    *recv_counts = std::move(r->counts);
  return std::move(r->bytes);
}

handle alltoall_async(const void* data, size_t count, std::span<const int64_t> send_counts,
                      dtype t, std::string name, const std::shared_ptr<async_result>& result) {
  auto& eng = engine_for("alltoall_async");
  return handle{eng.submit_run(
    {.kind = op_kind::alltoall, .type = t, .count = count, .name = std::move(name)},
    alltoall_body(data, alltoall_sends(count, send_counts, ranks_of(eng)), t, result,
                  eng.topo().rank))};
}

void reducescatter(const void* in, size_t count, size_t row, void* out, dtype t, op o,
                   scale_factors f, const std::string& name) {
  check_reducescatter(t, o, f, "reducescatter");
  auto& eng = engine_for("reducescatter");
  reducescatter_counts(count, row, eng.topo().size); // refuses bad rows before queueing
  eng.run(reducescatter_op(count, t, o, f, name),
          reducescatter_body(in, count, row, out, t, o, f, nullptr, eng.topo()));
}

handle reducescatter_async(const void* in, size_t count, size_t row, dtype t, op o,
                           scale_factors f, std::string name,
                           const std::shared_ptr<async_result>& result) {
  check_reducescatter(t, o, f, "reducescatter_async");
  auto& eng = engine_for("reducescatter_async");
  reducescatter_counts(count, row, eng.topo().size); // refuses bad rows before queueing
  return handle{eng.submit_run(reducescatter_op(count, t, o, f, std::move(name)),
                               reducescatter_body(in, count, row, nullptr, t, o, f, result,
                                                  eng.topo()))};
}

} // namespace hvactor::hvd::detail

namespace hvactor::hvd::detail {

namespace {

// The engine of a device call, once it is known to have a device backend.
engine& device_engine_for(const char* call) {
  auto& eng = engine_for(call);
  if (eng.device_backend() == nullptr)
    throw error(fmt::format("hvd::{} on device memory: no GPU collectives on rank {} ({}): {}",
                            call, job_topology().rank, job_topology().host, gpu_backend()));
  return eng;
}

// Puts the caller's current CUDA device back (device backends switch it).
struct keep_current_device {
  int device = collectives::current_device();
  ~keep_current_device() {
    collectives::restore_device(device);
  }
};

} // namespace

// Device reducescatter and alltoall: the host calls' bodies on the device
// backend (NCCL, or host-staged), after the caller's stream.

void device_reducescatter(const void* in, size_t count, size_t row, void* out, dtype t, op o,
                          cuda_stream s, scale_factors f, const std::string& name) {
  check_reducescatter(t, o, f, "reducescatter");
  keep_current_device keep;
  auto& eng = device_engine_for("reducescatter");
  reducescatter_counts(count, row, eng.topo().size);
  collectives::wait_for_stream(s);
  eng.run(reducescatter_op(count, t, o, f, name, true),
          reducescatter_body(in, count, row, out, t, o, f, nullptr, eng.topo()));
}

handle device_reducescatter_async(const void* in, size_t count, size_t row, void* out, dtype t,
                                  op o, std::string name, cuda_stream s, scale_factors f,
                                  std::shared_ptr<void> keep_alive) {
  check_reducescatter(t, o, f, "reducescatter_async");
  auto& eng = device_engine_for("reducescatter_async");
  reducescatter_counts(count, row, eng.topo().size);
  auto ready = collectives::record_ready(s);
  auto run = reducescatter_body(in, count, row, out, t, o, f, nullptr, eng.topo(),
                                std::move(ready));
  return handle{eng.submit_run(reducescatter_op(count, t, o, f, std::move(name), true),
                               [run, keep = std::move(keep_alive)](collectives::backend& b) {
                                 run(b);
                               })};
}

std::vector<int64_t> device_alltoall(const void* data, size_t count,
                                     std::span<const int64_t> send_counts, dtype t,
                                     cuda_stream s, const device_allocator& allocate) {
  keep_current_device keep;
  auto& eng = device_engine_for("alltoall");
  auto r = std::make_shared<async_result>();
  auto sends = alltoall_sends(count, send_counts, ranks_of(eng));
  collectives::wait_for_stream(s);
  eng.run({.kind = op_kind::alltoall, .type = t, .count = count, .device = true},
          alltoall_body(data, std::move(sends), t, r, eng.topo().rank,
                        {&eng.host_backend(), allocate, nullptr}));
  return std::move(r->counts);
}

handle device_alltoall_async(const void* data, size_t count, std::span<const int64_t> send_counts,
                             dtype t, std::string name, cuda_stream s, device_allocator allocate,
                             const std::shared_ptr<async_result>& result) {
  auto& eng = device_engine_for("alltoall_async");
  auto sends = alltoall_sends(count, send_counts, ranks_of(eng));
  auto ready = collectives::record_ready(s);
  return handle{eng.submit_run(
    {.kind = op_kind::alltoall, .type = t, .count = count, .device = true, .name = std::move(name)},
    alltoall_body(data, std::move(sends), t, result, eng.topo().rank,
                  {&eng.host_backend(), std::move(allocate), std::move(ready)}))};
}

} // namespace hvactor::hvd::detail
