#include "base/internal/owned_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "hvactor/errors.hpp"

namespace hvactor {

namespace {

// `text` with control characters as \xNN, for messages.
std::string shown(std::string_view text) {
  std::string out;
  for (unsigned char c : text)
    out += c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c) : std::string(1, static_cast<char>(c));
  return out;
}

[[noreturn]] void fail_io(std::string_view what, const std::string& path, int err) {
  throw error(fmt::format("cannot {} {}: {}", what, path, std::strerror(err)));
}

} // namespace

std::string child_path(const std::string& base, std::string_view component, std::string_view what) {
  const char* why = nullptr;
  if (component.empty())
    why = "is empty";
  else if (component == ".")
    why = "is '.'";
  else if (component.find("..") != std::string_view::npos)
    why = "contains '..'";
  else if (component.find('/') != std::string_view::npos)
    why = "contains '/'";
  else if (component.find('\0') != std::string_view::npos)
    why = "contains a NUL byte";
  else if (component.size() > 255)
    why = "is longer than 255 bytes";
  if (why != nullptr)
    throw std::invalid_argument(fmt::format("{} '{}' {}: it cannot name a directory inside {}",
                                            what, shown(component), why, base));
  return base + "/" + std::string(component);
}

owned_dir::~owned_dir() {
  remove();
}

owned_dir::owned_dir(owned_dir&& other) noexcept
  : path_(std::exchange(other.path_, {})), dev_(other.dev_), ino_(other.ino_),
    created_parents_(std::exchange(other.created_parents_, {})) {}

owned_dir& owned_dir::operator=(owned_dir&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::exchange(other.path_, {});
    dev_ = other.dev_;
    ino_ = other.ino_;
    created_parents_ = std::exchange(other.created_parents_, {});
  }
  return *this;
}

owned_dir owned_dir::make(const std::string& base, const std::vector<std::string>& components,
                          std::string_view what) {
  if (components.empty())
    throw std::invalid_argument("owned_dir::make: no directory to create");
  struct stat st {};
  if (::stat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw error(fmt::format("cannot create {} under {}: it is not an existing directory", what,
                            base));
  owned_dir out;
  std::string path = base;
  for (size_t i = 0; i + 1 < components.size(); ++i) {
    path = child_path(path, components[i], what);
    if (::mkdir(path.c_str(), 0700) == 0) {
      out.created_parents_.push_back(path);
      continue;
    }
    if (errno != EEXIST)
      fail_io("create the directory", path, errno);
    // An existing parent must be this user's directory: in a shared /tmp
    // another user could have made it first. (A link to one of ours is
    // fine: the leaf, the only thing removed, is checked by inode.)
    if (::stat(path.c_str(), &st) != 0)
      fail_io("inspect", path, errno);
    if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())
      throw error(fmt::format("{} exists but is not a directory owned by this user (uid {}); "
                              "remove it or point TMPDIR elsewhere",
                              path, ::geteuid()));
  }
  const auto& leaf = components.back();
  constexpr std::string_view unique = "XXXXXX";
  bool make_unique = leaf.size() > unique.size()
                     && leaf.compare(leaf.size() - unique.size(), unique.size(), unique) == 0;
  path = child_path(path, leaf, what);
  if (make_unique) {
    if (::mkdtemp(path.data()) == nullptr)
      fail_io("create a directory like", path, errno);
  } else if (::mkdir(path.c_str(), 0700) != 0) {
    if (errno == EEXIST)
      throw error(fmt::format("{} {} exists already: this run creates it new and removes it at "
                              "the end, so another run is using it or one was killed before "
                              "removing it; remove it when no run uses it",
                              what, path));
    fail_io("create the directory", path, errno);
  }
  if (::lstat(path.c_str(), &st) != 0) {
    int err = errno;
    ::rmdir(path.c_str());
    fail_io("inspect", path, err);
  }
  out.path_ = path;
  out.dev_ = st.st_dev;
  out.ino_ = st.st_ino;
  // mkdir applies the umask, which may only narrow 0700; chmod makes it exact.
  if (::chmod(path.c_str(), 0700) != 0)
    fail_io("chmod 0700", path, errno);
  return out;
}

void owned_dir::remove() noexcept {
  if (!path_.empty()) {
    struct stat st {};
    // remove_all does not follow links inside; the leaf itself is checked
    // here: still the directory made, not something put in its place.
    if (::lstat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_dev == dev_
        && st.st_ino == ino_) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
    path_.clear();
  }
  // Parents this run created, innermost first, only when empty (rmdir
  // refuses a non-empty directory and a symbolic link).
  for (auto it = created_parents_.rbegin(); it != created_parents_.rend(); ++it)
    ::rmdir(it->c_str());
  created_parents_.clear();
}

std::string temp_root() {
  const char* t = std::getenv("TMPDIR");
  if (t != nullptr && t[0] == '/')
    return t;
  return "/tmp";
}

} // namespace hvactor
