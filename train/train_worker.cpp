// hvactor::train in a worker process: the loop's session (context, dataset
// shards, the checkpoint to resume from, report()).

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <random>

#include <fmt/format.h>

#include <caf/scoped_actor.hpp>

#include "hvactor/code_registry.hpp"
#include "hvactor/errors.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/log.hpp"
#include "base/internal/process.hpp"
#include "base/internal/process_system.hpp"
#include "train/internal/report_pipe.hpp"
#include "train/internal/train_progress.hpp"
#include "train/internal/train_protocol.hpp"
#include "train/internal/transfer.hpp"
#include "base/net/transport.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

/// One worker's run of the loop.
struct worker_session {
  train_spec spec;
  context ctx;
  /// The process's actor system (the worker's, shared with hvd's clients).
  process_system::share sys = process_system::acquire();
  /// The driver's record of this attempt: report() goes there.
  train_progress progress;
  /// Reports without a checkpoint, sent in the background, in order.
  std::unique_ptr<report_pipe> pipe;
  std::map<std::string, dataset> shards;
  bool resume_fetched = false;
  checkpoint resume;
  fs::path temp_dir;
  uint64_t next_report = 0;

  /// Shards, the resume checkpoint and rank 0's checkpoints, on the
  /// route this worker takes (internal/transfer.hpp).
  std::optional<worker_transfers> bytes;

  std::chrono::milliseconds limit() const {
    return std::chrono::milliseconds{spec.report_limit_ms};
  }

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds{spec.timeout_ms};
  }

  void fill_context() {
    ctx.world_rank_ = env::get_int(env::rank, 0);
    ctx.world_size_ = env::get_int(env::size, 1);
    ctx.local_rank_ = env::get_int(env::local_rank, 0);
    ctx.local_world_size_ = env::get_int(env::local_size, 1);
    ctx.node_rank_ = env::get_int(env::cross_rank, 0);
    ctx.attempt_ = spec.attempt;
    ctx.config_ = decode_values(spec.config);
    ctx.name_ = spec.name;
  }

  // Under this process's scratch dir, which its colocator removes when the
  // process ends, however it ends.
  const fs::path& scratch() {
    if (temp_dir.empty()) {
      auto root = make_worker_scratch_dir(::getpid());
      auto dir = root / fmt::format("train-{}", std::random_device{}());
      fs::create_directories(dir);
      temp_dir = dir;
    }
    return temp_dir;
  }

  ~worker_session() {
    if (!temp_dir.empty()) {
      std::error_code ec;
      fs::remove_all(temp_dir, ec);
    }
  }
};

namespace {

std::atomic<worker_session*> current{nullptr};

worker_session& session(const char* what) {
  auto* s = current.load();
  if (!s)
    throw std::logic_error(fmt::format("train::{}: only inside a training loop that "
                                       "train::trainer::fit() runs",
                                       what));
  return *s;
}

} // namespace

context& get_context() {
  return session("get_context").ctx;
}

const dataset& get_dataset_shard(const std::string& name) {
  auto& s = session("get_dataset_shard");
  if (auto it = s.shards.find(name); it != s.shards.end())
    return it->second;
  if (std::find(s.spec.datasets.begin(), s.spec.datasets.end(), name) == s.spec.datasets.end()) {
    std::string names;
    for (auto& n : s.spec.datasets)
      names += (names.empty() ? "'" : ", '") + n + "'";
    throw std::invalid_argument(fmt::format("train::get_dataset_shard: no dataset '{}' (the "
                                            "trainer has {})",
                                            name, names.empty() ? "none" : names));
  }
  auto index = static_cast<uint32_t>(
    std::find(s.spec.datasets.begin(), s.spec.datasets.end(), name) - s.spec.datasets.begin());
  auto bytes = s.bytes->fetch_shard(index, s.spec.shard_dir);
  auto d = dataset::from_bytes(std::move(bytes.data), bytes.size);
  return s.shards.emplace(name, std::move(d)).first->second;
}

checkpoint get_checkpoint() {
  auto& s = session("get_checkpoint");
  if (!s.spec.has_resume)
    return {};
  if (!s.resume_fetched) {
    auto& name = s.spec.resume_name;
    bool plain = !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
    auto dir = s.scratch() / (plain ? name : std::string{"checkpoint"});
    std::error_code ec;
    fs::remove_all(dir, ec); // what an earlier failed fetch left
    try {
      s.bytes->fetch_resume(s.spec.resume_path, dir);
    } catch (...) {
      fs::remove_all(dir, ec);
      throw;
    }
    s.resume = checkpoint::from_directory(dir.string());
    s.resume_fetched = true;
  }
  return s.resume;
}

