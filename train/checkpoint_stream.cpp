// A checkpoint directory as a stream of bounded chunks, and back
// (internal/checkpoint_stream.hpp).

#include "train/internal/checkpoint_stream.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "train/internal/byte_codec.hpp"
#include "train/internal/checkpoint_files.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

using namespace checkpoint_files;

namespace {

constexpr char magic[4] = {'H', 'V', 'C', 'S'};
constexpr uint32_t version = 1;
constexpr uint8_t tag_dir = 1, tag_file = 2, tag_data = 3, tag_end = 4, tag_hole = 5;
constexpr size_t max_path = 4096;
// The sink syncs a file each time this much more of it was written.
constexpr uint64_t sync_bytes = uint64_t{8} << 20;
// The end record: tag, two u64, a 64-character hex digest with its length.
constexpr size_t end_record_bytes = 1 + 8 + 8 + 4 + 64;

template <class T, class Bytes>
void put(Bytes& out, T x) {
  char buf[sizeof(T)];
  std::memcpy(buf, &x, sizeof(T));
  out.insert(out.end(), buf, buf + sizeof(T));
}

template <class Bytes>
void put_str(Bytes& out, const std::string& s) {
  put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

// A relative path of plain names: no root, no "..", no ".", no empty part.
bool safe_relative(const std::string& rel) {
  if (rel.empty() || rel.size() > max_path || rel.front() == '/' || rel.back() == '/'
      || rel.find('\0') != std::string::npos || rel.find("//") != std::string::npos)
    return false;
  for (auto& part : fs::path{rel})
    if (part.empty() || part == ".." || part == "." || part.has_root_path())
      return false;
  return true;
}

} // namespace

// --- source -----------------------------------------------------------------

checkpoint_source::checkpoint_source(const fs::path& dir, size_t chunk_bytes)
  : dir_(dir), chunk_bytes_(std::max<size_t>(chunk_bytes, 4096)) {
  for (auto& e : list_tree(dir))
    entries_.push_back({std::move(e.rel), e.is_dir, std::move(e.path)});
}

checkpoint_source::~checkpoint_source() {
  close_file();
}

void checkpoint_source::close_file() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
}

// Adds the next entry's record, or the end record; false when it does not fit.
bool checkpoint_source::add_entry(bulk_bytes& out) {
  if (next_entry_ == entries_.size()) {
    if (chunk_bytes_ - out.size() < end_record_bytes)
      return false;
    digest_.update(out);
    out.push_back(static_cast<char>(tag_end));
    put<uint64_t>(out, entries_.size());
    put<uint64_t>(out, total_);
    put_str(out, digest_.finish());
    done_ = true;
    return true;
  }
  auto& e = entries_[next_entry_];
  if (chunk_bytes_ - out.size() < 1 + 4 + e.rel.size() + 8 + 16) {
    if (out.size() <= 8) // not even in a chunk of its own
      fail(fmt::format("the path '{}' is too long for a chunk", e.rel.substr(0, 200)));
    return false;
  }
  if (e.is_dir) {
    out.push_back(static_cast<char>(tag_dir));
    put_str(out, e.rel);
  } else {
    // O_NONBLOCK: a FIFO put in a file's place fails the S_ISREG check
    // below instead of blocking the open.
    fd_ = ::open(e.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd_ < 0)
      fail_errno("read", e.path.string());
    struct stat st{};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))
      fail(fmt::format("'{}' is not a regular file any more", e.path.string()));
    file_ = e.path.string();
    size_ = static_cast<uint64_t>(st.st_size);
    offset_ = 0;
    total_ += size_;
    out.push_back(static_cast<char>(tag_file));
    put_str(out, e.rel);
    put<uint64_t>(out, size_);
  }
  ++next_entry_;
  return true;
}

