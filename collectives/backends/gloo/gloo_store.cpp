#include "gloo_store.hpp"

namespace hvactor::collectives {

void gloo_store::set(const std::string& key, const std::vector<char>& data) {
  client_.set(key, data);
}

std::vector<char> gloo_store::get(const std::string& key) {
  return client_.get(key, client_.timeout());
}

void gloo_store::wait(const std::vector<std::string>& keys) {
  client_.wait(keys, client_.timeout());
}

void gloo_store::wait(const std::vector<std::string>& keys,
                      const std::chrono::milliseconds& timeout) {
  client_.wait(keys, timeout);
}

} // namespace hvactor::collectives
