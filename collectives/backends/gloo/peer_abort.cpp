#include "peer_abort.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "collectives/rendezvous/rendezvous_protocol.hpp"

namespace hvactor::collectives {

peer_announced_failure::peer_announced_failure(int announcer, int culprit,
                                               const std::string& reason)
  : std::runtime_error(reason), announcer(announcer), culprit(culprit) {}

/// Gloo's buffer behind the same interface: sends and receives go to it;
/// a wait that returns aborted, or starts after the abort, throws.
class abortable_buffer : public ::gloo::transport::UnboundBuffer {
public:
  abortable_buffer(std::unique_ptr<::gloo::transport::UnboundBuffer> inner, peer_abort& owner)
    : UnboundBuffer(inner->ptr, inner->size), inner_(std::move(inner)), owner_(owner) {
    owner_.add(this);
  }

  ~abortable_buffer() override {
    owner_.remove(this);
  }

  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override {
    owner_.check();
    bool done = inner_->waitRecv(rank, timeout);
    if (!done)
      owner_.check();
    return done;
  }

  bool waitSend(int* rank, std::chrono::milliseconds timeout) override {
    owner_.check();
    bool done = inner_->waitSend(rank, timeout);
    if (!done)
      owner_.check();
    return done;
  }

  void abortWaitRecv() override {
    inner_->abortWaitRecv();
  }

  void abortWaitSend() override {
    inner_->abortWaitSend();
  }

  void send(int dst, uint64_t slot, size_t offset, size_t nbytes) override {
    inner_->send(dst, slot, offset, nbytes);
  }

  void recv(int src, uint64_t slot, size_t offset, size_t nbytes) override {
    inner_->recv(src, slot, offset, nbytes);
  }

  void recv(std::vector<int> srcs, uint64_t slot, size_t offset, size_t nbytes) override {
    inner_->recv(std::move(srcs), slot, offset, nbytes);
  }

private:
  std::unique_ptr<::gloo::transport::UnboundBuffer> inner_;
  peer_abort& owner_;
};

std::unique_ptr<::gloo::transport::UnboundBuffer>
peer_abort::wrap(std::unique_ptr<::gloo::transport::UnboundBuffer> inner) {
  return std::make_unique<abortable_buffer>(std::move(inner), *this);
}

namespace {

/// The connected transport context behind the same interface: its pairs
/// as they are, its buffers wrapped. Gloo's algorithms reach both through
/// gloo::Context (getPair, createUnboundBuffer).
class abortable_transport : public ::gloo::transport::Context {
public:
  abortable_transport(std::shared_ptr<::gloo::transport::Context> inner,
                      std::shared_ptr<peer_abort> abort)
    : ::gloo::transport::Context(inner->rank, inner->size), inner_(std::move(inner)),
      abort_(std::move(abort)) {
    setTimeout(inner_->getTimeout());
  }

  std::unique_ptr<::gloo::transport::Pair>& getPair(int rank) override {
    return inner_->getPair(rank);
  }

  std::unique_ptr<::gloo::transport::Pair>& createPair(int rank) override {
    return inner_->createPair(rank);
  }

  std::unique_ptr<::gloo::transport::UnboundBuffer> createUnboundBuffer(void* ptr,
                                                                       size_t size) override {
    return abort_->wrap(inner_->createUnboundBuffer(ptr, size));
  }

private:
  std::shared_ptr<::gloo::transport::Context> inner_;
  // Every buffer refers to it: it lives as long as the context.
  std::shared_ptr<peer_abort> abort_;
};

} // namespace

abortable_context::abortable_context(int rank, int size, std::shared_ptr<peer_abort> abort)
  : ::gloo::rendezvous::Context(rank, size), abort_(std::move(abort)) {}

void abortable_context::connect(::gloo::rendezvous::Store& store,
                                std::shared_ptr<::gloo::transport::Device>& device) {
  connectFullMesh(store, device);
  transportContext_ = std::make_shared<abortable_transport>(transportContext_, abort_);
}

void abortable_context::connect(std::shared_ptr<::gloo::transport::Device>& device,
                                std::chrono::milliseconds connect_timeout,
                                const std::function<void(::gloo::transport::Context&)>& build) {
  auto tc = device->createContext(rank, size);
  // A pair keeps the timeout it was made with, and waits for its peer's
  // connect up to five times that (tcp::Pair::waitUntil): so that a pair
  // whose peer gave up fails by the rendezvous deadline, not 5x after it.
  tc->setTimeout(std::max(connect_timeout / 5, std::chrono::milliseconds{1000}));
  build(*tc);
  tc->setTimeout(getTimeout());
  device_ = device;
  raw_ = tc;
  transportContext_ = std::make_shared<abortable_transport>(std::move(tc), abort_);
}

void peer_abort::raise(int announcer, int culprit) {
  raise(announcer, culprit,
        fmt::format("rank {} announced that the collectives failed", announcer));
}

void peer_abort::raise(const std::string& reason) {
  raise(-1, -1, reason);
}

void peer_abort::raise(const std::string& reason, int culprit) {
  raise(-1, culprit, reason);
}

void peer_abort::raise(int announcer, int culprit, std::string reason) {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    if (raised_.load())
      return;
    announcer_ = announcer;
    culprit_ = culprit;
    reason_ = std::move(reason);
    raised_.store(true);
    // A wait in progress returns aborted (and throws); one not begun yet
    // finds its flag set, or sees raised_ first.
    for (auto* b : live_) {
      b->abortWaitSend();
      b->abortWaitRecv();
    }
    hooks = std::move(hooks_);
  }
  for (auto& hook : hooks)
    hook();
}

