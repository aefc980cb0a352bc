#pragma once

// hvactor::train's data: columns of numbers, batches, and in-memory
// datasets that a trainer splits among its workers (Ray Data's Dataset, in
// memory). With <hvactor/torch.hpp> a column converts to and from
// torch::Tensor.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace hvactor::train {

// -- columns and datasets ----------------------------------------------------------

enum class dtype : uint8_t { float32 = 0, float64 = 1, int64 = 2 };

/// Bytes per element of `t`.
size_t dtype_size(dtype t) noexcept;
/// "float32", "float64", "int64".
const char* dtype_name(dtype t) noexcept;

/// Selects the adapters' conversions (column_from / column_to) by ADL.
struct column_tag {};

// The adapters declare column_from(const X&, column_tag) -> column and
// column_to(const column&, std::type_identity<X>) -> X in this namespace;
// argument-dependent lookup finds them where they are included.

/// One named column of a dataset or a batch: rows of `inner_shape`
/// elements of one dtype, contiguous and row-major. Slices share the bytes.
/// With <hvactor/torch.hpp>, a torch::Tensor converts to a column (its first
/// dimension is the rows) and a column to a torch::Tensor (a copy).
class column {
public:
  column() = default;
  column(std::vector<float> xs);
  column(std::vector<double> xs);
  column(std::vector<int64_t> xs);
  /// `bytes` holds rows x product(inner_shape) elements of `type`.
  column(dtype type, std::vector<int64_t> inner_shape, std::vector<std::byte> bytes);
  /// The same over `size` bytes that `bytes` keeps alive (a mapped file, a
  /// buffer other columns share): no copy. `bytes` must be aligned for
  /// `type`.
  column(dtype type, std::vector<int64_t> inner_shape, std::shared_ptr<const std::byte> bytes,
         size_t size);

  /// From any type an adapter converts (torch::Tensor with hvactor/torch.hpp).
  template <class T>
    requires requires(const T& x) {
      { column_from(x, column_tag{}) } -> std::same_as<column>;
    }
  column(const T& x) : column(column_from(x, column_tag{})) {
  }

  /// To any type an adapter converts to (torch::Tensor with hvactor/torch.hpp).
  template <class T>
    requires requires(const column& c) {
      { column_to(c, std::type_identity<T>{}) } -> std::same_as<T>;
    }
  operator T() const {
    return column_to(*this, std::type_identity<T>{});
  }

  dtype type() const noexcept {
    return type_;
  }
  int64_t rows() const noexcept {
    return rows_;
  }
  /// Shape of one row (empty for a column of scalars).
  const std::vector<int64_t>& inner_shape() const noexcept {
    return inner_;
  }
  /// {rows, inner_shape...}.
  std::vector<int64_t> shape() const;
  /// Elements per row.
  int64_t row_elements() const noexcept;
  size_t row_bytes() const noexcept;
  size_t size_bytes() const noexcept {
    return static_cast<size_t>(rows_) * row_bytes();
  }
  const std::byte* data() const noexcept;

  /// The elements as T (float for float32, double for float64, int64_t for
  /// int64); std::invalid_argument naming both types otherwise.
  template <class T>
  std::span<const T> values() const {
    check_type(sizeof(T), std::is_floating_point_v<T>);
    return {reinterpret_cast<const T*>(data()), static_cast<size_t>(rows_ * row_elements())};
  }

  /// Rows [begin, end), sharing the bytes.
  column slice(int64_t begin, int64_t end) const;
  /// The rows at `indices` (in that order), copied.
  column gather(const std::vector<int64_t>& indices) const;
  /// The same numbers as `to` (a copy; *this when already `to`).
  column cast(dtype to) const;

private:
  void check_type(size_t size, bool floating) const;
  void check_shape(size_t size);

  dtype type_ = dtype::float64;
  std::vector<int64_t> inner_;
  int64_t rows_ = 0;
  std::shared_ptr<const std::byte> bytes_;
  size_t offset_ = 0;
};

/// One batch of a shard: the same rows of every column, by name.
class batch {
public:
  batch() = default;
  explicit batch(std::map<std::string, column> columns) : columns_(std::move(columns)) {
  }
  /// The column `name`; std::out_of_range naming the columns there are.
  const column& operator[](const std::string& name) const;
  int64_t rows() const noexcept;
  const std::map<std::string, column>& columns() const noexcept {
    return columns_;
  }

private:
  std::map<std::string, column> columns_;
};

/// iter_batches options (Ray's iter_torch_batches): shuffle the shard's rows
/// with `seed` (the same seed gives the same order), drop a last batch
/// smaller than batch_size, convert every column to `dtype` (Ray's
/// `dtypes=torch.float` is `.dtype = train::dtype::float32`).
struct batch_options {
  bool shuffle = false;
  int64_t seed = 0;
  bool drop_last = false;
  std::optional<train::dtype> dtype;
};

