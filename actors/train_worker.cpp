// hvactor::train in a worker process: the loop's session (context, dataset
// shards, the checkpoint to resume from, report()).

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "hvactor/code_registry.hpp"
#include "hvactor/errors.hpp"
#include "internal/knobs.hpp"
#include "internal/log.hpp"
#include "internal/process.hpp"
#include "internal/rendezvous_client.hpp"
#include "internal/train_protocol.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

/// One worker's run of the loop.
struct worker_session {
  train_spec spec;
  context ctx;
  std::unique_ptr<collectives::rendezvous_client> store;
  std::map<std::string, dataset> shards;
  bool resume_fetched = false;
  checkpoint resume;
  fs::path temp_dir;
  uint64_t next_report = 0;

  std::chrono::milliseconds limit() const {
    return std::chrono::milliseconds{spec.report_limit_ms};
  }

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds{spec.timeout_ms};
  }

  void set(const std::string& key, std::vector<char> value) {
    store->set(key, value);
  }

  // Chunked values, pipelined.
  get_batch get_many() {
    // Shards and the resume checkpoint are in the store before the loop runs.
    return [this](const std::vector<std::string>& keys) {
      return store->get_many(keys, timeout());
    };
  }
  set_batch set_many() {
    return [this](std::vector<std::pair<std::string, std::vector<char>>> entries) {
      store->set_many(std::move(entries));
    };
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
  auto bytes = get_chunked(s.get_many(), keys::data(name, s.ctx.world_rank()));
  return s.shards.emplace(name, dataset::from_bytes(bytes)).first->second;
}

checkpoint get_checkpoint() {
  auto& s = session("get_checkpoint");
  if (!s.spec.has_resume)
    return {};
  if (!s.resume_fetched) {
    auto bytes = get_chunked(s.get_many(), keys::resume);
    auto dir = s.scratch() / (s.spec.resume_name.empty() ? "checkpoint" : s.spec.resume_name);
    extract_archive(bytes, dir);
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
  bool with_checkpoint = s.ctx.world_rank() == 0 && static_cast<bool>(ckpt);
  if (with_checkpoint)
    put_chunked(s.set_many(), keys::ckpt(i), archive_directory(ckpt.path()));
  s.set(keys::report(i, s.ctx.world_rank()), encode_report(m, with_checkpoint));
  std::vector<char> ack;
  try {
    ack = s.store->get(keys::ack(i), s.limit()); // the other ranks may still be in their epoch
  } catch (const rendezvous_timeout&) {
    throw error(fmt::format(
      "train::report: report {} of rank {} was not acknowledged within {} ms: every worker "
      "must call report() the same number of times (or the driver stopped answering)",
      i + 1, s.ctx.world_rank(), s.spec.report_limit_ms));
  }
  if (!ack.empty())
    throw error("train::report: " + std::string{ack.begin(), ack.end()});
}

void run_worker(train_spec spec) {
  worker_session s;
  s.spec = std::move(spec);
  s.fill_context();
  auto host = env::get(env::rendezvous_addr).value_or("");
  auto port = env::get_int(env::rendezvous_port, 0);
  if (host.empty() || port <= 0 || port > 65535)
    throw error("train: the worker has no rendezvous store address (HOROVOD_GLOO_RENDEZVOUS_*)");
  s.store = std::make_unique<collectives::rendezvous_client>(
    host, static_cast<uint16_t>(port), s.spec.scope, s.timeout());
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
  loop(s.ctx);
}

} // namespace hvactor::train
