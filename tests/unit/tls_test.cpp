// TLS identity: make_certificates() builds a cluster CA and node
// certificates that validate() accepts and that complete a real mutual TLS
// handshake set up as CAF's OpenSSL module does; validate() refuses every
// config that would make CAF terminate, run anonymous, or fail handshakes.

#include "base/net/cert_authority.hpp"
#include <hvactor/errors.hpp>
#include <hvactor/tls.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <caf/actor_system_config.hpp>
#include <doctest/doctest.h>

#include "base/internal/env_names.hpp"
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace fs = std::filesystem;
namespace tls = hvactor::tls;

namespace {

/// A fresh directory under /tmp, removed with everything in it.
struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/hvactor-tls-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const {
    return path + "/" + name;
  }
};

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

mode_t mode_of(const std::string& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::string read_all(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

/// The identity make_certificates(dir, {name}) wrote.
tls::config node(const std::string& dir, const std::string& name) {
  return {dir + "/" + name + ".pem", dir + "/" + name + ".key", dir + "/ca.pem", ""};
}

/// The message validate() rejects `cfg` with, or "<accepted>".
std::string rejection(const tls::config& cfg) {
  try {
    tls::validate(cfg);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "<accepted>";
}

template <class T, void (*Free)(T*)>
struct freer {
  void operator()(T* p) const {
    Free(p);
  }
};
using x509_ptr = std::unique_ptr<X509, freer<X509, X509_free>>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, freer<EVP_PKEY, EVP_PKEY_free>>;
using ssl_ctx_ptr = std::unique_ptr<SSL_CTX, freer<SSL_CTX, SSL_CTX_free>>;
using ssl_ptr = std::unique_ptr<SSL, freer<SSL, SSL_free>>;

/// The first PEM object `read` parses from `path`.
template <class Ptr, class Read>
Ptr read_pem(const std::string& path, Read read) {
  FILE* f = std::fopen(path.c_str(), "r");
  REQUIRE(f != nullptr);
  Ptr result{read(f, nullptr, nullptr, nullptr)};
  std::fclose(f);
  REQUIRE(result);
  return result;
}

x509_ptr load_cert(const std::string& path) {
  return read_pem<x509_ptr>(path, PEM_read_X509);
}

pkey_ptr load_key(const std::string& path) {
  return read_pem<pkey_ptr>(path, PEM_read_PrivateKey);
}

void write_key(const std::string& path, EVP_PKEY* key, const char* passphrase = nullptr) {
  FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  auto* cipher = passphrase ? EVP_aes_256_cbc() : nullptr;
  auto* pass = reinterpret_cast<const unsigned char*>(passphrase);
  int len = passphrase ? static_cast<int>(std::strlen(passphrase)) : 0;
  CHECK(PEM_write_PrivateKey(f, key, cipher, pass, len, nullptr, nullptr) == 1);
  std::fclose(f);
}

/// Issues <name>.pem/.key signed by the CA in `dir` with extended key usage
/// `eku`, valid from now + `from_days` to now + `to_days`: the certificates
/// make_certificates() refuses to make.
void issue_custom(const std::string& dir, const std::string& name, const char* eku,
                  long from_days, long to_days) {
  auto ca_cert = load_cert(dir + "/ca.pem");
  auto ca_key = load_key(dir + "/ca.key");
  pkey_ptr key{EVP_EC_gen("P-256")};
  x509_ptr cert{X509_new()};
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 4242);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert.get()), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get()));
  X509_time_adj_ex(X509_getm_notBefore(cert.get()), from_days, 0, nullptr);
  X509_time_adj_ex(X509_getm_notAfter(cert.get()), to_days, 0, nullptr);
  X509_set_pubkey(cert.get(), key.get());
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, ca_cert.get(), cert.get(), nullptr, nullptr, 0);
  auto* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_ext_key_usage, eku);
  REQUIRE(ext != nullptr);
  X509_add_ext(cert.get(), ext, -1);
  X509_EXTENSION_free(ext);
  REQUIRE(X509_sign(cert.get(), ca_key.get(), EVP_sha256()) > 0);
  FILE* f = std::fopen((dir + "/" + name + ".pem").c_str(), "w");
  REQUIRE(f != nullptr);
  PEM_write_X509(f, cert.get());
  std::fclose(f);
  write_key(dir + "/" + name + ".key", key.get());
}

