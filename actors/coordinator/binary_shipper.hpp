#pragma once

// Internal: code shipping (interfaces.hpp step 3) for any coordinator: asks
// a node whether it caches the driver's binary and, if not, sends it in
// chunks (knobs::ship_chunk_bytes, knobs::ship_chunks_in_flight at a time);
// then the same for each of the binary's own libraries, one after another.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "hvactor/errors.hpp"
#include "base/internal/caf_error.hpp"
#include "actors/protocol/interfaces.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/program_libraries.hpp"

namespace hvactor::detail {

/// What to ship where.
struct shipment {
  proto::node_agent agent;
  std::string node;
  /// The binary, its SHA-256 and the job it is for.
  std::string path;
  std::string hash;
  /// The binary's own libraries, shipped after it.
  std::vector<program_library> libraries;
  std::string job;
  caf::timespan timeout;
};

/// `count` bytes of `path` at `offset` (fewer at its end); throws
/// hvactor::error naming the file.
std::vector<char> read_chunk(const std::string& path, uint64_t offset, size_t count);

/// Size of `path`, 0 when unreadable.
uint64_t file_size(const std::string& path);

namespace shipping {

struct upload {
  shipment what;
  uint64_t size = 0;
  uint64_t next = 0; // offset of the next chunk to send
  size_t in_flight = 0;
  bool sent_last = false;
  bool finished = false;
  uint64_t sent = 0;
  std::function<void(caf::error, uint64_t)> done;

  void finish(caf::error err) {
    finished = true;
    done(std::move(err), sent);
  }
};

template <class Self>
void more(Self self, std::shared_ptr<upload> up) {
  while (!up->finished && !up->sent_last && up->in_flight < knobs::ship_chunks_in_flight) {
    std::vector<char> chunk;
    try {
      chunk = read_chunk(up->what.path, up->next, knobs::ship_chunk_bytes);
    } catch (const std::exception& e) {
      up->finish(make_error(error_kind::generic, e.what()));
      return;
    }
    auto offset = up->next;
    up->next += chunk.size();
    up->sent_last = up->next >= up->size || chunk.empty();
    ++up->in_flight;
    auto n = chunk.size();
    self->request(up->what.agent, up->what.timeout, proto::put_bin_atom_v, up->what.hash,
                  up->what.job, offset, std::move(chunk), up->sent_last)
      .then(
        [=](bool) {
          up->sent += n;
          --up->in_flight;
          if (up->finished)
            return;
          if (up->sent_last && up->in_flight == 0)
            up->finish({});
          else
            more(self, up);
        },
        [=](caf::error& err) {
          if (!up->finished)
            up->finish(err);
        });
  }
}

} // namespace shipping

/// Makes sure `what.node` caches the file `what.path` (`local`: where the
/// node may find the same bytes itself).
template <class Self>
void ship_file(Self self, shipment what, std::string local,
               std::function<void(caf::error, uint64_t)> done) {
  auto agent = what.agent;
  auto timeout = what.timeout;
  auto hash = what.hash;
  self->request(agent, timeout, proto::has_bin_atom_v, hash, local)
    .then(
      [=](bool cached) {
        if (cached) {
          done({}, 0);
          return;
        }
        auto up = std::make_shared<shipping::upload>();
        up->what = what;
        up->size = file_size(what.path);
        up->done = done;
        shipping::more(self, up);
      },
      [=](caf::error& err) { done(err, 0); });
}

/// Ships file `index` of `what`: 0 the binary, i > 0 its library i - 1.
template <class Self>
void ship_from(Self self, shipment what, size_t index, uint64_t sent,
               std::function<void(caf::error, uint64_t)> done) {
  if (index > what.libraries.size()) {
    done({}, sent);
    return;
  }
  auto file = what;
  // The node takes the same bytes from its own disk where it has them at
  // the driver's path (a shared filesystem, a node image): the digest is
  // checked, so nothing travels. Every node once received the driver's
  // binary here: 8 MiB each, 503 MiB through the driver's one TLS thread at
  // 64 nodes, whose heartbeats then lagged until nodes were dropped.
  std::string local = what.path;
  if (index > 0) {
    file.path = local = what.libraries[index - 1].path;
    file.hash = what.libraries[index - 1].hash;
  }
  file.libraries.clear();
  ship_file(self, std::move(file), std::move(local), [=](caf::error err, uint64_t n) {
    if (err)
      done(std::move(err), sent + n);
    else
      ship_from(self, what, index + 1, sent + n, done);
  });
}

/// Makes sure `what.node` caches the binary and its libraries: `done(error,
/// bytes sent)` runs once, in `self`'s context.
template <class Self>
void ship_binary(Self self, shipment what, std::function<void(caf::error, uint64_t)> done) {
  ship_from(self, std::move(what), 0, 0, std::move(done));
}

} // namespace hvactor::detail
