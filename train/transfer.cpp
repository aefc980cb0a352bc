// hvactor::train's bulk bytes between the driver and its workers
// (internal/transfer.hpp): the route, the driver's offers and the same
// machine's copy of rank 0's checkpoint, and the worker's side of the
// three transfers. The data link's half is in transfer_link.cpp.

#include "train/internal/transfer.hpp"

#include <cstdlib>
#include <random>
#include <string_view>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/log.hpp"
#include "base/net/net.hpp"
#include "base/net/port_guard.hpp"
#include "train/internal/checkpoint_stream.hpp"
#include "train/internal/train_protocol.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

bool same_machine_allowed(const std::string& bind_host, bool secure) {
  auto env = std::getenv(local_route_env);
  return net::is_loopback(bind_host) && !secure && port_guard::current().same_user
         && !(env && std::string_view{env} == "0");
}

byte_route choose_route(bool local_checkpoints, const std::string& driver_view) {
  bool same_view = !driver_view.empty() && driver_view == machine_view();
  return local_checkpoints && same_view ? byte_route::same_machine : byte_route::data_link;
}

std::shared_ptr<upload_slot> new_upload_slot(const fs::path& run_dir) {
  std::random_device rd;
  auto tag = fmt::format("{:08x}{:08x}", rd(), rd());
  return std::make_shared<upload_slot>(run_dir / (".partial_upload_" + tag));
}

void copy_upload(upload_slot& slot, const fs::path& src, uint64_t index) {
  std::string why;
  try {
    copy_checkpoint_dir(src, slot.dir());
  } catch (const std::exception& e) {
    why = fmt::format("checkpoint of report {} refused: {}", index + 1, e.what());
  }
  slot.finished(why); // a failed copy's directory goes here
  if (!why.empty()) {
    log::error("train: {}", why);
    throw error(why);
  }
}

data_link::ticket offer_shard_fetch(const progress_config& cfg, uint32_t dataset, int32_t rank) {
  if (!cfg.data)
    throw error("this driver has no data link");
  return offer_shard(*cfg.data, cfg.shard_dir, dataset, rank, cfg.ticket_bound);
}

data_link::ticket offer_resume_fetch(const progress_config& cfg, int32_t rank) {
  if (!cfg.data)
    throw error("this driver has no data link");
  if (cfg.resume_dir.empty() || rank < 0 || rank >= cfg.size)
    throw error("this attempt has no checkpoint to resume from for that rank");
  return offer_resume(*cfg.data, cfg.resume_dir, cfg.ticket_bound);
}

worker_transfers::worker_transfers(caf::actor_system& sys, train_progress progress,
                                   byte_route route, link_target link, int32_t rank)
  : sys_(sys), progress_(std::move(progress)), route_(route), link_(std::move(link)),
    rank_(rank) {
}

namespace {

// A ticket for a transfer on the driver's data link, asked over the
// authenticated CAF connection.
template <class... Ts>
data_link::ticket ticket(caf::actor_system& sys, const train_progress& progress,
                         std::chrono::milliseconds timeout, const char* what, Ts... xs) {
  auto t = ask<std::string>(sys, progress, timeout, xs...);
  if (!t)
    throw error(fmt::format("{}: the driver refused the transfer: {}", what,
                            describe(t.error())));
  return *t;
}

// The bytes of the regular files under `dir`.
uint64_t tree_bytes(const fs::path& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it{dir, ec}, end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec))
      bytes += it->file_size(ec);
  return bytes;
}

} // namespace

shared_bytes worker_transfers::fetch_shard(uint32_t dataset, const std::string& shard_dir) {
  // On the driver's own machine the worker maps the shard's file (the
  // columns share its pages; the driver's removal of the file leaves the
  // mapping); elsewhere it fetches the file's bytes from the driver.
  if (route_ == byte_route::same_machine)
    return map_file(
      (fs::path{shard_dir} / std::to_string(dataset) / std::to_string(rank_)).string());
  return fetch_shard_by_link(link_, ticket(sys_, progress_, link_.timeout,
                                           "train::get_dataset_shard", tr_fetch_atom_v, dataset,
                                           rank_));
}

void worker_transfers::fetch_resume(const std::string& resume_path, const fs::path& dir) {
  if (route_ == byte_route::same_machine && !resume_path.empty()) {
    try {
      copy_checkpoint_dir(resume_path, dir);
      return;
    } catch (const std::exception& e) {
      log::warn("train: copying the checkpoint to resume from failed ({}); streaming it",
                e.what());
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  }
  fetch_resume_by_link(link_, ticket(sys_, progress_, link_.timeout, "train::get_checkpoint",
                                     tr_fetch_atom_v, rank_),
                       dir);
}

void worker_transfers::upload(uint64_t index, const fs::path& dir) {
  if (route_ == byte_route::same_machine) {
    // The copy is one request: its bound grows with the bytes (10 MB/s).
    auto bound = link_.timeout + std::chrono::milliseconds{tree_bytes(dir) / 10'000};
    auto done = ask<bool>(sys_, progress_, bound, tr_local_atom_v, index,
                          fs::absolute(dir).string());
    if (!done)
      throw error(fmt::format("train::report: the driver could not copy the checkpoint of "
                              "report {}: {}",
                              index + 1, describe(done.error())));
    return;
  }
  std::string refusal;
  try {
    refusal = upload_by_link(link_, ticket(sys_, progress_, link_.timeout, "train::report",
                                           tr_upload_atom_v, index),
                             dir);
  } catch (const std::exception& e) {
    throw error(fmt::format("train::report: the checkpoint of report {} did not reach the "
                            "driver: {}",
                            index + 1, e.what()));
  }
  if (!refusal.empty())
    throw error("train::report: " + refusal);
}

} // namespace hvactor::train