/// An SSL_CTX set up as CAF 0.17.6's session does in authentication mode.
ssl_ctx_ptr caf_like_context(const tls::config& cfg) {
  ssl_ctx_ptr ctx{SSL_CTX_new(TLS_method())};
  REQUIRE(ctx);
  REQUIRE(SSL_CTX_use_certificate_chain_file(ctx.get(), cfg.certificate.c_str()) == 1);
  REQUIRE(SSL_CTX_use_PrivateKey_file(ctx.get(), cfg.key.c_str(), SSL_FILETYPE_PEM) == 1);
  REQUIRE(SSL_CTX_load_verify_locations(ctx.get(), cfg.cafile.c_str(), nullptr) == 1);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  REQUIRE(SSL_CTX_set_cipher_list(ctx.get(), "HIGH:!aNULL:!MD5") == 1);
  return ctx;
}

struct handshake_result {
  bool server_ok = false; // SSL_accept succeeded
  bool client_ok = false; // SSL_connect succeeded and the server's byte arrived
};

/// A TLS handshake over a socketpair, server and client on two threads. The
/// server sends one byte after SSL_accept; with TLS 1.3 the client's
/// SSL_connect finishes before the server has checked the client's
/// certificate, so only reading that byte proves the server accepted it.
handshake_result handshake(const tls::config& server, const tls::config& client) {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  timeval timeout{5, 0};
  for (int fd : fds)
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  auto server_ctx = caf_like_context(server);
  auto client_ctx = caf_like_context(client);
  handshake_result result;
  std::thread server_thread{[&] {
    ssl_ptr ssl{SSL_new(server_ctx.get())};
    SSL_set_fd(ssl.get(), fds[0]);
    result.server_ok = SSL_accept(ssl.get()) == 1 && SSL_write(ssl.get(), "k", 1) == 1;
    if (!result.server_ok)
      ::shutdown(fds[0], SHUT_RDWR); // unblocks the client
  }};
  {
    ssl_ptr ssl{SSL_new(client_ctx.get())};
    SSL_set_fd(ssl.get(), fds[1]);
    char byte = 0;
    result.client_ok = SSL_connect(ssl.get()) == 1 && SSL_read(ssl.get(), &byte, 1) == 1
                       && byte == 'k';
    if (!result.client_ok)
      ::shutdown(fds[1], SHUT_RDWR); // unblocks the server
  }
  server_thread.join();
  ::close(fds[0]);
  ::close(fds[1]);
  return result;
}

} // namespace

