#pragma once

#include <hvactor/hvd.hpp>

namespace hvactor::test {

/// hvd::init() for the scope of one worker function, shut down even when it
/// throws, so that the next call starts from scratch.
struct hvd_session {
  hvd_session() {
    hvd::init();
  }
  ~hvd_session() {
    hvd::shutdown();
  }
};

} // namespace hvactor::test
