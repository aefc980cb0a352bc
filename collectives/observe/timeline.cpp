#include "collectives/observe/timeline.hpp"

#include <pthread.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <set>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/log.hpp"

namespace hvactor::collectives {

namespace {

const char* op_word(op_kind o) {
  switch (o) {
    case op_kind::allreduce:
      return "ALLREDUCE";
    case op_kind::allgather:
      return "ALLGATHER";
    case op_kind::broadcast:
      return "BROADCAST";
    case op_kind::barrier:
      return "BARRIER";
    case op_kind::alltoall:
      return "ALLTOALL";
    case op_kind::reducescatter:
      return "REDUCESCATTER";
    case op_kind::setup:
      return "SETUP";
  }
  return "COLLECTIVE";
}

const char* phase_name(timeline_phase p) {
  switch (p) {
    case timeline_phase::queue:
      return "QUEUE";
    case timeline_phase::negotiate:
      return "NEGOTIATE";
    case timeline_phase::memcpy_in:
      return "MEMCPY_IN_FUSION_BUFFER";
    case timeline_phase::memcpy_out:
      return "MEMCPY_OUT_FUSION_BUFFER";
    case timeline_phase::cycle:
      return "CYCLE_START";
    case timeline_phase::op:
      break;
  }
  return "";
}

const char* category(timeline_phase p) {
  switch (p) {
    case timeline_phase::queue:
      return "queue";
    case timeline_phase::negotiate:
      return "negotiate";
    case timeline_phase::memcpy_in:
    case timeline_phase::memcpy_out:
      return "memcpy";
    case timeline_phase::cycle:
      return "cycle";
    case timeline_phase::op:
      break;
  }
  return "op";
}

// "1700000000123456.789": nanoseconds as microseconds with three decimals.
std::string micros(int64_t ns) {
  ns = std::max<int64_t>(ns, 0);
  return fmt::format("{}.{:03}", ns / 1000, ns % 1000);
}

// Paths this process wrote a timeline to (an hvd::init() after
// hvd::shutdown() continues its file).
std::mutex written_mu;
std::set<std::string>& written_paths() {
  static auto* paths = new std::set<std::string>;
  return *paths;
}

} // namespace

// A file this process closed before (re-init, elastic jobs) gets the new
// session's events inside the same array: its closing "\n]\n" is
// overwritten. Returns whether the path was written before.
bool timeline::reopen_for_append() {
  {
    std::lock_guard<std::mutex> lk{written_mu};
    if (written_paths().insert(path_).second)
      return false;
  }
  file_ = std::fopen(path_.c_str(), "r+");
  if (file_ == nullptr)
    return true;
  char tail[3] = {0};
  if (std::fseek(file_, -3, SEEK_END) == 0 && std::fread(tail, 1, 3, file_) == 3
      && std::memcmp(tail, "\n]\n", 3) == 0 && std::fseek(file_, -3, SEEK_END) == 0) {
    file_was_closed_ = true;
    return true;
  }
  std::fclose(file_);
  file_ = nullptr;
  return true;
}

timeline::timeline(options opts) : opts_(std::move(opts)) {
  path_ = timeline_file(opts_.pattern, opts_.rank);
  std::error_code ec;
  auto parent = std::filesystem::path{path_}.parent_path();
  if (!parent.empty())
    std::filesystem::create_directories(parent, ec);
  bool again = reopen_for_append();
  if (file_ == nullptr)
    file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr)
    throw error(fmt::format("hvd::init: HOROVOD_TIMELINE={}: rank {} on {} cannot write its "
                            "timeline to {}: {}; set HOROVOD_TIMELINE to a path that is writable "
                            "on every node, or unset it",
                            opts_.pattern, opts_.rank, opts_.host, path_, std::strerror(errno)));
  size_t capacity = 2;
  while (capacity < opts_.capacity)
    capacity *= 2;
  ring_ = std::make_unique<timeline_event[]>(capacity);
  mask_ = capacity - 1;
  wall_offset_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count()
                    - now();
  auto meta = [&](const char* name, int tid, const std::string& args) {
    return fmt::format(R"({{"name":"{}","ph":"M","pid":{},"tid":{},"args":{{{}}}}})", name,
                       opts_.rank, tid, args);
  };
  text_ = (again && file_was_closed_ ? ",\n" : "[\n")
          + meta("process_name", 0,
                 fmt::format(R"x("name":"rank {} ({})")x", opts_.rank, json_escape(opts_.host)))
          + ",\n" + meta("process_sort_index", 0, fmt::format(R"("sort_index":{})", opts_.rank))
          + ",\n" + meta("thread_name", 0, R"("name":"operations")") + ",\n"
          + meta("thread_sort_index", 0, R"("sort_index":1000)");
  std::fputs(text_.c_str(), file_);
  std::fflush(file_);
  text_.clear();
  writer_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "hvd.timeline");
    writer_loop();
  });
}

timeline::~timeline() {
  try {
    close();
  } catch (...) {
    // Destructors do not throw; close() logged what went wrong.
  }
}

void timeline::record(const timeline_event& e, timeline_phase phase, int64_t begin_ns,
                      int64_t end_ns) noexcept {
  uint64_t capacity = mask_ + 1;
  uint64_t head = head_.load(std::memory_order_relaxed);
  if (head - tail_seen_ >= capacity / 2) {
    tail_seen_ = tail_.load(std::memory_order_acquire);
    if (head - tail_seen_ >= capacity) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // Half full: have the writer drain now rather than at its next tick.
    if (head - tail_seen_ >= capacity / 2 && !nudge_.exchange(true, std::memory_order_relaxed))
      cv_.notify_one();
  }
  auto& slot = ring_[head & mask_];
  slot = e;
  slot.phase = phase;
  slot.begin_ns = begin_ns;
  slot.end_ns = end_ns;
  head_.store(head + 1, std::memory_order_release);
}

