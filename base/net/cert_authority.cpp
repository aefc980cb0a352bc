#include "base/net/cert_authority.hpp"

#include "hvactor/errors.hpp"
#include "base/internal/knobs_net.hpp"

#include <cctype>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace fs = std::filesystem;

namespace hvactor::tls {

namespace {

struct openssl_deleter {
  void operator()(EVP_PKEY* p) const noexcept {
    EVP_PKEY_free(p);
  }
  void operator()(X509* p) const noexcept {
    X509_free(p);
  }
  void operator()(X509_EXTENSION* p) const noexcept {
    X509_EXTENSION_free(p);
  }
  void operator()(BIO* p) const noexcept {
    BIO_free(p);
  }
  void operator()(BIGNUM* p) const noexcept {
    BN_free(p);
  }
};
template <class T>
using openssl_ptr = std::unique_ptr<T, openssl_deleter>;

[[noreturn]] void fail(const std::string& what) {
  std::string reasons;
  while (auto code = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(code);
    reasons += (reasons.empty() ? "" : "; ") + std::string{reason ? reason : "?"};
  }
  throw error("make_certificates: " + what + (reasons.empty() ? "" : ": " + reasons));
}

void check_name(const std::string& name) {
  if (name.empty() || name.size() > 64)
    throw std::invalid_argument("make_certificates: name '" + name
                                + "' must have 1 to 64 characters");
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      throw std::invalid_argument("make_certificates: name '" + name
                                  + "' has characters outside [A-Za-z0-9._-]");
  if (name == "ca")
    throw std::invalid_argument("make_certificates: name 'ca' is reserved for the cluster CA");
}

void check_san(const std::string& san) {
  auto bad = [&] {
    return std::invalid_argument("make_certificates: extra SAN '" + san
                                 + "' must be IP:<address> or DNS:<host name>");
  };
  if (san.rfind("IP:", 0) == 0) {
    unsigned char buf[16];
    auto addr = san.substr(3);
    if (inet_pton(AF_INET, addr.c_str(), buf) != 1 && inet_pton(AF_INET6, addr.c_str(), buf) != 1)
      throw bad();
  } else if (san.rfind("DNS:", 0) == 0 && san.size() > 4) {
    for (char c : san.substr(4))
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '*')
        throw bad();
  } else {
    throw bad();
  }
}

openssl_ptr<EVP_PKEY> make_key() {
  openssl_ptr<EVP_PKEY> key{EVP_EC_gen("P-256")};
  if (!key)
    fail("cannot generate an EC P-256 key");
  return key;
}

/// A random positive 159-bit serial, as RFC 5280 recommends.
void set_random_serial(X509* cert) {
  unsigned char bytes[20];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1)
    fail("RAND_bytes failed");
  bytes[0] = (bytes[0] & 0x7f) | 0x40;
  openssl_ptr<BIGNUM> bn{BN_bin2bn(bytes, sizeof(bytes), nullptr)};
  if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)))
    fail("cannot set the serial number");
}

void add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  openssl_ptr<X509_EXTENSION> ext{X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str())};
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    fail(fmt::format("cannot add extension {} = {}", OBJ_nid2sn(nid), value));
}

/// An unsigned v3 certificate for `key` named CN=`cn`, valid `days`.
openssl_ptr<X509> new_cert(EVP_PKEY* key, const std::string& cn, int days) {
  openssl_ptr<X509> cert{X509_new()};
  if (!cert || X509_set_version(cert.get(), 2) != 1)
    fail("cannot create a certificate");
  set_random_serial(cert.get());
  auto* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>("hvactor"), -1, -1, 0)
        != 1
      || X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                    reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0)
           != 1)
    fail("cannot set the subject CN=" + cn);
  auto backdate = std::chrono::duration_cast<std::chrono::seconds>(knobs::certificate_backdate);
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -static_cast<long>(backdate.count()))
      || !X509_time_adj_ex(X509_getm_notAfter(cert.get()), days, 0, nullptr)
      || X509_set_pubkey(cert.get(), key) != 1)
    fail("cannot set the validity or the public key of CN=" + cn);
  return cert;
}

void sign(X509* cert, EVP_PKEY* issuer_key) {
  if (X509_sign(cert, issuer_key, EVP_sha256()) <= 0)
    fail("cannot sign the certificate");
}

std::string to_pem(X509* cert) {
  openssl_ptr<BIO> bio{BIO_new(BIO_s_mem())};
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1)
    fail("cannot encode a certificate as PEM");
  char* data = nullptr;
  auto len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

