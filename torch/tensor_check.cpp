#include "torch/tensor_check.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hvactor/errors.hpp"
#include "hvactor/hvd.hpp"

namespace hvactor::hvd::detail {

namespace {

// Words before the dimensions: scalar type, device type, number of dims.
constexpr size_t fixed_words = 3;

std::string shape_of(const tensor_desc& d) {
  return fmt::format("[{}]", fmt::join(d.sizes, ", "));
}

const char* scalar_name(int64_t s) {
  if (s < 0 || s >= static_cast<int64_t>(c10::ScalarType::NumOptions))
    return "an unknown scalar type";
  switch (static_cast<c10::ScalarType>(s)) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Half:
      return "float16";
    default:
      return c10::toString(static_cast<c10::ScalarType>(s));
  }
}

bool same_kind(const tensor_desc& a, const tensor_desc& b) {
  return a.scalar_type == b.scalar_type && a.device_type == b.device_type;
}

} // namespace

std::string call_name(std::string_view op, std::string_view name) {
  return name.empty() ? fmt::format("hvd::{}", op) : fmt::format("hvd::{} '{}'", op, name);
}

std::string to_string(const tensor_desc& d) {
  auto text = fmt::format("{} {}", scalar_name(d.scalar_type), shape_of(d));
  if (d.device_type != static_cast<int64_t>(c10::DeviceType::CPU))
    text += d.device_type == static_cast<int64_t>(c10::DeviceType::CUDA) ? " on cuda"
                                                                          : " on another device";
  return text;
}

void describe(std::span<const torch::Tensor> ts, std::vector<int64_t>& words) {
  words.push_back(static_cast<int64_t>(ts.size()));
  for (auto& t : ts) {
    words.push_back(static_cast<int64_t>(t.scalar_type()));
    words.push_back(static_cast<int64_t>(t.device().type()));
    words.push_back(t.dim());
    for (auto s : t.sizes())
      words.push_back(s);
  }
}

desc_table split_descs(std::span<const int64_t> words, int ranks, std::string_view call) {
  desc_table table(static_cast<size_t>(ranks));
  size_t at = 0;
  for (int r = 0; r < ranks; ++r) {
    auto bad = [&](std::string_view what) {
      return collective_error(
        fmt::format("{}: rank {} sent a malformed tensor description ({}); ranks must run the "
                    "same hvactor build",
                    call, r, what),
        r);
    };
    auto left = [&] { return words.size() - at; };
    if (left() < 1)
      throw bad("no tensor count");
    auto count = words[at++];
    if (count < 0 || static_cast<uint64_t>(count) > left() / fixed_words)
      throw bad(fmt::format("{} tensors in {} words", count, left()));
    auto& mine = table[static_cast<size_t>(r)];
    mine.resize(static_cast<size_t>(count));
    for (auto& d : mine) {
      if (left() < fixed_words)
        throw bad("a truncated tensor");
      d.scalar_type = words[at++];
      d.device_type = words[at++];
      auto dims = words[at++];
      if (dims < 0 || static_cast<uint64_t>(dims) > left())
        throw bad(fmt::format("{} dimensions in {} words", dims, left()));
      d.sizes.assign(words.begin() + static_cast<std::ptrdiff_t>(at),
                     words.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(dims)));
      at += static_cast<size_t>(dims);
      for (auto s : d.sizes)
        if (s < 0)
          throw bad(fmt::format("dimension {} in {}", s, shape_of(d)));
    }
  }
  if (at != words.size())
    throw collective_error(fmt::format("{}: the tensor descriptions hold {} words more than {} "
                                       "ranks sent; ranks must run the same hvactor build",
                                       call, words.size() - at, ranks));
  return table;
}

desc_table exchange(std::span<const torch::Tensor> ts, std::string_view call) {
  std::vector<int64_t> mine;
  describe(ts, mine);
  auto bytes = allgather(mine.data(), mine.size(), dtype::int64);
  auto words = as_vector<int64_t>(bytes);
  return split_descs(words, set_size(), call);
}

