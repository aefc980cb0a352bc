// The dashboard's connection loop (front.hpp); its pieces are in
// front_io.hpp.

#include "front.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <openssl/err.h>

#include "base/internal/log.hpp"
#include "front_io.hpp"

namespace hvactor::dashboard {

using namespace std::chrono_literals;
using namespace front_io;

namespace {

struct job {
  uint64_t id = 0;
  std::string head;
  peer who;
  bool last = false;
};

struct answer {
  uint64_t id = 0;
  std::string bytes;
  bool close = false;
};

} // namespace

struct front::state {
  front_limits lim;
  SSL_CTX* tls = nullptr;
  int listener = -1;
  int wake = -1; // an eventfd: a worker has an answer, or stop
  responder answer_fn;
  std::atomic<bool> stopping{false};
  std::thread reader;
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<job> jobs;        // guarded by mu
  std::vector<answer> answers; // guarded by mu
  // The reading thread's alone:
  std::map<uint64_t, conn> conns;
  uint64_t next_id = 1;
  clock::time_point accept_pause{};
  uint64_t expired = 0, oversized = 0, evicted = 0;

  void run();
  void work();
  void accept_all(clock::time_point now);
  void add(int fd, const sockaddr_storage& remote, clock::time_point now);
  bool evict_one();
  void step(uint64_t id, clock::time_point now);
  void handshake(uint64_t id, conn& c, clock::time_point now);
  void read(uint64_t id, conn& c, clock::time_point now);
  void dispatch(uint64_t id, conn& c, clock::time_point now);
  void refuse(uint64_t id, conn& c, std::string bytes, clock::time_point now);
  void flush(uint64_t id, conn& c, clock::time_point now);
  void take_answers(clock::time_point now);
  void expire(clock::time_point now);
  void drop(uint64_t id);
  void stop();
};

void front::state::run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stopping.load()) {
    auto now = clock::now();
    bool accepting = now >= accept_pause;
    fds.assign({{wake, POLLIN, 0}, {accepting ? listener : -1, POLLIN, 0}});
    ids.clear();
    // Only a deadline wakes the loop without an event: a connection's, or
    // the end of a pause in accepting. An idle dashboard sleeps until a
    // request or stop (its eventfd); waking every second cost the head
    // 5 wake-ups a second with the workers' waits below.
    std::optional<clock::time_point> next;
    if (!accepting)
      next = accept_pause;
    for (auto& [id, c] : conns) {
      if (c.now == phase::working)
        continue;
      fds.push_back({c.fd, c.wants, 0});
      ids.push_back(id);
      next = next ? std::min(*next, c.deadline) : c.deadline;
    }
    int64_t wait = -1;
    if (next)
      wait = std::max<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(*next - now).count(), 0);
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(wait, 1 << 30))) < 0
        && errno != EINTR) {
      log::error("dashboard: poll failed ({}); the dashboard stops serving", std::strerror(errno));
      return;
    }
    now = clock::now();
    if (fds[0].revents != 0)
      take_answers(now);
    if (fds[1].revents != 0)
      accept_all(now);
    for (size_t i = 0; i < ids.size(); ++i)
      if (fds[i + 2].revents != 0)
        step(ids[i], now);
    expire(now);
  }
}

void front::state::accept_all(clock::time_point now) {
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage remote{};
    socklen_t len = sizeof(remote);
    // Through the port guard (port_guard.hpp): another user's connection
    // on loopback never comes out of this call.
    int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&remote), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if ((errno == EMFILE || errno == ENFILE) && !evict_one()) {
        log::warn("dashboard: out of file descriptors; accepting again in 100 ms");
        accept_pause = now + 100ms;
      }
      return;
    }
    if (conns.size() >= lim.max_connections && !evict_one()) {
      ::close(fd); // every connection is being answered: this one waits for none
      continue;
    }
    add(fd, remote, now);
  }
}

void front::state::add(int fd, const sockaddr_storage& remote, clock::time_point now) {
  int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
  conn c;
  c.fd = fd;
  c.since = now;
  c.deadline = now + lim.request_deadline;
  c.who.remote_ip = address_text(remote, c.who.remote_port);
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0)
    c.who.local_ip = address_text(local, c.who.local_port);
  if (tls != nullptr) {
    c.ssl = ::SSL_new(tls);
    if (c.ssl == nullptr || ::SSL_set_fd(c.ssl, fd) != 1) {
      ::SSL_free(c.ssl);
      ::close(fd);
      return;
    }
    ::SSL_set_accept_state(c.ssl);
    ::SSL_set_mode(c.ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    c.who.ssl = c.ssl;
    c.now = phase::handshake;
  }
  conns.emplace(next_id++, std::move(c));
}

