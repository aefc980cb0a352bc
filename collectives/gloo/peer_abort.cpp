#include "peer_abort.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <exception>
#include <typeinfo>

#include <fmt/format.h>
#include <gloo/transport/pair.h>

// Gloo's own way to fail a TCP pair from outside its device thread (its
// buffers call it on a timeout): tcp::Pair::signalExceptionExternal(msg)
// wakes every operation pending on the pair with an IoException and closes
// it. Debian's libgloo-dev ships gloo/transport/tcp/pair.h without the
// gloo/common/memory.h it includes, so the class cannot be named here; the
// member, which libgloo exports, is called through its symbol. Under the
// Itanium C++ ABI a member function takes its object as the first argument
// (after the hidden pointer of a class-type result), as this declaration
// does; peer_abort_test checks the call against a real Gloo ring.
std::exception_ptr hvactor_gloo_tcp_pair_signal_exception_external(void* pair,
                                                                   const std::string& msg)
  __asm__("_ZN4gloo9transport3tcp4Pair23signalExceptionExternalERKNSt7__cxx1112basic_"
          "stringIcSt11char_traitsIcESaIcEEE");

namespace hvactor::collectives {

namespace {

// tcp::Pair's primary base is transport::Pair: the same address.
void fail_pair(::gloo::transport::Pair* pair, const std::string& why) {
  if (pair != nullptr && std::strcmp(typeid(*pair).name(), "N4gloo9transport3tcp4PairE") == 0)
    hvactor_gloo_tcp_pair_signal_exception_external(pair, why);
}

} // namespace

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
peer_abort::buffer(::gloo::Context& ctx, void* ptr, size_t bytes) {
  return std::make_unique<abortable_buffer>(ctx.createUnboundBuffer(ptr, bytes), *this);
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
  // The waits on Gloo's own buffers: failing a pair wakes every operation
  // pending on it (and closes it, as a failed rank's close_and_throw does).
  if (auto ctx = ctx_.lock())
    for (int r = 0; r < ctx->size; ++r)
      if (r != ctx->rank)
        fail_pair(ctx->getPair(r).get(), reason_);
}

void peer_abort::attach(std::weak_ptr<::gloo::Context> ctx) {
  std::lock_guard<std::mutex> lock{mutex_};
  ctx_ = std::move(ctx);
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

} // namespace hvactor::collectives
