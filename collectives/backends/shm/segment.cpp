#include "collectives/backends/shm/segment.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "hvactor/errors.hpp"

namespace hvactor::collectives::shm {

namespace {

constexpr uint64_t segment_magic = 0x6876616374736d31ULL; // "hvactsm1"
constexpr uint32_t layout_version = 6;
constexpr size_t page = 4096;
/// A segment never needs more: 256 ranks on a node, 64 MiB slots, two sets.
constexpr uint32_t max_slots = 256;
constexpr size_t max_slot_bytes = size_t{64} << 20;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

size_t words_offset() {
  return round_up(sizeof(segment_header), 64);
}

size_t sleepers_offset(uint32_t slots) {
  return words_offset() + 2 * size_t{slots} * sizeof(rank_words);
}

size_t data_offset(uint32_t slots) {
  return round_up(sleepers_offset(slots) + slots * sizeof(rank_sleepers), page);
}

std::string errno_text() {
  return std::strerror(errno);
}

} // namespace

size_t segment_bytes(uint32_t slots, size_t slot_bytes) {
  return data_offset(slots) + 2 * size_t{slots} * round_up(slot_bytes, page);
}

std::shared_ptr<segment> segment::create(uint32_t slots, size_t slot_bytes) {
  if (slots == 0 || slots > max_slots || slot_bytes == 0 || slot_bytes > max_slot_bytes)
    throw error(fmt::format("shared-memory segment: {} slots of {} bytes is out of range", slots,
                            slot_bytes));
  slot_bytes = round_up(slot_bytes, page);
  auto bytes = segment_bytes(slots, slot_bytes);
  int fd = static_cast<int>(::syscall(SYS_memfd_create, "hvactor-collectives", MFD_CLOEXEC));
  if (fd < 0)
    throw error("shared-memory segment: memfd_create failed: " + errno_text());
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    auto text = errno_text();
    ::close(fd);
    throw error(fmt::format("shared-memory segment: cannot size it to {} bytes: {}", bytes, text));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    auto text = errno_text();
    ::close(fd);
    throw error("shared-memory segment: mmap failed: " + text);
  }
  auto* h = new (base) segment_header;
  h->magic = segment_magic;
  h->version = layout_version;
  h->slots = slots;
  h->slot_bytes = slot_bytes;
  h->total_bytes = bytes;
  if (::getrandom(&h->id, sizeof(h->id), 0) != sizeof(h->id) || h->id == 0)
    h->id = (static_cast<uint64_t>(::getpid()) << 32) ^ reinterpret_cast<uintptr_t>(base) ^ 1;
  auto* p = static_cast<std::byte*>(base);
  for (uint32_t s = 0; s < slots; ++s) {
    for (uint32_t set = 0; set < 2; ++set)
      new (p + words_offset() + (2 * s + set) * sizeof(rank_words)) rank_words;
    new (p + sleepers_offset(slots) + s * sizeof(rank_sleepers)) rank_sleepers;
  }
  return std::shared_ptr<segment>(new segment(base, bytes, fd));
}

std::shared_ptr<segment> segment::attach(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw error(fmt::format("shared-memory segment: fd {} is not open: {}", fd, errno_text()));
  auto size = static_cast<size_t>(st.st_size);
  if (!S_ISREG(st.st_mode) || size < data_offset(1) || size > segment_bytes(max_slots, max_slot_bytes))
    throw error(fmt::format("shared-memory segment: fd {} is not a segment ({} bytes)", fd, size));
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    throw error(fmt::format("shared-memory segment: cannot map fd {}: {}", fd, errno_text()));
  std::shared_ptr<segment> seg(new segment(base, size, -1));
  auto& h = seg->header();
  if (h.magic != segment_magic || h.version != layout_version || h.slots == 0
      || h.slots > max_slots || h.slot_bytes == 0 || h.slot_bytes > max_slot_bytes
      || h.slot_bytes % page != 0 || h.total_bytes != size
      || segment_bytes(h.slots, h.slot_bytes) != size)
    throw error(fmt::format("shared-memory segment: fd {} does not hold a version {} segment", fd,
                            layout_version));
  return seg;
}

segment::~segment() {
  ::munmap(base_, bytes_);
  if (fd_ >= 0)
    ::close(fd_);
}

rank_words& segment::words(int slot, int set) const noexcept {
  return *reinterpret_cast<rank_words*>(static_cast<std::byte*>(base_) + words_offset()
                                        + static_cast<size_t>(2 * slot + set) * sizeof(rank_words));
}

rank_sleepers& segment::sleepers(int slot) const noexcept {
  return *reinterpret_cast<rank_sleepers*>(static_cast<std::byte*>(base_)
                                           + sleepers_offset(header().slots)
                                           + static_cast<size_t>(slot) * sizeof(rank_sleepers));
}

std::byte* segment::data(int set, int slot) const noexcept {
  auto& h = header();
  return static_cast<std::byte*>(base_) + data_offset(h.slots)
         + (static_cast<size_t>(set) * h.slots + static_cast<size_t>(slot)) * h.slot_bytes;
}

void segment::raise_abort(pid_t pid, abort_reason why) noexcept {
  auto& h = header();
  h.abort_why.store(static_cast<uint32_t>(why), std::memory_order_relaxed);
  h.abort_pid.store(static_cast<uint32_t>(pid), std::memory_order_seq_cst);
  wake_all();
}

void segment::wake_all() noexcept {
  for (uint32_t s = 0; s < header().slots; ++s) {
    for (int set : {0, 1}) {
      futex_wake(words(static_cast<int>(s), set).posted, INT_MAX);
      futex_wake(words(static_cast<int>(s), set).reduced, INT_MAX);
    }
  }
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, int64_t timeout_ns) noexcept {
  struct timespec ts {
    static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)
  };
  // Not FUTEX_PRIVATE: the word is shared between processes.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>& word, int n) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, n, nullptr, nullptr, 0);
}

} // namespace hvactor::collectives::shm
