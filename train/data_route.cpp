// hvactor::train's shards, resumes and checkpoints on the driver's data
// link (internal/data_route.hpp).

#include "train/internal/data_route.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/knobs.hpp"
#include "base/internal/log.hpp"
#include "train/internal/checkpoint_stream.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

namespace {

// The longest answer to an upload: why the driver refused it.
constexpr size_t max_refusal_bytes = size_t{64} << 10;

void remove_dir(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// A checkpoint stream as frames, then the empty one.
void send_stream(data_link::stream& s, const fs::path& dir) {
  checkpoint_source source{dir};
  while (auto chunk = source.next())
    s.write_frame(chunk->data(), chunk->size());
  s.write_u64(0);
}

// Frames into a sink until the empty one (`ended` then), which must close
// a whole stream.
void receive_stream(data_link::stream& s, checkpoint_sink& sink, bool& ended) {
  std::vector<char> chunk;
  for (;;) {
    s.read_frame(chunk, knobs::ship_chunk_bytes);
    if (chunk.empty())
      break;
    sink.feed(chunk);
  }
  ended = true;
  if (!sink.complete())
    throw error("the checkpoint stream ended before its end record");
}

// The rest of a refused upload, read and dropped, so that the sender gets
// to the answer instead of a reset connection.
void drain(data_link::stream& s) {
  try {
    std::vector<char> chunk;
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