// Closes the connection that has waited longest for its request (one
// being answered is never closed); false when there is none.
bool front::state::evict_one() {
  auto oldest = conns.end();
  for (auto it = conns.begin(); it != conns.end(); ++it)
    if ((it->second.now == phase::handshake || it->second.now == phase::reading)
        && (oldest == conns.end() || it->second.since < oldest->second.since))
      oldest = it;
  if (oldest == conns.end())
    return false;
  if (worth_logging(++evicted))
    log::warn("dashboard: {} connections open; closed the one from {}:{}, which waited longest "
              "for its request (closed so far: {})",
              conns.size(), oldest->second.who.remote_ip, oldest->second.who.remote_port,
              evicted);
  drop(oldest->first);
  return true;
}

void front::state::step(uint64_t id, clock::time_point now) {
  auto it = conns.find(id);
  if (it == conns.end())
    return;
  auto& c = it->second;
  switch (c.now) {
    case phase::handshake: handshake(id, c, now); break;
    case phase::reading: read(id, c, now); break;
    case phase::writing: flush(id, c, now); break;
    case phase::working: break;
  }
}

void front::state::handshake(uint64_t id, conn& c, clock::time_point now) {
  ::ERR_clear_error();
  int rc = ::SSL_accept(c.ssl);
  if (rc == 1) {
    c.now = phase::reading;
    read(id, c, now);
    return;
  }
  int e = ::SSL_get_error(c.ssl, rc);
  if (e == SSL_ERROR_WANT_READ)
    c.wants = POLLIN;
  else if (e == SSL_ERROR_WANT_WRITE)
    c.wants = POLLOUT;
  else
    drop(id); // not TLS, or a certificate of another CA
}

void front::state::read(uint64_t id, conn& c, clock::time_point now) {
  char buf[4096];
  for (;;) {
    auto end = head_end(c.in);
    if (end != std::string::npos && end <= lim.max_head_bytes) {
      dispatch(id, c, now);
      return;
    }
    if (end != std::string::npos || c.in.size() > lim.max_head_bytes) {
      if (worth_logging(++oversized))
        log::warn("dashboard: closed a connection from {}:{} whose request line and headers "
                  "passed {} bytes (closed so far: {})",
                  c.who.remote_ip, c.who.remote_port, lim.max_head_bytes, oversized);
      refuse(id, c, canned(431, "Request Header Fields Too Large",
                           fmt::format("refused: a request line and headers of at most {} bytes\n",
                                       lim.max_head_bytes)),
             now);
      return;
    }
    auto got = read_some(c, buf, sizeof(buf));
    if (got < 0)
      drop(id);
    if (got <= 0)
      return;
    c.in.append(buf, static_cast<size_t>(got));
  }
}

void front::state::dispatch(uint64_t id, conn& c, clock::time_point now) {
  auto end = head_end(c.in);
  std::string head = c.in.substr(0, end);
  c.in.erase(0, end);
  if (has_body(head)) {
    refuse(id, c, canned(413, "Payload Too Large", "refused: the dashboard takes no request "
                                                   "bodies (it answers GET and HEAD)\n"),
           now);
    return;
  }
  c.now = phase::working;
  bool last = ++c.served >= lim.keep_alive_requests;
  {
    std::lock_guard<std::mutex> guard{mu};
    jobs.push_back({id, std::move(head), c.who, last});
  }
  cv.notify_one();
}

void front::state::refuse(uint64_t id, conn& c, std::string bytes, clock::time_point now) {
  c.out = std::move(bytes);
  c.sent = 0;
  c.close_after = true;
  c.now = phase::writing;
  c.deadline = now + lim.write_deadline;
  flush(id, c, now);
}

void front::state::flush(uint64_t id, conn& c, clock::time_point now) {
  while (c.sent < c.out.size()) {
    auto put = write_some(c, c.out.data() + c.sent, c.out.size() - c.sent);
    if (put < 0)
      drop(id);
    if (put <= 0)
      return;
    c.sent += static_cast<size_t>(put);
  }
  if (c.close_after) {
    drop(id);
    return;
  }
  c.out = {};
  c.sent = 0;
  c.now = phase::reading;
  c.since = now;
  c.deadline = now + lim.request_deadline;
  read(id, c, now); // a pipelined request, or bytes TLS holds already
}