std::string to_pem(EVP_PKEY* key) {
  openssl_ptr<BIO> bio{BIO_new(BIO_s_mem())};
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    fail("cannot encode a private key as PEM");
  char* data = nullptr;
  auto len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

[[noreturn]] void fail_io(const std::string& what, const std::string& path, int err) {
  throw error(fmt::format("make_certificates: cannot {} {}: {}", what, path, std::strerror(err)));
}

/// Writes `bytes` to a new temp file beside `path`, with `mode`, synced.
std::string write_temp(const std::string& path, const std::string& bytes, mode_t mode) {
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    fail_io("create a temp file for", path, errno);
  size_t done = 0;
  int err = ::fchmod(fd, mode) == 0 ? 0 : errno;
  while (err == 0 && done < bytes.size()) {
    auto n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno != EINTR)
      err = errno;
    else if (n > 0)
      done += static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0)
    err = errno;
  ::close(fd);
  if (err != 0) {
    ::unlink(tmp.c_str());
    fail_io("write", tmp, err);
  }
  return tmp;
}

/// Moves `tmp` to `path`: replacing it, or (for the CA) only if absent, so
/// that two concurrent calls never swap one CA for another.
void commit(const std::string& tmp, const std::string& path, bool replace) {
  int rc = replace ? ::rename(tmp.c_str(), path.c_str()) : ::link(tmp.c_str(), path.c_str());
  int err = errno;
  if (rc != 0 || !replace)
    ::unlink(tmp.c_str());
  if (rc != 0)
    fail_io(replace ? "rename a temp file to" : "create", path, err);
}

template <class T, class Read>
openssl_ptr<T> read_pem(const std::string& path, Read read) {
  openssl_ptr<BIO> bio{BIO_new_file(path.c_str(), "r")};
  if (!bio)
    fail("cannot open " + path);
  // The callback returns no passphrase, so an encrypted key fails instead of
  // OpenSSL prompting on the terminal.
  openssl_ptr<T> result{read(bio.get(), nullptr, [](char*, int, int, void*) { return 0; },
                             nullptr)};
  if (!result)
    fail("cannot parse " + path + " (an encrypted CA key is not supported)");
  return result;
}

struct authority {
  openssl_ptr<X509> cert;
  openssl_ptr<EVP_PKEY> key;
};

authority load_ca(const std::string& pem, const std::string& key_path) {
  authority ca{read_pem<X509>(pem, PEM_read_bio_X509),
               read_pem<EVP_PKEY>(key_path, PEM_read_bio_PrivateKey)};
  if (X509_check_private_key(ca.cert.get(), ca.key.get()) != 1)
    fail(key_path + " does not match " + pem);
  if (X509_check_ca(ca.cert.get()) == 0)
    fail(pem + " is not a CA certificate");
  if (X509_cmp_current_time(X509_get0_notAfter(ca.cert.get())) <= 0)
    fail(pem + " has expired; remove ca.pem and ca.key to create a new CA, then reissue "
               "every node's certificate");
  return ca;
}

