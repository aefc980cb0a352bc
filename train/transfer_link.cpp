// hvactor::train's shards, resumes and checkpoints on the driver's data
// link: the data link's half of internal/transfer.hpp (the frames, the
// threads that read and write them, the upload slots).

#include "train/internal/transfer.hpp"

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/bulk_bytes.hpp"
#include "base/internal/log.hpp"
#include "train/internal/checkpoint_stream.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

namespace {

// A checkpoint stream's chunks on the link: one huge page each
// (base/internal/bulk_bytes.hpp). A receiver writes a chunk once all of it
// came, so small ones fill and empty the pipeline sooner; a 64 MiB
// checkpoint across 2.5 Gbit/s took 255 ms in chunks of 4 MiB, 245 in
// 2 MiB, 262 in 1 MiB (small pages again).
constexpr size_t link_chunk_bytes = bulk_allocator<char>::huge_page;

// The longest answer to an upload: why the driver refused it.
constexpr size_t max_refusal_bytes = size_t{64} << 10;

void remove_dir(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Chunks read from the socket wait here for the sink's thread: the disk
// writes one while the next arrives. At most `depth` chunks are held.
class chunk_queue {
public:
  explicit chunk_queue(size_t depth) : depth_(depth) {}

  /// A buffer to read into: a used one, or a new one while fewer than
  /// `depth` exist. Waits for one; nullopt once the consumer failed.
  std::optional<bulk_bytes> take_empty() {
    std::unique_lock<std::mutex> lk{mu_};
    cv_.wait(lk, [&] { return failed_ || !empty_.empty() || made_ < depth_; });
    if (failed_)
      return std::nullopt;
    if (empty_.empty()) {
      ++made_;
      return bulk_bytes{};
    }
    auto b = std::move(empty_.back());
    empty_.pop_back();
    return b;
  }
  void put_full(bulk_bytes b) {
    std::lock_guard<std::mutex> lk{mu_};
    full_.push_back(std::move(b));
    cv_.notify_all();
  }
  /// The next chunk to write; nullopt once the producer closed and none is
  /// left.
  std::optional<bulk_bytes> take_full() {
    std::unique_lock<std::mutex> lk{mu_};
    cv_.wait(lk, [&] { return closed_ || !full_.empty(); });
    if (full_.empty())
      return std::nullopt;
    auto b = std::move(full_.front());
    full_.pop_front();
    return b;
  }
  void put_empty(bulk_bytes b) {
    std::lock_guard<std::mutex> lk{mu_};
    empty_.push_back(std::move(b));
    cv_.notify_all();
  }
  void close() {
    std::lock_guard<std::mutex> lk{mu_};
    closed_ = true;
    cv_.notify_all();
  }
  void fail() {
    std::lock_guard<std::mutex> lk{mu_};
    failed_ = true;
    cv_.notify_all();
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t depth_;
  size_t made_ = 0;
  bool closed_ = false;
  bool failed_ = false;
  std::deque<bulk_bytes> full_;
  std::vector<bulk_bytes> empty_;
};

// A checkpoint stream as frames, then the empty one. The directory is
// read on a thread of its own, at most two chunks ahead of the socket.
void send_stream(data_link::stream& s, const fs::path& dir) {
  checkpoint_source source{dir, link_chunk_bytes};
  chunk_queue q{3};
  std::exception_ptr read_error;
  std::thread reader{[&] {
    while (auto chunk = q.take_empty()) {
      try {
        if (!source.next(*chunk))
          break;
      } catch (...) {
        read_error = std::current_exception();
        break;
      }
      q.put_full(std::move(*chunk));
    }
    q.close();
  }};
  struct join_reader {
    chunk_queue& q;
    std::thread& t;
    ~join_reader() {
      q.fail();
      if (t.joinable())
        t.join();
    }
  } joined{q, reader};
  while (auto chunk = q.take_full()) {
    s.write_frame(chunk->data(), chunk->size());
    q.put_empty(std::move(*chunk));
  }
  reader.join();
  if (read_error)
    std::rethrow_exception(read_error);
  s.write_u64(0);
}

// Frames into a sink until the empty one (`ended` then), which must close
// a whole stream. The sink writes on a thread of its own, at most three
// chunks behind the socket.
void receive_stream(data_link::stream& s, checkpoint_sink& sink, bool& ended) {
  chunk_queue q{4};
  std::exception_ptr write_error;
  std::thread writer{[&] {
    while (auto chunk = q.take_full()) {
      try {
        sink.feed(*chunk);
      } catch (...) {
        write_error = std::current_exception();
        q.fail();
        return;
      }
      q.put_empty(std::move(*chunk));
    }
  }};
  struct join_writer {
    chunk_queue& q;
    std::thread& t;
    ~join_writer() {
      q.close();
      if (t.joinable())
        t.join();
    }
  } joined{q, writer};
  while (auto chunk = q.take_empty()) {
    chunk->reserve(link_chunk_bytes); // once per buffer: no regrowth
    s.read_frame(*chunk, knobs::ship_chunk_bytes);
    if (chunk->empty()) {
      ended = true;
      break;
    }
    q.put_full(std::move(*chunk));
  }
  q.close();
  writer.join();
  writer = std::thread{};
  if (write_error)
    std::rethrow_exception(write_error);
  if (!sink.complete())
    throw error("the checkpoint stream ended before its end record");
}

// The rest of a refused upload, read and dropped, so that the sender gets
// to the answer instead of a reset connection.
void drain(data_link::stream& s) {
  try {
    bulk_bytes chunk;
    do
      s.read_frame(chunk, knobs::ship_chunk_bytes);
    while (!chunk.empty());
  } catch (const std::exception&) {
    // The sender is gone or sends garbage: it gets no answer.
  }
}

} // namespace

void upload_slot::finished(std::string why) {
  std::lock_guard<std::mutex> lk{mu_};
  if (state_ == state::cancelled || !why.empty())
    remove_dir(dir_);
  if (state_ == state::running) {
    state_ = why.empty() ? state::complete : state::failed;
    why_ = std::move(why);
  }
}

std::string upload_slot::claim() {
  std::lock_guard<std::mutex> lk{mu_};
  switch (state_) {
    case state::complete:
      state_ = state::claimed;
      return {};
    case state::failed:
      return why_;
    case state::running:
      return "its transfer had not finished";
    default:
      return "it was dropped";
  }
}

void upload_slot::cancel() {
  std::lock_guard<std::mutex> lk{mu_};
  if (state_ == state::complete || state_ == state::failed)
    remove_dir(dir_);
  state_ = state::cancelled;
}

data_link::ticket offer_shard(data_link::server& link, const fs::path& shard_dir, uint32_t dataset,
                              int32_t rank, std::chrono::milliseconds valid) {
  auto [fd, size] = open_shard_file(shard_dir.string(), dataset, rank);
  auto file = std::shared_ptr<int>(new int{fd}, [](int* p) {
    ::close(*p);
    delete p;
  });
  return link.offer(
    [file, size = size](data_link::stream& s) {
      s.write_u64(size);
      s.send_file(*file, 0, size);
      s.finish();
    },
    valid);
}

data_link::ticket offer_resume(data_link::server& link, const fs::path& dir,
                               std::chrono::milliseconds valid) {
  return link.offer(
    [dir](data_link::stream& s) {
      send_stream(s, dir);
      s.finish();
    },
    valid);
}

data_link::ticket offer_upload(data_link::server& link, std::shared_ptr<upload_slot> slot,
                               uint64_t index, std::chrono::milliseconds valid) {
  return link.offer(
    [slot, index](data_link::stream& s) {
      std::string why;
      bool ended = false;
      try {
        checkpoint_sink sink{slot->dir()};
        receive_stream(s, sink, ended);
      } catch (const std::exception& e) {
        why = fmt::format("checkpoint of report {} refused: {}", index + 1, e.what());
      }
      slot->finished(why);
      if (!why.empty()) {
        log::error("train: {}", why);
        if (!ended)
          drain(s);
      }
      s.write_frame(why.data(), why.size());
      s.finish();
    },
    valid);
}

shared_bytes fetch_shard_by_link(const link_target& to, const data_link::ticket& t) {
  auto s = data_link::connect(to.host, to.port, to.tls, t, to.timeout);
  auto size = s->read_u64();
  auto out = fresh_bytes(static_cast<size_t>(size));
  s->read(out.data.get(), out.size);
  return out;
}

void fetch_resume_by_link(const link_target& to, const data_link::ticket& t, const fs::path& dir) {
  auto s = data_link::connect(to.host, to.port, to.tls, t, to.timeout);
  checkpoint_sink sink{dir};
  bool ended = false;
  receive_stream(*s, sink, ended);
}

std::string upload_by_link(const link_target& to, const data_link::ticket& t,
                           const fs::path& dir) {
  auto s = data_link::connect(to.host, to.port, to.tls, t, to.timeout);
  send_stream(*s, dir);
  std::vector<char> why;
  s->read_frame(why, max_refusal_bytes);
  return {why.begin(), why.end()};
}

} // namespace hvactor::train
