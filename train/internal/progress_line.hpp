#pragma once

// Internal: the trainer's progress output on the driver (train_trainer.cpp).

#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "hvactor/train.hpp"

namespace hvactor::train {

/// The driver's progress output (Ray's trial progress): on a terminal one
/// live line, rewritten per report; otherwise one plain line per report.
/// The workers' own output lines come through here too ("(rank N) ..."),
/// printed above the live line. Called from the fit thread and the job's
/// coordinator: locked.
class progress {
public:
  progress(int verbose, std::string name, int workers, std::string prefix = {})
      : verbose_(verbose), name_(std::move(name)), workers_(workers),
        tty_(::isatty(STDOUT_FILENO) == 1),
        prefix_(prefix.empty() ? std::string{"(rank "} : "(" + prefix + " rank ") {
  }

  void report(int64_t iteration, double elapsed, const metrics& m, int alive) {
    if (verbose_ <= 0)
      return;
    std::string shown;
    for (auto& [k, v] : m)
      if (!is_auto(k))
        shown += fmt::format(" {}={}", k, v.to_string());
    std::lock_guard<std::mutex> guard{mu_};
    live_line_ = fmt::format("[{}] iter {} | {:.1f}s |{} | workers {}/{}", name_, iteration,
                             elapsed, shown.empty() ? " -" : shown, alive, workers_);
    if (tty_)
      std::fprintf(stdout, "\r\x1b[K%s", live_line_.c_str());
    else
      std::fprintf(stdout, "%s\n", live_line_.c_str());
    std::fflush(stdout);
  }

  /// One line a worker wrote to its stdout (1) or stderr (2).
  void worker_line(int rank, int stream, const std::string& text) {
    std::lock_guard<std::mutex> guard{mu_};
    if (muted_)
      return;
    bool redraw = tty_ && !live_line_.empty();
    if (redraw)
      std::fputs("\r\x1b[K", stdout);
    auto* out = stream == 2 ? stderr : stdout;
    std::fprintf(out, "%s%d) %s\n", prefix_.c_str(), rank, text.c_str());
    std::fflush(out);
    if (redraw) {
      std::fputs(live_line_.c_str(), stdout);
      std::fflush(stdout);
    }
  }

  /// The fit was stopped on purpose: what its workers say while they are
  /// shut down ("could not tell the driver ...") is noise.
  void mute() {
    std::lock_guard<std::mutex> guard{mu_};
    muted_ = true;
  }

  void note(const std::string& text) {
    if (verbose_ <= 0)
      return;
    end_live();
    std::lock_guard<std::mutex> guard{mu_};
    std::fprintf(stdout, "[%s] %s\n", name_.c_str(), text.c_str());
    std::fflush(stdout);
  }

  void end_live() {
    std::lock_guard<std::mutex> guard{mu_};
    if (tty_ && !live_line_.empty()) {
      std::fputc('\n', stdout);
      std::fflush(stdout);
    }
    live_line_.clear();
  }

  static bool is_auto(const std::string& k) {
    return k == "training_iteration" || k == "attempt" || k == "time_total_s"
           || k == "time_this_iter_s";
  }

private:
  std::mutex mu_;
  int verbose_;
  std::string name_;
  int workers_;
  bool tty_;
  bool muted_ = false;
  std::string prefix_;
  std::string live_line_;
};

} // namespace hvactor::train
