#pragma once

// A fresh directory under /tmp for one unit test, removed with everything
// in it.

#include <stdlib.h>

#include <filesystem>
#include <string>

#include <doctest/doctest.h>

namespace hvactor_test {

struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& prefix = "hvactor-unit") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

} // namespace hvactor_test
