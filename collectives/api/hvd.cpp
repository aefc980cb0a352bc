#include "hvactor/hvd.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <mutex>

#include <fmt/format.h>

#include "collectives/backends/adasum.hpp"
#include "collectives/backends/device_setup.hpp"
#include "collectives/elastic/elastic_session.hpp"
#include "collectives/engine/engine.hpp"
#include "collectives/backends/host_backend.hpp"
#include "collectives/api/hvd_options.hpp"
#include "collectives/api/hvd_calls.hpp"
#include "collectives/rendezvous/rendezvous_client.hpp"
#include "collectives/backends/binding.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/knobs_elastic.hpp"
#include "collectives/engine/peer_counts.hpp"
#include "hvactor/errors.hpp"
#include "base/internal/log.hpp"
#include "collectives/observe/timeline.hpp"

namespace hvactor::hvd {

namespace {

using collectives::op_kind;
using collectives::topology;

// The process's collectives. One per process, as in Horovod: the API is a
// set of free functions over it.
struct state {
  std::mutex mu;
  std::unique_ptr<detail::engine> engine;
  /// HOROVOD_TIMELINE's file; outlives the engine, which records into it.
  std::unique_ptr<collectives::timeline> timeline;
  /// The rendezvous store's client; outlives the engine: a Gloo failure
  /// asks it which rank failed first (gloo_backend's blame).
  std::unique_ptr<collectives::rendezvous_client> store;
  topology topo;
  // How many times init() connected; names the rendezvous prefix, so that a
  // re-init never reads the previous connection's keys.
  int connections = 0;
  /// The connection's rendezvous scope and key prefix (process sets
  /// connect under it).
  detail::job_connection connection;
  /// The device backend chosen at init: "nccl", "host-staged", "none: ...".
  std::string gpu = "none: hvd::init() was not called";
  /// The CUDA device of the device backend; -1 without one.
  int gpu_device = -1;
  /// What HVACTOR_BIND_TO did at init ("none", "core 1").
  std::string binding = "none";
  /// HOROVOD_THREAD_AFFINITY's core for the engine thread, or why it
  /// stays unpinned.
  collectives::thread_core_choice engine_core;
};

state& global() {
  static state* st = new state; // never destroyed: usable from static destructors
  return *st;
}

// Where Gloo listens when HOROVOD_GLOO_IFACE is not set: loopback when the
// job's rendezvous is local, else the node's address or hostname.
std::string bind_host(const std::string& rendezvous_host) {
  if (auto node = env::get(env::node_address); node && !node->empty())
    return *node;
  if (rendezvous_host.rfind("127.", 0) == 0 || rendezvous_host == "localhost")
    return "127.0.0.1";
  return detail::machine_hostname();
}

struct connection {
  std::unique_ptr<collectives::backend> host;
  /// The device setup passes the NCCL id through it; then it lives as long
  /// as the engine (state::store): the backends keep a reference.
  std::unique_ptr<collectives::rendezvous_client> store;
};

connection connect(const topology& topo, const std::string& scope, int connection_no,
                   const detail::engine_options& opts) {
  if (topo.size == 1)
    return {collectives::make_local_backend(), nullptr};
  auto addr = env::get(env::rendezvous_addr);
  auto port = env::get_int(env::rendezvous_port, 0);
  if (!addr || addr->empty() || port <= 0)
    throw error(fmt::format("hvd::init: {}={} but {} / {} are not set; start the program with "
                            "hvactor-run or through an hvactor::executor",
                            env::size, topo.size, env::rendezvous_addr, env::rendezvous_port));
  auto client = std::make_unique<collectives::rendezvous_client>(
    *addr, static_cast<uint16_t>(port), scope, opts.timeout);
  auto host = collectives::make_host_backend(
    topo, *client, fmt::format("gloo.{}", connection_no), bind_host(*addr),
    {.gloo_allreduce = opts.gloo_allreduce, .paths = opts.paths});
  return {std::move(host), std::move(client)};
}

// Gloo writes to its sockets without MSG_NOSIGNAL: a peer that died would
// kill this process with SIGPIPE instead of failing the operation with
// EPIPE. Ignore it unless the program installed a handler of its own.
void ignore_sigpipe() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    ::signal(SIGPIPE, SIG_IGN);
}

} // namespace

detail::engine& detail::global_engine(const char* call) {
  auto& st = global();
  if (!st.engine)
    throw not_started(fmt::format("hvd::{} called before hvd::init()", call));
  return *st.engine;
}

