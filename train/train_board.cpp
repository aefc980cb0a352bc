#include "train/internal/train_board.hpp"

#include <chrono>

namespace hvactor::train {

proto::train_point train_point_of(const metrics& m, const std::string& job_id,
                                  const std::filesystem::path& run_dir, int64_t iteration,
                                  const std::string& checkpoint,
                                  const std::string& experiment) {
  proto::train_point p;
  p.job_id = job_id;
  p.run = run_dir.filename().string();
  p.storage = run_dir.string();
  p.iteration = iteration;
  p.time_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
               .count();
  for (auto& [name, v] : m)
    if (!v.is_string())
      p.metrics.emplace_back(name, v.as_double());
  p.checkpoint = checkpoint;
  p.experiment = experiment;
  return p;
}

} // namespace hvactor::train
