#include "actors/node/horovod_worker.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>

#include <caf/io/middleman.hpp>

#include "actors/protocol/interfaces.hpp"
#include "base/net/transport.hpp"
#include "hvactor/code_registry.hpp"
#include "base/internal/log.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/process_system.hpp"
#include "base/internal/start_marks.hpp"
#include "actors/protocol/system_config.hpp"

namespace hvactor {

namespace {

using namespace proto;

[[noreturn]] void leave(int code) {
  std::fflush(nullptr);
  ::_exit(code);
}

struct worker_state {
  detail::executable_slot executable;
  std::shared_ptr<std::promise<void>> done;
  static inline const char* name = "horovod_worker";
};

call_result run_call(worker_state& st, const call_request& req) {
  call_result out;
  out.seq = req.seq;
  auto invoker = detail::find_invoker(req.invoker);
  if (invoker == nullptr) {
    out.error = "unknown function kind '" + req.invoker
                + "': the worker does not run the driver's binary";
    return out;
  }
  try {
    detail::call_context ctx{st.executable, req.target, req.args, {}};
    invoker(ctx);
    out.ok = true;
    out.payload = std::move(ctx.result);
  } catch (const std::exception& e) {
    out.error = e.what();
  } catch (...) {
    out.error = "unknown exception (not derived from std::exception)";
  }
  return out;
}

horovod_worker::behavior_type worker_impl(horovod_worker::stateful_pointer<worker_state> self,
                                          std::shared_ptr<std::promise<void>> done) {
  self->state.done = std::move(done);
  return {
    [=](set_env_atom, const env_list& env) {
      detail::start_marks::note(detail::start_marks::env_set_ns);
      for (auto& [key, value] : env.entries)
        ::setenv(key.c_str(), value.c_str(), 1);
      if (auto rank = env::get(env::rank))
        log::set_role("worker " + *rank);
      return true;
    },
    [=](call_atom, const call_request& req) { return run_call(self->state, req); },
    [=](stop_atom) {
      self->state.executable = {};
      self->state.done->set_value();
      self->quit();
    },
  };
}

// A separate, never-busy actor: the worker's own thread may be inside a long
// user function when the driver dies.
caf::behavior guard_impl(caf::event_based_actor* self, coordinator coord) {
  self->monitor(coord);
  self->set_down_handler([](caf::down_msg& dm) {
    log::warn("lost the driver ({}); leaving", caf::to_string(dm.reason));
    leave(1);
  });
  return {[](int) {}};
}

} // namespace

bool is_worker_process() {
  return env::get(env::worker_coordinator).has_value();
}

void serve_worker() {
  auto endpoint = env::get(env::worker_coordinator).value_or("");
  auto job = env::get(env::worker_job).value_or("");
  int rank = env::get_int(env::worker_rank, -1);
  auto node = env::get(env::worker_node).value_or("");
  auto timeout = std::chrono::milliseconds{
    env::get_int64(env::worker_timeout_ms, knobs::default_worker_timeout_ms)};
  log::set_role("worker " + std::to_string(rank));
  if (env::get(env::worker_output).value_or("") == "lines")
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || rank < 0) {
    log::error("malformed worker environment: {}='{}', {}={}", env::worker_coordinator, endpoint,
               env::worker_rank, rank);
    leave(2);
  }
  auto host = endpoint.substr(0, colon);
  auto port = static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1)));
  // The node hands its TLS identity (if any) to its workers; the process
  // system takes it from the same environment.
  auto tls = tls::from_env();
  try {
    tls::validate(tls);
  } catch (const std::exception& e) {
    log::error("bad TLS identity from the node: {}", e.what());
    leave(2);
  }
  // The process's one system (the store clients, the elastic and training
  // sessions share it); the share is never dropped: the system lives until
  // _exit, so that no destructor may block the exit.
  caf::actor_system* sys = nullptr;
  try {
    sys = (new process_system::share(process_system::acquire()))->get();
  } catch (const std::exception& e) {
    log::error("cannot start the worker's actor system: {}", e.what());
    leave(2);
  }
  coordinator coord;
  {
    caf::scoped_actor self{*sys};
    auto found = transport::connect(*sys, host, port, timeout);
    if (!found) {
      log::error("cannot reach the driver at {}: {}", endpoint, sys->render(found.error()));
      leave(3);
    }
    coord = caf::actor_cast<coordinator>(std::move(*found));
    sys->spawn(guard_impl, coord);
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    auto worker = sys->spawn<caf::detached>(worker_impl, done);
    char hostname[256] = {0};
    ::gethostname(hostname, sizeof(hostname) - 1);
    worker_hello hello{job, rank, node, hostname, static_cast<int32_t>(::getpid())};
    if (auto ok = ask<bool>(*self, coord, timeout, register_atom_v, hello, worker); !ok) {
      log::error("registration with the driver failed: {}", describe(ok.error()));
      leave(4);
    }
    detail::start_marks::note(detail::start_marks::registered_ns);
    // The guard ends the process if the driver goes away; otherwise the
    // job ends with `stop`.
    finished.wait();
  }
  leave(0);
}

} // namespace hvactor
