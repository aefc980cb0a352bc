#pragma once

// Internal: how forwarded worker output is printed on the driver
// (hvactor-run, horovod_runner's driver_log_verbosity).

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
  /// `dir`: where per-rank copies go (dir/rank.N/stdout, stderr); empty:
  /// none. `timestamps`: prefix every line with the local time.
  output_printer(std::string dir, bool timestamps) : dir_(std::move(dir)), stamp_(timestamps) {
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
  std::map<std::string, std::ofstream> files_;
};

} // namespace hvactor
