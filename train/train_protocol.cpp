// hvactor::train's wire formats: store keys, metrics, chunked values and
// checkpoint streams through the store (internal/train_protocol.hpp).

#include "train/internal/train_protocol.hpp"

#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "train/internal/byte_codec.hpp"
#include "base/internal/log.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

std::string machine_view() {
  std::ifstream boot{"/proc/sys/kernel/random/boot_id"};
  std::string id;
  std::getline(boot, id);
  std::error_code ec;
  auto ns = fs::read_symlink("/proc/self/ns/mnt", ec);
  if (id.empty() || ec)
    return {}; // unknown: never equal to a driver's
  return id + " " + ns.string();
}

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

} // namespace hvactor::train
