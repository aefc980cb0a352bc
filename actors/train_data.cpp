// hvactor::train's data: values, columns, batches, datasets, their shards
// and their byte form.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "hvactor/train.hpp"
#include "internal/byte_codec.hpp"

namespace hvactor::train {

// -- value -------------------------------------------------------------------------

int64_t value::as_int() const {
  if (auto* i = std::get_if<int64_t>(&v_))
    return *i;
  throw std::invalid_argument("train::value: " + to_string() + " is not an integer");
}

double value::as_double() const {
  if (auto* i = std::get_if<int64_t>(&v_))
    return static_cast<double>(*i);
  if (auto* d = std::get_if<double>(&v_))
    return *d;
  throw std::invalid_argument("train::value: '" + std::get<std::string>(v_)
                              + "' is a text, not a number");
}

const std::string& value::as_string() const {
  if (auto* s = std::get_if<std::string>(&v_))
    return *s;
  throw std::invalid_argument("train::value: " + to_string() + " is a number, not a text");
}

std::string value::to_string() const {
  if (auto* i = std::get_if<int64_t>(&v_))
    return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v_))
    return fmt::format("{:.6g}", *d);
  return std::get<std::string>(v_);
}

// -- column ------------------------------------------------------------------------

size_t dtype_size(dtype t) noexcept {
  return t == dtype::float32 ? 4 : 8;
}

const char* dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::float32:
      return "float32";
    case dtype::float64:
      return "float64";
    case dtype::int64:
      return "int64";
  }
  return "?";
}

namespace {

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& xs) {
  std::vector<std::byte> out(xs.size() * sizeof(T));
  if (!xs.empty())
    std::memcpy(out.data(), xs.data(), out.size());
  return out;
}

int64_t product(const std::vector<int64_t>& dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>{});
}

} // namespace

column::column(std::vector<float> xs) : column(dtype::float32, {}, bytes_of(xs)) {
}

column::column(std::vector<double> xs) : column(dtype::float64, {}, bytes_of(xs)) {
}

column::column(std::vector<int64_t> xs) : column(dtype::int64, {}, bytes_of(xs)) {
}

column::column(dtype type, std::vector<int64_t> inner_shape, std::vector<std::byte> bytes)
    : type_(type), inner_(std::move(inner_shape)) {
  if (static_cast<uint8_t>(type) > static_cast<uint8_t>(dtype::int64))
    throw std::invalid_argument("train::column: unknown dtype "
                                + std::to_string(static_cast<int>(type)));
  // A row's byte size must be a plain int64 (shapes from a peer's bytes
  // could overflow it otherwise).
  int64_t elements = 1, row_size = 0;
  for (auto d : inner_)
    if (d < 0 || __builtin_mul_overflow(elements, d, &elements))
      throw std::invalid_argument("train::column: a row's shape is negative or too large");
  if (__builtin_mul_overflow(elements, static_cast<int64_t>(dtype_size(type)), &row_size))
    throw std::invalid_argument("train::column: a row's shape is too large");
  auto row = row_bytes();
  if (row == 0) {
    if (!bytes.empty())
      throw std::invalid_argument("train::column: bytes for rows of no elements");
    rows_ = 0;
  } else {
    if (bytes.size() % row != 0)
      throw std::invalid_argument(fmt::format(
        "train::column: {} bytes are not a whole number of {}-byte rows", bytes.size(), row));
    rows_ = static_cast<int64_t>(bytes.size() / row);
  }
  bytes_ = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
}

std::vector<int64_t> column::shape() const {
  std::vector<int64_t> out{rows_};
  out.insert(out.end(), inner_.begin(), inner_.end());
  return out;
}

int64_t column::row_elements() const noexcept {
  return product(inner_);
}

size_t column::row_bytes() const noexcept {
  return static_cast<size_t>(row_elements()) * dtype_size(type_);
}

const std::byte* column::data() const noexcept {
  return bytes_ ? bytes_->data() + offset_ : nullptr;
}

