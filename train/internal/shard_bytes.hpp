#pragma once

// Internal: where a dataset shard's bytes live in a worker. The columns of
// a fetched shard share one buffer (dataset::from_bytes over shared bytes),
// so the bytes are written once: into fresh memory as they arrive on the
// driver's data link, or not at all when the shard is a file of the
// driver's machine (mapped).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

namespace hvactor::train {

struct shared_bytes {
  std::shared_ptr<std::byte> data;
  size_t size = 0;
};

/// `size` bytes of fresh anonymous memory, page-aligned, with transparent
/// huge pages asked for from 2 MiB (one fault per 2 MiB instead of per
/// 4 KiB); unmapped when the last owner goes. hvactor::error when the
/// memory cannot be had.
shared_bytes fresh_bytes(size_t size);

/// The regular file at `path`, mapped read-only (private, its pages
/// populated at once); hvactor::error naming the path otherwise.
shared_bytes map_file(const std::string& path);

/// A fresh 0700 directory for a fit's shard files under `root` (the temp
/// dir): "hvactor-train-shards-<pid namespace>-<pid>-XXXXXX". The folders
/// of drivers that are gone (killed before their clean-up ran) are swept
/// first (sweep_shard_dirs). hvactor::error when it cannot be made.
std::filesystem::path make_shard_dir(const std::filesystem::path& root);

/// Removes the shard folders under `root` whose driver, in this pid
/// namespace, no longer exists, when they are real directories of this
/// user; returns how many.
size_t sweep_shard_dirs(const std::filesystem::path& root);

/// The shard file `dir`/`dataset`/`rank` opened for reading (not through a
/// symbolic link) and its size, as the driver serves it on its data link;
/// the caller closes it. hvactor::error when there is no such regular
/// file.
std::pair<int, uint64_t> open_shard_file(const std::string& dir, uint32_t dataset, int32_t rank);

} // namespace hvactor::train
