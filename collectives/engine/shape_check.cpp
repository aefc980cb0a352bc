#include "collectives/engine/shape_check.hpp"

#include <bit>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "collectives/engine/operation.hpp"

namespace hvactor::collectives::shape_check {

namespace {

// FNV-1a over the fields same_shape() compares.
// A word at a time (FNV-1a a byte at a time took a tenth of a synchronous
// 4-byte allreduce in shared memory): each word mixed in with a
// multiply-xorshift step; only equality across ranks of one build matters.
struct hasher {
  uint64_t h = 14695981039346656037ull;
  void add(uint64_t value) {
    h = (h ^ value) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
};

// " 'name'" for a named (async) tensor, else nothing.
std::string label(const operation& op) {
  return op.name.empty() ? std::string{} : fmt::format(" '{}'", op.name);
}

std::string elements(size_t n) {
  return fmt::format("{} element{}", n, n == 1 ? "" : "s");
}

// What differs between rank 0's `a` and rank `r`'s `b`, first the fields
// that make the others meaningless.
std::string difference(const operation& a, const operation& b, int r) {
  const char* kind = to_string(a.kind);
  if (a.kind != b.kind)
    return fmt::format("Mismatched collective operations: rank 0 runs {}, but rank {} runs {}",
                       describe(a), r, describe(b));
  if (a.device != b.device)
    return fmt::format("Mismatched {} memory: rank 0 passes {} memory{}, but rank {} {} memory",
                       kind, a.device ? "device" : "host", label(a), r,
                       b.device ? "device" : "host");
  if (a.type != b.type)
    return fmt::format("Mismatched {} data types: rank 0 sent {}{}, but rank {} sent {}", kind,
                       hvd::to_string(a.type), label(a), r, hvd::to_string(b.type));
  if (count_is_shared(a) && !same_dims(a, b) && !(a.shape.empty() && b.shape.empty()))
    return fmt::format("Mismatched {} tensor shapes: rank 0 sent a tensor{} of shape {}, but rank "
                       "{} sent a tensor of shape {}",
                       kind, label(a), dims_of(a), r, dims_of(b));
  if (count_is_shared(a) && a.count != b.count)
    return fmt::format("Mismatched {} tensor sizes: rank 0 sent a tensor{} of {} ({}), but rank {} "
                       "sent one of {}",
                       kind, label(a), elements(a.count), hvd::to_string(a.type), r,
                       elements(b.count));
  if (reduces(a.kind) && a.reduction != b.reduction)
    return fmt::format("Mismatched {} operations: rank 0 asked for {}{}, but rank {} for {}", kind,
                       hvd::to_string(a.reduction), label(a), r, hvd::to_string(b.reduction));
  if (reduces(a.kind) && (a.prescale != b.prescale || a.postscale != b.postscale))
    return fmt::format("Mismatched prescale and/or postscale factors: rank 0 had prescale factor "
                       "{} and postscale factor {}{}, but rank {} had prescale factor {} and "
                       "postscale factor {}",
                       a.prescale, a.postscale, label(a), r, b.prescale, b.postscale);
  if (a.kind == op_kind::broadcast && a.root != b.root)
    return fmt::format("Mismatched broadcast root ranks: rank 0 specified root rank {}, but rank {} "
                       "specified root rank {}",
                       a.root, r, b.root);
  return fmt::format("Mismatched collective operations: rank 0 runs {}, but rank {} runs {}",
                     describe(a), r, describe(b));
}

} // namespace

int64_t fingerprint(bool batch, std::span<const operation* const> ops) {
  hasher h;
  h.add(batch ? 1 : 0);
  h.add(ops.size());
  for (auto* p : ops) {
    auto& op = *p;
    h.add(static_cast<uint64_t>(op.kind));
    h.add(op.device ? 1 : 0);
    if (op.kind == op_kind::barrier || op.kind == op_kind::setup)
      continue;
    h.add(static_cast<uint64_t>(op.type));
    if (count_is_shared(op)) {
      h.add(op.count);
      // The dimensions, an empty shape as [count] (so that the buffer
      // API's and a 1-D tensor's agree).
      h.add(std::max<size_t>(op.shape.size(), 1));
      if (op.shape.empty())
        h.add(op.count);
      for (auto d : op.shape)
        h.add(static_cast<uint64_t>(d));
    }
    if (reduces(op.kind)) {
      h.add(static_cast<uint64_t>(op.reduction));
      h.add(std::bit_cast<uint64_t>(op.prescale));
      h.add(std::bit_cast<uint64_t>(op.postscale));
    }
    if (op.kind == op_kind::broadcast)
      h.add(static_cast<uint64_t>(static_cast<uint32_t>(op.root)));
  }
  // Non-negative and far from the limits: the engine reduces x and -x.
  return static_cast<int64_t>(h.h >> 2);
}

int64_t fingerprint(const op_list& list) {
  std::vector<const operation*> ops;
  ops.reserve(list.ops.size());
  for (auto& op : list.ops)
    ops.push_back(&op);
  return fingerprint(list.batch, ops);
}

op_list prefix(const op_list& list, size_t n) {
  op_list out{list.batch, {}};
  n = std::min(n, list.ops.size());
  out.ops.assign(list.ops.begin(), list.ops.begin() + static_cast<std::ptrdiff_t>(n));
  return out;
}

void explain(const std::vector<op_list>& lists, int rank, const std::string& host) {
  if (lists.empty())
    return;
  auto& first = lists[0];
  auto where = [&] {
    return fmt::format(" (seen on rank {} of {} on {}). Every rank must submit each collective "
                       "with the same type and size (only allgather and alltoall take a "
                       "different count per rank): named tensors pair by name, unnamed "
                       "collectives by call order; the collectives stay usable",
                       rank, lists.size(), host);
  };
  for (size_t r = 1; r < lists.size(); ++r) {
    auto& other = lists[r];
    int ri = static_cast<int>(r);
    if (other.batch != first.batch) {
      auto side = [](const op_list& l) {
        if (l.ops.empty())
          return std::string{"nothing"};
        return (l.batch ? "async " : "") + describe(l.ops[0]);
      };
      throw collective_error(
        fmt::format("Mismatched collective operations: rank 0 runs {}, but rank {} runs {}{}",
                    side(first), ri, side(other), where()),
        -1);
    }
    size_t n = std::max(first.ops.size(), other.ops.size());
    for (size_t i = 0; i < n; ++i) {
      if (i >= first.ops.size() || i >= other.ops.size())
        throw collective_error(
          fmt::format("Mismatched collective operations: rank 0 runs {} queued allreduces, but "
                      "rank {} runs {}{}",
                      first.ops.size(), ri, other.ops.size(), where()),
          -1);
      if (!same_shape(first.ops[i], other.ops[i]))
        throw collective_error(difference(first.ops[i], other.ops[i], ri) + where());
    }
  }
}

} // namespace hvactor::collectives::shape_check
