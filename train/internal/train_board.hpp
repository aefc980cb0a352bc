#pragma once

// Internal: a report of hvactor::train as the head's dashboard gets it
// (proto::train_point, actors/board/board_types.hpp).

#include <cstdint>
#include <filesystem>
#include <string>

#include "hvactor/train.hpp"
#include "actors/protocol/interfaces.hpp"

namespace hvactor::train {

/// The report's numeric metrics (texts left out) at `iteration`, with its
/// persisted checkpoint (empty when none), for the run in `run_dir`.
proto::train_point train_point_of(const metrics& m, const std::string& job_id,
                                  const std::filesystem::path& run_dir, int64_t iteration,
                                  const std::string& checkpoint,
                                  const std::string& experiment = {});

} // namespace hvactor::train
