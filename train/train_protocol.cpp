// hvactor::train's wire formats: store keys, metrics, checkpoint archives,
// chunked values (internal/train_protocol.hpp).

#include "train/internal/train_protocol.hpp"

#include <fstream>

#include <fmt/format.h>

#include "train/internal/byte_codec.hpp"
#include "base/internal/knobs.hpp"
#include "base/internal/log.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

namespace keys {

std::string data(const std::string& name, int rank) {
  return fmt::format("data/{}/{}", name, rank);
}

} // namespace keys

namespace {

void write_values(byte_writer& w, const std::map<std::string, value>& m) {
  w.u32(static_cast<uint32_t>(m.size()));
  for (auto& [k, v] : m) {
    w.str(k);
    if (v.is_int()) {
      w.u8(0);
      w.u64(static_cast<uint64_t>(v.as_int()));
    } else if (v.is_double()) {
      w.u8(1);
      w.f64(v.as_double());
    } else {
      w.u8(2);
      w.str(v.as_string());
    }
  }
}

std::map<std::string, value> read_values(byte_reader& r) {
  std::map<std::string, value> out;
  auto n = r.u32();
  for (uint32_t i = 0; i < n; ++i) {
    auto k = r.str();
    switch (r.u8()) {
      case 0:
        out[k] = static_cast<int64_t>(r.u64());
        break;
      case 1:
        out[k] = r.f64();
        break;
      case 2:
        out[k] = r.str();
        break;
      default:
        throw error("train metrics: unknown value type");
    }
  }
  return out;
}

} // namespace

std::vector<char> encode_values(const std::map<std::string, value>& m) {
  byte_writer w;
  write_values(w, m);
  return w.take();
}

std::map<std::string, value> decode_values(const std::vector<char>& bytes) {
  byte_reader r{bytes, "train values"};
  auto out = read_values(r);
  r.expect_end();
  return out;
}

std::vector<char> encode_report(const metrics& m, bool has_checkpoint) {
  byte_writer w;
  w.u8(has_checkpoint ? 1 : 0);
  write_values(w, m);
  return w.take();
}

std::pair<metrics, bool> decode_report(const std::vector<char>& bytes) {
  byte_reader r{bytes, "a train report"};
  bool ckpt = r.u8() != 0;
  auto m = read_values(r);
  r.expect_end();
  return {std::move(m), ckpt};
}

// Archive: "HVCK", u32 version, u32 entries; per entry: u8 kind (0 file,
// 1 directory), relative path, and for a file u64 size + bytes.
std::vector<char> archive_directory(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw error(fmt::format("checkpoint: '{}' is not a directory", dir.string()));
  struct entry {
    std::string rel;
    bool is_dir;
    fs::path path;
  };
  std::vector<entry> entries;
  fs::recursive_directory_iterator it{dir, fs::directory_options::none, ec}, end;
  if (ec)
    throw error(fmt::format("checkpoint: cannot read '{}': {}", dir.string(), ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec)
      throw error(fmt::format("checkpoint: cannot read '{}': {}", dir.string(), ec.message()));
    auto st = it->symlink_status(ec);
    auto rel = fs::relative(it->path(), dir, ec).generic_string();
    if (fs::is_directory(st))
      entries.push_back({rel, true, it->path()});
    else if (fs::is_regular_file(st))
      entries.push_back({rel, false, it->path()});
    else
      log::warn("checkpoint: skipping '{}' (not a regular file or directory)",
                it->path().string());
  }
  // Directories before the files in them.
  std::sort(entries.begin(), entries.end(),
            [](const entry& a, const entry& b) { return a.rel < b.rel; });
  byte_writer w;
  w.raw("HVCK", 4);
  w.u32(1);
  w.u32(static_cast<uint32_t>(entries.size()));
  for (auto& e : entries) {
    w.u8(e.is_dir ? 1 : 0);
    w.str(e.rel);
    if (e.is_dir)
      continue;
    // Straight into the archive: one read, no per-character copying.
    std::ifstream in{e.path, std::ios::binary | std::ios::ate};
    if (!in)
      throw error(fmt::format("checkpoint: cannot read '{}'", e.path.string()));
    auto size = static_cast<uint64_t>(in.tellg());
    in.seekg(0);
    w.u64(size);
    auto* dst = w.grow(static_cast<size_t>(size));
    if (size > 0 && !in.read(dst, static_cast<std::streamsize>(size)))
      throw error(fmt::format("checkpoint: cannot read '{}' (changed while it was archived?)",
                              e.path.string()));
  }
  return w.take();
}