void peer_abort::on_raise(std::function<void()> hook) {
  bool now;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    now = raised_.load();
    if (!now)
      hooks_.push_back(std::move(hook));
  }
  if (now && hook)
    hook();
}

void peer_abort::check() const {
  if (!raised_.load(std::memory_order_acquire))
    return;
  std::lock_guard<std::mutex> lock{mutex_};
  throw peer_announced_failure(announcer_, culprit_, reason_);
}

void peer_abort::add(abortable_buffer* b) {
  std::lock_guard<std::mutex> lock{mutex_};
  live_.push_back(b);
}

void peer_abort::remove(abortable_buffer* b) {
  std::lock_guard<std::mutex> lock{mutex_};
  live_.erase(std::find(live_.begin(), live_.end(), b));
}

std::string announcement(int announcer, int culprit) {
  return fmt::format("{} {}", announcer, culprit);
}

bool parse_announcement(const std::string& text, int& announcer, int& culprit) {
  auto* p = text.data();
  auto* end = p + text.size();
  auto a = std::from_chars(p, end, announcer);
  if (a.ec != std::errc{} || a.ptr == end || *a.ptr != ' ')
    return false;
  auto c = std::from_chars(a.ptr + 1, end, culprit);
  return c.ec == std::errc{} && c.ptr == end;
}

namespace {

// The driver's word (a lost node, a dead rank) names the job's rank R as
// "peer rank R": this context's rank where R is one of them (`job_ranks`:
// each rank's job rank, empty where they are the job's), else -1.
int culprit_in(const std::string& why, size_t at, int size, const std::vector<int>& job_ranks) {
  int job_rank = std::atoi(why.c_str() + at + 10);
  if (job_ranks.empty())
    return job_rank >= 0 && job_rank < size ? job_rank : -1;
  auto i = std::find(job_ranks.begin(), job_ranks.end(), job_rank);
  return i != job_ranks.end() ? static_cast<int>(i - job_ranks.begin()) : -1;
}

} // namespace

std::shared_ptr<void> watch_failures(rendezvous_client& client, const std::string& prefix,
                                     const std::shared_ptr<peer_abort>& abort, int me, int size,
                                     std::vector<int> job_ranks) {
  auto announced = client.watch(
    prefix + "/failed",
    [abort, me, size](const std::vector<char>& v) {
      int announcer = -1, culprit = -1;
      if (!parse_announcement(std::string(v.begin(), v.end()), announcer, culprit)
          || announcer < 0 || announcer >= size || announcer == me)
        return;
      abort->raise(announcer, culprit >= 0 && culprit < size ? culprit : -1);
    },
    [abort, size, job_ranks](const std::string& why) {
      if (why.find(proto::superseded_after_failure) != std::string::npos) {
        abort->raise(why);
      } else if (auto at = why.find("peer rank ");
                 at != std::string::npos
                 && why.find(proto::node_left_the_cluster) != std::string::npos) {
        // A static job's driver lost a node of the job: its first rank.
        abort->raise(why.substr(at), culprit_in(why, at, size, job_ranks));
      }
    });
  // A static job's driver saw a rank's process die.
  auto died = client.watch(proto::rank_died_key,
                           [abort, size, job_ranks](const std::vector<char>& v) {
                             std::string why(v.begin(), v.end());
                             auto at = why.find("peer rank ");
                             if (at != std::string::npos)
                               abort->raise(why.substr(at), culprit_in(why, at, size, job_ranks));
                           });
  return std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(
    std::move(announced), std::move(died));
}

} // namespace hvactor::collectives
