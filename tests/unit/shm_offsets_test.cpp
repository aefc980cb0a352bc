// Shared-memory collectives on buffers at any offset from a cache line:
// each rank's data sits in its slot at its own buffer's offset
// (rank_words::offset), so results must not depend on whether the ranks'
// offsets agree, nor on an offset changing from one call to the next
// (each set keeps what its step said). Small slots (64 KiB), so that every
// call runs many chunked steps on both sets. Threads check with CHECK (a
// REQUIRE would leave the other ranks waiting for their peer).

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <doctest/doctest.h>

#include "collectives/backends/shm/communicator.hpp"
#include "shm_group.hpp"

namespace hvd = hvactor::hvd;
using hvactor::test::on_every_rank;
using hvactor::test::shm_group;

namespace {

constexpr size_t slot = size_t{64} << 10;

/// `bytes` bytes starting `offset` bytes past a cache line.
class offset_buffer {
public:
  offset_buffer(size_t bytes, size_t offset)
    : raw_(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + offset + 64) / 64 * 64))),
      data_(raw_.get() + offset) {
  }

  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }

  std::byte* data() const {
    return data_;
  }

private:
  struct release {
    void operator()(std::byte* p) const {
      std::free(p);
    }
  };
  std::unique_ptr<std::byte, release> raw_;
  std::byte* data_;
};

/// Rank k's offset in call `call` of a case: the same for every rank
/// (16: a large std::vector's), or each its own, changing between calls.
size_t offset_of(bool same, int k, int call) {
  return same ? 16 : static_cast<size_t>((k * 24 + call * 20 + 4) % 64);
}

float value(int k, size_t i) {
  return static_cast<float>(k * 1000 + static_cast<int>(i % 997));
}

/// Rank k's `count` values in `b`.
float* filled(const offset_buffer& b, int k, size_t count) {
  float* x = b.as<float>();
  for (size_t i = 0; i < count; ++i)
    x[i] = value(k, i);
  return x;
}

/// How many of `x` differ from the sum of n ranks' values.
size_t wrong_sums(const float* x, size_t count, int n) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float expected = 0;
    for (int r = 0; r < n; ++r)
      expected += value(r, i);
    wrong += x[i] != expected;
  }
  return wrong;
}

/// body(comm, k, n, same) on every local rank k of groups of 2 and 3
/// ranks, with the ranks' offsets the same or each its own.
template <class Body>
void on_every_group(Body body) {
  for (int n : {2, 3}) {
    for (bool same : {true, false}) {
      CAPTURE(n);
      CAPTURE(same);
      auto comms = shm_group(n, slot);
      on_every_rank(n, [&](int k) { body(*comms[static_cast<size_t>(k)], k, n, same); });
    }
  }
}

} // namespace

TEST_SUITE("shared-memory offsets") {

TEST_CASE("allreduce sums exactly whatever the ranks' buffer offsets, call after call") {
  on_every_group([](hvactor::collectives::shm::communicator& comm, int k, int n, bool same) {
    for (int call = 0; call < 4; ++call) {
      size_t count = 50'000 + static_cast<size_t>(call) * 7;
      offset_buffer b{count * sizeof(float), offset_of(same, k, call)};
      float* x = filled(b, k, count);
      comm.allreduce(x, count, hvd::dtype::float32, hvd::op::sum);
      CHECK(wrong_sums(x, count, n) == 0);
    }
  });
}

TEST_CASE("allgatherv and broadcast deliver every byte whatever the buffers' offsets") {
  auto byte_of = [](int k, size_t i) { return static_cast<std::byte>((k * 31 + i) % 251); };
  on_every_group([&](hvactor::collectives::shm::communicator& comm, int k, int n, bool same) {
    std::vector<size_t> bytes, offsets;
    size_t total = 0;
    for (int r = 0; r < n; ++r) {
      bytes.push_back(150'000 + static_cast<size_t>(r) * 13);
      offsets.push_back(total);
      total += bytes.back();
    }
    for (int call = 0; call < 3; ++call) {
      offset_buffer in{bytes[static_cast<size_t>(k)], offset_of(same, k, call + 1)};
      offset_buffer out{total, offset_of(same, k, call)};
      for (size_t i = 0; i < bytes[static_cast<size_t>(k)]; ++i)
        in.data()[i] = byte_of(k, i);
      comm.allgatherv(in.data(), out.data(), bytes, offsets);
      size_t wrong = 0;
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < bytes[static_cast<size_t>(r)]; ++i)
          wrong += out.data()[offsets[static_cast<size_t>(r)] + i] != byte_of(r, i);
      CHECK(wrong == 0);

      int root = (call + 1) % n;
      offset_buffer b{total, offset_of(same, k, call + 2)};
      for (size_t i = 0; i < total; ++i)
        b.data()[i] = k == root ? byte_of(root, i) : std::byte{0};
      comm.broadcast(b.data(), total, root);
      wrong = 0;
      for (size_t i = 0; i < total; ++i)
        wrong += b.data()[i] != byte_of(root, i);
      CHECK(wrong == 0);
    }
  });
}

TEST_CASE("reduce_scatter then allgather_slices (the hierarchical allreduce) at any offsets") {
  on_every_group([](hvactor::collectives::shm::communicator& comm, int k, int n, bool same) {
    for (int call = 0; call < 3; ++call) {
      size_t count = 40'000 + static_cast<size_t>(call) * 5;
      offset_buffer b{count * sizeof(float), offset_of(same, k, call)};
      float* x = filled(b, k, count);
      comm.reduce_scatter(x, count, hvd::dtype::float32, hvd::op::sum);
      comm.allgather_slices(x, count, hvd::dtype::float32);
      CHECK(wrong_sums(x, count, n) == 0);
    }
  });
}

} // TEST_SUITE
