#include "server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>

#include <fmt/format.h>
#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "base/internal/actor_system.hpp"
#include "base/internal/log.hpp"
#include "base/net/net.hpp"
#include "base/net/port_guard.hpp"
#include "front.hpp"
#include "page.hpp"
#include "render.hpp"

namespace hvactor::dashboard {

using namespace std::chrono_literals;

namespace {

// A request head as cpp-httplib reads it, and the response it writes;
// front.hpp has read the head whole and writes the response.
class request_stream final : public httplib::Stream {
public:
  request_stream(std::string_view head, const peer& who) : head_(head), who_(who) {}
  std::string out;
  bool is_readable() const override { return pos_ < head_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    size = std::min(size, head_.size() - pos_);
    std::memcpy(ptr, head_.data() + pos_, size);
    pos_ += size;
    return static_cast<ssize_t>(size);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = who_.remote_ip;
    port = who_.remote_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = who_.local_ip;
    port = who_.local_port;
  }
  // No socket: cpp-httplib answers 500 to one numbered FD_SETSIZE or more.
  socket_t socket() const override { return INVALID_SOCKET; }

private:
  std::string_view head_;
  size_t pos_ = 0;
  const peer& who_;
};

// cpp-httplib's parsing, routing and response writing, without its sockets.
class router : public httplib::Server {
public:
  std::string answer(std::string_view head, const peer& who, bool last, bool& close) {
    request_stream strm{head, who};
    bool closed = false;
    bool ok = process_request(strm, last, closed, [&who](httplib::Request& req) {
      req.ssl = who.ssl;
    });
    close = !ok || closed || last;
    return std::move(strm.out);
  }
};

} // namespace

struct server::impl {
  caf::actor_system& sys;
  proto::node_registry registry;
  options o;
  bool loopback = true;
  router http;
  SSL_CTX* tls = nullptr;
  std::unique_ptr<front> net;
  uint16_t port = 0;

  ~impl() {
    net.reset(); // its connections' sessions first
    ::SSL_CTX_free(tls);
  }
  snapshot take() const;
  bool allowed(const httplib::Request& req, httplib::Response& res) const;
  void routes();
};

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::string random_token() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
}

bool same_token(const std::string& a, const std::string& b) {
  return !a.empty() && a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// The value of `name` in a Cookie header ("a=1; b=2").
std::string cookie(const std::string& header, const std::string& name) {
  size_t pos = 0;
  while (pos < header.size()) {
    auto end = header.find(';', pos);
    if (end == std::string::npos)
      end = header.size();
    auto item = header.substr(pos, end - pos);
    item.erase(0, item.find_first_not_of(' '));
    if (item.rfind(name + "=", 0) == 0)
      return item.substr(name.size() + 1);
    pos = end + 1;
  }
  return {};
}

std::optional<sockaddr_storage> to_sockaddr(const std::string& host, int port) {
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    return ss;
  }
  if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    return ss;
  }
  return std::nullopt;
}

// The cluster identity, and a client certificate asked for but optional
// (the token is the other way in); one that is presented must verify.
bool setup_tls(SSL_CTX& ctx, const tls::config& t) {
  if (SSL_CTX_use_certificate_chain_file(&ctx, t.certificate.c_str()) != 1
      || SSL_CTX_use_PrivateKey_file(&ctx, t.key.c_str(), SSL_FILETYPE_PEM) != 1
      || SSL_CTX_check_private_key(&ctx) != 1
      || SSL_CTX_load_verify_locations(&ctx, t.cafile.c_str(), nullptr) != 1)
    return false;
  SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  return true;
}

// Whether the TLS peer presented a certificate the cluster CA verified.
bool has_client_certificate(const SSL* ssl) {
  if (ssl == nullptr)
    return false;
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr)
    return false;
  X509_free(cert);
  return SSL_get_verify_result(ssl) == X509_V_OK;
}

} // namespace

snapshot server::impl::take() const {
  snapshot s;
  s.head_id = o.head_id;
  s.head_started_ms = o.head_started_ms;
  auto view = ask<proto::cluster_view>(sys, registry, 3s, proto::list_atom_v);
  if (!view)
    throw std::runtime_error("the registry did not answer: " + sys.render(view.error()));
  s.view = std::move(*view);
  s.view.agents.clear();
  auto board = ask<proto::board>(sys, registry, 3s, proto::board_atom_v);
  if (!board)
    throw std::runtime_error("the registry did not answer: " + sys.render(board.error()));
  s.board = std::move(*board);
  s.now_ms = now_ms();
  return s;
}

bool server::impl::allowed(const httplib::Request& req, httplib::Response& res) const {
  if (loopback) {
    if (o.insecure)
      return true;
    auto peer = to_sockaddr(req.remote_addr, req.remote_port);
    auto self = to_sockaddr(req.local_addr, req.local_port);
    if (!peer || !self)
      return false;
    auto owner = port_guard::socket_owner(reinterpret_cast<const sockaddr*>(&*peer),
                                          reinterpret_cast<const sockaddr*>(&*self));
    return owner && *owner == ::getuid();
  }
  if (has_client_certificate(req.ssl))
    return true;
  if (auto auth = req.get_header_value("Authorization"); auth.rfind("Bearer ", 0) == 0)
    return same_token(auth.substr(7), o.token);
  if (auto c = cookie(req.get_header_value("Cookie"), "hvactor_dashboard"); !c.empty())
    return same_token(c, o.token);
  if (same_token(req.get_param_value("token"), o.token)) {
    res.set_header("Set-Cookie", fmt::format("hvactor_dashboard={}; Path=/; Secure; HttpOnly; "
                                             "SameSite=Strict",
                                             o.token));
    return true;
  }
  return false;
}

