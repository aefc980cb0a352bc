#pragma once

// Internal: what a child process's monitor thread (process.cpp) reads from
// the child: its stderr, kept as a tail of lines (echoed, passed to
// process_spec::on_line, event lines picked out by their marker), and its
// stdout when captured, passed on as lines. Used by that thread only.

#include <unistd.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hvactor {

namespace process_output {

// The last lines of the child's stderr; every line also to on_line (2).
class line_tail {
public:
  using sink = std::function<void(int, const std::string&)>;

  line_tail(size_t max_lines, bool echo, sink on_line = {}, std::string marker = {})
    : max_lines_(max_lines), echo_(echo), on_line_(std::move(on_line)),
      marker_(std::move(marker)) {
  }

  void feed(const char* data, size_t n) {
    partial_.append(data, n);
    size_t start = 0;
    for (size_t pos; (pos = partial_.find('\n', start)) != std::string::npos; start = pos + 1)
      push(partial_.substr(start, pos - start + 1));
    partial_.erase(0, start);
  }

  std::vector<std::string> finish() {
    if (!partial_.empty())
      push(partial_ + "\n");
    partial_.clear();
    std::vector<std::string> out;
    for (auto& line : lines_)
      out.push_back(line.substr(0, line.size() - 1));
    return out;
  }

private:
  void push(std::string line) {
    if (on_line_ && !marker_.empty() && line.rfind(marker_, 0) == 0) {
      on_line_(2, line.substr(0, line.size() - 1));
      return;
    }
    if (echo_)
      [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
    if (on_line_)
      on_line_(2, line.substr(0, line.size() - 1));
    lines_.push_back(std::move(line));
    while (lines_.size() > max_lines_)
      lines_.pop_front();
  }

  size_t max_lines_;
  bool echo_;
  sink on_line_;
  std::string marker_;
  std::string partial_;
  std::deque<std::string> lines_;
};


// Complete lines of the child's stdout, for process_spec::on_line.
class line_splitter {
public:
  explicit line_splitter(line_tail::sink on_line) : on_line_(std::move(on_line)) {
  }

  void feed(const char* data, size_t n) {
    partial_.append(data, n);
    size_t start = 0;
    for (size_t pos; (pos = partial_.find('\n', start)) != std::string::npos; start = pos + 1)
      on_line_(1, partial_.substr(start, pos - start));
    partial_.erase(0, start);
  }

  void finish() {
    if (!partial_.empty())
      on_line_(1, partial_);
    partial_.clear();
  }

private:
  line_tail::sink on_line_;
  std::string partial_;
};

} // namespace process_output

/// The child's stderr and captured stdout pipes (non-blocking; owned,
/// closed by finish()).
class child_output {
public:
  using sink = process_output::line_tail::sink;

  /// `err_fd`: the child's stderr; `out_fd`: its stdout, or -1 when not
  /// captured (then `on_line` gets stderr only). `tail_lines`: the stderr
  /// lines finish() returns; `echo`: stderr also to this process's.
  child_output(int err_fd, int out_fd, size_t tail_lines, bool echo, sink on_line,
               std::string event_marker);

  /// Either pipe has not reached EOF.
  bool open() const noexcept {
    return err_open_ || out_open_;
  }
  /// The descriptors to poll: -1 for a pipe at EOF.
  int err_fd() const noexcept {
    return err_open_ ? err_fd_ : -1;
  }
  int out_fd() const noexcept {
    return out_open_ ? out_fd_ : -1;
  }

  /// Reads what is there now from each open pipe.
  void pump();

  /// After the child died: what it wrote before, a bounded amount
  /// (grandchildren may keep the pipes open: never waits for EOF).
  void drain();

  /// Ends stdout's last line, closes both pipes, and returns the stderr
  /// tail (ending its last line).
  std::vector<std::string> finish();

private:
  int err_fd_;
  int out_fd_;
  bool err_open_ = true;
  bool out_open_;
  process_output::line_tail tail_;
  std::optional<process_output::line_splitter> out_lines_;
  char buf_[4096];
};

} // namespace hvactor
