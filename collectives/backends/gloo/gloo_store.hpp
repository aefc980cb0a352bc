#pragma once

#include <gloo/rendezvous/store.h>

#include "collectives/rendezvous/rendezvous_client.hpp"

namespace hvactor::collectives {

/// gloo::rendezvous::Store over the coordinator's rendezvous_store (the
/// exact virtuals of Debian's gloo 0.5.0: set, blocking get, wait with and
/// without timeout). Waits without a timeout use the client's timeout.
class gloo_store : public ::gloo::rendezvous::Store {
public:
  explicit gloo_store(rendezvous_client& client) : client_(client) {
  }

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

private:
  rendezvous_client& client_;
};

} // namespace hvactor::collectives
