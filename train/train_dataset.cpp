// hvactor::train's datasets: from rows, tensors and CSV files, their
// shards, and their byte form.

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "hvactor/train.hpp"
#include "train/internal/byte_codec.hpp"
#include "train/internal/shard_bytes.hpp"
#include "train/internal/train_protocol.hpp"

namespace hvactor::train {

// -- dataset -----------------------------------------------------------------------

dataset dataset::from_items(const std::vector<std::map<std::string, double>>& rows) {
  std::map<std::string, std::vector<double>> cols;
  if (!rows.empty())
    for (auto& [name, _] : rows.front())
      cols[name].reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    bool same = rows[i].size() == cols.size();
    for (auto& [name, x] : rows[i]) {
      auto it = cols.find(name);
      if (it == cols.end()) {
        same = false;
        break;
      }
      it->second.push_back(x);
    }
    if (!same)
      throw std::invalid_argument(fmt::format(
        "train::dataset::from_items: row {} does not have the names of row 0", i));
  }
  std::map<std::string, column> out;
  for (auto& [name, xs] : cols)
    out.emplace(name, column{std::move(xs)});
  dataset d = from_tensors(std::move(out));
  d.rows_ = static_cast<int64_t>(rows.size());
  return d;
}

dataset dataset::from_tensors(std::map<std::string, column> columns) {
  dataset d;
  bool first = true;
  for (auto& [name, col] : columns) {
    if (name.empty())
      throw std::invalid_argument("train::dataset: a column without a name");
    if (first)
      d.rows_ = col.rows();
    else if (col.rows() != d.rows_)
      throw std::invalid_argument(fmt::format(
        "train::dataset: column '{}' has {} rows, the others {}", name, col.rows(), d.rows_));
    first = false;
  }
  d.columns_ = std::move(columns);
  return d;
}

namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  std::istringstream in{line};
  while (std::getline(in, cell, ','))
    cells.push_back(cell);
  if (!line.empty() && line.back() == ',')
    cells.emplace_back();
  return cells;
}

// The longest header line from_csv reads (a bound on what a file can make it
// allocate before it knows the columns).
constexpr size_t max_csv_header_bytes = size_t{8} << 20;

// std::getline that reads at most `limit` bytes: false at the end of the
// input; true with `in` failed when the line is longer (nothing beyond the
// limit is held in memory).
bool read_bounded_line(std::istream& in, std::string& line, size_t limit) {
  line.clear();
  std::istreambuf_iterator<char> it{in}, end;
  if (it == end)
    return false;
  for (; it != end; ++it) {
    char c = *it;
    if (c == '\n') {
      ++it;
      return true;
    }
    if (line.size() == limit) {
      in.setstate(std::ios::failbit);
      return true;
    }
    line.push_back(c);
  }
  return true;
}

std::string trim(std::string s) {
  auto b = s.find_first_not_of(" \t\r\"");
  auto e = s.find_last_not_of(" \t\r\"");
  return b == std::string::npos ? std::string{} : s.substr(b, e - b + 1);
}

} // namespace

