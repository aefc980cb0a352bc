#include "collectives/engine/operation.hpp"

#include <algorithm>
#include <iterator>
#include <span>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace hvactor::collectives {

const char* to_string(op_kind k) {
  switch (k) {
    case op_kind::allreduce:
      return "allreduce";
    case op_kind::allgather:
      return "allgather";
    case op_kind::broadcast:
      return "broadcast";
    case op_kind::barrier:
      return "barrier";
    case op_kind::alltoall:
      return "alltoall";
    case op_kind::reducescatter:
      return "reducescatter";
    case op_kind::setup:
      return "setup";
  }
  return "?";
}

bool count_is_shared(const operation& op) {
  switch (op.kind) {
    case op_kind::allreduce:
    case op_kind::reducescatter:
    case op_kind::broadcast:
      return true;
    case op_kind::allgather:
      return op.device;
    default:
      return false;
  }
}

bool same_collective(const operation& a, const operation& b) {
  return a.name == b.name && same_shape(a, b);
}

bool same_shape(const operation& a, const operation& b) {
  if (a.kind != b.kind || a.device != b.device)
    return false;
  switch (a.kind) {
    case op_kind::barrier:
    case op_kind::setup:
      return true;
    case op_kind::allreduce:
    case op_kind::reducescatter:
      if (a.reduction != b.reduction || a.prescale != b.prescale || a.postscale != b.postscale)
        return false;
      break;
    case op_kind::broadcast:
      if (a.root != b.root)
        return false;
      break;
    default:
      break;
  }
  return a.type == b.type && (!count_is_shared(a) || (a.count == b.count && same_dims(a, b)));
}

bool same_dims(const operation& a, const operation& b) {
  if (a.shape.empty() && b.shape.empty())
    return a.count == b.count;
  auto one = [](const operation& op, int64_t& count) {
    count = static_cast<int64_t>(op.count);
    return op.shape.empty() ? std::span<const int64_t>(&count, 1)
                            : std::span<const int64_t>(op.shape);
  };
  int64_t ca = 0, cb = 0;
  auto da = one(a, ca), db = one(b, cb);
  return std::equal(da.begin(), da.end(), db.begin(), db.end());
}

std::string dims_of(const operation& op) {
  if (op.shape.empty())
    return fmt::format("[{}]", op.count);
  return fmt::format("[{}]", fmt::join(op.shape, ", "));
}

void describe_to(std::string& out, const operation& op) {
  auto it = std::back_inserter(out);
  out += to_string(op.kind);
  if (!op.name.empty())
    fmt::format_to(it, " '{}'", op.name);
  if (op.kind == op_kind::barrier || op.kind == op_kind::setup)
    return;
  out += " (";
  if (op.device)
    out += "device, ";
  out += hvd::to_string(op.type);
  if (count_is_shared(op))
    fmt::format_to(it, " x {}", op.count);
  if (reduces(op.kind)) {
    fmt::format_to(it, ", {}", hvd::to_string(op.reduction));
    if (op.prescale != 1.0)
      fmt::format_to(it, ", prescale {}", op.prescale);
    if (op.postscale != 1.0)
      fmt::format_to(it, ", postscale {}", op.postscale);
  } else if (op.kind == op_kind::broadcast)
    fmt::format_to(it, ", root {}", op.root);
  out += ')';
}

std::string describe(const operation& op) {
  std::string out;
  describe_to(out, op);
  return out;
}

} // namespace hvactor::collectives
