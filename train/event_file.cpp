// TensorBoard event files of a run's reports (internal/event_file.hpp).

#include "train/internal/event_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <isa-l/crc.h>

#include "hvactor/errors.hpp"
#include "tensorboard.pb.h"

namespace fs = std::filesystem;

namespace hvactor::train::tensorboard {

namespace {

std::string host_name() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf.data();
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>(v >> (8 * i)));
}

} // namespace

uint32_t masked_crc32c(const void* data, size_t n) {
  // ISA-L's iSCSI CRC is CRC-32C with the initial value given and no final
  // inversion: the standard one is crc32_iscsi(p, n, ~0) ^ ~0.
  uint32_t crc = ~crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(data)),
                              static_cast<int>(n), 0xFFFFFFFFu);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

event_file::event_file(const fs::path& dir) {
  static std::atomic<int> opened{0};
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  path_ = dir / fmt::format("events.out.tfevents.{}.{}.{}.{}", seconds, host_name(), ::getpid(),
                            opened++);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    throw error(fmt::format("train: cannot create the TensorBoard file '{}': {}", path_.string(),
                            std::strerror(errno)));
  Event version;
  version.set_wall_time(std::chrono::duration<double>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count());
  version.set_file_version("brain.Event:2");
  append(version.SerializeAsString());
}

event_file::~event_file() {
  if (fd_ >= 0)
    ::close(fd_);
}

void event_file::add_scalars(int64_t step, double wall_time, const metrics& m) {
  Event ev;
  ev.set_wall_time(wall_time);
  ev.set_step(step);
  auto* summary = ev.mutable_summary();
  for (auto& [name, v] : m) {
    if (v.is_string())
      continue;
    auto* value = summary->add_value();
    value->set_tag(name);
    value->set_simple_value(static_cast<float>(v.as_double()));
  }
  append(ev.SerializeAsString());
}

// One record, in one write: a reader never sees half of it unless the
// disk is full.
void event_file::append(const std::string& bytes) {
  std::string record;
  record.reserve(bytes.size() + 16);
  uint64_t n = bytes.size();
  for (int i = 0; i < 8; ++i)
    record.push_back(static_cast<char>(n >> (8 * i)));
  put_u32(record, masked_crc32c(record.data(), 8));
  record += bytes;
  put_u32(record, masked_crc32c(bytes.data(), bytes.size()));
  size_t done = 0;
  while (done < record.size()) {
    auto w = ::write(fd_, record.data() + done, record.size() - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      throw error(fmt::format("train: writing the TensorBoard file '{}' failed: {}",
                              path_.string(), std::strerror(errno)));
    done += static_cast<size_t>(w);
  }
}

} // namespace hvactor::train::tensorboard
