// hvactor::train's values, columns and batches.

#include <algorithm>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "hvactor/train.hpp"
#include "train/internal/train_protocol.hpp"

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
  check_shape(bytes.size());
  auto owner = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
  bytes_ = std::shared_ptr<const std::byte>{owner, owner->data()};
}

column::column(dtype type, std::vector<int64_t> inner_shape, std::shared_ptr<const std::byte> bytes,
               size_t size)
    : type_(type), inner_(std::move(inner_shape)) {
  check_shape(size);
  if (size != 0 && !bytes)
    throw std::invalid_argument("train::column: no bytes for a column of rows");
  if (reinterpret_cast<uintptr_t>(bytes.get()) % dtype_size(type) != 0)
    throw std::invalid_argument("train::column: bytes not aligned for the column's dtype");
  bytes_ = std::move(bytes);
}

// Sets rows_ from a byte size; std::invalid_argument for a bad type, shape
// or size.
void column::check_shape(size_t size) {
  auto type = type_;
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
    if (size != 0)
      throw std::invalid_argument("train::column: bytes for rows of no elements");
    rows_ = 0;
  } else {
    if (size % row != 0)
      throw std::invalid_argument(fmt::format(
        "train::column: {} bytes are not a whole number of {}-byte rows", size, row));
    rows_ = static_cast<int64_t>(size / row);
  }
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
  return bytes_ ? bytes_.get() + offset_ : nullptr;
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

void no_such_column(const std::map<std::string, column>& columns, const std::string& name,
                    const char* what) {
  std::string names;
  for (auto& [n, _] : columns)
    names += (names.empty() ? "'" : ", '") + n + "'";
  throw std::out_of_range(fmt::format("{}: no column '{}' (it has {})", what, name,
                                      names.empty() ? "none" : names));
}

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

} // namespace hvactor::train
