#include "torch/optimizer_state.hpp"

#include <cstring>
#include <optional>
#include <sstream>
#include <typeinfo>
#include <vector>

#include <c10/util/Type.h>
#include <fmt/format.h>

#include "hvactor/elastic.hpp"
#include "hvactor/errors.hpp"
#include "hvactor/hvd.hpp"

namespace hvactor::hvd::detail {

namespace {

// The archive's keys beside Optimizer::save's, which sits under "state".
std::string group_key(size_t i, const char* field) {
  return fmt::format("hvactor/param_group/{}/{}", i, field);
}

int64_t read_int(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue v;
  archive.read(key, v);
  return v.toInt();
}

std::string read_string(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue v;
  archive.read(key, v);
  return v.toStringRef();
}

std::string readable(const std::string& mangled) {
  return mangled.empty() ? std::string{"no options"} : c10::demangle(mangled.c_str());
}

// LibTorch's message without its C++ stack trace.
std::string message_of(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e))
    return c->what_without_backtrace();
  return e.what();
}

// Every rank's `mine`, index = rank: one allgather of int64 words, each
// rank's length first, then its bytes, padded to a whole word.
std::vector<std::string> gather_texts(const std::string& mine, std::string_view call) {
  std::vector<int64_t> words(1 + (mine.size() + 7) / 8, 0);
  words[0] = static_cast<int64_t>(mine.size());
  if (!mine.empty())
    std::memcpy(words.data() + 1, mine.data(), mine.size());
  auto all = as_vector<int64_t>(allgather(words.data(), words.size(), dtype::int64));
  std::vector<std::string> out;
  size_t at = 0;
  for (int r = 0; r < size(); ++r) {
    int64_t len = at < all.size() ? all[at++] : -1;
    if (len < 0 || static_cast<uint64_t>(len + 7) / 8 > all.size() - at)
      throw collective_error(fmt::format("{}: rank {} sent a malformed status", call, r), r);
    out.emplace_back(reinterpret_cast<const char*>(all.data() + at), static_cast<size_t>(len));
    at += static_cast<size_t>(len + 7) / 8;
  }
  return out;
}

} // namespace

std::string save_optimizer(const torch::optim::Optimizer& opt, std::string_view call) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive state(archive.compilation_unit());
  opt.save(state);
  archive.write("state", state);
  const auto& groups = opt.param_groups();
  archive.write("hvactor/param_groups", c10::IValue(static_cast<int64_t>(groups.size())));
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    archive.write(group_key(i, "params"), c10::IValue(static_cast<int64_t>(g.params().size())));
    std::string type = g.has_options() ? typeid(g.options()).name() : "";
    archive.write(group_key(i, "options_type"), c10::IValue(type));
    if (!g.has_options())
      continue;
    torch::serialize::OutputArchive options(archive.compilation_unit());
    try {
      g.options().serialize(options);
    } catch (const std::exception& e) {
      throw error(fmt::format(
        "{}: the options of param group {} ({}) on rank {} cannot be serialized ({}); an "
        "OptimizerOptions of your own must implement serialize(OutputArchive&) and "
        "serialize(InputArchive&)",
        call, i, readable(type), rank(), message_of(e)));
    }
    archive.write(group_key(i, "options"), options);
  }
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_optimizer(torch::optim::Optimizer& opt, const std::string& blob, std::string_view call,
                    std::string_view source) {
  std::istringstream in{blob};
  torch::serialize::InputArchive archive;
  auto& groups = opt.param_groups();
  // The state's tensors land on this rank's parameters' device: root's
  // momentum buffers on its cuda:0 become this rank's on its own GPU.
  std::optional<torch::Device> device;
  for (auto& g : groups)
    if (!device && !g.params().empty())
      device = g.params().front().device();
  if (device)
    archive.load_from(in, *device);
  else
    archive.load_from(in);
  auto me = is_initialized() ? rank() : 0;
  auto count = read_int(archive, "hvactor/param_groups");
  if (count != static_cast<int64_t>(groups.size()))
    throw error(fmt::format("{}: {} has {} param groups but rank {} has {}; every rank must build "
                            "the same optimizer",
                            call, source, count, me, groups.size()));
  for (size_t i = 0; i < groups.size(); ++i) {
    auto params = read_int(archive, group_key(i, "params"));
    if (params != static_cast<int64_t>(groups[i].params().size()))
      throw error(fmt::format("{}: param group {} has {} parameters on {} but {} on rank {}; "
                              "every rank must build the same optimizer",
                              call, i, params, source, groups[i].params().size(), me));
    auto theirs = read_string(archive, group_key(i, "options_type"));
    std::string mine = groups[i].has_options() ? typeid(groups[i].options()).name() : "";
    if (theirs != mine)
      throw error(fmt::format("{}: param group {} has {} on {} but {} on rank {}; every rank "
                              "must build the same optimizer",
                              call, i, readable(theirs), source, readable(mine), me));
  }
  try {
    torch::serialize::InputArchive state;
    archive.read("state", state);
    // Load replaces the entries it has; a parameter with state here but none
    // at the source must lose it too.
    opt.state().clear();
    opt.load(state);
    for (size_t i = 0; i < groups.size(); ++i) {
      if (!groups[i].has_options())
        continue;
      torch::serialize::InputArchive options;
      archive.read(group_key(i, "options"), options);
      groups[i].options().serialize(options);
    }
  } catch (const c10::Error& e) {
    throw error(fmt::format("{}: rank {} could not load the optimizer state of {}: {}", call, me,
                            source, message_of(e)));
  }
}