dataset dataset::from_csv(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw error(fmt::format("train::dataset::from_csv: cannot read '{}': it is a directory, "
                            "not a CSV file",
                            path));
  std::ifstream in{path};
  if (!in)
    throw error(fmt::format("train::dataset::from_csv: cannot read '{}'", path));
  std::string line;
  size_t line_no = 0;
  std::vector<std::string> names;
  while (names.empty() && read_bounded_line(in, line, max_csv_header_bytes)) {
    ++line_no;
    if (in.fail())
      throw std::invalid_argument(fmt::format(
        "train::dataset::from_csv: {}:{}: the header line is longer than {} bytes", path,
        line_no, max_csv_header_bytes));
    if (trim(line).empty())
      continue;
    for (auto& c : split_csv_line(line))
      names.push_back(trim(c));
  }
  if (names.empty())
    throw std::invalid_argument(fmt::format(
      "train::dataset::from_csv: '{}' has no header line (the file is empty or blank)", path));
  std::unordered_set<std::string_view> seen;
  seen.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty())
      throw std::invalid_argument(fmt::format(
        "train::dataset::from_csv: {}:{}: column {} has no name", path, line_no, i + 1));
    if (!seen.insert(names[i]).second)
      throw std::invalid_argument(fmt::format(
        "train::dataset::from_csv: {}:{}: column '{}' appears twice", path, line_no,
        names[i]));
  }
  // A data line holds one number per column: bounded by the header's width.
  const size_t max_row_bytes = max_csv_header_bytes + 64 * names.size();
  std::vector<std::vector<double>> cols(names.size());
  while (read_bounded_line(in, line, max_row_bytes)) {
    ++line_no;
    if (in.fail())
      throw std::invalid_argument(fmt::format(
        "train::dataset::from_csv: {}:{}: the line is longer than {} bytes ({} columns)", path,
        line_no, max_row_bytes, names.size()));
    if (trim(line).empty())
      continue;
    auto cells = split_csv_line(line);
    if (cells.size() != names.size())
      throw std::invalid_argument(fmt::format(
        "train::dataset::from_csv: {}:{}: {} cells, the header has {}", path, line_no,
        cells.size(), names.size()));
    for (size_t i = 0; i < cells.size(); ++i) {
      auto text = trim(cells[i]);
      char* end = nullptr;
      double x = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size())
        throw std::invalid_argument(fmt::format(
          "train::dataset::from_csv: {}:{}: '{}' in column '{}' is not a number", path, line_no,
          text, names[i]));
      cols[i].push_back(x);
    }
  }
  std::map<std::string, column> out;
  for (size_t i = 0; i < names.size(); ++i)
    out.emplace(names[i], column{std::move(cols[i])});
  return from_tensors(std::move(out));
}

std::vector<std::string> dataset::column_names() const {
  std::vector<std::string> out;
  for (auto& [name, _] : columns_)
    out.push_back(name);
  return out;
}

const column& dataset::operator[](const std::string& name) const {
  auto it = columns_.find(name);
  if (it == columns_.end())
    no_such_column(columns_, name, "train::dataset");
  return it->second;
}

batch_range dataset::iter_batches(int64_t batch_size, batch_options opts) const {
  if (batch_size < 1)
    throw std::invalid_argument(
      fmt::format("iter_batches: batch_size must be >= 1: Got {}.", batch_size));
  batch_range r;
  r.columns_ = columns_;
  r.rows_ = rows_;
  r.batch_size_ = batch_size;
  r.drop_last_ = opts.drop_last;
  r.dtype_ = opts.dtype;
  if (opts.shuffle) {
    r.order_.resize(static_cast<size_t>(rows_));
    std::iota(r.order_.begin(), r.order_.end(), int64_t{0});
    std::mt19937_64 rng{static_cast<uint64_t>(opts.seed)};
    // Fisher-Yates with the engine's raw output, so that a seed gives the
    // same order with every standard library.
    for (size_t i = r.order_.size(); i > 1; --i)
      std::swap(r.order_[i - 1], r.order_[rng() % i]);
  }
  return r;
}

std::pair<int64_t, int64_t> dataset::shard_bounds(int64_t rows, int rank, int world_size,
                                                  data_config how) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument(
      fmt::format("train::dataset::shard: rank {} of a world of {}", rank, world_size));
  auto base = rows / world_size;
  if (how.equal) // the last rows % world_size rows belong to no rank
    return {rank * base, (rank + 1) * base};
  auto extra = rows % world_size;
  auto begin = rank * base + std::min<int64_t>(rank, extra);
  auto end = begin + base + (rank < extra ? 1 : 0);
  return {begin, end};
}

dataset dataset::shard(int rank, int world_size, data_config how) const {
  auto [begin, end] = shard_bounds(rows_, rank, world_size, how);
  dataset d;
  for (auto& [name, col] : columns_)
    d.columns_.emplace(name, col.slice(begin, end));
  d.rows_ = end - begin;
  return d;
}

