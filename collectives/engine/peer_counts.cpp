#include "collectives/engine/peer_counts.hpp"

#include <string>

#include <fmt/format.h>

#include "hvactor/errors.hpp"

namespace hvactor::collectives {

namespace {

constexpr int64_t dtypes = static_cast<int64_t>(hvd::last_dtype) + 1;

std::string dtype_name(int64_t t) {
  if (t < 0 || t >= dtypes)
    return fmt::format("an unknown dtype ({})", t);
  return hvd::to_string(static_cast<hvd::dtype>(t));
}

// Counts checked one by one, then their sum in bytes.
peer_counts checked(std::span<const int64_t> table, const char* call) {
  if (table.size() % announcement_words != 0)
    throw collective_error(fmt::format("{}: {} words of announced counts are not {} per rank",
                                       call, table.size(), announcement_words));
  peer_counts out;
  size_t elements = 0;
  for (size_t r = 0; r < table.size() / announcement_words; ++r) {
    auto count = table[r * announcement_words];
    auto type = table[r * announcement_words + 1];
    if (count < 0)
      throw collective_error(fmt::format("{}: rank {} announced {} elements", call, r, count),
                             static_cast<int>(r));
    auto c = static_cast<size_t>(count);
    if (__builtin_add_overflow(elements, c, &elements) || type < 0 || type >= dtypes
        || __builtin_mul_overflow(elements, hvd::size_of(static_cast<hvd::dtype>(type)),
                                  &out.total_bytes))
      throw collective_error(
        fmt::format("{}: rank {} announced {} elements of {}: with the ranks before it, more "
                    "bytes than this machine can address",
                    call, r, count, dtype_name(type)),
        static_cast<int>(r));
    out.counts.push_back(c);
  }
  return out;
}

} // namespace

std::vector<int64_t> announce(size_t count, hvd::dtype t) {
  return {static_cast<int64_t>(count), static_cast<int64_t>(t)};
}

peer_counts check_allgather_counts(std::span<const int64_t> table, const char* call) {
  for (size_t r = 1; r < table.size() / announcement_words; ++r)
    if (table[r * announcement_words + 1] != table[1])
      throw collective_error(fmt::format("{}: rank {} passed {} but rank 0 passed {}; every rank "
                                         "must pass the same dtype",
                                         call, r, dtype_name(table[r * announcement_words + 1]),
                                         dtype_name(table[1])),
                             static_cast<int>(r));
  return checked(table, call);
}

peer_counts check_alltoall_counts(std::span<const int64_t> table, hvd::dtype mine, int me,
                                  const char* call) {
  for (size_t r = 0; r < table.size() / announcement_words; ++r)
    if (table[r * announcement_words + 1] != static_cast<int64_t>(mine))
      throw collective_error(fmt::format("{}: rank {} sends {} but rank {} passed {}; every rank "
                                         "must pass the same dtype",
                                         call, r, dtype_name(table[r * announcement_words + 1]),
                                         me, hvd::to_string(mine)),
                             static_cast<int>(r));
  return checked(table, call);
}

} // namespace hvactor::collectives
