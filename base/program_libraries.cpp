#include "base/internal/program_libraries.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/file_digest.hpp"
#include "base/internal/log.hpp"
#include "base/internal/process.hpp"

namespace hvactor {

namespace {

namespace fs = std::filesystem;

// Bounds on what a (possibly hostile or corrupt) ELF file can make us read.
constexpr size_t max_program_headers = 4096;
constexpr size_t max_dynamic_bytes = size_t{1} << 20;
constexpr size_t max_string_bytes = size_t{64} << 10;
constexpr auto list_limit = std::chrono::seconds{20};

struct fd_closer {
  int fd;
  ~fd_closer() {
    ::close(fd);
  }
};

bool read_at(int fd, void* out, size_t n, uint64_t offset) {
  auto got = ::pread(fd, out, n, static_cast<off_t>(offset));
  return got == static_cast<ssize_t>(n);
}

// The NUL-terminated string at `offset`, at most `limit` bytes.
std::string read_string(int fd, uint64_t offset, size_t limit) {
  std::string buf(limit, '\0');
  auto got = ::pread(fd, buf.data(), limit, static_cast<off_t>(offset));
  if (got <= 0)
    return {};
  buf.resize(static_cast<size_t>(got));
  return buf.substr(0, buf.find('\0'));
}

// File offset of virtual address `vaddr`, through the PT_LOAD segments.
std::optional<uint64_t> file_offset(const std::vector<Elf64_Phdr>& phs, uint64_t vaddr) {
  for (auto& p : phs)
    if (p.p_type == PT_LOAD && vaddr >= p.p_vaddr && vaddr - p.p_vaddr < p.p_filesz)
      return vaddr - p.p_vaddr + p.p_offset;
  return std::nullopt;
}

std::vector<std::string> read_runpath(int fd, const std::vector<Elf64_Phdr>& phs,
                                      const Elf64_Phdr& dyn) {
  auto bytes = std::min<uint64_t>(dyn.p_filesz, max_dynamic_bytes);
  std::vector<Elf64_Dyn> entries(bytes / sizeof(Elf64_Dyn));
  if (entries.empty() || !read_at(fd, entries.data(), entries.size() * sizeof(Elf64_Dyn),
                                  dyn.p_offset))
    return {};
  std::optional<uint64_t> strtab, runpath, rpath;
  for (auto& e : entries) {
    if (e.d_tag == DT_NULL)
      break;
    if (e.d_tag == DT_STRTAB)
      strtab = e.d_un.d_ptr;
    else if (e.d_tag == DT_RUNPATH)
      runpath = e.d_un.d_val;
    else if (e.d_tag == DT_RPATH)
      rpath = e.d_un.d_val;
  }
  auto which = runpath ? runpath : rpath;
  auto base = strtab ? file_offset(phs, *strtab) : std::nullopt;
  if (!which || !base)
    return {};
  auto text = read_string(fd, *base + *which, max_string_bytes);
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    auto end = std::min(text.find(':', start), text.size());
    if (end > start)
      out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool is_system_dir(const fs::path& dir) {
  auto s = dir.string() + "/";
  for (const char* root : {"/lib/", "/lib32/", "/lib64/", "/usr/lib/", "/usr/lib32/", "/usr/lib64/"})
    if (s.rfind(root, 0) == 0)
      return true;
  return false;
}

// The RUNPATH entries relative to $ORIGIN, made real paths (those that exist).
std::set<fs::path> origin_dirs(const std::vector<std::string>& runpath, const fs::path& origin) {
  std::set<fs::path> out;
  for (auto entry : runpath) {
    for (const char* token : {"${ORIGIN}", "$ORIGIN"}) {
      auto at = entry.find(token);
      if (at == std::string::npos)
        continue;
      entry.replace(at, std::strlen(token), origin.string());
      std::error_code ec;
      auto real = fs::canonical(entry, ec);
      if (!ec)
        out.insert(real);
      break;
    }
  }
  return out;
}

// "\tlibx.so.1 => /path/libx.so.1 (0x...)": {name, path}; nothing for the
// vdso, the loader itself and "not found".
std::optional<std::pair<std::string, std::string>> parse_list_line(const std::string& line) {
  auto arrow = line.find(" => ");
  if (arrow == std::string::npos)
    return std::nullopt;
  auto name = line.substr(0, arrow);
  name.erase(0, name.find_first_not_of(" \t"));
  auto rest = line.substr(arrow + 4);
  auto paren = rest.rfind(" (0x");
  if (rest.empty() || rest[0] != '/' || paren == std::string::npos)
    return std::nullopt;
  return std::pair{name, rest.substr(0, paren)};
}

} // namespace

elf_load_info read_elf_load_info(const std::string& program) {
  int fd = ::open(program.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    throw error(fmt::format("cannot read the program {}: {}", program, std::strerror(errno)));
  fd_closer closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw error(fmt::format("the program {} is not a regular file", program));
  Elf64_Ehdr eh{};
  if (!read_at(fd, &eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0
      || eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr)
      || eh.e_phnum == 0 || eh.e_phnum > max_program_headers)
    return {};
  std::vector<Elf64_Phdr> phs(eh.e_phnum);
  if (!read_at(fd, phs.data(), phs.size() * sizeof(Elf64_Phdr), eh.e_phoff))
    return {};
  elf_load_info info;
  for (auto& p : phs) {
    if (p.p_type == PT_INTERP)
      info.interpreter = read_string(fd, p.p_offset, std::min<uint64_t>(p.p_filesz, 4096));
    else if (p.p_type == PT_DYNAMIC)
      info.runpath = read_runpath(fd, phs, p);
  }
  return info;
}

std::vector<program_library> program_libraries(const std::string& program) {
  auto real = fs::canonical(program);
  auto info = read_elf_load_info(real);
  if (info.interpreter.empty() || info.interpreter[0] != '/')
    return {};
  auto origins = origin_dirs(info.runpath, real.parent_path());
  process_spec spec;
  spec.executable = info.interpreter;
  spec.args = {info.interpreter, "--list", real.string()};
  spec.capture_stdout = true;
  spec.echo_stderr = false;
  auto listed = run_command(std::move(spec), list_limit);
  if (listed.timed_out)
    throw error(fmt::format("listing the libraries of {} with {} --list took over {} s", program,
                            info.interpreter, list_limit.count()));
  std::vector<program_library> out;
  std::set<std::string> names;
  size_t start = 0;
  while (start < listed.out.size()) {
    auto end = listed.out.find('\n', start);
    auto line = listed.out.substr(start, end - start);
    start = end == std::string::npos ? listed.out.size() : end + 1;
    auto entry = parse_list_line(line);
    if (!entry || !valid_library_name(entry->first) || !names.insert(entry->first).second)
      continue;
    std::error_code ec;
    auto path = fs::canonical(entry->second, ec);
    if (ec)
      continue;
    bool ours = entry->first.rfind("libhvactor", 0) == 0;
    bool beside = origins.count(path.parent_path()) && !is_system_dir(path.parent_path());
    if (ours || beside)
      out.push_back({entry->first, path.string(), sha256_file(path.string())});
  }
  if (listed.exit.exit_code != 0)
    log::debug("{} --list {} ended with {}", info.interpreter, program,
               describe_exit(listed.exit.exit_code, listed.exit.signal));
  return out;
}

bool valid_library_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.' || name.find('/') != std::string::npos)
    return false;
  return std::none_of(name.begin(), name.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

} // namespace hvactor