void column::check_type(size_t size, bool floating) const {
  bool ok = size == dtype_size(type_) && floating == (type_ != dtype::int64);
  if (!ok)
    throw std::invalid_argument(fmt::format("train::column: the column holds {}, not {}-byte {}",
                                            dtype_name(type_), size,
                                            floating ? "reals" : "integers"));
}

column column::slice(int64_t begin, int64_t end) const {
  if (begin < 0 || end < begin || end > rows_)
    throw std::out_of_range(
      fmt::format("train::column: rows [{}, {}) of a column of {} rows", begin, end, rows_));
  column out = *this;
  out.offset_ = offset_ + static_cast<size_t>(begin) * row_bytes();
  out.rows_ = end - begin;
  return out;
}

column column::gather(const std::vector<int64_t>& indices) const {
  auto row = row_bytes();
  std::vector<std::byte> out(indices.size() * row);
  for (size_t i = 0; i < indices.size(); ++i) {
    auto r = indices[i];
    if (r < 0 || r >= rows_)
      throw std::out_of_range(fmt::format("train::column: row {} of {}", r, rows_));
    std::memcpy(out.data() + i * row, data() + static_cast<size_t>(r) * row, row);
  }
  return column{type_, inner_, std::move(out)};
}

namespace {

template <class From, class To>
void convert(const std::byte* in, std::byte* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    From x;
    std::memcpy(&x, in + i * sizeof(From), sizeof(From));
    To y = static_cast<To>(x);
    std::memcpy(out + i * sizeof(To), &y, sizeof(To));
  }
}

template <class From>
void convert_to(dtype to, const std::byte* in, std::byte* out, size_t n) {
  switch (to) {
    case dtype::float32:
      return convert<From, float>(in, out, n);
    case dtype::float64:
      return convert<From, double>(in, out, n);
    case dtype::int64:
      return convert<From, int64_t>(in, out, n);
  }
}

} // namespace

column column::cast(dtype to) const {
  if (to == type_)
    return *this;
  auto n = static_cast<size_t>(rows_ * row_elements());
  std::vector<std::byte> out(n * dtype_size(to));
  switch (type_) {
    case dtype::float32:
      convert_to<float>(to, data(), out.data(), n);
      break;
    case dtype::float64:
      convert_to<double>(to, data(), out.data(), n);
      break;
    case dtype::int64:
      convert_to<int64_t>(to, data(), out.data(), n);
      break;
  }
  return column{to, inner_, std::move(out)};
}

// -- batch -------------------------------------------------------------------------

namespace {

template <class Map>
[[noreturn]] void no_such_column(const Map& columns, const std::string& name, const char* what) {
  std::string names;
  for (auto& [n, _] : columns)
    names += (names.empty() ? "'" : ", '") + n + "'";
  throw std::out_of_range(fmt::format("{}: no column '{}' (it has {})", what, name,
                                      names.empty() ? "none" : names));
}

} // namespace

const column& batch::operator[](const std::string& name) const {
  auto it = columns_.find(name);
  if (it == columns_.end())
    no_such_column(columns_, name, "train::batch");
  return it->second;
}

int64_t batch::rows() const noexcept {
  return columns_.empty() ? 0 : columns_.begin()->second.rows();
}

int64_t batch_range::size() const noexcept {
  // Without rows + batch_size - 1, which overflows for a huge batch_size.
  return rows_ / batch_size_ + (!drop_last_ && rows_ % batch_size_ != 0 ? 1 : 0);
}

batch_range::iterator batch_range::begin() const {
  iterator it;
  it.range_ = this;
  it.next_ = 0;
  if (size() == 0)
    it.next_ = -1;
  else
    it.load();
  return it;
}

batch_range::iterator batch_range::end() const {
  iterator it;
  it.range_ = this;
  it.next_ = -1;
  return it;
}

