#pragma once

// Internal: which shared libraries travel with a program shipped to a node.
//
// A node runs the driver's program from its binary cache (<work>/bin/<hash>),
// so a RUNPATH relative to the program ($ORIGIN/../lib, what `cmake
// --install` writes) points nowhere there. The program's own libraries are
// therefore shipped beside it, content-addressed like the program, and the
// node puts them first on the worker's LD_LIBRARY_PATH.

#include <string>
#include <vector>

namespace hvactor {

/// One shared library a shipped program needs on the node.
struct program_library {
  /// The name the loader asks for (the DT_NEEDED entry, e.g.
  /// "libhvactor_base.so.0"); the node links it under this name.
  std::string name;
  /// Where this machine's loader finds it (a real path, no symlinks).
  std::string path;
  /// SHA-256 of its bytes, lowercase hex.
  std::string hash;
};

/// The dynamic loader named by `program`'s PT_INTERP and its DT_RUNPATH (or
/// DT_RPATH) entries; both empty for a static or non-ELF file. Throws
/// hvactor::error when the file cannot be read.
struct elf_load_info {
  std::string interpreter;
  std::vector<std::string> runpath;
};
elf_load_info read_elf_load_info(const std::string& program);

/// The libraries `program` loads that belong with it: hvactor's own
/// (libhvactor*, which must be exactly the program's version) and every
/// library found in a directory its RUNPATH names relative to $ORIGIN,
/// outside the system's library directories (/lib*, /usr/lib*). Resolved
/// by the program's own loader (`ld.so --list`, which runs none of the
/// program's code) under this process's LD_LIBRARY_PATH. Libraries from
/// absolute paths (the build tree, the CUDA toolkit, LibTorch) are
/// expected on the node as before. Empty for a static or non-ELF program.
std::vector<program_library> program_libraries(const std::string& program);

/// True when `name` can be a library's file name in a node's cache: not
/// empty, at most 255 bytes, no '/', no leading '.', no control bytes.
bool valid_library_name(const std::string& name);

} // namespace hvactor
