#include "hvactor/tls.hpp"

#include "base/internal/env_names.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

namespace hvactor::tls {

namespace {

struct openssl_deleter {
  void operator()(SSL_CTX* p) const noexcept {
    SSL_CTX_free(p);
  }
  void operator()(X509_STORE_CTX* p) const noexcept {
    X509_STORE_CTX_free(p);
  }
  void operator()(X509* p) const noexcept {
    X509_free(p);
  }
  void operator()(BIO* p) const noexcept {
    BIO_free(p);
  }
};
template <class T>
using openssl_ptr = std::unique_ptr<T, openssl_deleter>;

/// Takes OpenSSL's queued errors.
std::vector<unsigned long> drain_errors() {
  std::vector<unsigned long> codes;
  while (auto code = ERR_get_error())
    codes.push_back(code);
  return codes;
}

/// "lib: reason; ..." of `codes`.
std::string describe(const std::vector<unsigned long>& codes) {
  std::string result;
  for (auto code : codes) {
    const char* lib = ERR_lib_error_string(code);
    const char* reason = ERR_reason_error_string(code);
    auto item = fmt::format("{}: {}", lib ? lib : "OpenSSL",
                            reason ? reason : fmt::format("error {:#x}", code));
    if (result.find(item) == std::string::npos)
      result += (result.empty() ? "" : "; ") + item;
  }
  return result.empty() ? "no reason given by OpenSSL" : result;
}

/// OpenSSL's queued reasons, "lib: reason; ...", and clears the queue.
std::string openssl_reasons() {
  return describe(drain_errors());
}

[[noreturn]] void reject(const std::string& message) {
  ERR_clear_error();
  throw std::invalid_argument(message);
}

/// A regular file this process can read, or a rejection naming it.
void check_readable(const char* what, const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    reject(fmt::format("TLS {} {}: {}", what, path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    reject(fmt::format("TLS {} {}: not a regular file", what, path));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    reject(fmt::format("TLS {} {}: {}", what, path, std::strerror(errno)));
  ::close(fd);
}

/// Feeds the passphrase to OpenSSL; never prompts on a terminal, which
/// OpenSSL's default callback would do for an encrypted key.
int passphrase_callback(char* buf, int size, int, void* userdata) {
  const auto& passphrase = *static_cast<const std::string*>(userdata);
  if (passphrase.empty() || size <= 0)
    return 0;
  auto len = std::min(passphrase.size(), static_cast<size_t>(size));
  std::memcpy(buf, passphrase.data(), len);
  return static_cast<int>(len);
}

bool file_contains(const std::string& path, const std::string& needle) {
  std::ifstream in{path, std::ios::binary};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  return text.find(needle) != std::string::npos;
}

/// Number of PEM certificates in `path` (0 when none parse).
int count_certificates(const std::string& path) {
  openssl_ptr<BIO> bio{BIO_new_file(path.c_str(), "r")};
  int count = 0;
  while (bio) {
    openssl_ptr<X509> cert{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)};
    if (!cert)
      break;
    ++count;
  }
  ERR_clear_error(); // the read past the last certificate queues "no start line"
  return count;
}

std::string subject_of(X509* cert) {
  if (!cert)
    return "?";
  char buf[256];
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof(buf));
  return buf;
}

std::string asn1_time_text(const ASN1_TIME* t) {
  openssl_ptr<BIO> bio{BIO_new(BIO_s_mem())};
  if (!bio || ASN1_TIME_print(bio.get(), t) != 1)
    return "?";
  char* data = nullptr;
  auto len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

/// Verifies the loaded chain against the loaded CA for one purpose, as the
/// peer's OpenSSL will in the handshake.
void verify_for(SSL_CTX* ctx, const config& cfg, int purpose, const char* eku) {
  X509* leaf = SSL_CTX_get0_certificate(ctx);
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx, &chain);
  openssl_ptr<X509_STORE_CTX> store_ctx{X509_STORE_CTX_new()};
  if (!store_ctx
      || X509_STORE_CTX_init(store_ctx.get(), SSL_CTX_get_cert_store(ctx), leaf, chain) != 1
      || X509_STORE_CTX_set_purpose(store_ctx.get(), purpose) != 1)
    reject(fmt::format("TLS certificate {}: cannot set up verification: {}", cfg.certificate,
                       openssl_reasons()));
  if (X509_verify_cert(store_ctx.get()) == 1)
    return;
  int err = X509_STORE_CTX_get_error(store_ctx.get());
  int depth = X509_STORE_CTX_get_error_depth(store_ctx.get());
  X509* culprit = X509_STORE_CTX_get_current_cert(store_ctx.get());
  if (err == X509_V_ERR_INVALID_PURPOSE)
    reject(fmt::format("TLS certificate {} lacks the {} purpose (extended key usage): a node "
                       "both publishes and connects, so its certificate needs serverAuth and "
                       "clientAuth (issue it with hvactor::tls::make_certificates)",
                       cfg.certificate, eku));
  std::string when;
  if (culprit
      && (err == X509_V_ERR_CERT_HAS_EXPIRED || err == X509_V_ERR_CERT_NOT_YET_VALID))
    when = fmt::format(", valid from {} to {}", asn1_time_text(X509_get0_notBefore(culprit)),
                       asn1_time_text(X509_get0_notAfter(culprit)));
  reject(fmt::format("TLS certificate {} does not verify against the CA {}: {} (depth {}, "
                     "subject {}{}); every node needs a certificate issued by the same "
                     "cluster CA",
                     cfg.certificate, cfg.cafile, X509_verify_cert_error_string(err), depth,
                     subject_of(culprit), when));
}

} // namespace

bool config::enabled() const noexcept {
  return !certificate.empty() || !key.empty() || !cafile.empty();
}

config from_env() {
  config result;
  result.certificate = env::get(env::tls_certificate).value_or("");
  result.key = env::get(env::tls_key).value_or("");
  result.cafile = env::get(env::tls_cafile).value_or("");
  result.passphrase = env::get(env::tls_passphrase).value_or("");
  return result;
}

std::vector<std::pair<std::string, std::string>> to_env(const config& cfg) {
  std::vector<std::pair<std::string, std::string>> result;
  auto add = [&](const char* name, const std::string& value) {
    if (!value.empty())
      result.emplace_back(name, value);
  };
  add(env::tls_certificate, cfg.certificate);
  add(env::tls_key, cfg.key);
  add(env::tls_cafile, cfg.cafile);
  add(env::tls_passphrase, cfg.passphrase);
  return result;
}

void validate(const config& cfg) {
  if (!cfg.enabled() && cfg.passphrase.empty())
    return;
  // Any openssl.* key switches CAF to authentication mode, which needs all
  // three files; a partial set throws from the actor_system constructor or,
  // without a CA, fails every handshake.
  std::string missing;
  auto note_missing = [&](const std::string& value, const char* option) {
    if (value.empty())
      missing += (missing.empty() ? "" : ", ") + std::string{option};
  };
  note_missing(cfg.certificate, "--tls-cert");
  note_missing(cfg.key, "--tls-key");
  note_missing(cfg.cafile, "--tls-ca");
  if (!missing.empty())
    reject("TLS needs --tls-cert, --tls-key and --tls-ca together; missing: " + missing);
  check_readable("certificate", cfg.certificate);
  check_readable("key", cfg.key);
  check_readable("CA file", cfg.cafile);
  ERR_clear_error();
  openssl_ptr<SSL_CTX> ctx{SSL_CTX_new(TLS_method())};
  if (!ctx)
    reject("TLS: OpenSSL cannot create an SSL_CTX: " + openssl_reasons());
  // The same three calls CAF's session makes for every connection.
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cfg.certificate.c_str()) != 1)
    reject(fmt::format("TLS certificate {} does not load as a PEM certificate chain: {}",
                       cfg.certificate, openssl_reasons()));
  SSL_CTX_set_default_passwd_cb(ctx.get(), passphrase_callback);
  SSL_CTX_set_default_passwd_cb_userdata(ctx.get(), const_cast<std::string*>(&cfg.passphrase));
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), cfg.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    // The call also compares the key with the certificate loaded above.
    auto codes = drain_errors();
    for (auto code : codes)
      if (ERR_GET_LIB(code) == ERR_LIB_X509 && ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH)
        reject(fmt::format("TLS key {} does not match the certificate {}: the key belongs to "
                           "another certificate",
                           cfg.key, cfg.certificate));
    std::string hint;
    if (file_contains(cfg.key, "ENCRYPTED"))
      hint = cfg.passphrase.empty()
               ? fmt::format(" (the key is encrypted and no passphrase is set; set {})",
                             env::tls_passphrase)
               : " (the key is encrypted: wrong passphrase?)";
    reject(fmt::format("TLS key {} does not load as a PEM private key: {}{}", cfg.key,
                       describe(codes), hint));
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    reject(fmt::format("TLS key {} does not match the certificate {}: {}", cfg.key,
                       cfg.certificate, openssl_reasons()));
  if (count_certificates(cfg.cafile) == 0)
    reject(fmt::format("TLS CA file {} holds no PEM certificate", cfg.cafile));
  if (SSL_CTX_load_verify_locations(ctx.get(), cfg.cafile.c_str(), nullptr) != 1)
    reject(fmt::format("TLS CA file {} does not load: {}", cfg.cafile, openssl_reasons()));
  // The peer checks the purpose the role needs: a server's certificate for
  // serverAuth, a client's for clientAuth (docs/development/platform-notes.md,
  // "CAF TLS: certificate purpose").
  verify_for(ctx.get(), cfg, X509_PURPOSE_SSL_SERVER, "serverAuth");
  verify_for(ctx.get(), cfg, X509_PURPOSE_SSL_CLIENT, "clientAuth");
  ERR_clear_error();
}

void apply(const config& tls, caf::actor_system_config& cfg) {
  auto set = [&](const char* name, const std::string& value) {
    if (!value.empty())
      cfg.set(name, value);
  };
  set("openssl.certificate", tls.certificate);
  set("openssl.key", tls.key);
  set("openssl.cafile", tls.cafile);
  set("openssl.passphrase", tls.passphrase);
}

} // namespace hvactor::tls
