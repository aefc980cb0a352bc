#pragma once

// Internal: a checkpoint directory as a stream of chunks, read from disk
// and written to disk one chunk at a time, so that neither end holds more
// than the chunks in flight, whatever the checkpoint's size.
//
// Every chunk is at most `chunk_bytes` and a run of whole records
// (little-endian; the first chunk starts with "HVCS" and u32 version 1):
//
//   u8 1  directory   str path
//   u8 2  file        str path, u64 size     then its bytes as records 3 and 5
//   u8 3  data        u32 n, n bytes         the current file's next bytes
//   u8 5  hole        u64 n                  n zero bytes the source had as a hole
//   u8 4  end         u64 entries, u64 file bytes,
//                     str SHA-256 (hex) of every stream byte before this record
//
// Paths are relative, '/'-separated plain names (no "..", ".", root or
// empty part); directories come before what is in them. The sink refuses,
// with an hvactor::error naming what is wrong, a file given more or fewer
// bytes than it announced, a path that would leave its directory or that
// exists already, a chunk over the bound, anything after the end, and a
// digest or count that does not match; the caller then removes what was
// written. Holes (SEEK_HOLE) travel as their length and stay holes.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/internal/bulk_bytes.hpp"
#include "base/internal/file_digest.hpp"
#include "base/internal/knobs_jobs.hpp"

namespace hvactor::train {

/// Reads a directory as chunks. Symbolic links and other special files are
/// skipped (with a warning).
class checkpoint_source {
public:
  /// hvactor::error naming `dir` when it is not a readable directory.
  explicit checkpoint_source(const std::filesystem::path& dir,
                             size_t chunk_bytes = knobs::ship_chunk_bytes);
  ~checkpoint_source();
  checkpoint_source(const checkpoint_source&) = delete;
  checkpoint_source& operator=(const checkpoint_source&) = delete;

  /// The next chunk; nullopt once the chunk with the end record was given.
  /// hvactor::error when a file cannot be read or changed size meanwhile.
  std::optional<std::vector<char>> next();
  /// The same into `out` (its memory reused: fresh pages cost a fault
  /// each); false once the end was given.
  bool next(bulk_bytes& out);

private:
  struct entry {
    std::string rel;
    bool is_dir;
    std::filesystem::path path;
  };
  bool add_entry(bulk_bytes& out);
  bool add_file_bytes(bulk_bytes& out);
  void close_file();

  std::filesystem::path dir_;
  size_t chunk_bytes_;
  std::vector<entry> entries_;
  size_t next_entry_ = 0;
  int fd_ = -1;
  std::string file_;
  uint64_t size_ = 0;
  uint64_t offset_ = 0;
  uint64_t total_ = 0;
  bool started_ = false;
  bool done_ = false;
  sha256_stream digest_;
};

/// Writes a stream's files under a directory, chunk by chunk.
class checkpoint_sink {
public:
  /// `dir` is created (its parent must exist) and must not exist yet.
  explicit checkpoint_sink(std::filesystem::path dir,
                           size_t chunk_bytes = knobs::ship_chunk_bytes);
  ~checkpoint_sink();
  checkpoint_sink(const checkpoint_sink&) = delete;
  checkpoint_sink& operator=(const checkpoint_sink&) = delete;

  /// Writes the chunk's records; after the end record every file is synced.
  void feed(std::string_view chunk);
  template <class Alloc>
  void feed(const std::vector<char, Alloc>& chunk) {
    feed(std::string_view{chunk.data(), chunk.size()});
  }
  /// The end record came and matched.
  bool complete() const noexcept {
    return done_;
  }
  uint64_t file_bytes() const noexcept {
    return total_;
  }

private:
  void open_file(const std::string& rel, uint64_t size);
  void finish_file();
  void write_data(std::string_view bytes);

  std::filesystem::path dir_;
  size_t chunk_bytes_;
  bool started_ = false;
  bool done_ = false;
  int fd_ = -1;
  std::string file_;
  uint64_t size_ = 0;
  uint64_t written_ = 0;
  uint64_t synced_ = 0;
  uint64_t entries_ = 0;
  uint64_t total_ = 0;
  sha256_stream digest_;
};

/// The same machine's route: copies the checkpoint directory `src` into
/// `dst` (created; must not exist) as the driver, with copy_file_range
/// (data segments only: holes stay holes), each file synced. Only files
/// and directories this process's user owns are copied, symbolic links
/// skipped as the stream does; hvactor::error naming the file otherwise.
/// The bytes a file had when opened are copied; a file that shrinks
/// meanwhile is an error. Returns the bytes copied.
uint64_t copy_checkpoint_dir(const std::filesystem::path& src, const std::filesystem::path& dst);

} // namespace hvactor::train
