#include "driver/internal/output_printer.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include <fmt/chrono.h>
#include <fmt/format.h>

namespace hvactor {

namespace fs = std::filesystem;

void output_printer::line(int rank, int stream, const std::string& text) {
  std::lock_guard<std::mutex> guard{mu_};
  auto tagged = fmt::format("{}[1,{}]<{}>:{}\n", stamp(), rank, stream == 1 ? "stdout" : "stderr",
                            text);
  std::fwrite(tagged.data(), 1, tagged.size(), stream == 1 ? stdout : stderr);
  std::fflush(stream == 1 ? stdout : stderr);
  if (!dir_.empty()) {
    auto& f = file(rank, stream == 1 ? "stdout" : "stderr");
    f << text << '\n';
    f.flush();
  }
}

void output_printer::event(int rank, const std::map<std::string, std::string>& kv) {
  std::string text;
  for (auto& [k, v] : kv)
    text += fmt::format("{}{}={}", text.empty() ? "" : " ", k, v);
  std::lock_guard<std::mutex> guard{mu_};
  auto tagged = fmt::format("{}[1,{}]<event>:{}\n", stamp(), rank, text);
  std::fwrite(tagged.data(), 1, tagged.size(), stdout);
  std::fflush(stdout);
}

std::string output_printer::stamp() const {
  if (!stamp_)
    return {};
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  ::localtime_r(&t, &tm);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03} ", tm, ms.count());
}

std::ofstream& output_printer::file(int rank, const char* name) {
  auto key = std::to_string(rank) + name;
  auto i = files_.find(key);
  if (i != files_.end())
    return i->second;
  auto dir = fs::path(dir_) / fmt::format("rank.{:0{}}", rank, width_);
  fs::create_directories(dir);
  return files_.emplace(key, std::ofstream(dir / name)).first->second;
}

} // namespace hvactor