authority create_ca(const std::string& pem, const std::string& key_path, int days,
                    std::vector<std::string>& written) {
  authority ca{nullptr, make_key()};
  unsigned char tag[4];
  if (RAND_bytes(tag, sizeof(tag)) != 1)
    fail("RAND_bytes failed");
  // A distinct subject per CA, so an operator (and OpenSSL's issuer lookup)
  // can tell two clusters' CAs apart.
  ca.cert = new_cert(ca.key.get(),
                     fmt::format("hvactor cluster CA {:02x}{:02x}{:02x}{:02x}", tag[0], tag[1],
                                 tag[2], tag[3]),
                     days);
  X509* cert = ca.cert.get();
  if (X509_set_issuer_name(cert, X509_get_subject_name(cert)) != 1)
    fail("cannot set the CA's issuer");
  add_ext(cert, cert, NID_basic_constraints, "critical,CA:TRUE");
  add_ext(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  add_ext(cert, cert, NID_subject_key_identifier, "hash");
  sign(cert, ca.key.get());
  // Key first: a ca.pem never exists without its key.
  auto key_tmp = write_temp(key_path, to_pem(ca.key.get()), 0600);
  commit(key_tmp, key_path, false);
  written.push_back(key_path);
  auto pem_tmp = write_temp(pem, to_pem(cert), 0644);
  commit(pem_tmp, pem, false);
  written.push_back(pem);
  return ca;
}

std::string san_list(const std::string& name, const std::vector<std::string>& extra_sans) {
  std::vector<std::string> sans{"DNS:" + name, "DNS:localhost", "IP:127.0.0.1"};
  for (const auto& san : extra_sans)
    sans.push_back(san);
  std::string result;
  for (size_t i = 0; i < sans.size(); ++i) {
    bool seen = false;
    for (size_t j = 0; j < i; ++j)
      seen = seen || sans[j] == sans[i];
    if (!seen)
      result += (result.empty() ? "" : ",") + sans[i];
  }
  return result;
}

void issue(const authority& ca, const std::string& dir, const std::string& name,
           const std::vector<std::string>& extra_sans, int days,
           std::vector<std::string>& written) {
  auto key = make_key();
  auto cert = new_cert(key.get(), name, days);
  // A certificate must not outlive its issuer.
  const ASN1_TIME* ca_end = X509_get0_notAfter(ca.cert.get());
  if (ASN1_TIME_compare(X509_get0_notAfter(cert.get()), ca_end) > 0
      && X509_set1_notAfter(cert.get(), ca_end) != 1)
    fail("cannot cap the validity of " + name);
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.cert.get())) != 1)
    fail("cannot set the issuer of " + name);
  add_ext(cert.get(), ca.cert.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_ext(cert.get(), ca.cert.get(), NID_key_usage, "critical,digitalSignature");
  add_ext(cert.get(), ca.cert.get(), NID_ext_key_usage, "serverAuth,clientAuth");
  add_ext(cert.get(), ca.cert.get(), NID_subject_alt_name, san_list(name, extra_sans));
  add_ext(cert.get(), ca.cert.get(), NID_subject_key_identifier, "hash");
  add_ext(cert.get(), ca.cert.get(), NID_authority_key_identifier, "keyid:always");
  sign(cert.get(), ca.key.get());
  auto pem = (fs::path{dir} / (name + ".pem")).string();
  auto key_path = (fs::path{dir} / (name + ".key")).string();
  // Both temps first, then two renames back to back: CAF re-reads both files
  // at every connection, so the window with a mismatched pair stays tiny.
  auto key_tmp = write_temp(key_path, to_pem(key.get()), 0600);
  std::string pem_tmp;
  try {
    pem_tmp = write_temp(pem, to_pem(cert.get()), 0644);
  } catch (...) {
    ::unlink(key_tmp.c_str());
    throw;
  }
  commit(key_tmp, key_path, true);
  commit(pem_tmp, pem, true);
  written.push_back(pem);
  written.push_back(key_path);
}

void make_dir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      throw error("make_certificates: " + dir + " exists and is not a directory");
    return;
  }
  std::error_code ec;
  auto parent = fs::path{dir}.parent_path();
  if (!parent.empty())
    fs::create_directories(parent, ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    fail_io("create the directory", dir, errno);
  // mkdir applies the umask, which may only narrow 0700; chmod makes it exact.
  if (::chmod(dir.c_str(), 0700) != 0)
    fail_io("chmod 0700", dir, errno);
}

} // namespace

std::vector<std::string> make_certificates(const std::string& dir,
                                           const std::vector<std::string>& names,
                                           const std::vector<std::string>& extra_sans,
                                           int days) {
  if (dir.empty())
    throw std::invalid_argument("make_certificates: the directory is empty");
  if (days < 1)
    throw std::invalid_argument(fmt::format("make_certificates: days is {}, must be >= 1", days));
  for (const auto& name : names)
    check_name(name);
  for (const auto& san : extra_sans)
    check_san(san);
  ERR_clear_error();
  make_dir(dir);
  std::vector<std::string> written;
  auto ca_pem = (fs::path{dir} / "ca.pem").string();
  auto ca_key = (fs::path{dir} / "ca.key").string();
  bool have_pem = fs::exists(ca_pem);
  bool have_key = fs::exists(ca_key);
  if (have_pem != have_key)
    throw error(fmt::format("make_certificates: {} exists but {} does not; restore it, or remove "
                            "both to create a new CA (then reissue every node's certificate)",
                            have_pem ? ca_pem : ca_key, have_pem ? ca_key : ca_pem));
  auto ca = have_pem ? load_ca(ca_pem, ca_key) : create_ca(ca_pem, ca_key, days, written);
  for (const auto& name : names)
    issue(ca, dir, name, extra_sans, days, written);
  return written;
}

} // namespace hvactor::tls
