#include "server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <stdexcept>
#include <vector>

#include <civetweb.h>
#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>

#include "base/internal/actor_system.hpp"
#include "base/internal/log.hpp"
#include "base/net/net.hpp"
#include "base/net/port_guard.hpp"
#include "page.hpp"
#include "render.hpp"

namespace hvactor::dashboard {

using namespace std::chrono_literals;

struct server::impl {
  caf::actor_system& sys;
  proto::node_registry registry;
  options o;
  bool loopback = true;
  mg_context* ctx = nullptr;
  uint16_t port = 0;

  snapshot take() const;
  bool allowed(mg_connection* conn, std::string& cookie) const;
  int serve(mg_connection* conn);
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
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// The value of `name` in a query string or a Cookie header ("a=1&b=2",
// "a=1; b=2").
std::string field(const char* text, const std::string& name, char sep) {
  if (text == nullptr)
    return {};
  std::string s = text;
  size_t pos = 0;
  while (pos <= s.size()) {
    auto end = s.find(sep, pos);
    if (end == std::string::npos)
      end = s.size();
    auto item = s.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ')
      item.erase(0, 1);
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

void reply(mg_connection* conn, int status, const char* type, const std::string& body,
           const std::string& extra_headers = {}) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n%s"
            "Connection: close\r\n\r\n",
            status, mg_get_response_code_text(conn, status), type, body.size(),
            extra_headers.c_str());
  mg_write(conn, body.data(), body.size());
}

int on_request(mg_connection* conn) {
  auto* st = static_cast<server::impl*>(mg_get_user_data(mg_get_context(conn)));
  try {
    return st->serve(conn);
  } catch (const std::exception& e) {
    reply(conn, 500, "text/plain; charset=utf-8", std::string{"error: "} + e.what() + "\n");
    return 500;
  }
}

int on_log(const mg_connection*, const char* message) {
  log::debug("dashboard: {}", message);
  return 1;
}

// Loads the cluster identity into civetweb's TLS context and asks for a
// client certificate (optional: the token is the other way in).
int on_init_ssl(void* ssl_ctx, void* user_data) {
  auto* st = static_cast<server::impl*>(user_data);
  auto* ctx = static_cast<SSL_CTX*>(ssl_ctx);
  auto& t = st->o.tls;
  if (SSL_CTX_use_certificate_chain_file(ctx, t.certificate.c_str()) != 1
      || SSL_CTX_use_PrivateKey_file(ctx, t.key.c_str(), SSL_FILETYPE_PEM) != 1
      || SSL_CTX_check_private_key(ctx) != 1
      || SSL_CTX_load_verify_locations(ctx, t.cafile.c_str(), nullptr) != 1)
    return -1;
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  return 1;
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

bool server::impl::allowed(mg_connection* conn, std::string& cookie) const {
  auto* ri = mg_get_request_info(conn);
  if (loopback) {
    if (o.insecure)
      return true;
    auto peer = to_sockaddr(ri->remote_addr, ri->remote_port);
    auto self = to_sockaddr(o.host, ri->server_port);
    if (!peer || !self)
      return false;
    auto owner = port_guard::socket_owner(reinterpret_cast<const sockaddr*>(&*peer),
                                          reinterpret_cast<const sockaddr*>(&*self));
    return owner && *owner == ::getuid();
  }
  if (ri->is_ssl == 0)
    return false;
  if (ri->client_cert != nullptr)
    return true; // verified against the cluster CA in the handshake
  std::string bearer;
  if (const char* auth = mg_get_header(conn, "Authorization");
      auth != nullptr && std::strncmp(auth, "Bearer ", 7) == 0)
    bearer = auth + 7;
  if (!bearer.empty())
    return same_token(bearer, o.token);
  if (auto c = field(mg_get_header(conn, "Cookie"), "hvactor_dashboard", ';'); !c.empty())
    return same_token(c, o.token);
  if (auto t = field(ri->query_string, "token", '&'); !t.empty() && same_token(t, o.token)) {
    cookie = fmt::format("Set-Cookie: hvactor_dashboard={}; Path=/; Secure; HttpOnly; "
                         "SameSite=Strict\r\n",
                         o.token);
    return true;
  }
  return false;
}

int server::impl::serve(mg_connection* conn) {
  auto* ri = mg_get_request_info(conn);
  std::string cookie;
  if (!allowed(conn, cookie)) {
    log::warn("dashboard: refused a request from {}:{} ({})", ri->remote_addr, ri->remote_port,
              loopback ? "another user's process" : "no client certificate or token");
    reply(conn, 403, "text/plain; charset=utf-8",
          loopback ? "refused: this dashboard serves only the head's user\n"
                   : "refused: present a certificate of the cluster CA or the dashboard's "
                     "token\n");
    return 403;
  }
  std::string uri = ri->local_uri ? ri->local_uri : "/";
  if (std::strcmp(ri->request_method, "GET") != 0 && std::strcmp(ri->request_method, "HEAD") != 0) {
    reply(conn, 405, "text/plain; charset=utf-8", "read-only: GET only\n");
    return 405;
  }
  const char* json = "application/json; charset=utf-8";
  if (uri == "/" || uri == "/index.html") {
    reply(conn, 200, "text/html; charset=utf-8", page_html, cookie);
  } else if (uri == "/api/cluster") {
    reply(conn, 200, json, to_json(take()), cookie);
  } else if (uri == "/api/nodes" || uri == "/api/jobs" || uri == "/api/runs") {
    reply(conn, 200, json, to_json(take(), uri.substr(5)), cookie);
  } else if (uri == "/metrics") {
    reply(conn, 200, "text/plain; version=0.0.4; charset=utf-8", to_prometheus(take()), cookie);
  } else if (uri == "/api/plot") {
    char run[32] = {0}, metric[512] = {0};
    const char* qs = ri->query_string ? ri->query_string : "";
    mg_get_var(qs, std::strlen(qs), "run", run, sizeof run);
    mg_get_var(qs, std::strlen(qs), "metric", metric, sizeof metric);
    char* end = nullptr;
    auto idx = std::strtoul(run, &end, 10);
    auto svg = (end != run && *end == 0) ? plot_svg(take(), idx, metric) : std::string{};
    if (svg.empty())
      reply(conn, 404, "text/plain; charset=utf-8", "no such run or metric\n");
    else
      reply(conn, 200, "image/svg+xml", svg, cookie);
  } else {
    reply(conn, 404, "text/plain; charset=utf-8", "not found\n");
    return 404;
  }
  return 200;
}

server::server(caf::actor_system& sys, proto::node_registry registry, options o)
    : impl_(new impl{sys, std::move(registry), std::move(o)}) {
  auto& st = *impl_;
  if (st.o.host == "localhost")
    st.o.host = "127.0.0.1"; // civetweb and the owner lookup take addresses
  st.loopback = net::is_loopback(st.o.host);
  if (!st.loopback && !st.o.tls.enabled())
    throw std::runtime_error(fmt::format(
      "refusing to serve the dashboard on {} without TLS: off loopback it needs the cluster's "
      "certificate (--tls-cert, --tls-key, --tls-ca); keep --dashboard-host 127.0.0.1 or pass "
      "--include-dashboard false",
      st.o.host));
  if (!st.loopback && st.o.token.empty())
    st.o.token = random_token();
  mg_init_library(st.loopback ? 0 : MG_FEATURES_TLS);
  auto host = st.o.host.find(':') != std::string::npos ? "[" + st.o.host + "]" : st.o.host;
  auto ports = fmt::format("{}:{}{}", host, st.o.port, st.loopback ? "" : "s");
  std::vector<const char*> opts{"listening_ports", ports.c_str(), "num_threads", "4",
                                "request_timeout_ms", "10000", "enable_keep_alive", "no"};
  opts.push_back(nullptr);
  mg_callbacks cb{};
  cb.begin_request = on_request;
  cb.log_message = on_log;
  if (!st.loopback)
    cb.init_ssl = on_init_ssl;
  st.ctx = mg_start(&cb, &st, opts.data());
  if (st.ctx == nullptr)
    throw std::runtime_error(fmt::format("cannot serve the dashboard on {}:{} (is the port taken? "
                                         "try another --dashboard-port){}",
                                         st.o.host, st.o.port,
                                         st.loopback ? "" : "; or the TLS files did not load"));
  mg_server_port sp[4];
  int n = mg_get_server_ports(st.ctx, 4, sp);
  st.port = n > 0 ? static_cast<uint16_t>(sp[0].port) : static_cast<uint16_t>(st.o.port);
}

server::~server() {
  if (impl_ && impl_->ctx)
    mg_stop(impl_->ctx);
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