void check_allgather(const desc_table& table, std::string_view call) {
  for (size_t r = 0; r < table.size(); ++r)
    if (table[r].size() != 1)
      throw collective_error(
        fmt::format("{}: rank {} sent {} tensors; allgather takes one", call, r, table[r].size()),
        static_cast<int>(r));
  const auto& first = table[0][0];
  for (size_t r = 1; r < table.size(); ++r) {
    const auto& d = table[r][0];
    std::string rule;
    if (!same_kind(d, first))
      rule = "every rank must send the same dtype, on the same device";
    else if (d.sizes.size() != first.sizes.size())
      rule = "every rank must send as many dimensions";
    else if (!std::equal(d.sizes.begin() + (d.sizes.empty() ? 0 : 1), d.sizes.end(),
                         first.sizes.begin() + (first.sizes.empty() ? 0 : 1)))
      rule = "every dimension but the first must match";
    if (rule.empty())
      continue;
    bool shapes_only = same_kind(d, first);
    throw collective_error(
      fmt::format("{}: rank {} sent {} but rank 0 has {}; {}", call, r,
                  shapes_only ? "shape " + shape_of(d) : to_string(d),
                  shapes_only ? shape_of(first) : to_string(first), rule),
      static_cast<int>(r));
  }
}

void check_broadcast(const desc_table& table, int root, std::string_view call) {
  // The table is in the order of the thread's process set (the job's
  // ranks outside a process_set_scope); `root` and the messages' ranks
  // are global ranks.
  auto set = current_process_set();
  const auto& members = set.ranks();
  auto at = std::find(members.begin(), members.end(), root);
  if (at == members.end() || members.size() != table.size())
    throw std::invalid_argument(
      fmt::format("{}: root {} is not a member of {}", call, root, set.to_string()));
  const auto& want = table[static_cast<size_t>(at - members.begin())];
  for (size_t i = 0; i < table.size(); ++i) {
    const auto& have = table[i];
    auto r = members[i];
    if (have.size() != want.size())
      throw collective_error(fmt::format("{}: rank {} passed {} tensors but root rank {} passed "
                                         "{}; every rank must pass the same tensors",
                                         call, r, have.size(), root, want.size()),
                             static_cast<int>(r));
    for (size_t i = 0; i < have.size(); ++i) {
      if (same_kind(have[i], want[i]) && have[i].sizes == want[i].sizes)
        continue;
      throw collective_error(
        fmt::format("{}: {}rank {} has {} but root rank {} has {}; every rank must pass root's "
                    "dtype and shape",
                    call, want.size() > 1 ? fmt::format("tensor {}: ", i) : std::string{}, r,
                    to_string(have[i]), root, to_string(want[i])),
        static_cast<int>(r));
    }
  }
}

void check_same(const desc_table& table, std::string_view call) {
  const auto& want = table[0];
  for (size_t r = 1; r < table.size(); ++r) {
    const auto& have = table[r];
    for (size_t i = 0; i < have.size() && i < want.size(); ++i) {
      if (same_kind(have[i], want[i]) && have[i].sizes == want[i].sizes)
        continue;
      throw collective_error(
        fmt::format("{}: {}rank {} has {} but rank 0 has {}; every rank must pass the same dtype "
                    "and shape",
                    call, want.size() > 1 ? fmt::format("tensor {}: ", i) : std::string{}, r,
                    to_string(have[i]), to_string(want[i])),
        static_cast<int>(r));
    }
    if (have.size() != want.size())
      throw collective_error(fmt::format("{}: rank {} passed {} tensors but rank 0 passed {}; "
                                         "every rank must pass the same tensors",
                                         call, r, have.size(), want.size()),
                             static_cast<int>(r));
  }
}

dtype dtype_of_tensor(const torch::Tensor& t, const char* call) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return dtype::float32;
    case torch::kDouble:
      return dtype::float64;
    case torch::kInt:
      return dtype::int32;
    case torch::kLong:
      return dtype::int64;
    case torch::kHalf:
      return dtype::float16;
    case torch::kBFloat16:
      return dtype::bfloat16;
    case torch::kShort:
      return dtype::int16;
    case torch::kChar:
      return dtype::int8;
    case torch::kByte:
      return dtype::uint8;
    case torch::kBool:
      return dtype::boolean;
    default:
      throw std::invalid_argument(fmt::format("hvd::{}: tensors of {} are not supported (float, "
                                              "double, half, bfloat16, int64, int32, int16, int8, "
                                              "uint8, bool)",
                                              call, c10::toString(t.scalar_type())));
  }
}

} // namespace hvactor::hvd::detail
