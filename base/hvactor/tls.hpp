#pragma once

#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system_config.hpp>

/// One process's TLS identity for CAF's OpenSSL module (mutual TLS between
/// all hvactor processes of a cluster, every certificate issued by one
/// private cluster CA; see cert_authority.hpp).
///
/// CAF 0.17 checks nothing at startup: it reads the files at the first
/// connection, std::terminate()s the process on a bad path, and a node with
/// no keys silently runs anonymous TLS. Hence validate() before creating an
/// actor_system, and apply() only a validated config.
namespace hvactor::tls {

/// Paths of one process's TLS identity; all empty: TLS off.
struct config {
  /// PEM certificate chain, leaf first.
  std::string certificate;
  /// PEM private key of the leaf.
  std::string key;
  /// PEM file of the cluster CA, the only trust anchor.
  std::string cafile;
  /// Passphrase of an encrypted key; empty for a plain one.
  std::string passphrase;

  /// True if any of certificate, key or cafile is set.
  bool enabled() const noexcept;
};

/// The config named by HVACTOR_TLS_CERT, _KEY, _CA and _PASSPHRASE (unset:
/// empty): how a node hands its identity to its worker processes.
config from_env();

/// The HVACTOR_TLS_* variables that carry `cfg`, only those with a non-empty value,
/// in the order certificate, key, CA, passphrase.
std::vector<std::pair<std::string, std::string>> to_env(const config& cfg);

/// Fail-closed check of `cfg`, run before an actor_system is created. Does
/// nothing when `cfg` is not enabled() and has no passphrase. Otherwise
/// throws std::invalid_argument, naming the file and OpenSSL's reason, when:
/// only some of certificate/key/cafile are set; a file is missing or
/// unreadable; the chain or the key does not parse (wrong or missing
/// passphrase included); the key does not match the certificate; the CA file
/// holds no certificate; the certificate does not verify against the CA
/// (expired or not yet valid included); or it lacks the serverAuth or the
/// clientAuth purpose (a node both publishes and connects). Loads the files
/// the way CAF does, into a throw-away SSL_CTX.
void validate(const config& cfg);

/// Sets openssl.certificate, openssl.key, openssl.cafile and
/// openssl.passphrase in `cfg`, each only when non-empty. Does not load
/// caf::openssl::manager; the caller does.
void apply(const config& tls, caf::actor_system_config& cfg);

} // namespace hvactor::tls
