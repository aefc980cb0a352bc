#include "base/internal/file_digest.hpp"

#include "hvactor/errors.hpp"

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <openssl/evp.h>

namespace hvactor {

namespace {

constexpr size_t chunk_size = 1 << 20;

struct md_ctx_deleter {
  void operator()(EVP_MD_CTX* ctx) const noexcept {
    EVP_MD_CTX_free(ctx);
  }
};
using md_ctx_ptr = std::unique_ptr<EVP_MD_CTX, md_ctx_deleter>;

md_ctx_ptr new_sha256() {
  md_ctx_ptr ctx{EVP_MD_CTX_new()};
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw error("sha256: OpenSSL could not initialise a SHA-256 digest");
  return ctx;
}

std::string finish_hex(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, digest, &len) != 1)
    throw error("sha256: OpenSSL could not finish the digest");
  static constexpr char hex[] = "0123456789abcdef";
  std::string result;
  result.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    result += hex[digest[i] >> 4];
    result += hex[digest[i] & 0xf];
  }
  return result;
}

/// Closes the descriptor on every path out of sha256_file.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

[[noreturn]] void throw_io(const char* what, const std::string& path, int err) {
  throw error("sha256 of " + path + ": cannot " + what + ": " + std::strerror(err));
}

} // namespace

std::string sha256_file(const std::string& path) {
  fd_guard file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0)
    throw_io("open", path, errno);
  auto ctx = new_sha256();
  std::vector<char> buf(chunk_size);
  for (;;) {
    auto n = ::read(file.fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw_io("read", path, errno);
    }
    if (n == 0)
      break;
    if (EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(n)) != 1)
      throw error("sha256 of " + path + ": OpenSSL digest update failed");
  }
  return finish_hex(ctx.get());
}

std::string sha256_bytes(std::span<const char> bytes) {
  auto ctx = new_sha256();
  if (EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1)
    throw error("sha256: OpenSSL digest update failed");
  return finish_hex(ctx.get());
}

struct sha256_stream::impl {
  md_ctx_ptr ctx = new_sha256();
};

sha256_stream::sha256_stream() : impl_(std::make_unique<impl>()) {
}

sha256_stream::~sha256_stream() = default;
sha256_stream::sha256_stream(sha256_stream&&) noexcept = default;
sha256_stream& sha256_stream::operator=(sha256_stream&&) noexcept = default;

void sha256_stream::update(std::span<const char> bytes) {
  if (EVP_DigestUpdate(impl_->ctx.get(), bytes.data(), bytes.size()) != 1)
    throw error("sha256: OpenSSL digest update failed");
}

std::string sha256_stream::finish() {
  auto hex = finish_hex(impl_->ctx.get());
  impl_->ctx = new_sha256();
  return hex;
}

} // namespace hvactor
