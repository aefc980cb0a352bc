#pragma once

// Internal: TensorBoard event files of a run's reports, as Ray Tune's
// TensorBoard logger writes them: storage_path/name/events.out.tfevents.*,
// each report an Event of `training_iteration` with a scalar per numeric
// metric, so that `tensorboard --logdir storage_path/name` plots the run.
//
// The file is a TFRecord stream: per record a little-endian u64 length,
// the masked CRC-32C of those 8 bytes, the bytes (a serialized Event,
// tensorboard.proto), and their masked CRC-32C. The first record carries
// the file version "brain.Event:2".

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "hvactor/train_value.hpp"

namespace hvactor::train::tensorboard {

/// TFRecord's checksum: CRC-32C (Castagnoli), rotated right by 15 bits
/// plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

/// A new event file in a run's directory.
class event_file {
public:
  /// Creates events.out.tfevents.<seconds>.<host>.<pid>.<n> in `dir` and
  /// writes the version record; hvactor::error naming the file when it
  /// cannot.
  explicit event_file(const std::filesystem::path& dir);
  ~event_file();
  event_file(const event_file&) = delete;
  event_file& operator=(const event_file&) = delete;

  /// One Event at `step` and `wall_time` (seconds since the epoch) with a
  /// scalar per int or double metric (strings are skipped); hvactor::error
  /// when the write fails.
  void add_scalars(int64_t step, double wall_time, const metrics& m);

  const std::filesystem::path& path() const noexcept {
    return path_;
  }

private:
  void append(const std::string& record);

  int fd_ = -1;
  std::filesystem::path path_;
};

} // namespace hvactor::train::tensorboard
