#pragma once

// Internal: memory for bulk bytes in flight (hvactor::train's checkpoint
// chunks and data link frames). A fresh 4 KiB page costs a page fault on
// first touch: 12 ms per fresh 4 MiB buffer on the VMs measured, 0.4 ms
// when the buffer lies in transparent huge pages. Buffers of at least a
// huge page are therefore aligned to one and advised MADV_HUGEPAGE
// (advice only: without THP the pages stay small and nothing else
// changes), and a vector of these bytes is never zero-filled by resize(),
// since every byte is written (read() or pread()) before it is read.

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

namespace hvactor {

template <class T>
class bulk_allocator {
public:
  using value_type = T;
  static constexpr size_t huge_page = size_t{2} << 20;

  bulk_allocator() noexcept = default;
  template <class U>
  bulk_allocator(const bulk_allocator<U>&) noexcept {
  }

  T* allocate(size_t n) {
    size_t bytes = n * sizeof(T);
    if (bytes < huge_page)
      return static_cast<T*>(::operator new(bytes));
    size_t rounded = (bytes + huge_page - 1) & ~(huge_page - 1);
    void* p = std::aligned_alloc(huge_page, rounded);
    if (!p)
      throw std::bad_alloc{};
    ::madvise(p, rounded, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < huge_page)
      ::operator delete(p);
    else
      std::free(p);
  }
  /// Default-initialization: resize() leaves the new bytes as they are.
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  friend bool operator==(const bulk_allocator&, const bulk_allocator&) noexcept {
    return true;
  }
};

/// A chunk's bytes.
using bulk_bytes = std::vector<char, bulk_allocator<char>>;

} // namespace hvactor
