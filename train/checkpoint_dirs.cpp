// Where hvactor::train's driver keeps a run's checkpoints: the
// checkpoint_NNNNNN directories under the run's directory, the newest
// num_to_keep of them (internal/train_progress.hpp).

#include <algorithm>
#include <regex>

#include <fmt/format.h>

#include "train/internal/train_progress.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

namespace {

const std::regex& checkpoint_pattern() {
  static const std::regex pattern{"checkpoint_([0-9]{6,})"};
  return pattern;
}

} // namespace

fs::path persist_checkpoint(const progress_config& cfg, const fs::path& partial,
                            std::vector<fs::path>& doomed) {
  auto name = partial.filename().string().substr(std::string_view{".partial_"}.size());
  auto final_dir = cfg.run_dir / name;
  fs::rename(partial, final_dir);
  std::error_code ec;
  if (auto keep = cfg.num_to_keep) {
    // By index: the newest `keep` stay.
    std::vector<std::pair<int64_t, fs::path>> all;
    for (fs::directory_iterator it{cfg.run_dir, ec}, end; !ec && it != end; it.increment(ec)) {
      std::smatch m;
      auto name = it->path().filename().string();
      if (std::regex_match(name, m, checkpoint_pattern()))
        all.emplace_back(std::stoll(m[1]), it->path());
    }
    std::sort(all.begin(), all.end());
    for (size_t k = 0; k + static_cast<size_t>(*keep) < all.size(); ++k) {
      auto gone = cfg.run_dir / (".removing_" + all[k].second.filename().string());
      fs::rename(all[k].second, gone, ec);
      doomed.push_back(ec ? all[k].second : gone);
    }
  }
  return final_dir;
}

int64_t next_checkpoint_index(const fs::path& dir) {
  int64_t next = 0;
  std::error_code ec;
  for (fs::directory_iterator it{dir, ec}, end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    auto name = it->path().filename().string();
    if (std::regex_match(name, m, checkpoint_pattern()))
      next = std::max<int64_t>(next, std::stoll(m[1]) + 1);
  }
  return next;
}

std::string checkpoint_dir_name(int64_t index) {
  return fmt::format("checkpoint_{:06d}", index);
}

} // namespace hvactor::train
