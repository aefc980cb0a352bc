#pragma once

// A cluster's TLS directory, as `hvactor-node certs --dir DIR` writes it:
// DIR/ca.pem (the cluster CA), DIR/ca.key (its key: it stays where it was
// made), and DIR/NAME.pem + DIR/NAME.key for each identity (nodes by node
// id, "head", "driver"). hvactor-run's per-job directory, hvactor-up's
// per-cluster one and each machine's copy, hvactor-node --tls-dir, and the
// Kubernetes Secret all use this layout.

#include <string>
#include <vector>

#include "hvactor/tls.hpp"

namespace hvactor::cluster {

class tls_layout {
public:
  /// `dir` empty: names relative to the working directory ("ca.pem").
  explicit tls_layout(std::string dir);

  const std::string& dir() const noexcept {
    return dir_;
  }

  /// DIR/ca.pem.
  std::string ca() const;
  /// DIR/NAME.pem.
  std::string certificate(const std::string& name) const;
  /// DIR/NAME.key.
  std::string key(const std::string& name) const;

  /// The identity `name`: its certificate and key, and the CA.
  tls::config identity(const std::string& name) const;

  /// What a machine running `name` needs: ca.pem, NAME.pem, NAME.key (never
  /// the CA's key).
  std::vector<std::string> handed_out(const std::string& name) const;

  /// Makes the CA (once; reused later) and a certificate for each of
  /// `names`, valid for both TLS roles, with `sans` added
  /// (tls::make_certificates); returns the paths written.
  std::vector<std::string> make(const std::vector<std::string>& names,
                                const std::vector<std::string>& sans) const;

private:
  std::string path(const std::string& file) const;

  std::string dir_;
};

} // namespace hvactor::cluster