void server::impl::routes() {
  auto& h = http;
  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (allowed(req, res))
      return httplib::Server::HandlerResponse::Unhandled;
    log::warn("dashboard: refused a request from {}:{} ({})", req.remote_addr, req.remote_port,
              loopback ? "another user's process" : "no client certificate or token");
    res.status = 403;
    res.set_content(loopback ? "refused: this dashboard serves only the head's user\n"
                             : "refused: present a certificate of the cluster CA or the "
                               "dashboard's token\n",
                    "text/plain; charset=utf-8");
    return httplib::Server::HandlerResponse::Handled;
  });
  const char* json = "application/json; charset=utf-8";
  auto page = [](const httplib::Request&, httplib::Response& res) {
    res.set_content(page_html, "text/html; charset=utf-8");
  };
  h.Get("/", page);
  h.Get("/index.html", page);
  h.Get("/api/cluster", [this, json](const httplib::Request&, httplib::Response& res) {
    res.set_content(to_json(take()), json);
  });
  h.Get("/api/(nodes|jobs|runs)", [this, json](const httplib::Request& req, httplib::Response& res) {
    res.set_content(to_json(take(), req.matches[1]), json);
  });
  h.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(to_prometheus(take()), "text/plain; version=0.0.4; charset=utf-8");
  });
  h.Get("/api/plot", [this](const httplib::Request& req, httplib::Response& res) {
    auto run = req.get_param_value("run");
    char* end = nullptr;
    auto idx = std::strtoul(run.c_str(), &end, 10);
    auto svg = !run.empty() && *end == 0
                 ? plot_svg(take(), idx, req.get_param_value("metric"))
                 : std::string{};
    if (svg.empty()) {
      res.status = 404;
      res.set_content("no such run or metric\n", "text/plain; charset=utf-8");
    } else {
      res.set_content(svg, "image/svg+xml");
    }
  });
  h.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content("error: " + what + "\n", "text/plain; charset=utf-8");
  });
}

server::server(caf::actor_system& sys, proto::node_registry registry, options o)
    : impl_(new impl{sys, std::move(registry), std::move(o)}) {
  auto& st = *impl_;
  if (st.o.host == "localhost")
    st.o.host = "127.0.0.1"; // the owner lookup takes addresses
  st.loopback = net::is_loopback(st.o.host);
  if (!st.loopback && !st.o.tls.enabled())
    throw std::runtime_error(fmt::format(
      "refusing to serve the dashboard on {} without TLS: off loopback it needs the cluster's "
      "certificate (--tls-cert, --tls-key, --tls-ca); keep --dashboard-host 127.0.0.1 or pass "
      "--include-dashboard false",
      st.o.host));
  if (!st.loopback) {
    if (st.o.token.empty())
      st.o.token = random_token();
    st.tls = ::SSL_CTX_new(TLS_server_method());
    if (st.tls == nullptr || !setup_tls(*st.tls, st.o.tls))
      throw std::runtime_error(fmt::format("cannot serve the dashboard over TLS: the certificate "
                                           "{} or key {} or CA {} did not load",
                                           st.o.tls.certificate, st.o.tls.key, st.o.tls.cafile));
  }
  front_limits limits;
  st.http.set_keep_alive_max_count(limits.keep_alive_requests);
  st.http.set_keep_alive_timeout(
    std::chrono::duration_cast<std::chrono::seconds>(limits.request_deadline).count());
  st.http.set_default_headers({{"Cache-Control", "no-store"},
                               {"X-Content-Type-Options", "nosniff"}});
  st.routes();
  st.net = std::make_unique<front>(st.o.host, st.o.port, st.tls, limits);
  st.port = st.net->port();
  // Another user's process on loopback is closed at accept, and the
  // connections are capped, as on the head's CAF ports (port_guard.hpp); the
  // check per request below stays for --insecure and as a second line.
  port_guard::watch(st.port, false);
  st.net->start([&http = st.http](std::string_view head, const peer& who, bool last,
                                  bool& close) { return http.answer(head, who, last, close); });
}

server::~server() {
  if (!impl_)
    return;
  impl_->net.reset();
  port_guard::unwatch(impl_->port);
}

uint16_t server::port() const {
  return impl_->port;
}

std::string server::url() const {
  auto& st = *impl_;
  auto host = st.o.host.find(':') != std::string::npos ? "[" + st.o.host + "]" : st.o.host;
  if (st.loopback)
    return fmt::format("http://{}:{}", host, st.port);
  return fmt::format("https://{}:{}/?token={}", host, st.port, st.o.token);
}

} // namespace hvactor::dashboard
