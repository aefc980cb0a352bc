#include "peer_addresses.hpp"

#include <cstddef>
#include <exception>
#include <vector>

#include <gloo/transport/tcp/address.h>

namespace hvactor::collectives {

std::map<std::string, int> learn_peer_addresses(::gloo::Context& ctx, rendezvous_client& client,
                                                const std::string& prefix,
                                                std::chrono::milliseconds timeout) {
  const int me = ctx.rank, size = ctx.size;
  std::string mine;
  for (int r = 0; r < size; ++r) {
    if (r != me)
      mine += ctx.getPair(r)->address().str();
    mine += '\n';
  }
  client.set(prefix + "/pairs/" + std::to_string(me), std::vector<char>(mine.begin(), mine.end()));
  std::map<std::string, int> peers;
  for (int r = 0; r < size; ++r) {
    if (r == me)
      continue;
    auto bytes = client.get(prefix + "/pairs/" + std::to_string(r), timeout);
    std::string text(bytes.begin(), bytes.end());
    size_t pos = 0;
    for (int i = 0; i < me; ++i)
      pos = text.find('\n', pos) + 1;
    peers[text.substr(pos, text.find('\n', pos) - pos)] = r;
    // connectFullMesh's value: rank r's pair addresses in rank order,
    // without its own; the one for this rank.
    auto listened = client.get(prefix + "/" + std::to_string(r), timeout);
    auto width = listened.size() / static_cast<size_t>(size - 1);
    auto at = static_cast<size_t>(me < r ? me : me - 1) * width;
    try {
      if (width > 0 && at + width <= listened.size())
        peers[::gloo::transport::tcp::Address(
                std::vector<char>(listened.begin() + static_cast<std::ptrdiff_t>(at),
                                  listened.begin() + static_cast<std::ptrdiff_t>(at + width)))
                .str()] = r;
    } catch (const std::exception&) {
      // Another Gloo's layout: the messages then name fewer peers.
    }
  }
  return peers;
}

} // namespace hvactor::collectives