void timeline::writer_loop() {
  std::unique_lock<std::mutex> lk{mu_};
  while (!stop_) {
    cv_.wait_for(lk, opts_.flush_interval,
                 [&] { return stop_ || nudge_.load(std::memory_order_relaxed); });
    nudge_.store(false, std::memory_order_relaxed);
    lk.unlock();
    drain();
    lk.lock();
  }
}

void timeline::drain() {
  uint64_t head = head_.load(std::memory_order_acquire);
  uint64_t tail = tail_.load(std::memory_order_relaxed);
  for (; tail != head; ++tail)
    format(ring_[tail & mask_], text_);
  tail_.store(tail, std::memory_order_release);
  if (text_.empty())
    return;
  if (std::fwrite(text_.data(), 1, text_.size(), file_) != text_.size() || std::fflush(file_) != 0)
    log::warn("hvd: timeline {}: write failed: {}", path_, std::strerror(errno));
  text_.clear();
}

int timeline::queue_lane(const timeline_event& e, std::string& out) {
  for (size_t i = 0; i < lanes_.size(); ++i) {
    if (lanes_[i] <= e.begin_ns) {
      lanes_[i] = e.end_ns;
      return static_cast<int>(i) + 1;
    }
  }
  lanes_.push_back(e.end_ns);
  int tid = static_cast<int>(lanes_.size());
  out += fmt::format(
    ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":{1},\"args\":{{\"name\":"
    "\"queue{2}\"}}}},\n{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":{0},\"tid\":{1},"
    "\"args\":{{\"sort_index\":{1}}}}}",
    opts_.rank, tid, tid == 1 ? std::string{} : fmt::format(" (lane {})", tid));
  return tid;
}

// Appends one event; no allocation beyond `out` growing.
void timeline::format(const timeline_event& e, std::string& out) {
  if (e.phase == timeline_phase::cycle) {
    // An instant event on the rank's row (Chrome's "ph":"i", process scope).
    int64_t ts = std::max<int64_t>(e.begin_ns + wall_offset_ns_, 0);
    fmt::format_to(std::back_inserter(out),
                   ",\n{{\"name\":\"CYCLE_START\",\"cat\":\"cycle\",\"ph\":\"i\",\"s\":\"p\","
                   "\"pid\":{},\"tid\":0,\"ts\":{}.{:03}}}",
                   opts_.rank, ts / 1000, ts % 1000);
    ++written_;
    return;
  }
  int tid = e.phase == timeline_phase::queue ? queue_lane(e, out) : 0;
  out += ",\n{\"name\":\"";
  if (e.phase == timeline_phase::op) {
    for (const char* c = e.backend; *c != '\0'; ++c)
      out += *c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
    if (e.backend[0] != '\0')
      out += '_';
    out += op_word(e.op);
  } else {
    out += phase_name(e.phase);
  }
  int64_t ts = std::max<int64_t>(e.begin_ns + wall_offset_ns_, 0);
  int64_t dur = std::max<int64_t>(e.end_ns - e.begin_ns, 0);
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{}.{:03},"
                 "\"dur\":{}.{:03},\"args\":{{",
                 category(e.phase), opts_.rank, tid, ts / 1000, ts % 1000, dur / 1000, dur % 1000);
  std::string_view names{e.names, e.names_length};
  if (e.tensors > 0) {
    out += "\"tensors\":\"";
    json_escape_to(out, names);
    fmt::format_to(it, "\",\"fused\":{}", e.tensors);
  } else {
    // An operation of its own: its fields as messages render them.
    op_.kind = e.op;
    op_.type = e.type;
    op_.count = e.has_type ? e.bytes / hvd::size_of(e.type) : 0;
    op_.reduction = e.reduction;
    op_.root = e.root;
    op_.device = e.device;
    op_.name.assign(names);
    op_text_.clear();
    describe_to(op_text_, op_);
    out += "\"op\":\"";
    json_escape_to(out, op_text_);
    out += '"';
  }
  if (e.has_type)
    fmt::format_to(it, ",\"dtype\":\"{}\"", hvd::to_string(e.type));
  if (e.bytes > 0)
    fmt::format_to(it, ",\"bytes\":{}", e.bytes);
  if (e.failed)
    out += ",\"failed\":true";
  out += "}}";
  ++written_;
}

void timeline::close() {
  {
    std::lock_guard<std::mutex> lk{mu_};
    if (closed_)
      return;
    closed_ = stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable())
    writer_.join();
  drain();
  if (auto lost = dropped(); lost > 0) {
    log::warn("hvd: timeline {}: {} events dropped (the writer fell behind)", path_, lost);
    text_ += fmt::format(
      ",\n{{\"name\":\"timeline: {} events dropped\",\"ph\":\"i\",\"s\":\"p\",\"pid\":{},"
      "\"tid\":0,\"ts\":{}}}",
      lost, opts_.rank, micros(now() + wall_offset_ns_));
  }
  text_ += "\n]\n";
  bool ok = std::fwrite(text_.data(), 1, text_.size(), file_) == text_.size();
  ok = std::fclose(file_) == 0 && ok;
  file_ = nullptr;
  text_.clear();
  if (!ok)
    log::warn("hvd: timeline {}: closing failed: {}", path_, std::strerror(errno));
  else
    log::debug("hvd: timeline {}: {} events", path_, written_);
}

} // namespace hvactor::collectives
