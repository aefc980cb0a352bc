#include "tools/cluster/tls_layout.hpp"

#include "base/net/cert_authority.hpp"

namespace hvactor::cluster {

tls_layout::tls_layout(std::string dir) : dir_(std::move(dir)) {
}

std::string tls_layout::path(const std::string& file) const {
  return dir_.empty() ? file : dir_ + "/" + file;
}

std::string tls_layout::ca() const {
  return path("ca.pem");
}

std::string tls_layout::certificate(const std::string& name) const {
  return path(name + ".pem");
}

std::string tls_layout::key(const std::string& name) const {
  return path(name + ".key");
}

tls::config tls_layout::identity(const std::string& name) const {
  return {certificate(name), key(name), ca(), {}};
}

std::vector<std::string> tls_layout::handed_out(const std::string& name) const {
  return {ca(), certificate(name), key(name)};
}

std::vector<std::string> tls_layout::make(const std::vector<std::string>& names,
                                          const std::vector<std::string>& sans) const {
  return tls::make_certificates(dir_, names, sans);
}

} // namespace hvactor::cluster