void front::state::take_answers(clock::time_point now) {
  uint64_t count = 0;
  (void)!::read(wake, &count, sizeof(count));
  std::vector<answer> got;
  {
    std::lock_guard<std::mutex> guard{mu};
    got.swap(answers);
  }
  for (auto& a : got) {
    auto it = conns.find(a.id);
    if (it == conns.end())
      continue;
    auto& c = it->second;
    c.out = std::move(a.bytes);
    c.sent = 0;
    c.close_after = a.close;
    c.now = phase::writing;
    c.deadline = now + lim.write_deadline;
    flush(a.id, c, now);
  }
}

void front::state::expire(clock::time_point now) {
  std::vector<uint64_t> late;
  for (auto& [id, c] : conns)
    if (c.now != phase::working && now >= c.deadline)
      late.push_back(id);
  for (auto id : late) {
    auto& c = conns.at(id);
    if (worth_logging(++expired))
      log::warn("dashboard: closed a connection from {}:{} that {} within {} ms (closed so far: "
                "{})",
                c.who.remote_ip, c.who.remote_port,
                c.now == phase::writing ? "did not take its response" : "sent no whole request",
                (c.now == phase::writing ? lim.write_deadline : lim.request_deadline).count(),
                expired);
    drop(id);
  }
}

void front::state::drop(uint64_t id) {
  auto it = conns.find(id);
  if (it == conns.end())
    return;
  auto& c = it->second;
  if (c.ssl != nullptr) {
    if (::SSL_is_init_finished(c.ssl) == 1) {
      ::ERR_clear_error();
      ::SSL_shutdown(c.ssl); // a close_notify if it fits; never waits
    }
    ::SSL_free(c.ssl);
    ::ERR_clear_error();
  }
  ::close(c.fd);
  conns.erase(it);
}

void front::state::work() {
  for (;;) {
    job j;
    {
      std::unique_lock<std::mutex> lock{mu};
      cv.wait(lock, [this] { return stopping.load() || !jobs.empty(); });
      if (stopping.load())
        return;
      j = std::move(jobs.front());
      jobs.pop_front();
    }
    answer a{j.id, {}, false};
    try {
      a.bytes = answer_fn(j.head, j.who, j.last, a.close);
    } catch (const std::exception& e) {
      a.bytes = canned(500, "Internal Server Error", fmt::format("error: {}\n", e.what()));
      a.close = true;
    }
    {
      std::lock_guard<std::mutex> guard{mu};
      answers.push_back(std::move(a));
    }
    uint64_t one = 1;
    (void)!::write(wake, &one, sizeof(one));
  }
}

void front::state::stop() {
  {
    // Under the lock: a worker between its check and its wait still sees it.
    std::lock_guard<std::mutex> guard{mu};
    stopping = true;
  }
  uint64_t one = 1;
  (void)!::write(wake, &one, sizeof(one));
  cv.notify_all();
  if (reader.joinable())
    reader.join();
  for (auto& w : workers)
    w.join();
  while (!conns.empty())
    drop(conns.begin()->first);
  ::close(listener);
  ::close(wake);
}

front::front(const std::string& host, int port, SSL_CTX* tls, front_limits limits)
    : s_(new state) {
  s_->lim = limits;
  s_->tls = tls;
  s_->listener = listen_on(host, port);
  s_->wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s_->wake < 0) {
    ::close(s_->listener);
    throw std::runtime_error(fmt::format("cannot serve the dashboard: eventfd: {}",
                                         std::strerror(errno)));
  }
}

front::~front() {
  s_->stop();
}

uint16_t front::port() const {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (::getsockname(s_->listener, reinterpret_cast<sockaddr*>(&local), &len) != 0)
    return 0;
  int port = 0;
  address_text(local, port);
  return static_cast<uint16_t>(port);
}

void front::start(responder answer) {
  s_->answer_fn = std::move(answer);
  for (size_t i = 0; i < s_->lim.workers; ++i)
    s_->workers.emplace_back([s = s_.get()] { s->work(); });
  s_->reader = std::thread([s = s_.get()] { s->run(); });
}

} // namespace hvactor::dashboard