detail::engine& detail::engine_for(const char* call) {
  auto& eng = global_engine(call);
  if (auto id = current_set_id(); id != 0)
    return set_engine(id, call);
  return eng;
}

const collectives::topology& detail::job_topology() {
  return global().topo;
}

detail::job_connection detail::job_connection_info() {
  return global().connection;
}

namespace {

detail::engine& current(const char* call) {
  return detail::engine_for(call);
}

const topology& topo(const char* call) {
  current(call);
  return global().topo;
}

// An async allreduce's descriptor; the engine names an unnamed one
// "allreduce.noname.<n>".
collectives::operation async_allreduce(size_t count, dtype t, op o, std::string name,
                                       bool device, scale_factors f,
                                       std::span<const int64_t> shape) {
  return {.kind = op_kind::allreduce,
          .type = t,
          .count = count,
          .reduction = o,
          .prescale = f.prescale_factor,
          .postscale = f.postscale_factor,
          .device = device,
          .shape = {shape.begin(), shape.end()},
          .name = std::move(name)};
}

} // namespace

// A reduction that means nothing for the type, refused before anything is
// queued (on every rank alike: each makes the same call).
void detail::check_reduction(dtype t, op o, const char* call, scale_factors f) {
  if (t == dtype::boolean && o == op::average)
    throw std::invalid_argument(fmt::format("hvd::{}: bool tensors reduce with op::sum or op::max "
                                            "(or), op::min or op::product (and); op::average is "
                                            "not defined for them",
                                            call));
  for (double x : {f.prescale_factor, f.postscale_factor})
    if (!std::isfinite(x))
      throw std::invalid_argument(fmt::format(
        "hvd::{}: prescale_factor {} and postscale_factor {} must be finite numbers", call,
        f.prescale_factor, f.postscale_factor));
  if (o == op::adasum)
    collectives::check_adasum(t, set_size(), call);
  if (t == dtype::boolean && !f.identity())
    throw std::invalid_argument(fmt::format(
      "hvd::{}: bool tensors take no prescale_factor or postscale_factor (got {} and {})", call,
      f.prescale_factor, f.postscale_factor));
}

namespace {

// Puts the caller's current CUDA device back: device backends switch the
// calling thread to their GPU.
struct keep_device {
  int device = collectives::current_device();
  ~keep_device() {
    collectives::restore_device(device);
  }
};

// The engine of a device call, once it is known to have a device backend.
detail::engine& device_engine(const char* call) {
  auto& eng = current(call);
  if (eng.device_backend() == nullptr)
    throw error(fmt::format("hvd::{} on device memory: no GPU collectives on rank {} ({}): {}",
                            call, global().topo.rank, global().topo.host, global().gpu));
  return eng;
}

// init() for one world: this rank's place and its rendezvous scope (from
// the environment for a static job, from the assignment for an elastic one).
void connect_locked(state& st, const topology& t, const std::string& scope) {
  auto opts = detail::engine_options_from_env();
  // Before the engine's and Gloo's threads start (they inherit it).
  st.binding = collectives::bind_from_env(t.local_rank, t.local_size);
  st.engine_core = collectives::thread_core_from_env(t.local_rank, t.local_size);
  opts.thread_core = st.engine_core.core;
  ignore_sigpipe();
  // Opened before connecting: a path this rank cannot write fails init()
  // at once, with the path in the message.
  std::unique_ptr<collectives::timeline> timeline;
  // HOROVOD_TIMELINE=DYNAMIC (Horovod's spelling for "start_timeline()
  // will be called"): no file yet.
  if (auto path = env::get(env::timeline); path && !path->empty() && *path != "DYNAMIC")
    timeline = std::make_unique<collectives::timeline>(
      collectives::timeline::options{.pattern = *path, .rank = t.rank, .host = t.host});
  // Counted only once connected: after an init that failed everywhere (a
  // rank never arrived), the retry must use the prefix that rank uses. The
  // failed attempt left only arrival keys, which the retry sets again.
  // Elastic jobs: every generation has a scope of its own, shared by
  // processes that connected different numbers of times before.
  auto connection_no = elastic::detail::enabled() ? 0 : st.connections;
  auto conn = connect(t, scope, connection_no, opts);
  ++st.connections;
  auto prefix = fmt::format("gloo.{}", connection_no);
  st.topo = t;
  auto addr = env::get(env::rendezvous_addr).value_or("127.0.0.1");
  st.connection = {.scope = scope,
                   .prefix = prefix,
                   .address = addr,
                   .port = static_cast<uint16_t>(env::get_int(env::rendezvous_port, 0)),
                   .bind_host = bind_host(addr)};
  opts.timeline = timeline.get();
  auto eng = std::make_unique<detail::engine>(std::move(conn.host), t, opts);
  auto keep = collectives::current_device();
  auto dev = collectives::setup_devices(t, *eng, conn.store.get(), prefix, opts.timeout);
  collectives::restore_device(keep);
  eng->set_device_backend(std::move(dev.device));
  st.gpu = dev.description;
  st.gpu_device = dev.gpu;
  st.store = std::move(conn.store);
  st.engine = std::move(eng);
  st.timeline = std::move(timeline);
  log::debug("hvd::init: rank {} of {} on {} (GPU collectives: {})", t.rank, t.size, t.host,
             st.gpu);
}

} // namespace