// Adds the open file's next bytes (a data or a hole record); false when the
// chunk is full.
bool checkpoint_source::add_file_bytes(bulk_bytes& out) {
  if (offset_ == size_) {
    close_file();
    return true;
  }
  auto off = static_cast<off_t>(offset_);
  // Where the next data is: ENXIO says only a hole is left; a file system
  // without SEEK_DATA has data everywhere.
  auto data = ::lseek(fd_, off, SEEK_DATA);
  if (data < 0 && errno == ENXIO)
    check_not_shorter(fd_, size_, file_);
  uint64_t data_at = data >= 0 ? std::min<uint64_t>(static_cast<uint64_t>(data), size_)
                     : errno == ENXIO ? size_
                                      : offset_;
  if (data_at > offset_) { // a hole: its length only
    if (chunk_bytes_ - out.size() < 1 + 8)
      return false;
    out.push_back(static_cast<char>(tag_hole));
    put<uint64_t>(out, data_at - offset_);
    offset_ = data_at;
    return true;
  }
  auto hole = ::lseek(fd_, off, SEEK_HOLE);
  uint64_t data_end = hole < 0 ? size_ : std::min<uint64_t>(static_cast<uint64_t>(hole), size_);
  size_t room = chunk_bytes_ - out.size();
  if (room < 1 + 4 + 1)
    return false;
  auto n = static_cast<size_t>(std::min<uint64_t>(data_end - offset_, room - 5));
  if (n == 0) // the file changed between the two lseeks
    fail(fmt::format("'{}' changed while it was read", file_));
  out.push_back(static_cast<char>(tag_data));
  put<uint32_t>(out, static_cast<uint32_t>(n));
  auto at = out.size();
  out.resize(at + n);
  size_t got = 0;
  while (got < n) {
    auto r = ::pread(fd_, out.data() + at + got, n - got, off + static_cast<off_t>(got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      fail_errno("read", file_);
    if (r == 0)
      fail(fmt::format("'{}' became shorter while it was read ({} of {} bytes)", file_,
                       offset_ + got, size_));
    got += static_cast<size_t>(r);
  }
  offset_ += n;
  return true;
}

std::optional<std::vector<char>> checkpoint_source::next() {
  bulk_bytes out;
  if (!next(out))
    return std::nullopt;
  return std::vector<char>(out.begin(), out.end());
}

bool checkpoint_source::next(bulk_bytes& out) {
  if (done_)
    return false;
  out.clear();
  out.reserve(chunk_bytes_);
  if (!started_) {
    out.insert(out.end(), magic, magic + 4);
    put<uint32_t>(out, version);
    started_ = true;
  }
  while (!done_) {
    bool added = fd_ >= 0 ? add_file_bytes(out) : add_entry(out);
    if (!added)
      break;
  }
  if (!done_)
    digest_.update(out);
  return true;
}

// --- sink -------------------------------------------------------------------

checkpoint_sink::checkpoint_sink(fs::path dir, size_t chunk_bytes)
  : dir_(std::move(dir)), chunk_bytes_(chunk_bytes) {
  if (::mkdir(dir_.c_str(), 0755) != 0)
    fail_errno("create", dir_.string());
}

checkpoint_sink::~checkpoint_sink() {
  if (fd_ >= 0)
    ::close(fd_);
}

void checkpoint_sink::open_file(const std::string& rel, uint64_t size) {
  auto path = dir_ / rel;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    fail_errno("create", path.string());
  file_ = path.string();
  size_ = size;
  written_ = 0;
  synced_ = 0;
  ++entries_;
  total_ += size;
  if (size == 0)
    finish_file();
}

void checkpoint_sink::finish_file() {
  // Holes at the end: the size makes them.
  if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0 || ::fsync(fd_) != 0)
    fail_errno("write", file_);
  ::close(fd_);
  fd_ = -1;
}

// The current file's next bytes, at written_.
void checkpoint_sink::write_data(std::string_view bytes) {
  size_t put = 0;
  while (put < bytes.size()) {
    auto w = ::pwrite(fd_, bytes.data() + put, bytes.size() - put,
                      static_cast<off_t>(written_ + put));
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      fail_errno("write", file_);
    put += static_cast<size_t>(w);
  }
  // Writeback starts now. A sync costs in proportion to what came since
  // the last one (a VM's disk makes the host's copy durable): one every
  // sync_bytes spreads that over the transfer, where it overlaps the link,
  // so that the last one finds little left.
  auto end = written_ + bytes.size();
  ::sync_file_range(fd_, static_cast<off_t>(written_), static_cast<off_t>(bytes.size()),
                    SYNC_FILE_RANGE_WRITE);
  if (end - synced_ >= sync_bytes) {
    if (::fdatasync(fd_) != 0)
      fail_errno("write", file_);
    synced_ = end;
  }
}

void checkpoint_sink::feed(std::string_view chunk) {
  if (done_)
    fail("bytes after the end of the stream");
  if (chunk.size() > chunk_bytes_)
    fail(fmt::format("a chunk of {} bytes (at most {})", chunk.size(), chunk_bytes_));
  byte_reader r{chunk, "a checkpoint chunk"};
  if (!started_) {
    if (r.raw(4) != std::string_view{magic, 4} || r.u32() != version)
      fail("not hvactor's checkpoint stream");
    started_ = true;
  }
  size_t record_start = 0;
  while (!r.at_end()) {
    record_start = chunk.size() - r.left();
    auto tag = r.u8();
    if (tag == tag_data || tag == tag_hole) {
      uint64_t n = tag == tag_data ? r.u32() : r.u64();
      if (fd_ < 0 || n > size_ - written_)
        fail(fmt::format("more bytes than announced for '{}' ({} of {} written, {} more came)",
                         file_.empty() ? "(no file)" : file_, written_, size_, n));
      if (tag == tag_data)
        write_data(r.raw(n));
      written_ += n;
      if (written_ == size_)
        finish_file();
      continue;
    }
    if (fd_ >= 0)
      fail(fmt::format("'{}' ended after {} of its {} bytes", file_, written_, size_));
    if (tag == tag_end) {
      digest_.update({chunk.data(), record_start});
      auto entries = r.u64();
      auto total = r.u64();
      auto sum = r.str();
      r.expect_end();
      if (entries != entries_ || total != total_)
        fail(fmt::format("the stream announced {} entries and {} bytes, {} and {} came", entries,
                         total, entries_, total_));
      if (sum != digest_.finish())
        fail("the stream's digest does not match its bytes");
      int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
      }
      done_ = true;
      return;
    }
    auto rel = r.str();
    if (!safe_relative(rel))
      fail(fmt::format("an unsafe path '{}'", rel.substr(0, 200)));
    if (tag == tag_dir) {
      auto path = dir_ / rel;
      if (::mkdir(path.c_str(), 0755) != 0)
        fail_errno("create", path.string());
      ++entries_;
    } else if (tag == tag_file) {
      open_file(rel, r.u64());
    } else {
      fail(fmt::format("an unknown record {}", tag));
    }
  }
  digest_.update(chunk);
}

} // namespace hvactor::train
