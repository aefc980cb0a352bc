#pragma once

// Internal: the progress and result tables (Ray's tabulate "psql" look).

#include <algorithm>
#include <string>
#include <vector>

namespace hvactor::tune {

/// `rows` under `head`, each column as wide as its widest cell.
inline std::string format_table(const std::vector<std::string>& head,
                                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (auto& h : head)
    width.push_back(h.size());
  for (auto& r : rows)
    for (size_t i = 0; i < r.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  auto rule = [&] {
    std::string out = "+";
    for (auto w : width)
      out += std::string(w + 2, '-') + "+";
    return out + "\n";
  };
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (size_t i = 0; i < width.size(); ++i) {
      auto c = i < cells.size() ? cells[i] : std::string{};
      out += " " + c + std::string(width[i] - c.size(), ' ') + " |";
    }
    return out + "\n";
  };
  auto out = rule() + line(head) + rule();
  for (auto& r : rows)
    out += line(r);
  return out + rule();
}

} // namespace hvactor::tune
