// hvactor::train in a worker process: the loop's session (context, dataset
// shards, the checkpoint to resume from, report()).

#include <unistd.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include <caf/scoped_actor.hpp>

#include "hvactor/code_registry.hpp"
#include "hvactor/errors.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/knobs.hpp"
#include "base/internal/log.hpp"
#include "base/internal/process.hpp"
#include "base/internal/process_system.hpp"
#include "train/internal/checkpoint_stream.hpp"
#include "train/internal/data_route.hpp"
#include "train/internal/report_pipe.hpp"
#include "train/internal/shard_bytes.hpp"
#include "train/internal/train_progress.hpp"
#include "train/internal/train_protocol.hpp"
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

  /// The driver's data link, when it has one (train_spec::data_port).
  std::optional<link_target> link;

  /// This worker sees the driver's files (train_spec::machine_view).
  bool same_view() const {
    return !spec.machine_view.empty() && spec.machine_view == machine_view();
  }

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

namespace {

// Receives the answer to tr_piece request `id` into `out` at `offset`
// (allocated at the first answer, the shard's size).
void receive_piece(caf::blocking_actor& self, caf::message_id id, uint64_t offset,
                   shared_bytes& out, std::chrono::milliseconds timeout) {
  caf::error err = caf::sec::request_timeout;
  caf::blocking_actor::accept_one_cond until_one;
  self.varargs_receive(
    until_one, id,
    [&](uint64_t size, std::vector<char>& bytes) {
      if (offset == 0 && !out.data)
        out = fresh_bytes(static_cast<size_t>(size));
      if (size != out.size || bytes.size() > out.size - offset
          || (bytes.empty() && offset < size)) {
        err = make_error(error_kind::generic, "the driver's answer does not fit the shard");
        return;
      }
      if (!bytes.empty())
        std::memcpy(out.data.get() + offset, bytes.data(), bytes.size());
      err = caf::error{};
    },
    [&](caf::error& e) { err = std::move(e); }, caf::after(wait_bound(timeout)) >> [] {});
  if (err)
    throw error(fmt::format("train::get_dataset_shard: cannot fetch the shard from the driver: {}",
                            describe(err)));
}

// Rank's shard of dataset `index` from the driver's progress actor, in
// pieces of knobs::ship_chunk_bytes, train_chunks_in_flight asked at once,
// each copied once into fresh memory of the shard's size.
shared_bytes fetch_shard(worker_session& s, uint32_t index) {
  caf::scoped_actor self{*s.sys};
  auto rank = static_cast<int32_t>(s.ctx.world_rank());
  auto ask_piece = [&](uint64_t offset) {
    // Bounded by the receive (receive_piece), as ask() does.
    return self->request(s.progress, caf::infinite, tr_piece_atom_v, index, rank, offset).id();
  };
  shared_bytes out;
  receive_piece(*self, ask_piece(0), 0, out, s.timeout());
  auto piece = static_cast<uint64_t>(knobs::ship_chunk_bytes);
  std::deque<std::pair<caf::message_id, uint64_t>> asked;
  for (uint64_t at = piece; at < out.size; at += piece) {
    if (asked.size() == knobs::train_chunks_in_flight) {
      receive_piece(*self, asked.front().first, asked.front().second, out, s.timeout());
      asked.pop_front();
    }
    asked.emplace_back(ask_piece(at), at);
  }
  for (auto& [id, at] : asked)
    receive_piece(*self, id, at, out, s.timeout());
  return out;
}

// A ticket for a transfer on the driver's data link.
template <class... Ts>
data_link::ticket ticket(worker_session& s, const char* what, Ts... xs) {
  auto t = ask<std::string>(*s.sys, s.progress, s.timeout(), xs...);
  if (!t)
    throw error(fmt::format("{}: the driver refused the transfer: {}", what,
                            describe(t.error())));
  return *t;
}

} // namespace

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
  // On the driver's own machine the worker maps the shard's file (the
  // columns share its pages; the driver's removal of the file leaves the
  // mapping); elsewhere it fetches the file's bytes from the driver.
  auto rank = static_cast<int32_t>(s.ctx.world_rank());
  shared_bytes bytes;
  if (s.spec.local_checkpoints && s.same_view())
    bytes = map_file(
      (fs::path{s.spec.shard_dir} / std::to_string(index) / std::to_string(rank)).string());
  else if (s.link)
    bytes = fetch_shard_by_link(*s.link, ticket(s, "train::get_dataset_shard", tr_fetch_atom_v,
                                                index, rank));
  else
    bytes = fetch_shard(s, index);
  auto d = dataset::from_bytes(std::move(bytes.data), bytes.size);
  return s.shards.emplace(name, std::move(d)).first->second;
}

