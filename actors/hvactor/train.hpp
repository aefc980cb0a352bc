#pragma once

// hvactor::train: Ray Train's HorovodTrainer on the executor (API.md
// "Trainer"). A training loop runs on every worker with its shard of the
// datasets; train::report() sends metrics from every rank and rank 0's
// checkpoint to the driver, which persists it under
// storage_path/name/checkpoint_NNNNNN; a failed worker group restarts from
// the latest checkpoint up to failure.max_failures times.
//
// Tensors: columns hold numbers (float32, float64, int64) without LibTorch;
// with <hvactor/torch.hpp> a column converts to and from torch::Tensor.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "hvactor/executor.hpp"
#include "hvactor/runtime.hpp"
#include "hvactor/settings.hpp"

namespace hvactor::train {

// -- values: metrics and config ----------------------------------------------------

/// Selects the adapters' value conversions (value_from) by ADL.
struct value_tag {};

/// One metric or config value: an integer, a real number or a text (the
/// values of Ray's report and train_loop_config dicts).
class value {
public:
  value() = default;
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  value(T x) : v_(static_cast<int64_t>(x)) {
  }
  value(bool x) : v_(int64_t{x ? 1 : 0}) {
  }
  template <class T>
    requires std::is_floating_point_v<T>
  value(T x) : v_(static_cast<double>(x)) {
  }
  value(std::string x) : v_(std::move(x)) {
  }
  value(const char* x) : v_(std::string{x}) {
  }
  /// From any type an adapter converts (a one-element torch::Tensor with
  /// hvactor/torch.hpp).
  template <class T>
    requires requires(const T& x) {
      { value_from(x, value_tag{}) } -> std::same_as<value>;
    }
  value(const T& x) : value(value_from(x, value_tag{})) {
  }

  bool is_int() const noexcept {
    return std::holds_alternative<int64_t>(v_);
  }
  bool is_double() const noexcept {
    return std::holds_alternative<double>(v_);
  }
  bool is_string() const noexcept {
    return std::holds_alternative<std::string>(v_);
  }

  /// The integer; std::invalid_argument for a real or a text.
  int64_t as_int() const;
  /// The number (an integer converts); std::invalid_argument for a text.
  double as_double() const;
  /// The text; std::invalid_argument for a number.
  const std::string& as_string() const;
  /// As printed in progress lines: integers plainly, reals with 6
  /// significant digits, texts as they are.
  std::string to_string() const;

  const std::variant<int64_t, double, std::string>& get() const noexcept {
    return v_;
  }

  friend bool operator==(const value&, const value&) = default;

private:
  std::variant<int64_t, double, std::string> v_ = int64_t{0};
};

/// What report() sends: name -> value.
using metrics = std::map<std::string, value>;
/// The trainer's `.config`, handed to every worker's loop.
using config = std::map<std::string, value>;

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

  dtype type_ = dtype::float64;
  std::vector<int64_t> inner_;
  int64_t rows_ = 0;
  std::shared_ptr<const std::vector<std::byte>> bytes_;
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

private:
  std::map<std::string, column> columns_;
  int64_t rows_ = 0;
};

// -- checkpoints -------------------------------------------------------------------

/// A directory of files (Ray's Checkpoint.from_directory). report() copies
/// it when called; in a result, or from get_checkpoint(), it is a directory
/// on this machine.
class checkpoint {
public:
  checkpoint() = default;
  static checkpoint from_directory(std::string path);
  const std::string& path() const noexcept {
    return path_;
  }
  explicit operator bool() const noexcept {
    return !path_.empty();
  }
  friend bool operator==(const checkpoint&, const checkpoint&) = default;

private:
  std::string path_;
};

// -- inside the training loop ------------------------------------------------------

/// What a worker's loop knows about its place in the run (Ray's
/// train.get_context()).
class context {
public:
  int world_rank() const noexcept {
    return world_rank_;
  }
  int world_size() const noexcept {
    return world_size_;
  }
  int local_rank() const noexcept {
    return local_rank_;
  }
  int local_world_size() const noexcept {
    return local_world_size_;
  }
  int node_rank() const noexcept {
    return node_rank_;
  }
  /// The trainer's `.config`.
  const train::config& config() const noexcept {
    return config_;
  }
  /// run.name.
  const std::string& experiment_name() const noexcept {
    return name_;
  }
  /// 0 for the first run of the worker group, k after its k-th restart.
  int attempt() const noexcept {
    return attempt_;
  }

private:
  friend struct worker_session;
  int world_rank_ = 0, world_size_ = 1, local_rank_ = 0, local_world_size_ = 1, node_rank_ = 0;
  int attempt_ = 0;
  train::config config_;
  std::string name_;
};

