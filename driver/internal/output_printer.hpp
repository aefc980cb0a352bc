#pragma once

// Internal: how forwarded worker output is printed on the driver
// (hvactor-run, horovod_runner's driver_log_verbosity).

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

namespace hvactor {

/// Prints forwarded lines whole, tagged like mpirun --tag-output, and
/// copies them to per-rank files. Called from the coordinator (one thread
/// at a time), but locked anyway: the launcher prints its own lines too.
class output_printer {
public:
  /// `dir`: where per-rank copies go (dir/rank.N/stdout, stderr; N padded
  /// with zeros to the width of the highest of `ranks` ranks, as
  /// horovodrun's --output-filename: rank.07 of 12); empty: none.
  /// `timestamps`: prefix every line with the local time.
  output_printer(std::string dir, bool timestamps, int ranks = 1)
    : dir_(std::move(dir)), stamp_(timestamps),
      width_(static_cast<int>(std::to_string(std::max(ranks - 1, 0)).size())) {
  }

  /// One line of `rank`'s stdout (stream 1) or stderr (2), to ours:
  /// "[1,<rank>]<stdout>:<text>".
  void line(int rank, int stream, const std::string& text);

  /// One hvactor::log::event of `rank`, to stdout: "[1,<rank>]<event>:k=v ...".
  void event(int rank, const std::map<std::string, std::string>& kv);

private:
  std::string stamp() const;
  std::ofstream& file(int rank, const char* name);

  std::mutex mu_;
  std::string dir_;
  bool stamp_;
  int width_;
  std::map<std::string, std::ofstream> files_;
};

} // namespace hvactor