void report(const metrics& m, const checkpoint& ckpt) {
  auto& s = session("report");
  for (auto& [name, _] : m)
    if (name.empty())
      throw std::invalid_argument("train::report: a metric without a name");
  auto i = s.next_report++;
  int rank = s.ctx.world_rank();
  bool with_checkpoint = rank == 0 && static_cast<bool>(ckpt);
  if (!ckpt) {
    // Metrics only: queued, the driver gets them in order, and a refusal
    // is thrown by the next report() or when the loop returns.
    s.pipe->push(train_report{rank, i, encode_report(m, false), false});
    return;
  }
  // A report with a checkpoint (on any rank: each passes its own, rank 0's
  // is kept) waits for the earlier ones, then for its own answer: when it
  // returns, every rank's report is recorded and the checkpoint persisted.
  s.pipe->drain();
  if (with_checkpoint)
    s.bytes->upload(i, ckpt.path());
  train_report r{rank, i, encode_report(m, with_checkpoint), with_checkpoint};
  // Answered once every rank reported and the driver recorded it (the
  // other ranks may still be in their epoch).
  auto ack = ask<std::string>(*s.sys, s.progress, s.limit(), tr_report_atom_v, std::move(r));
  if (!ack && ack.error() == caf::sec::request_timeout)
    throw error(fmt::format(
      "train::report: report {} of rank {} was not acknowledged within {} ms: every worker "
      "must call report() the same number of times (or the driver stopped answering)",
      i + 1, rank, s.spec.report_limit_ms));
  if (!ack)
    throw error(fmt::format("train::report: report {} of rank {}: {}", i + 1, rank,
                            describe(ack.error())));
  if (!ack->empty())
    throw error("train::report: " + *ack);
}

void run_worker(train_spec spec) {
  worker_session s;
  s.spec = std::move(spec);
  s.fill_context();
  auto host = env::get(env::rendezvous_addr).value_or("");
  auto port = env::get_int(env::rendezvous_port, 0);
  if (host.empty() || port <= 0 || port > 65535)
    throw error("train: the worker has no rendezvous store address (HOROVOD_GLOO_RENDEZVOUS_*)");
  // The progress actor listens on the store's host (the driver's address).
  auto found = transport::connect(*s.sys, host, s.spec.progress_port, s.timeout());
  if (!found)
    throw error(fmt::format("train: the worker cannot reach the driver's progress actor at {}:{} "
                            "within {} ms: {}",
                            host, s.spec.progress_port, s.spec.timeout_ms,
                            describe(found.error())));
  s.progress = caf::actor_cast<train_progress>(std::move(*found));
  // The route: the driver's own machine, or its data link.
  s.bytes.emplace(*s.sys, s.progress,
                  choose_route(s.spec.local_checkpoints, s.spec.machine_view),
                  link_target{host, s.spec.data_port,
                              transport::secure(*s.sys) ? tls::from_env() : tls::config{},
                              s.timeout()},
                  static_cast<int32_t>(s.ctx.world_rank()));
  s.pipe = std::make_unique<report_pipe>(*s.sys, s.progress, s.limit());
  auto loop = reinterpret_cast<void (*)(context&)>(
    const_cast<void*>(hvactor::detail::decode_code_address(s.spec.loop)));
  worker_session* none = nullptr;
  if (!current.compare_exchange_strong(none, &s))
    throw std::logic_error("train: a training loop is already running in this worker");
  struct reset {
    ~reset() {
      current.store(nullptr);
    }
  } reset_current;
  int rank = s.ctx.world_rank();
  try {
    loop(s.ctx);
    s.pipe->drain(); // a queued report's failure fails the call
  } catch (const std::exception& e) {
    // The driver learns at once; the call's error carries the details.
    caf::anon_send(s.progress, tr_fail_atom_v, static_cast<int32_t>(rank), std::string{e.what()});
    throw;
  } catch (...) {
    caf::anon_send(s.progress, tr_fail_atom_v, static_cast<int32_t>(rank),
                   std::string{"unknown exception"});
    throw;
  }
  auto told = ask<bool>(*s.sys, s.progress, s.timeout(), tr_done_atom_v,
                        static_cast<int32_t>(rank), s.next_report);
  if (!told)
    log::warn("train: rank {} could not tell the driver that its loop returned: {}", rank,
              describe(told.error()));
}

} // namespace hvactor::train
