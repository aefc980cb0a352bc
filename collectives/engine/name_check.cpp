#include "collectives/engine/name_check.hpp"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "hvactor/errors.hpp"

namespace hvactor::collectives {

namespace {

// Encoded operation: kind, type, reduction, device (one byte each), root
// (4 bytes), count (8), prescale and postscale (8 each), the number of
// dimensions (4) and each dimension (8), name length (4), name bytes.
constexpr size_t fixed_bytes = 4 + 4 + 8 + 8 + 8 + 4 + 4;

void put(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out += static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t take(std::string_view& in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i)
    value |= uint64_t{static_cast<unsigned char>(in[static_cast<size_t>(i)])} << (8 * i);
  in.remove_prefix(static_cast<size_t>(bytes));
  return value;
}

// One side of a mismatch: what that rank runs at position i.
std::string side(const op_list& list, size_t i, bool kinds_differ) {
  if (i >= list.ops.size())
    return "nothing";
  auto text = describe(list.ops[i]);
  // A batch against a single operation: say which one is the queued one.
  return kinds_differ && list.batch ? "async " + text : text;
}

} // namespace

size_t name_check::agree(const std::vector<op_list>& lists) {
  bool all_empty = std::all_of(lists.begin(), lists.end(),
                               [](const op_list& l) { return l.ops.empty(); });
  if (all_empty)
    return 0;
  size_t common = lists[0].ops.size();
  for (auto& l : lists)
    common = std::min(common, l.ops.size());
  // Only what runs now is compared: a batch's prefix, one single operation.
  size_t now = std::max<size_t>(lists[0].batch ? common : std::min<size_t>(common, 1), 1);
  for (size_t r = 1; r < lists.size(); ++r) {
    bool kinds_differ = lists[r].batch != lists[0].batch;
    for (size_t i = 0; i < now; ++i) {
      if (!kinds_differ && i < common && same_collective(lists[r].ops[i], lists[0].ops[i]))
        continue;
      throw collective_error(fmt::format(
        "hvd: ranks disagree on collective operation #{}: rank 0 runs {} where rank {} runs {} "
        "(seen on rank {} on {}). Every rank must submit the same collectives, with the same "
        "names, types and sizes, in the same order",
        checked_ + i, side(lists[0], i, kinds_differ), r, side(lists[r], i, kinds_differ), rank_,
        host_));
    }
  }
  checked_ += now;
  return now;
}

std::string name_check::encode(const op_list& list) {
  std::string out;
  out += list.batch ? 'B' : 'S';
  for (auto& op : list.ops) {
    put(out, static_cast<uint64_t>(op.kind), 1);
    put(out, static_cast<uint64_t>(op.type), 1);
    put(out, static_cast<uint64_t>(op.reduction), 1);
    put(out, op.device ? 1 : 0, 1);
    put(out, static_cast<uint32_t>(op.root), 4);
    put(out, op.count, 8);
    put(out, std::bit_cast<uint64_t>(op.prescale), 8);
    put(out, std::bit_cast<uint64_t>(op.postscale), 8);
    put(out, op.shape.size(), 4);
    for (auto d : op.shape)
      put(out, static_cast<uint64_t>(d), 8);
    put(out, op.name.size(), 4);
    out += op.name;
  }
  return out;
}

op_list name_check::decode(std::string_view in, int from_rank) {
  auto malformed = [&] {
    return collective_error(fmt::format(
      "hvd: name negotiation: rank {} sent {} bytes that are not a list of operations; do all "
      "ranks run the same hvactor build?",
      from_rank, in.size()));
  };
  op_list list;
  if (in.empty() || (in[0] != 'B' && in[0] != 'S'))
    throw malformed();
  list.batch = in[0] == 'B';
  auto rest = in.substr(1);
  while (!rest.empty()) {
    if (rest.size() < fixed_bytes)
      throw malformed();
    operation op;
    op.kind = static_cast<op_kind>(take(rest, 1));
    op.type = static_cast<hvd::dtype>(take(rest, 1));
    op.reduction = static_cast<hvd::op>(take(rest, 1));
    op.device = take(rest, 1) != 0;
    op.root = static_cast<int>(static_cast<int32_t>(take(rest, 4)));
    op.count = static_cast<size_t>(take(rest, 8));
    op.prescale = std::bit_cast<double>(take(rest, 8));
    op.postscale = std::bit_cast<double>(take(rest, 8));
    auto dims = static_cast<size_t>(take(rest, 4));
    if (dims > (rest.size() - 4) / 8)
      throw malformed();
    op.shape.resize(dims);
    for (auto& d : op.shape)
      d = static_cast<int64_t>(take(rest, 8));
    auto length = static_cast<size_t>(take(rest, 4));
    if (op.kind > last_op_kind || op.type > hvd::last_dtype
        || op.reduction > hvd::op::adasum || rest.size() < length)
      throw malformed();
    op.name.assign(rest.substr(0, length));
    rest.remove_prefix(length);
    list.ops.push_back(std::move(op));
  }
  return list;
}

} // namespace hvactor::collectives