/// Batches of a dataset or shard, built as the loop advances (an input range).
class batch_range {
public:
  class iterator {
  public:
    using value_type = train::batch;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    const train::batch& operator*() const {
      return current_;
    }
    const train::batch* operator->() const {
      return &current_;
    }
    iterator& operator++();
    void operator++(int) {
      ++*this;
    }
    friend bool operator==(const iterator& a, const iterator& b) noexcept {
      return a.range_ == b.range_ && a.next_ == b.next_;
    }

  private:
    friend class batch_range;
    void load();
    const batch_range* range_ = nullptr;
    int64_t next_ = 0;
    train::batch current_;
  };

  iterator begin() const;
  iterator end() const;
  /// Number of batches.
  int64_t size() const noexcept;

private:
  friend class dataset;
  std::map<std::string, column> columns_;
  std::vector<int64_t> order_; // row order when shuffled
  int64_t rows_ = 0;
  int64_t batch_size_ = 1;
  bool drop_last_ = false;
  std::optional<dtype> dtype_;
};

/// How a dataset is split among `world_size` ranks (Ray Train's DataConfig;
/// Ray Data's `split(n, equal=...)`). Both splits are contiguous, in rank
/// order, and never duplicate a row.
struct data_config {
  /// true (the default; Ray Train splits with `streaming_split(n,
  /// equal=True)`): every rank gets rows / world_size rows, rank r the rows
  /// [r * q, (r + 1) * q) with q = rows / world_size; the last
  /// rows % world_size rows are dropped (as Ray's `split(n, equal=True)`),
  /// so every rank runs the same number of batches. Fewer rows than ranks:
  /// every shard is empty.
  /// false: nothing is dropped; shares differ by at most one row, the first
  /// rows % world_size ranks holding one more (100 rows over 3: 34, 33, 33).
  bool equal = true;
};

/// Rows of named columns, all with the same number of rows (Ray Data's
/// Dataset, in memory). On the driver it is what `.datasets` hands the
/// trainer; in a worker, get_dataset_shard() returns this worker's share.
class dataset {
public:
  /// Rows of named numbers, stored as float64 columns; every row must have
  /// the same names (std::invalid_argument naming the row otherwise).
  static dataset from_items(const std::vector<std::map<std::string, double>>& rows);
  /// Named columns (torch::Tensor converts with hvactor/torch.hpp), the
  /// first dimension of each being the rows; std::invalid_argument when the
  /// row counts differ.
  static dataset from_tensors(std::map<std::string, column> columns);
  /// A CSV file with a header line of column names and numbers in every
  /// other line (float64 columns); std::invalid_argument naming the file and
  /// line for anything else: a header line over 8 MiB, a repeated column
  /// name, a data line with another cell count or over 8 MiB + 64 B per
  /// column, a cell that is not a number. A missing or unreadable file, or a
  /// directory: hvactor::error.
  static dataset from_csv(const std::string& path);

  dataset() = default;
  int64_t count() const noexcept {
    return rows_;
  }
  std::vector<std::string> column_names() const;
  /// The column `name`; std::out_of_range naming the columns there are.
  const column& operator[](const std::string& name) const;
  const std::map<std::string, column>& columns() const noexcept {
    return columns_;
  }

  /// Batches of `batch_size` rows (>= 1, else std::invalid_argument).
  batch_range iter_batches(int64_t batch_size, batch_options opts = {}) const;

  /// Rank `rank`'s share of `world_size`, split as `how` says (default:
  /// equal shares, the last rows % world_size rows dropped); the columns'
  /// bytes are shared. std::invalid_argument unless 0 <= rank < world_size.
  dataset shard(int rank, int world_size, data_config how = {}) const;
  /// Rows [begin, end) of rank `rank` of `world_size`, split as `how` says.
  static std::pair<int64_t, int64_t> shard_bounds(int64_t rows, int rank, int world_size,
                                                  data_config how = {});

  /// The columns as one byte string (how shards travel to the workers) and
  /// back; from_bytes throws hvactor::error on malformed input.
  std::vector<char> to_bytes() const;
  static dataset from_bytes(const std::vector<char>& bytes);
  /// The same over `size` bytes that `bytes` keeps alive: the columns share
  /// them, no copy (each column's bytes start 64-byte aligned in to_bytes'
  /// form; a column that is not aligned there is copied).
  static dataset from_bytes(std::shared_ptr<const std::byte> bytes, size_t size);

private:
  std::map<std::string, column> columns_;
  int64_t rows_ = 0;
};

} // namespace hvactor::train