/// The loop's context; std::logic_error outside a training loop.
context& get_context();

/// This worker's shard of the dataset `name` (fetched from the driver on
/// first use); std::invalid_argument naming the datasets there are.
const dataset& get_dataset_shard(const std::string& name);

/// The checkpoint to resume from (after a restart: the latest persisted
/// one; else `.resume_from_checkpoint`), copied into a directory on this
/// machine; empty when there is none.
checkpoint get_checkpoint();

/// Sends `m` to the driver; rank 0's `ckpt` directory is copied there and
/// persisted (other ranks' checkpoints are ignored). Every worker must call
/// it the same number of times: it returns once every rank reported this
/// iteration and the checkpoint is persisted (hvactor::error after
/// knobs::train_report_limit otherwise, naming the missing ranks).
void report(const metrics& m, const checkpoint& ckpt = {});

// -- the driver --------------------------------------------------------------------

struct scaling_config {
  int num_workers = 1;
  bool use_gpu = false;
  int cpus_per_worker = 1;
  std::optional<int> gpus_per_worker;
};

struct failure_config {
  /// Restarts of the worker group after a failure; -1: no limit.
  int max_failures = 0;
};

struct checkpoint_config {
  /// Persisted checkpoints kept (the newest); unset: all.
  std::optional<int> num_to_keep;
};

struct run_config {
  /// Directory under storage_path; default "hvactor_train_<date>_<time>".
  std::string name;
  /// Where checkpoints are persisted, on the driver's machine; default
  /// $HOME/hvactor_results.
  std::string storage_path;
  failure_config failure;
  checkpoint_config checkpoint;
  /// 0: no progress output; 1: a line per report (live on a terminal).
  int verbose = 1;
};

struct trainer_options {
  scaling_config scaling;
  std::map<std::string, dataset> datasets;
  /// How every dataset is split among the workers (HorovodTrainer's
  /// dataset_config): equal shares by default, `{.equal = false}` for
  /// shares that keep every row.
  data_config dataset_config;
  run_config run;
  /// Where a new fit starts from (get_checkpoint() in the loop).
  checkpoint resume_from_checkpoint;
  train::config config;
  /// The executor's settings (timeouts) for each worker group.
  hvactor::settings settings;
};

/// What fit() returns (Ray's Result).
struct result {
  /// Rank 0's last report, with training_iteration (1-based over the whole
  /// fit), attempt, time_total_s and time_this_iter_s added.
  train::metrics metrics;
  /// The latest persisted checkpoint (a directory under path); empty if none.
  train::checkpoint checkpoint;
  /// Every report of rank 0, in order, across restarts.
  std::vector<train::metrics> metrics_history;
  /// Every rank's metrics of each report (by iteration, then rank).
  std::vector<std::vector<train::metrics>> worker_metrics_history;
  /// Why the fit failed (the last worker group's error); null on success.
  std::exception_ptr error;
  /// storage_path/name.
  std::string path;

  /// error's text; empty on success.
  std::string error_message() const;
};

/// "Result(metrics={...}, path=..., checkpoint=Checkpoint(path=...))", or
/// with error=... when the fit failed (Ray's print(result)).
std::ostream& operator<<(std::ostream& out, const result& r);

/// Ray Train's HorovodTrainer: runs `loop` on a group of workers.
class trainer {
public:
  using loop_fn = void (*)(context&);

  /// Validates `opts` (std::invalid_argument): num_workers >= 1,
  /// cpus_per_worker >= 1, gpus_per_worker only with use_gpu,
  /// max_failures >= -1, num_to_keep >= 1, a name without '/', verbose 0 or 1.
  template <class F>
  trainer(runtime& rt, F loop, trainer_options opts)
      : trainer(rt, encode_loop(hvactor::detail::to_pointer(loop)), std::move(opts), 0) {
  }
  ~trainer();

  trainer(const trainer&) = delete;
  trainer& operator=(const trainer&) = delete;

  /// Trains: starts the worker group, runs the loop on every worker,
  /// persists the checkpoints, restarts after failures; returns when the
  /// loop returned on every worker or the failures ran out (result.error).
  /// Errors before any worker ran (placement, invalid datasets) throw.
  result fit();

private:
  static std::string encode_loop(loop_fn fn);
  trainer(runtime& rt, std::string loop, trainer_options opts, int);

  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace hvactor::train