namespace {

// A relative path of plain names: no root, no "..", no ".", no empty part.
bool safe_relative(const std::string& rel) {
  if (rel.empty() || rel.front() == '/' || rel.find('\0') != std::string::npos)
    return false;
  for (auto& part : fs::path{rel})
    if (part.empty() || part == ".." || part == "." || part.has_root_path())
      return false;
  return true;
}

} // namespace

void extract_archive(const std::vector<char>& bytes, const fs::path& dir) {
  byte_reader r{bytes, "a checkpoint archive"};
  if (r.raw(4) != "HVCK" || r.u32() != 1)
    throw error("a checkpoint archive: not hvactor's checkpoint format");
  auto n = r.u32();
  fs::create_directories(dir);
  for (uint32_t i = 0; i < n; ++i) {
    bool is_dir = r.u8() != 0;
    auto rel = r.str();
    if (!safe_relative(rel))
      throw error(fmt::format("a checkpoint archive: unsafe path '{}'", rel));
    auto path = dir / rel;
    if (is_dir) {
      fs::create_directories(path);
      continue;
    }
    auto size = r.u64();
    auto data = r.raw(size);
    fs::create_directories(path.parent_path());
    std::ofstream out{path, std::ios::binary | std::ios::trunc};
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out)
      throw error(fmt::format("checkpoint: cannot write '{}'", path.string()));
  }
  r.expect_end();
}

void put_chunked(const set_batch& set, const std::string& key, const std::vector<char>& value) {
  auto chunk = knobs::ship_chunk_bytes;
  auto count = std::max<size_t>(1, (value.size() + chunk - 1) / chunk);
  std::vector<std::pair<std::string, std::vector<char>>> batch;
  for (size_t i = 0; i < count; ++i) {
    auto begin = std::min(value.size(), i * chunk);
    auto end = std::min(value.size(), begin + chunk);
    batch.emplace_back(fmt::format("{}#{}", key, i),
                       std::vector<char>(value.begin() + static_cast<ptrdiff_t>(begin),
                                         value.begin() + static_cast<ptrdiff_t>(end)));
    if (batch.size() == knobs::train_chunks_in_flight || i + 1 == count)
      set(std::exchange(batch, {}));
  }
  byte_writer w;
  w.u64(count);
  batch.emplace_back(key + "#n", w.take());
  set(std::move(batch));
}

std::vector<char> get_chunked(const get_batch& get, const std::string& key) {
  auto head = std::move(get({key + "#n"}).at(0));
  byte_reader r{head, "a chunked value"};
  auto count = r.u64();
  // Each chunk is at most ship_chunk_bytes, and a value at most the largest
  // message: a malformed count cannot make us wait for chunks forever.
  if (count == 0 || count > knobs::max_message_bytes / knobs::ship_chunk_bytes * 64)
    throw error(fmt::format("'{}': a malformed chunk count {}", key, count));
  std::vector<char> out;
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < count; ++i) {
    keys.push_back(fmt::format("{}#{}", key, i));
    if (keys.size() == knobs::train_chunks_in_flight || i + 1 == count) {
      for (auto& part : get(std::exchange(keys, {})))
        out.insert(out.end(), part.begin(), part.end());
    }
  }
  return out;
}

} // namespace hvactor::train