void init() {
  auto& st = global();
  std::lock_guard<std::mutex> lk{st.mu};
  if (st.engine)
    return;
  if (!elastic::detail::enabled()) {
    connect_locked(st, detail::topology_from_env(), env::get(env::rendezvous_scope).value_or("default/0"));
    return;
  }
  // Elastic: join the newest generation this worker is assigned to. A
  // failed connection (a peer died meanwhile) asks the driver for the next.
  for (int failures = 0;; ++failures) {
    auto taken = elastic::detail::take_assignment();
    int gen = taken.generation;
    try {
      const auto& w = taken.where;
      topology t{w, env::get(env::hostname).value_or(detail::machine_hostname())};
      connect_locked(st, t, taken.scope);
      elastic::detail::joined(gen, st.topo.rank);
      return;
    } catch (const error& e) {
      if (failures + 1 >= knobs::elastic_init_attempts)
        throw;
      log::info("hvd::init: generation {} did not connect ({}); asking for the next one", gen,
                e.what());
      elastic::detail::request_reset(gen, e.what());
    }
  }
}

void shutdown() {
  auto& st = global();
  std::lock_guard<std::mutex> lk{st.mu};
  if (!st.engine)
    return;
  if (elastic::detail::enabled())
    elastic::detail::left();
  detail::close_process_sets();
  st.engine->stop();
  st.engine.reset();
  st.store.reset();
  if (st.timeline) {
    st.timeline->close();
    st.timeline.reset();
  }
}

void start_timeline(const std::string& file_path, bool mark_cycles) {
  auto& eng = current("start_timeline");
  if (file_path.empty())
    throw std::invalid_argument("hvd::start_timeline: file_path is empty");
  auto& st = global();
  std::lock_guard<std::mutex> lk{st.mu};
  // Opened first: a path this rank cannot write throws here, naming it, and
  // the timeline running so far goes on.
  auto tl = std::make_unique<collectives::timeline>(collectives::timeline::options{
    .pattern = file_path, .rank = st.topo.rank, .host = st.topo.host});
  eng.set_timeline(tl.get(), mark_cycles);
  if (st.timeline)
    st.timeline->close();
  st.timeline = std::move(tl);
}

void stop_timeline() {
  auto& eng = current("stop_timeline");
  auto& st = global();
  std::lock_guard<std::mutex> lk{st.mu};
  eng.set_timeline(nullptr, false);
  if (st.timeline) {
    st.timeline->close();
    st.timeline.reset();
  }
}

bool is_initialized() {
  return global().engine != nullptr;
}

int rank() {
  return topo("rank").rank;
}
int size() {
  return topo("size").size;
}
int local_rank() {
  return topo("local_rank").local_rank;
}
int local_size() {
  return topo("local_size").local_size;
}
int cross_rank() {
  return topo("cross_rank").cross_rank;
}
int cross_size() {
  return topo("cross_size").cross_size;
}

handle::~handle() = default;

bool handle::ready() const {
  using namespace std::chrono_literals;
  return op_ && op_->done.wait_for(0s) == std::future_status::ready;
}

const std::string& handle::name() const {
  static const std::string none;
  return op_ ? op_->op.name : none;
}

void synchronize(handle& h) {
  if (!h.op_)
    throw std::invalid_argument("hvd::synchronize: empty handle");
  auto& global_eng = detail::global_engine("synchronize");
  if (h.op_->process_set == 0) {
    global_eng.wait(*h.op_);
  } else if (auto eng = detail::live_set_engine(h.op_->process_set)) {
    eng->wait(*h.op_);
  } else {
    h.op_->done.get(); // its set was removed: the operation finished (or failed) first
  }
}

