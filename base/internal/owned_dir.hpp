#pragma once

// Directories named partly by what the environment says (a Slurm job id, a
// node name) and removed at the end of a run. Two rules keep such a removal
// from ever reaching anything else: a name component cannot climb
// (child_path), and a run removes only the directory it made itself, and
// only while that path is still that directory (owned_dir).

#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace hvactor {

/// `base`/`component`. Throws std::invalid_argument naming `what` and the
/// value when the component is empty, ".", contains "..", '/' or NUL, or is
/// longer than 255 bytes: it then could name something other than a new
/// entry directly inside `base`.
std::string child_path(const std::string& base, std::string_view component, std::string_view what);

/// A directory this process created, with mode 0700, removed with its
/// contents by remove() or the destructor.
///
/// make(base, {a, b, c}) creates base/a/b/c: `base` must be an existing
/// directory; a and b are created when missing, and when they exist they must
/// be directories owned by this user; c, the leaf,
/// is always created new, with mkdir (mkdtemp when it ends in "XXXXXX"),
/// and throws hvactor::error when it exists already. remove() deletes the
/// leaf only while it is still the directory made (same device and inode,
/// not a symbolic link), then those of a and b that this call created, when
/// they are empty. Nothing it did not create is ever removed, and no
/// symbolic link is followed.
class owned_dir {
public:
  owned_dir() = default;
  ~owned_dir();
  owned_dir(owned_dir&& other) noexcept;
  owned_dir& operator=(owned_dir&& other) noexcept;
  owned_dir(const owned_dir&) = delete;
  owned_dir& operator=(const owned_dir&) = delete;

  /// See the class comment. Every component passes child_path's check
  /// (`what` names them in its message).
  static owned_dir make(const std::string& base, const std::vector<std::string>& components,
                        std::string_view what);

  /// The leaf's path; empty when none is held.
  const std::string& path() const noexcept {
    return path_;
  }

  /// Removes what make() created (idempotent; never throws).
  void remove() noexcept;

private:
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  /// Parents make() created, innermost last.
  std::vector<std::string> created_parents_;
};

/// The directory for temporary files: $TMPDIR when it is an absolute path,
/// else /tmp.
std::string temp_root();

} // namespace hvactor
