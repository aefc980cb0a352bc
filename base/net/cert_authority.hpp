#pragma once

#include <string>
#include <vector>

/// A private cluster CA on disk, and node certificates issued by it, for
/// hvactor's mutual TLS (tls.hpp). Everything is made in-process with
/// OpenSSL's C API; no `openssl` program is needed.
namespace hvactor::tls {

/// Creates `dir` (mode 0700; an existing one keeps its mode) and, unless it
/// already holds one, a cluster CA: ca.pem (self-signed, CA:TRUE,
/// keyCertSign) and ca.key (mode 0600), EC P-256, valid `days`. An existing
/// ca.pem/ca.key pair is loaded and reused, never overwritten; only one of
/// the two, a mismatched or expired pair throws hvactor::error.
///
/// Then issues, for each name, <name>.pem and <name>.key (mode 0600), signed
/// by the CA: CN=name, EKU serverAuth and clientAuth, keyUsage
/// digitalSignature, SAN DNS:name, DNS:localhost, IP:127.0.0.1 and each of
/// `extra_sans` ("IP:10.0.0.5", "DNS:host"). Valid `days`, capped at the
/// CA's end. An existing <name>.pem/.key is replaced atomically (a temp file
/// renamed over it), because CAF re-reads them at every connection.
///
/// Throws std::invalid_argument, before writing anything, for a name that is
/// empty, longer than 64, "ca", or has characters outside [A-Za-z0-9._-];
/// for a malformed extra SAN; for days < 1. Throws hvactor::error on I/O or
/// OpenSSL failures. Returns the paths written (ca.pem and ca.key only when
/// created), in order.
std::vector<std::string> make_certificates(const std::string& dir,
                                           const std::vector<std::string>& names,
                                           const std::vector<std::string>& extra_sans = {},
                                           int days = 825);

} // namespace hvactor::tls
