#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/internal/rank_layout.hpp"
#include "hvactor/hvd_types.hpp"

namespace hvactor::collectives {

/// Where this process sits in the job (Horovod's rank variables) and on
/// which node.
struct topology : rank_layout {
  /// Node id (HOROVOD_HOSTNAME) or the machine's hostname.
  std::string host;
};

/// One tensor of a fused allreduce: `count` elements at `data`.
struct buffer_part {
  void* data = nullptr;
  size_t count = 0;
};

/// The transport under the hvd API: one implementation per library (Gloo,
/// NCCL). Calls come from one thread at a time, in the same order on every
/// rank. A failure throws an hvactor error naming the operation, this rank
/// and the peer, after which the backend is unusable.
class backend {
public:
  virtual ~backend() = default;

  /// In-place elementwise reduction; `o` is never op::average (the caller
  /// divides).
  virtual void allreduce(void* data, size_t count, hvd::dtype t, hvd::op o) = 0;

  /// Allreduces the concatenation of `parts` (one dtype) in place without
  /// a fusion buffer, when this backend can copy each part in and out
  /// itself (shared memory); returns false, having done nothing, when it
  /// cannot (the caller packs a fusion buffer instead). The same on every
  /// rank for the same job.
  virtual bool allreduce_parts(std::span<const buffer_part> parts, hvd::dtype t, hvd::op o) {
    (void)parts, (void)t, (void)o;
    return false;
  }

  /// The negotiator's solo round in one exchange, where this backend can:
  /// sets header[data_word] to 0 (the caller preset it to -1), min-
  /// allreduces `header` (`words` int64) and, in the same step, allreduces
  /// `data` with `o`; `accept` sees the reduced header (the same on every
  /// rank) and decides whether the data's result is written (only valid
  /// where the reduced header[data_word] is 0: every rank sent data; a rank
  /// that exchanged its header alone sent none). Returns false, having done
  /// nothing, when it cannot (the caller then exchanges the header alone,
  /// which takes the same single step). `o` is never op::average.
  virtual bool allreduce_with_header(int64_t* header, size_t words, size_t data_word, void* data,
                                     size_t count, hvd::dtype t, hvd::op o,
                                     const std::function<bool(std::span<const int64_t>)>& accept) {
    (void)header, (void)words, (void)data_word, (void)data, (void)count, (void)t, (void)o,
      (void)accept;
    return false;
  }

  /// The negotiation header's exchange: min-allreduces `header` (`words`
  /// int64; header[data_word] as the caller set it). A backend whose
  /// allreduce_with_header sends other messages than allreduce() sends
  /// them here too, so that a rank exchanging its header alone meets one
  /// that sends data with it in the same step.
  virtual void exchange_header(int64_t* header, size_t words, size_t data_word) {
    (void)data_word;
    allreduce(header, words, hvd::dtype::int64, hvd::op::min);
  }

  /// Concatenates every rank's `in` into `out` in rank order; `counts[r]`
  /// is rank r's element count.
  virtual void allgatherv(const void* in, void* out, std::span<const size_t> counts,
                          hvd::dtype t) = 0;

  /// Root's `data` to every rank.
  virtual void broadcast(void* data, size_t count, hvd::dtype t, int root) = 0;

  virtual void barrier() = 0;

  /// Sends send_counts[r] elements to rank r (consecutive in `in`), receives
  /// recv_counts[r] from rank r into `out` in rank order.
  virtual void alltoallv(const void* in, std::span<const int64_t> send_counts, void* out,
                         std::span<const int64_t> recv_counts, hvd::dtype t) = 0;

  /// Reduces `count` elements at `data` (scratch: overwritten) across the
  /// ranks with `o` (never op::average) and writes rank `rank`'s part into
  /// `out`: the parts are consecutive, rank r's holds counts[r] elements
  /// (Horovod's reducescatter). The default allreduces `data` and copies
  /// the part out; backends with a reduce-scatter of their own override it.
  virtual void reducescatter(void* data, size_t count, std::span<const size_t> counts, int rank,
                             hvd::dtype t, hvd::op o, void* out);

