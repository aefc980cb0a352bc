#pragma once

/// Horovod's broadcast_object and allgather_object for C++ values: any
/// type CAF can inspect (numbers, strings, standard containers, and
/// structs with an `inspect` overload, as caf::meta documents), serialized
/// with CAF's binary format, as Horovod pickles Python objects. Every rank
/// must call them (collectives like the others); the sizes travel first,
/// so the ranks' objects may differ in size.

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "hvactor/errors.hpp"
#include "hvactor/hvd_collectives.hpp"
#include "hvactor/serialization.hpp"

namespace hvactor::hvd {

namespace detail {

/// `obj`'s bytes, or nothing with the reason in `why` when it cannot be
/// serialized (the caller still takes part in the collectives, so that
/// every rank fails together instead of waiting for this one).
template <class T>
std::vector<char> pack_object(const T& obj, std::string& why) {
  try {
    // CAF's serializer only reads: the const_cast spares a copy of `obj`.
    return hvactor::detail::pack(const_cast<T&>(obj));
  } catch (const std::exception& e) {
    why = e.what();
    return {};
  }
}

template <class T>
T unpack_object(const std::vector<char>& bytes) {
  return std::get<0>(hvactor::detail::unpack<T>(bytes));
}

} // namespace detail

/// Root's `obj` on every rank (the root gets its own back): Horovod's
/// hvd.broadcast_object(obj, root_rank).
template <class T>
T broadcast_object(const T& obj, int root = 0) {
  std::vector<char> bytes;
  std::string why;
  if (rank() == root)
    bytes = detail::pack_object(obj, why);
  // -1: the root could not serialize its object; every rank fails.
  int64_t n = why.empty() ? static_cast<int64_t>(bytes.size()) : -1;
  broadcast(std::span<int64_t>(&n, 1), root);
  if (n < 0)
    throw error("hvd::broadcast_object: root rank " + std::to_string(root) +
                " could not serialize its object" + (why.empty() ? "" : ": " + why));
  bytes.resize(static_cast<size_t>(n));
  broadcast(std::span<uint8_t>(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()), root);
  if (rank() == root)
    return obj;
  return detail::unpack_object<T>(bytes);
}

/// Every rank's `obj`, in rank order: Horovod's hvd.allgather_object(obj).
template <class T>
std::vector<T> allgather_object(const T& obj) {
  std::string why;
  auto bytes = detail::pack_object(obj, why);
  // -1: this rank could not serialize its object; every rank fails.
  int64_t n = why.empty() ? static_cast<int64_t>(bytes.size()) : -1;
  auto sizes = allgather(std::span<const int64_t>(&n, 1));
  for (size_t r = 0; r < sizes.size(); ++r)
    if (sizes[r] < 0)
      throw error("hvd::allgather_object: rank " + std::to_string(r) +
                  " could not serialize its object" + (why.empty() ? "" : ": " + why));
  auto all = allgather(
    std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  std::vector<T> out;
  out.reserve(sizes.size());
  size_t at = 0;
  for (auto s : sizes) {
    if (s < 0 || static_cast<size_t>(s) > all.size() - at)
      throw std::invalid_argument("hvd::allgather_object: the sizes do not match the bytes");
    std::vector<char> one(all.begin() + static_cast<std::ptrdiff_t>(at),
                          all.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(s)));
    out.push_back(detail::unpack_object<T>(one));
    at += static_cast<size_t>(s);
  }
  return out;
}

} // namespace hvactor::hvd