void barrier() {
  current("barrier").run({.kind = op_kind::barrier}, [](collectives::backend& b) { b.barrier(); });
}

int join() {
  // A joined rank's part in device allreduces (device zeros) may be set up
  // on this thread: its current CUDA device is put back.
  keep_device keep;
  return current("join").join();
}

namespace detail {

// Each call describes its operation by typed fields (no text: the engine
// formats one only for an error or the timeline) and hands it with its
// buffers to the engine, which runs it on the backend of its memory.

void allreduce(void* data, size_t count, dtype t, op o, const std::string& name,
               scale_factors f, std::span<const int64_t> shape) {
  check_reduction(t, o, "allreduce", f);
  current("allreduce").allreduce(
    {.kind = op_kind::allreduce,
     .type = t,
     .count = count,
     .reduction = o,
     .prescale = f.prescale_factor,
     .postscale = f.postscale_factor,
     .shape = {shape.begin(), shape.end()},
     .name = name},
    data);
}

handle allreduce_async(void* data, size_t count, dtype t, op o, std::string name,
                       scale_factors f, std::span<const int64_t> shape) {
  check_reduction(t, o, "allreduce_async", f);
  auto& eng = current("allreduce_async");
  return handle{eng.submit(async_allreduce(count, t, o, std::move(name), false, f, shape), data)};
}

void device_allreduce(void* data, size_t count, dtype t, op o, cuda_stream s, scale_factors f,
                      std::span<const int64_t> shape) {
  check_reduction(t, o, "allreduce", f);
  keep_device keep;
  auto& eng = device_engine("allreduce");
  collectives::wait_for_stream(s);
  eng.allreduce({.kind = op_kind::allreduce,
                 .type = t,
                 .count = count,
                 .reduction = o,
                 .prescale = f.prescale_factor,
                 .postscale = f.postscale_factor,
                 .device = true,
                 .shape = {shape.begin(), shape.end()}},
                data);
}

void device_allgather(const void* in, void* out, size_t count, dtype t, cuda_stream s) {
  keep_device keep;
  auto& eng = device_engine("allgather");
  collectives::wait_for_stream(s);
  std::vector<size_t> counts(static_cast<size_t>(eng.topo().size), count);
  eng.run({.kind = op_kind::allgather, .type = t, .count = count, .device = true},
          [&](collectives::backend& b) { b.allgatherv(in, out, counts, t); });
}

void device_broadcast(void* data, size_t count, dtype t, int root, cuda_stream s) {
  keep_device keep;
  auto& eng = device_engine("broadcast");
  root = engine_root(root, "broadcast");
  collectives::wait_for_stream(s);
  eng.run({.kind = op_kind::broadcast, .type = t, .count = count, .root = root, .device = true},
          [&](collectives::backend& b) { b.broadcast(data, count, t, root); });
}

handle device_allreduce_async(void* data, size_t count, dtype t, op o, std::string name,
                              cuda_stream s, scale_factors f, std::span<const int64_t> shape) {
  check_reduction(t, o, "allreduce_async", f);
  auto& eng = device_engine("allreduce_async");
  // The GPU orders the collective after the caller's work; the caller (a
  // gradient hook during backward) goes on queueing kernels meanwhile.
  auto ready = collectives::record_ready(s);
  return handle{eng.submit(async_allreduce(count, t, o, std::move(name), true, f, shape), data,
                           std::move(ready))};
}

} // namespace detail

bool gpu_available() {
  return is_initialized() && global().engine->device_backend() != nullptr;
}

std::string backend_info() {
  auto& eng = current("backend_info");
  std::lock_guard<std::mutex> lk{global().mu};
  auto info = eng.host_backend().describe();
  const auto& b = global().binding;
  if (b.rfind("core", 0) == 0)
    info += "; bound to " + b;
  else if (b != "none")
    info += "; not bound" + b.substr(4); // " (3 local ranks on 2 cores)"
  const auto& engine_core = global().engine_core;
  if (engine_core.core)
    info += fmt::format("; engine thread on core {}", *engine_core.core);
  else if (!engine_core.unpinned.empty())
    info += "; engine thread not pinned (" + engine_core.unpinned + ")";

  return info;
}

std::string gpu_backend() {
  return global().gpu;
}

int gpu_device() {
  return gpu_available() ? global().gpu_device : -1;
}

} // namespace hvactor::hvd
