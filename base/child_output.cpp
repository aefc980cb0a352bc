// A child's stderr and stdout as its monitor thread reads them
// (internal/child_output.hpp).
#include "base/internal/child_output.hpp"

#include <unistd.h>

#include <algorithm>

namespace hvactor {

child_output::child_output(int err_fd, int out_fd, size_t tail_lines, bool echo, sink on_line,
                           std::string event_marker)
  : err_fd_(err_fd),
    out_fd_(out_fd),
    out_open_(out_fd >= 0),
    tail_(tail_lines, echo, on_line, std::move(event_marker)) {
  if (out_fd >= 0)
    out_lines_.emplace(std::move(on_line));
}

void child_output::pump() {
  // Reads what is there now; false once the pipe reached EOF.
  auto pump = [&](int fd, auto&& feed) {
    for (;;) {
      ssize_t n = ::read(fd, buf_, sizeof(buf_));
      if (n > 0) {
        feed(buf_, static_cast<size_t>(n));
        continue;
      }
      return n != 0;
    }
  };
  if (err_open_)
    err_open_ = pump(err_fd_, [&](const char* d, size_t n) { tail_.feed(d, n); });
  if (out_open_)
    out_open_ = pump(out_fd_, [&](const char* d, size_t n) { out_lines_->feed(d, n); });
}

void child_output::drain() {
  for (int i = 0; err_open_ && i < 64; ++i) {
    ssize_t n = ::read(err_fd_, buf_, sizeof(buf_));
    if (n <= 0)
      break;
    tail_.feed(buf_, static_cast<size_t>(n));
  }
  for (int i = 0; out_open_ && i < 64; ++i) {
    ssize_t n = ::read(out_fd_, buf_, sizeof(buf_));
    if (n <= 0)
      break;
    out_lines_->feed(buf_, static_cast<size_t>(n));
  }
}

std::vector<std::string> child_output::finish() {
  if (out_lines_)
    out_lines_->finish();
  ::close(err_fd_);
  if (out_fd_ >= 0)
    ::close(out_fd_);
  return tail_.finish();
}

} // namespace hvactor