void create_state(torch::optim::Optimizer& opt) {
  if (!opt.state().empty() || dynamic_cast<torch::optim::LBFGS*>(&opt))
    return;
  torch::NoGradGuard no_grad;
  for (auto& group : opt.param_groups())
    for (auto& p : group.params())
      if (p.requires_grad())
        p.mutable_grad() = torch::zeros(p.sizes(), p.options());
  opt.step();
}

void broadcast_optimizer(torch::optim::Optimizer& opt, int root) {
  constexpr std::string_view call = "hvd::broadcast_optimizer_state";
  // One byte says what follows: 'k' the state, 'e' why root has none.
  std::vector<char> blob;
  std::string failure;
  try {
    create_state(opt);
  } catch (const std::exception& e) {
    failure = fmt::format("{}: rank {} could not create its optimizer's state (one step with zero "
                          "gradients, as Horovod does for an optimizer without state): {}",
                          call, rank(), message_of(e));
  }
  if (rank() == root && !failure.empty()) {
    blob.assign(1, 'e');
  } else if (rank() == root) {
    try {
      auto bytes = save_optimizer(opt, call);
      blob.reserve(bytes.size() + 1);
      blob.push_back('k');
      blob.insert(blob.end(), bytes.begin(), bytes.end());
    } catch (const std::exception& e) {
      failure = message_of(e);
      blob.assign(1, 'e');
    }
  }
  elastic::detail::broadcast_bytes(blob, root);
  if (rank() != root && failure.empty()) {
    if (blob.empty() || (blob[0] != 'k' && blob[0] != 'e'))
      failure = fmt::format("{}: rank {} received {} bytes from root rank {} that are no "
                            "optimizer state; ranks must run the same hvactor build",
                            call, rank(), blob.size(), root);
    else if (blob[0] == 'k')
      try {
        load_optimizer(opt, std::string(blob.begin() + 1, blob.end()), call,
                       fmt::format("root rank {}", root));
      } catch (const std::exception& e) {
        failure = message_of(e);
      }
  }
  // Every rank learns whether every other one succeeded: a failure is the
  // same error everywhere, not an error on one rank and a stall on the rest.
  auto failures = gather_texts(failure, call);
  for (int r = 0; r < size(); ++r)
    if (!failures[static_cast<size_t>(r)].empty())
      throw collective_error(failures[static_cast<size_t>(r)], r);
}

} // namespace hvactor::hvd::detail
