#include "driver/internal/job_session.hpp"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "actors/internal/rendezvous_store.hpp"
#include "base/internal/log.hpp"
#include "base/internal/knobs.hpp"
#include "actors/internal/system_config.hpp"
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
  : rt_(rt), settings_(cfg.settings), start_bound_(start_bound_of(cfg)), direct_(cfg.direct) {
  bool registers = !cfg.launch;
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
  caller_.emplace(system());
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
  if (lk.owns_lock() && std::this_thread::get_id() == owner_ && !workers_.empty()
      && !direct_->ended())
    return call_workers(**caller_, req, bound);
  lk = {};
  return hvactor::ask<call_results>(system(), coord_, bound, call_atom_v, req);
}

void job_session::drain_abandoned(caf::blocking_actor& self) {
  caf::blocking_actor::accept_one_cond until_one;
  for (auto& [id, due] : abandoned_) {
    bool taken = true;
    while (due > 0 && taken) {
      taken = false;
      self.varargs_receive(
        until_one, id, [&](call_result&) { taken = true; }, [&](caf::error&) { taken = true; },
        caf::after(std::chrono::seconds{0}) >> [] {});
      due -= taken ? 1 : 0;
    }
  }
  abandoned_.erase(std::remove_if(abandoned_.begin(), abandoned_.end(),
                                  [](auto& entry) { return entry.second == 0; }),
                   abandoned_.end());
}

namespace {

// The rank that has not answered when only one has not, else -1.
int only_open_rank(const std::vector<std::optional<std::vector<char>>>& answers) {
  int open = -1;
  for (size_t r = 0; r < answers.size(); ++r)
    if (!answers[r]) {
      if (open >= 0)
        return -1;
      open = static_cast<int>(r);
    }
  return open;
}

// "rank 3 on node 'n1' (pid 4711)", or the ranks that may be meant.
std::string ranks_label(const std::vector<std::string>& labels,
                        const std::vector<std::optional<std::vector<char>>>& answers, int rank) {
  if (rank >= 0)
    return labels[static_cast<size_t>(rank)];
  std::vector<std::string> open;
  for (size_t r = 0; r < answers.size() && open.size() <= 8; ++r)
    if (!answers[r])
      open.push_back(open.size() < 8 ? std::to_string(r) : "...");
  return fmt::format("one of ranks {}", fmt::join(open, ", "));
}

// Every rank answered: the payloads in rank order.
call_results results_of(std::vector<std::optional<std::vector<char>>>& answers) {
  call_results out;
  out.payloads.reserve(answers.size());
  for (auto& a : answers)
    out.payloads.push_back(std::move(*a));
  return out;
}

} // namespace

caf::expected<call_results> job_session::call_workers(caf::blocking_actor& self,
                                                      const call_request& req,
                                                      std::chrono::milliseconds bound) {
  drain_abandoned(self);
  // One request id for every rank, as CAF's fan-out requests do: a blocking
  // actor waits for answers to one id at a time, and so it takes them in
  // arrival order, a failure the moment it comes. No CAF request timeout:
  // the receive carries the bound (hvactor::ask explains why).
  auto id = self.new_request_id(caf::message_priority::normal);
  if (!direct_->begin(self.ctrl(), id))
    return hvactor::ask<call_results>(self, coord_, bound, call_atom_v, req);
  auto msg = caf::make_message(call_atom_v, req);
  for (auto& w : workers_)
    w->enqueue(caf::make_mailbox_element(self.ctrl(), id, {}, msg), self.context());
  auto deadline = deadline_after(std::chrono::steady_clock::now(), settings_.call_timeout);
  std::vector<std::optional<std::vector<char>>> answers(workers_.size());
  size_t due = workers_.size();
  caf::error failure;
  // The rank whose answer is the current message, or -1 (an answer CAF made
  // up for a worker it lost, or the coordinator's).
  auto sender_rank = [&] {
    auto& sender = self.current_sender();
    if (!sender)
      return only_open_rank(answers);
    auto i = rank_of_.find(caf::actor_cast<caf::actor_addr>(sender));
    return i == rank_of_.end() ? only_open_rank(answers) : i->second;
  };
  caf::blocking_actor::accept_one_cond until_one;
  while (due > 0 && !failure) {
    self.varargs_receive(
      until_one, id.response_id(),
      [&](call_result& res) {
        int rank = sender_rank();
        --due;
        if (!res.ok) {
          failure = make_error(error_kind::worker_error,
                               fmt::format("remote call on {} raised: {}",
                                           ranks_label(labels_, answers, rank), res.error),
                               rank);
        } else if (rank >= 0 && !answers[static_cast<size_t>(rank)]) {
          answers[static_cast<size_t>(rank)] = std::move(res.payload);
        } else {
          failure = make_error(error_kind::generic, "an answer to a call came from no rank of "
                                                    "the job (internal bug)");
        }
      },
      [&](caf::error& err) {
        int rank = sender_rank();
        --due;
        failure = make_error(error_kind::worker_error,
                             fmt::format("remote call on {} failed: {}",
                                         ranks_label(labels_, answers, rank), describe(err)),
                             rank);
      },
      caf::after(time_left(deadline)) >> [&] {
        int rank = only_open_rank(answers);
        failure = make_error(error_kind::worker_error,
                             fmt::format("remote call on {} did not answer within call_timeout "
                                         "({} ms)",
                                         ranks_label(labels_, answers, rank),
                                         settings_.call_timeout.count()),
                             rank);
      });
  }
  direct_->finish();
  if (!failure)
    return results_of(answers);
  if (due > 0) {
    abandoned_.emplace_back(id.response_id(), due);
    if (abandoned_.size() > knobs::max_abandoned_calls)
      abandoned_.erase(abandoned_.begin());
  }
  // The coordinator holds the failure for the call error grace, or answers
  // with the job's failure: when a rank died, its own exit report is the
  // error the user needs, not its peers' broken collectives.
  auto held = hvactor::ask<call_results>(self, coord_, bound, call_failed_atom_v, failure);
  if (held)
    return failure; // the coordinator never answers with results
  return held.error();
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
