#include "driver/internal/job_session.hpp"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "actors/coordinator/call_fanin.hpp"
#include "actors/node/rendezvous_store.hpp"
#include "base/internal/log.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/knobs_net.hpp"
#include "actors/protocol/system_config.hpp"
#include "base/net/transport.hpp"

namespace hvactor {

using namespace proto;

namespace {

std::chrono::milliseconds start_bound_of(const coordinator_config& cfg) {
  std::error_code ec;
  auto bytes = std::filesystem::file_size(cfg.executable, ec);
  auto shipping = std::chrono::milliseconds(
    ec ? 0 : static_cast<int64_t>(bytes / (knobs::shipping_bytes_per_second / 1000)));
  auto bound = cfg.settings.placement_timeout + 2 * cfg.settings.timeout + knobs::start_slack
               + shipping;
  // An elastic job waits for min_workers slots first.
  if (cfg.options.min_workers)
    bound += wait_bound(std::chrono::milliseconds{cfg.options.elastic_timeout});
  return bound;
}

} // namespace

namespace {

// Every timeout clamped to knobs::longest_wait ("no bound"), so that the
// sums and deadlines built from them cannot overflow.
coordinator_config saturated(coordinator_config cfg) {
  for (auto* t : {&cfg.settings.timeout, &cfg.settings.placement_timeout,
                  &cfg.settings.call_timeout})
    *t = wait_bound(*t);
  return cfg;
}

} // namespace

job_session::job_session(runtime::impl& rt, coordinator_config config)
  : job_session(rt, saturated(std::move(config)), 0) {
}

job_session::job_session(runtime::impl& rt, coordinator_config cfg, int)
  : rt_(rt), settings_(cfg.settings), start_bound_(start_bound_of(cfg)) {
  bool registers = !cfg.launch;
  // The blocking actor of the session's own calls; the coordinator tells
  // it when the job fails (direct_caller).
  caller_.emplace(system());
  call_id_ = (*caller_)->new_request_id(caf::message_priority::normal);
  cfg.direct = {(*caller_)->ctrl(), call_id_};
  store_ = spawn_rendezvous_store(system());
  cfg.store = store_;
  coord_ = spawn_coordinator(system(), std::move(cfg));
  try {
    store_port_ = publish(caf::actor_cast<caf::actor>(store_), "rendezvous store");
    if (registers)
      coord_port_ = publish(caf::actor_cast<caf::actor>(coord_), "coordinator");
  } catch (...) {
    close();
    throw;
  }
}

job_session::~job_session() {
  close();
}

uint16_t job_session::publish(const caf::actor& whom, const char* what) {
  auto port = transport::publish(system(), whom, 0, rt_.bind_host);
  if (!port)
    throw error(fmt::format("cannot publish the job's {} on {}: {}", what, rt_.bind_host,
                            system().render(port.error())));
  if (rt_.watchdog)
    rt_.watchdog->watch(*port);
  return *port;
}

caf::expected<job_info> job_session::start() {
  auto endpoint = coord_port_ != 0 ? fmt::format("{}:{}", rt_.bind_host, coord_port_)
                                   : std::string{};
  // The coordinator bounds placement, shipping and registration itself;
  // this bound only catches a coordinator that stopped answering.
  auto info = ask<job_info>(start_bound_, start_atom_v, endpoint, rt_.bind_host, store_port_);
  if (info) {
    for (int32_t r = 0; r < info->size; ++r) {
      workers_.push_back(caf::actor_cast<horovod_worker>(info->workers.at(r)));
      rank_of_.emplace(workers_.back().address(), r);
      labels_.push_back(fmt::format("rank {} on node '{}' (pid {})", r, info->nodes.at(r),
                                    info->pids.at(r)));
    }
  }
  return info;
}

caf::expected<call_results> job_session::call_all(const call_request& req,
                                                  std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lk{caller_mu_, std::try_to_lock};
  if (lk.owns_lock() && std::this_thread::get_id() == owner_ && !workers_.empty() && !ended_)
    return call_workers(**caller_, req);
  lk = {};
  return hvactor::ask<call_results>(system(), coord_, bound, call_atom_v, req);
}

namespace {

// The rank that has not answered when only one has not, else -1.
int only_open_rank(const std::vector<size_t>& open) {
  return open.size() == 1 ? static_cast<int>(open.front()) : -1;
}

// "rank 3 on node 'n1' (pid 4711)", or the ranks that may be meant.
std::string ranks_label(const std::vector<std::string>& labels, const std::vector<size_t>& open,
                        int rank) {
  if (rank >= 0)
    return labels[static_cast<size_t>(rank)];
  std::vector<std::string> ranks;
  for (size_t r : open) {
    if (ranks.size() == 8) {
      ranks.push_back("...");
      break;
    }
    ranks.push_back(std::to_string(r));
  }
  return fmt::format("one of ranks {}", fmt::join(ranks, ", "));
}

} // namespace

caf::expected<call_results> job_session::call_workers(caf::blocking_actor& self,
                                                      const call_request& req) {
  // One request id for every direct call (coordinator.hpp, direct_caller),
  // as CAF's fan-out requests do: a blocking actor waits for answers to one
  // id at a time, and so it takes them in arrival order, a failure the
  // moment it comes, and the coordinator's job_failed too. Each call has
  // its number (seq): answers to an earlier call that failed before every
  // rank answered are skipped when they come. No CAF request timeout: the
  // receive carries the bound (hvactor::ask explains why).
  auto seq = ++seq_;
  auto numbered = req;
  numbered.seq = seq;
  auto msg = caf::make_message(call_atom_v, std::move(numbered));
  for (auto& w : workers_)
    w->enqueue(caf::make_mailbox_element(self.ctrl(), call_id_, {}, msg), self.context());
  auto deadline = deadline_after(std::chrono::steady_clock::now(), settings_.call_timeout);
  call_fanin answers{knobs::call_error_grace};
  answers.open(seq, workers_.size());
  caf::error failure;
  caf::error job_failure;
  bool complete = false;
  // The rank whose answer is the current message, or -1 (an answer CAF made
  // up for a worker it lost).
  auto sender_rank = [&] {
    auto& sender = self.current_sender();
    auto i = sender ? rank_of_.find(caf::actor_cast<caf::actor_addr>(sender)) : rank_of_.end();
    return i != rank_of_.end() ? i->second : only_open_rank(answers.open_slots(seq));
  };
  auto who = [&](int rank) { return ranks_label(labels_, answers.open_slots(seq), rank); };
  caf::blocking_actor::accept_one_cond until_one;
  while (!complete && !failure && !job_failure) {
    self.varargs_receive(
      until_one, call_id_.response_id(),
      [&](call_result& res) {
        if (res.seq != seq)
          return; // a late answer to an earlier call
        int rank = sender_rank();
        if (!res.ok)
          failure = call_raised(who(rank), res.error, rank);
        else if (rank < 0)
          failure = make_error(error_kind::generic, "an answer to a call came from no rank of "
                                                    "the job (internal bug)");
        else
          complete = answers.on_result(seq, static_cast<size_t>(rank), std::move(res.payload))
                     == call_fanin::next::answer;
      },
      [&](job_failed& jf) { job_failure = std::move(jf.reason); },
      [&](caf::error& err) {
        int rank = sender_rank();
        failure = call_failed(who(rank), err, rank);
      },
      caf::after(time_left(deadline)) >> [&] {
        int rank = only_open_rank(answers.open_slots(seq));
        failure = call_timed_out(who(rank), settings_.call_timeout, rank);
      });
  }
  if (complete)
    return call_results{answers.take_results(seq)};
  if (job_failure) {
    ended_ = true;
    return job_failure;
  }
  return hold(self, std::move(failure));
}

// The first failure of a call waits call_error_grace for the job's: when a
// rank dies, its peers usually fail first (their collective breaks), and
// the dead rank's own exit report, which the coordinator sends a little
// later as job_failed, is the error the user needs.
caf::error job_session::hold(caf::blocking_actor& self, caf::error failure) {
  auto until = deadline_after(std::chrono::steady_clock::now(), knobs::call_error_grace);
  caf::error job_failure;
  bool waiting = true;
  caf::blocking_actor::accept_one_cond until_one;
  while (waiting && !job_failure)
    self.varargs_receive(
      until_one, call_id_.response_id(), [&](call_result&) {}, [&](caf::error&) {},
      [&](job_failed& jf) { job_failure = std::move(jf.reason); },
      caf::after(time_left(until)) >> [&] { waiting = false; });
  if (job_failure) {
    ended_ = true;
    return job_failure;
  }
  return failure;
}

void job_session::launch(std::function<void(caf::expected<job_exit>)> done) {
  auto coord = coord_;
  auto bound = start_bound_;
  auto finish_bound = settings_.call_timeout;
  auto endpoint = rt_.bind_host;
  auto port = store_port_;
  launch_waiter_ = system().spawn([=](caf::event_based_actor* self) {
    // A coordinator that terminates answers nothing: its exit is the outcome.
    auto once = std::make_shared<bool>(false);
    auto finish = [=](caf::expected<job_exit> out) {
      if (std::exchange(*once, true))
        return;
      done(std::move(out));
      self->quit();
    };
    self->monitor(coord);
    self->set_down_handler([=](caf::down_msg& dm) {
      finish(exited_error("job's coordinator", dm.reason));
    });
    self->request(coord, wait_bound(bound), start_atom_v, std::string{}, endpoint, port)
      .then(
        [=](const job_info&) {
          // The coordinator answers `finished` once every process exited;
          // the request bound only catches a coordinator gone silent.
          self->request(coord, wait_bound(finish_bound), finished_atom_v)
            .then([=](job_exit& out) { finish(std::move(out)); },
                  [=](caf::error& err) { finish(std::move(err)); });
        },
        [=](caf::error& err) { finish(std::move(err)); });
  });
}

caf::error job_session::shutdown() {
  if (closed_ || !coord_)
    return {};
  auto stopped = ask<bool>(settings_.timeout + knobs::shutdown_slack, shutdown_atom_v);
  return stopped ? caf::error{} : std::move(stopped.error());
}

void job_session::close() noexcept {
  if (closed_)
    return;
  closed_ = true;
  try {
    caller_.reset();
    if (launch_waiter_)
      caf::anon_send_exit(launch_waiter_, caf::exit_reason::user_shutdown);
    for (auto port : {coord_port_, store_port_})
      if (port != 0 && rt_.watchdog)
        rt_.watchdog->unwatch(port);
    if (coord_port_ != 0)
      transport::unpublish(system(), caf::actor_cast<caf::actor>(coord_), coord_port_);
    if (store_port_ != 0)
      transport::unpublish(system(), caf::actor_cast<caf::actor>(store_), store_port_);
    if (coord_)
      caf::anon_send_exit(coord_, caf::exit_reason::user_shutdown);
    if (store_)
      caf::anon_send_exit(store_, caf::exit_reason::user_shutdown);
  } catch (const std::exception& e) {
    log::warn("closing job: {}", e.what());
  }
  launch_waiter_ = nullptr;
  coord_ = nullptr;
  store_ = nullptr;
  coord_port_ = store_port_ = 0;
}

} // namespace hvactor