namespace {

// The checkpoint to resume from into `dir`: copied from the driver's disk
// on the same route (falling back to the stream when the copy is refused,
// another user's file say), else streamed from the driver's progress
// actor in chunks, train_chunks_in_flight asked at once, each written as
// it comes.
void fetch_resume(worker_session& s, const fs::path& dir) {
  if (s.spec.local_checkpoints && s.same_view() && !s.spec.resume_path.empty()) {
    try {
      copy_checkpoint_dir(s.spec.resume_path, dir);
      return;
    } catch (const std::exception& e) {
      log::warn("train: copying the checkpoint to resume from failed ({}); streaming it",
                e.what());
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  }
  auto rank = static_cast<int32_t>(s.ctx.world_rank());
  if (s.link) {
    fetch_resume_by_link(*s.link, ticket(s, "train::get_checkpoint", tr_fetch_atom_v, rank), dir);
    return;
  }
  checkpoint_sink sink{dir};
  caf::scoped_actor self{*s.sys};
  std::deque<caf::message_id> asked;
  uint32_t next = 0;
  auto ask_chunk = [&] {
    // Bounded by the receive below, as ask() does.
    asked.push_back(self->request(s.progress, caf::infinite, tr_resume_atom_v, rank, next++).id());
  };
  while (asked.size() < knobs::train_chunks_in_flight)
    ask_chunk();
  while (!sink.complete()) {
    caf::error err = caf::sec::request_timeout;
    bool ended = false;
    caf::blocking_actor::accept_one_cond until_one;
    self->varargs_receive(
      until_one, asked.front(),
      [&](std::vector<char>& chunk) {
        err = caf::error{};
        ended = chunk.empty();
        if (!ended)
          sink.feed(chunk);
      },
      [&](caf::error& e) { err = std::move(e); },
      caf::after(wait_bound(s.timeout())) >> [] {});
    asked.pop_front();
    if (err)
      throw error(fmt::format("train::get_checkpoint: cannot fetch the checkpoint from the "
                              "driver: {}",
                              describe(err)));
    if (ended && !sink.complete())
      throw error("train::get_checkpoint: the checkpoint stream ended before its end record");
    if (!sink.complete())
      ask_chunk();
  }
}

} // namespace

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
      fetch_resume(s, dir);
    } catch (...) {
      fs::remove_all(dir, ec);
      throw;
    }
    s.resume = checkpoint::from_directory(dir.string());
    s.resume_fetched = true;
  }
  return s.resume;
}

namespace {

// Receives the answer to a tr_chunk request within `timeout`.
void receive_ack(caf::blocking_actor& self, caf::message_id id, std::chrono::milliseconds timeout,
                 uint64_t report) {
  caf::error err = caf::sec::request_timeout;
  caf::blocking_actor::accept_one_cond until_one;
  self.varargs_receive(
    until_one, id, [&](bool) { err = caf::error{}; }, [&](caf::error& e) { err = std::move(e); },
    caf::after(wait_bound(timeout)) >> [] {});
  if (err)
    throw error(fmt::format("train::report: the checkpoint of report {} did not reach the "
                            "driver: {}",
                            report + 1, describe(err)));
}

// Rank 0's checkpoint directory to the driver as a stream of
// ship_chunk_bytes chunks (internal/checkpoint_stream.hpp), read from disk
// as they go, at most train_chunks_in_flight unanswered; the chunk count.
uint32_t send_checkpoint(worker_session& s, uint64_t i, const fs::path& dir) {
  checkpoint_source source{dir};
  caf::scoped_actor self{*s.sys};
  std::deque<caf::message_id> ids;
  uint32_t count = 0;
  while (auto bytes = source.next()) {
    if (ids.size() == knobs::train_chunks_in_flight) {
      receive_ack(*self, ids.front(), s.timeout(), i);
      ids.pop_front();
    }
    train_chunk c{i, count++, std::move(*bytes)};
    // Bounded by the receive (receive_ack), as ask() does.
    ids.push_back(self->request(s.progress, caf::infinite, tr_chunk_atom_v, std::move(c)).id());
  }
  for (auto id : ids)
    receive_ack(*self, id, s.timeout(), i);
  return count;
}

// On the driver's machine: the driver copies the directory (tr_local).
uint32_t copy_by_driver(worker_session& s, uint64_t i, const fs::path& dir) {
  // The copy is one request: its bound grows with the bytes (10 MB/s).
  uint64_t bytes = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it{dir, ec}, end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec))
      bytes += it->file_size(ec);
  auto bound = s.timeout() + std::chrono::milliseconds{bytes / 10'000};
  auto done = ask<bool>(*s.sys, s.progress, bound, tr_local_atom_v, i,
                        fs::absolute(dir).string());
  if (!done)
    throw error(fmt::format("train::report: the driver could not copy the checkpoint of report "
                            "{}: {}",
                            i + 1, describe(done.error())));
  return 1;
}

} // namespace

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
    s.pipe->push(train_report{rank, i, encode_report(m, false), 0});
    return;
  }
  // A report with a checkpoint (on any rank: each passes its own, rank 0's
  // is kept) waits for the earlier ones, then for its own answer: when it
  // returns, every rank's report is recorded and the checkpoint persisted.
  s.pipe->drain();
  uint32_t chunks = 0;
  if (with_checkpoint && s.spec.local_checkpoints && s.same_view()) {
    chunks = copy_by_driver(s, i, ckpt.path());
  } else if (with_checkpoint && s.link) {
    std::string refusal;
    try {
      refusal = upload_by_link(*s.link, ticket(s, "train::report", tr_upload_atom_v, i),
                               ckpt.path());
    } catch (const std::exception& e) {
      throw error(fmt::format("train::report: the checkpoint of report {} did not reach the "
                              "driver: {}",
                              i + 1, e.what()));
    }
    if (!refusal.empty())
      throw error("train::report: " + refusal);
    chunks = 1;
  } else if (with_checkpoint) {
    chunks = send_checkpoint(s, i, ckpt.path());
  }
  train_report r{rank, i, encode_report(m, with_checkpoint), chunks};
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
  if (s.spec.data_port != 0)
    s.link = link_target{host, s.spec.data_port,
                         transport::secure(*s.sys) ? tls::from_env() : tls::config{},
                         s.timeout()};
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
