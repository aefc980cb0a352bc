// Clears OpenSSL's per-thread error queue before every TLS I/O call that
// CAF 0.17.6's OpenSSL module makes (SSL_read and SSL_write here;
// SSL_connect and SSL_accept in tls_handshake.cpp, which also paces them).
//
// Why: OpenSSL requires an empty error queue before SSL_read/SSL_write/
// SSL_accept/SSL_connect, or SSL_get_error() misreports the call. CAF's
// session drains the queue only inside its log statements, which Debian
// compiles out, and all sessions share the multiplexer thread. So one peer
// that vanished without a TLS close_notify (a status client exiting, a
// SIGKILLed driver, a rejected handshake) left an error that made the next
// read on an unrelated, healthy connection "fail" and CAF closed it: every
// node dropped out of the registry whenever any TLS peer went away (found
// by the multi-node tests). These definitions interpose libssl's (symbol
// lookup finds this library before libssl, which only hvactor's
// dependencies pull in) and forward to the real functions.

#include <dlfcn.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace {

template <class F>
F real(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

} // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static auto fn = real<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return fn(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static auto fn = real<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return fn(ssl, buf, num);
}

} // extern "C"
