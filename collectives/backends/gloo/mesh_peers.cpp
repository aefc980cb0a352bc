#include "mesh_peers.hpp"

#include <algorithm>

namespace hvactor::collectives::mesh_peers {

namespace {

void add(std::vector<int>& peers, int rank, int peer) {
  if (peer != rank && std::find(peers.begin(), peers.end(), peer) == peers.end())
    peers.push_back(peer);
}

} // namespace

std::vector<int> ring(int rank, int size) {
  std::vector<int> peers;
  if (size > 1) {
    add(peers, rank, (rank + 1) % size);
    add(peers, rank, (rank + size - 1) % size);
  }
  return peers;
}

std::vector<int> broadcast(int rank, int size, int root) {
  // In step i the virtual ranks below 2^(i+1) pair up across bit i.
  std::vector<int> peers;
  int v = (rank - root + size) % size;
  for (int bit = 1; bit < size; bit <<= 1) {
    int u = v ^ bit;
    if (v < 2 * bit && u < size)
      add(peers, rank, (u + root) % size);
  }
  return peers;
}

std::vector<int> barrier(int rank, int size) {
  std::vector<int> peers;
  for (int d = 1; d < size; d <<= 1) {
    add(peers, rank, (rank + d) % size);
    add(peers, rank, (rank - d % size + size) % size);
  }
  return peers;
}

std::vector<int> all(int rank, int size) {
  std::vector<int> peers;
  for (int k = 1; k < size; ++k)
    peers.push_back((rank + k) % size);
  return peers;
}

} // namespace hvactor::collectives::mesh_peers