// Byte form: "HVDS", u32 version, u64 rows, u32 columns; per column: name,
// u8 dtype, u32 rank of a row's shape, its i64 dims, u64 byte count, bytes.
// The byte form, version 2: "HVDS", 2, rows, the column count, then per
// column its name, dtype, inner shape and byte size, zeros up to the next
// multiple of column_alignment from the start, and its bytes. Version 1
// (no zeros) is still read.
namespace {
constexpr size_t column_alignment = 64;
} // namespace

std::vector<char> dataset::to_bytes() const {
  byte_writer w;
  w.raw("HVDS", 4);
  w.u32(2);
  w.u64(static_cast<uint64_t>(rows_));
  w.u32(static_cast<uint32_t>(columns_.size()));
  for (auto& [name, col] : columns_) {
    w.str(name);
    w.u8(static_cast<uint8_t>(col.type()));
    w.u32(static_cast<uint32_t>(col.inner_shape().size()));
    for (auto d : col.inner_shape())
      w.u64(static_cast<uint64_t>(d));
    w.u64(col.size_bytes());
    auto pad = (column_alignment - w.size() % column_alignment) % column_alignment;
    std::memset(w.grow(pad), 0, pad);
    w.raw(reinterpret_cast<const char*>(col.data()), col.size_bytes());
  }
  return w.take();
}

dataset dataset::from_bytes(const std::vector<char>& bytes) {
  auto copy = fresh_bytes(bytes.size());
  if (!bytes.empty())
    std::memcpy(copy.data.get(), bytes.data(), bytes.size());
  return from_bytes(std::move(copy.data), copy.size);
}

dataset dataset::from_bytes(std::shared_ptr<const std::byte> bytes, size_t size) {
  const char* base = reinterpret_cast<const char*>(bytes.get());
  byte_reader r{std::string_view{base, size}, "a dataset shard"};
  if (r.raw(4) != "HVDS")
    throw error("a dataset shard: not hvactor's dataset format");
  auto version = r.u32();
  if (version != 1 && version != 2)
    throw error(fmt::format("a dataset shard: format version {} (this build reads 1 and 2)",
                            version));
  auto rows = static_cast<int64_t>(r.u64());
  auto n = r.u32();
  std::map<std::string, column> cols;
  for (uint32_t i = 0; i < n; ++i) {
    auto name = r.str();
    auto type = r.u8();
    if (type > static_cast<uint8_t>(dtype::int64))
      throw error("a dataset shard: unknown dtype");
    auto dims = r.u32();
    if (dims > 16)
      throw error("a dataset shard: a row of more than 16 dimensions");
    std::vector<int64_t> inner;
    for (uint32_t d = 0; d < dims; ++d)
      inner.push_back(static_cast<int64_t>(r.u64()));
    auto col_size = r.u64();
    if (version == 2)
      r.raw((column_alignment - r.position() % column_alignment) % column_alignment);
    auto data = r.raw(col_size);
    auto* first = reinterpret_cast<const std::byte*>(data.data());
    auto dt = static_cast<dtype>(type);
    try {
      column c = reinterpret_cast<uintptr_t>(first) % dtype_size(dt) == 0
                   ? column{dt, std::move(inner), std::shared_ptr<const std::byte>{bytes, first},
                            data.size()}
                   : column{dt, std::move(inner), std::vector<std::byte>(first, first + data.size())};
      if (c.row_bytes() != 0 && c.rows() != rows)
        throw error("a dataset shard: columns of different lengths");
      cols.emplace(std::move(name), std::move(c));
    } catch (const std::invalid_argument& e) {
      throw error(std::string{"a dataset shard: "} + e.what());
    }
  }
  r.expect_end();
  auto d = from_tensors(std::move(cols));
  d.rows_ = rows;
  return d;
}

} // namespace hvactor::train