  /// "gloo", "local", "shm", "hierarchical", "nccl", "host-staged", ...
  virtual const char* name() const = 0;

  /// Which path each operation takes and why (hvd::backend_info()).
  virtual std::string describe() const {
    return name();
  }

  /// Autotune's hierarchical switches: whether they can change at run time
  /// (the job's layout has a hierarchical path), their state, and the
  /// switch (on the engine's round driver, between operations).
  virtual bool hierarchical_tunable() const {
    return false;
  }
  virtual std::pair<bool, bool> hierarchical_switches() const {
    return {false, false};
  }
  virtual void set_hierarchical(bool /*allreduce*/, bool /*allgather*/) {
  }

  // Memory of the buffers this backend reduces. Host backends keep the
  // defaults (plain memory, synchronous); device backends (nccl/) override
  // them so that the engine packs device tensors into a device fusion buffer
  // exactly as it packs host tensors.

  /// Copies `bytes` between two buffers of this backend's memory.
  virtual void copy(void* dst, const void* src, size_t bytes);

  /// Zeroes `bytes` at `dst`.
  virtual void zero(void* dst, size_t bytes);

  /// A buffer of at least `bytes` owned by the backend (the fusion buffer
  /// of device tensors); valid until the next call.
  virtual void* scratch(size_t bytes);

  /// A zeroed buffer of at least `bytes` of this backend's memory, freed
  /// with its last owner: a joined rank's part in an allreduce it did not
  /// submit (host zeros for host memory; device backends zero device
  /// memory on their stream, ordered before the collective that reads it).
  virtual std::shared_ptr<void> zeros(size_t bytes);

  /// op::adasum of `count` elements at `data` across the `ranks` ranks
  /// (this one `rank`), in place. The default runs adasum_allreduce() on
  /// this backend (host memory); device backends copy to host memory, run
  /// it on their host backend and copy back (NCCL has no Adasum; Horovod's
  /// GPU Adasum also reduces on the host between nodes).
  virtual void adasum(void* data, size_t count, hvd::dtype t, int rank, int ranks);

  /// Divides `count` elements at `data` by `divisor` (op::average; the
  /// engine calls it once, after the sum). Integers truncate toward zero;
  /// floating point multiplies by 1/divisor; a divisor <= 1 does nothing.
  virtual void scale(void* data, size_t count, hvd::dtype t, int divisor);

  /// Multiplies `count` elements at `data` by `factor` (the scale factors
  /// of hvd::scale_factors), bit for bit as Horovod: float32 and the
  /// 16-bit types by (float)factor in float (on the device, float16 by
  /// the factor rounded to float16, as Horovod's kernel), float64 in
  /// double, integers as static_cast<T>(x * factor) (truncation); bool is
  /// never scaled. A factor of 1 does nothing.
  virtual void multiply(void* data, size_t count, hvd::dtype t, double factor);

  /// Waits until the work queued so far finished (device streams); throws
  /// like the collectives themselves.
  virtual void finish() {
  }

  /// From any thread: the call in progress on another thread fails now
  /// (with `why`) instead of waiting for its peers, and so does every
  /// later one. Used when work this backend's call was part of failed
  /// elsewhere (the hierarchical pipeline). Backends without waits of
  /// their own ignore it.
  virtual void interrupt(const std::string& why) {
    (void)why;
  }

  /// Orders the work queued from now on after `ready`, a CUDA event the
  /// caller recorded on its stream (device backends: the GPU waits, not
  /// the host); host backends have nothing to order.
  virtual void wait_ready(const std::shared_ptr<void>& ready) {
    (void)ready;
  }

private:
  std::vector<char> scratch_;
};

/// The backend of a job of one process (no environment): every collective is
/// a local copy.
std::unique_ptr<backend> make_local_backend();

} // namespace hvactor::collectives