TEST_SUITE("tls") {

TEST_CASE("make_certificates creates a private CA and node certificates that validate") {
  temp_dir tmp;
  auto dir = tmp / "pki";
  auto written = tls::make_certificates(dir, {"node-a", "node-b"});
  CHECK(written
        == std::vector<std::string>{dir + "/ca.key", dir + "/ca.pem", dir + "/node-a.pem",
                                    dir + "/node-a.key", dir + "/node-b.pem",
                                    dir + "/node-b.key"});
  CHECK(mode_of(dir) == 0700);
  CHECK(mode_of(dir + "/ca.key") == 0600);
  CHECK(mode_of(dir + "/node-a.key") == 0600);
  CHECK(mode_of(dir + "/node-b.key") == 0600);
  CHECK(rejection(node(dir, "node-a")) == "<accepted>");
  CHECK(rejection(node(dir, "node-b")) == "<accepted>");
  auto ca = load_cert(dir + "/ca.pem");
  CHECK(X509_check_ca(ca.get()) != 0);
  for (auto& entry : fs::directory_iterator(dir))
    CHECK_FALSE(contains(entry.path().string(), ".tmp.")); // no temp file left behind
}

TEST_CASE("node certificates carry the node's name, localhost and the extra SANs") {
  temp_dir tmp;
  tls::make_certificates(tmp.path, {"node-a"}, {"IP:10.0.0.5", "DNS:gpu-7.example"});
  auto cert = load_cert(tmp / "node-a.pem");
  CHECK(X509_check_host(cert.get(), "node-a", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(cert.get(), "localhost", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(cert.get(), "gpu-7.example", 0, 0, nullptr) == 1);
  CHECK(X509_check_ip_asc(cert.get(), "127.0.0.1", 0) == 1);
  CHECK(X509_check_ip_asc(cert.get(), "10.0.0.5", 0) == 1);
  CHECK(X509_check_ip_asc(cert.get(), "10.0.0.6", 0) == 0);
}

TEST_CASE("a second call reuses the CA, and replaces a node's certificate") {
  temp_dir tmp;
  tls::make_certificates(tmp.path, {"node-a"});
  auto ca_before = read_all(tmp / "ca.pem");
  auto node_before = read_all(tmp / "node-a.pem");
  auto written = tls::make_certificates(tmp.path, {"node-c", "node-a"});
  CHECK(written
        == std::vector<std::string>{tmp / "node-c.pem", tmp / "node-c.key", tmp / "node-a.pem",
                                    tmp / "node-a.key"});
  CHECK(read_all(tmp / "ca.pem") == ca_before);
  CHECK(read_all(tmp / "node-a.pem") != node_before);
  CHECK(rejection(node(tmp.path, "node-c")) == "<accepted>");
  CHECK(rejection(node(tmp.path, "node-a")) == "<accepted>");
}

TEST_CASE("make_certificates refuses bad names, SANs and half a CA before writing") {
  temp_dir tmp;
  auto dir = tmp / "pki";
  for (std::string name : {std::string{}, std::string{"a/b"}, std::string{"../x"},
                           std::string{"node a"}, std::string{"ca"}, std::string(65, 'x')}) {
    CAPTURE(name);
    CHECK_THROWS_AS(tls::make_certificates(dir, {"ok", name}), std::invalid_argument);
  }
  for (std::string san : {"10.0.0.5", "IP:10.0.0.500", "DNS:", "DNS:a b", "URI:x"}) {
    CAPTURE(san);
    CHECK_THROWS_AS(tls::make_certificates(dir, {"ok"}, {san}), std::invalid_argument);
  }
  CHECK_THROWS_AS(tls::make_certificates(dir, {"ok"}, {}, 0), std::invalid_argument);
  CHECK_FALSE(fs::exists(dir));
  tls::make_certificates(dir, {});
  fs::remove(dir + "/ca.key");
  CHECK_THROWS_WITH_AS(tls::make_certificates(dir, {"ok"}),
                       doctest::Contains("ca.key does not"), hvactor::error);
}

TEST_CASE("validate refuses a certificate from another cluster's CA") {
  temp_dir tmp;
  tls::make_certificates(tmp / "ours", {"node-a"});
  tls::make_certificates(tmp / "theirs", {"rogue"});
  auto cfg = node(tmp / "theirs", "rogue");
  cfg.cafile = tmp / "ours/ca.pem";
  auto message = rejection(cfg);
  INFO(message);
  CHECK(contains(message, "does not verify against the CA " + cfg.cafile));
  CHECK(contains(message, cfg.certificate));
}

TEST_CASE("validate names a missing file and lists missing options") {
  temp_dir tmp;
  tls::make_certificates(tmp.path, {"node-a"});
  auto cfg = node(tmp.path, "node-a");
  cfg.key = tmp / "nope.key";
  auto message = rejection(cfg);
  CHECK(contains(message, cfg.key));
  CHECK(contains(message, "No such file or directory"));

  CHECK(rejection({tmp / "node-a.pem", "", "", ""})
        == "TLS needs --tls-cert, --tls-key and --tls-ca together; missing: --tls-key, "
           "--tls-ca");
  CHECK(rejection({"", "", tmp / "ca.pem", ""})
        == "TLS needs --tls-cert, --tls-key and --tls-ca together; missing: --tls-cert, "
           "--tls-key");
  CHECK(contains(rejection({"", "", "", "secret"}), "missing: --tls-cert, --tls-key, --tls-ca"));
  CHECK(rejection({}) == "<accepted>"); // TLS off
}

TEST_CASE("validate refuses a mismatched key, a CA file without certificates, a bad chain") {
  temp_dir tmp;
  tls::make_certificates(tmp.path, {"node-a", "node-b"});
  std::ofstream{tmp / "junk.pem"} << "not a certificate\n";
  auto cfg = node(tmp.path, "node-a");
  cfg.key = tmp / "node-b.key";
  CHECK(contains(rejection(cfg), "does not match the certificate " + cfg.certificate));
  cfg = node(tmp.path, "node-a");
  cfg.cafile = tmp / "junk.pem";
  CHECK(contains(rejection(cfg), "CA file " + cfg.cafile + " holds no PEM certificate"));
  cfg = node(tmp.path, "node-a");
  cfg.certificate = tmp / "junk.pem";
  CHECK(contains(rejection(cfg), "does not load as a PEM certificate chain"));
}

TEST_CASE("validate loads an encrypted key only with the right passphrase") {
  temp_dir tmp;
  tls::make_certificates(tmp.path, {"node-a"});
  auto key = load_key(tmp / "node-a.key");
  write_key(tmp / "node-a.key", key.get(), "s3cret");
  auto cfg = node(tmp.path, "node-a");
  cfg.passphrase = "s3cret";
  CHECK(rejection(cfg) == "<accepted>");
  cfg.passphrase = "wrong";
  CHECK(contains(rejection(cfg), "wrong passphrase?"));
  cfg.passphrase = "";
  CHECK(contains(rejection(cfg), "no passphrase is set"));
}

TEST_CASE("validate refuses expired, not yet valid and single-purpose certificates") {
  temp_dir tmp;
  tls::make_certificates(tmp.path, {});
  issue_custom(tmp.path, "expired", "serverAuth,clientAuth", -10, -1);
  issue_custom(tmp.path, "future", "serverAuth,clientAuth", 1, 10);
  issue_custom(tmp.path, "server-only", "serverAuth", 0, 10);
  issue_custom(tmp.path, "client-only", "clientAuth", 0, 10);
  issue_custom(tmp.path, "both", "serverAuth,clientAuth", 0, 10);
  CHECK(contains(rejection(node(tmp.path, "expired")), "certificate has expired"));
  CHECK(contains(rejection(node(tmp.path, "future")), "certificate is not yet valid"));
  CHECK(contains(rejection(node(tmp.path, "server-only")), "lacks the clientAuth purpose"));
  CHECK(contains(rejection(node(tmp.path, "client-only")), "lacks the serverAuth purpose"));
  CHECK(rejection(node(tmp.path, "both")) == "<accepted>");
}

TEST_CASE("to_env and from_env round-trip a config through the environment") {
  tls::config cfg{"/pki/a.pem", "/pki/a.key", "/pki/ca.pem", ""};
  auto vars = tls::to_env(cfg);
  REQUIRE(vars.size() == 3); // no empty passphrase
  CHECK(vars[0] == std::pair<std::string, std::string>{hvactor::env::tls_certificate, "/pki/a.pem"});
  for (auto& [name, value] : vars)
    ::setenv(name.c_str(), value.c_str(), 1);
  ::unsetenv(hvactor::env::tls_passphrase);
  auto back = tls::from_env();
  CHECK(back.certificate == cfg.certificate);
  CHECK(back.key == cfg.key);
  CHECK(back.cafile == cfg.cafile);
  CHECK(back.passphrase.empty());
  CHECK(back.enabled());
  for (const char* name : {hvactor::env::tls_certificate, hvactor::env::tls_key, hvactor::env::tls_cafile})
    ::unsetenv(name);
  CHECK_FALSE(tls::from_env().enabled());
}

TEST_CASE("apply sets CAF's openssl options, the passphrase only when given") {
  caf::actor_system_config cfg;
  tls::apply({"/pki/a.pem", "/pki/a.key", "/pki/ca.pem", ""}, cfg);
  CHECK(cfg.openssl_certificate == "/pki/a.pem");
  CHECK(cfg.openssl_key == "/pki/a.key");
  CHECK(cfg.openssl_cafile == "/pki/ca.pem");
  CHECK(cfg.openssl_passphrase.empty());
  tls::apply({"/pki/a.pem", "/pki/a.key", "/pki/ca.pem", "s3cret"}, cfg);
  CHECK(cfg.openssl_passphrase == "s3cret");
}

TEST_CASE("two issued certificates complete a mutual TLS handshake") {
  temp_dir tmp;
  tls::make_certificates(tmp.path, {"node-a", "node-b"});
  auto result = handshake(node(tmp.path, "node-a"), node(tmp.path, "node-b"));
  CHECK(result.server_ok);
  CHECK(result.client_ok);
}

TEST_CASE("a certificate from another CA fails the handshake on either side") {
  temp_dir tmp;
  tls::make_certificates(tmp / "ours", {"node-a"});
  tls::make_certificates(tmp / "theirs", {"rogue"});
  auto rogue = node(tmp / "theirs", "rogue");
  rogue.cafile = tmp / "ours/ca.pem"; // trusts our CA, but its own cert is not ours
  SUBCASE("as the client") {
    auto result = handshake(node(tmp / "ours", "node-a"), rogue);
    CHECK_FALSE(result.server_ok);
    CHECK_FALSE(result.client_ok);
  }
  SUBCASE("as the server") {
    auto result = handshake(rogue, node(tmp / "ours", "node-a"));
    CHECK_FALSE(result.server_ok);
    CHECK_FALSE(result.client_ok);
  }
}

} // TEST_SUITE