void batch_range::iterator::load() {
  auto& r = *range_;
  auto first = next_ * r.batch_size_;
  auto last = std::min(r.rows_, first + r.batch_size_);
  std::map<std::string, column> cols;
  for (auto& [name, col] : r.columns_) {
    column c;
    if (r.order_.empty()) {
      c = col.slice(first, last);
    } else {
      std::vector<int64_t> rows(r.order_.begin() + first, r.order_.begin() + last);
      c = col.gather(rows);
    }
    cols.emplace(name, r.dtype_ ? c.cast(*r.dtype_) : std::move(c));
  }
  current_ = train::batch{std::move(cols)};
}

batch_range::iterator& batch_range::iterator::operator++() {
  if (next_ < 0)
    return *this;
  if (++next_ >= range_->size()) {
    next_ = -1;
    current_ = {};
  } else {
    load();
  }
  return *this;
}

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

std::string trim(std::string s) {
  auto b = s.find_first_not_of(" \t\r\"");
  auto e = s.find_last_not_of(" \t\r\"");
  return b == std::string::npos ? std::string{} : s.substr(b, e - b + 1);
}

} // namespace

dataset dataset::from_csv(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    throw error(fmt::format("train::dataset::from_csv: cannot read '{}'", path));
  std::string line;
  size_t line_no = 0;
  std::vector<std::string> names;
  while (names.empty() && std::getline(in, line)) {
    ++line_no;
    if (trim(line).empty())
      continue;
    for (auto& c : split_csv_line(line))
      names.push_back(trim(c));
  }
  if (names.empty())
    throw std::invalid_argument(
      fmt::format("train::dataset::from_csv: '{}' has no header line", path));
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty())
      throw std::invalid_argument(fmt::format(
        "train::dataset::from_csv: {}:{}: column {} has no name", path, line_no, i + 1));
    for (size_t j = 0; j < i; ++j)
      if (names[i] == names[j])
        throw std::invalid_argument(fmt::format(
          "train::dataset::from_csv: {}:{}: column '{}' appears twice", path, line_no,
          names[i]));
  }
  std::vector<std::vector<double>> cols(names.size());
  while (std::getline(in, line)) {
    ++line_no;
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

std::pair<int64_t, int64_t> dataset::shard_bounds(int64_t rows, int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument(
      fmt::format("train::dataset::shard: rank {} of a world of {}", rank, world_size));
  auto base = rows / world_size;
  auto extra = rows % world_size;
  auto begin = rank * base + std::min<int64_t>(rank, extra);
  auto end = begin + base + (rank < extra ? 1 : 0);
  return {begin, end};
}

dataset dataset::shard(int rank, int world_size) const {
  auto [begin, end] = shard_bounds(rows_, rank, world_size);
  dataset d;
  for (auto& [name, col] : columns_)
    d.columns_.emplace(name, col.slice(begin, end));
  d.rows_ = end - begin;
  return d;
}

// Byte form: "HVDS", u32 version, u64 rows, u32 columns; per column: name,
// u8 dtype, u32 rank of a row's shape, its i64 dims, u64 byte count, bytes.
std::vector<char> dataset::to_bytes() const {
  byte_writer w;
  w.raw("HVDS", 4);
  w.u32(1);
  w.u64(static_cast<uint64_t>(rows_));
  w.u32(static_cast<uint32_t>(columns_.size()));
  for (auto& [name, col] : columns_) {
    w.str(name);
    w.u8(static_cast<uint8_t>(col.type()));
    w.u32(static_cast<uint32_t>(col.inner_shape().size()));
    for (auto d : col.inner_shape())
      w.u64(static_cast<uint64_t>(d));
    w.u64(col.size_bytes());
    w.raw(reinterpret_cast<const char*>(col.data()), col.size_bytes());
  }
  return w.take();
}

dataset dataset::from_bytes(const std::vector<char>& bytes) {
  byte_reader r{bytes, "a dataset shard"};
  if (r.raw(4) != "HVDS" || r.u32() != 1)
    throw error("a dataset shard: not hvactor's dataset format");
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
    auto size = r.u64();
    auto data = r.raw(size);
    std::vector<std::byte> raw(data.size());
    std::memcpy(raw.data(), data.data(), data.size());
    try {
      column c{static_cast<dtype>(type), std::move(inner), std::move(raw)};
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
