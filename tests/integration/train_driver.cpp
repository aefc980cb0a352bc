// A driver for hvactor::train's tests (train_test.cpp), run as a child
// process on the embedded cluster or joined to a cluster (--address). Its
// loop needs no LibTorch: the dataset holds x = 0..rows-1 (and y = 2x), the
// checkpoint is a directory with an "epoch" file, a payload of
// --ckpt-bytes deterministic bytes and a subdirectory.
//
//   train_driver --workers N --epochs E --storage DIR --name NAME
//                [--rows R] [--max-failures K] [--num-to-keep K]
//                [--kill-rank R --kill-epoch E] [--throw-rank R --throw-epoch E]
//                [--resume DIR] [--ckpt-bytes B] [--short-rank R]
//                [--equal 0|1]   (dataset_config.equal; default 1)
//                [--sparse-gib G] (rank 0's checkpoints also hold a sparse
//                 file of G GiB, an empty file and an empty directory, under
//                 names with spaces and non-ASCII letters)
//                [--allreduce 1] (hvd::init, then a 4 KiB allreduce per epoch)
//                [--kill-mid-report-epoch E] (rank 0 of the first attempt
//                 SIGKILLs itself 150 ms into report E's checkpoint transfer)
//                [--odd-floats 1] (every report also holds inf=+inf,
//                 ninf=-inf, nan=NaN and tiny=the smallest subnormal)
//
// Prints key=value lines: "history ..." per report of rank 0, "shard ..."
// per rank of the last report, "checkpoint path=... intact=0|1", and
// "error text=..." when the fit failed (exit 1).

#include <signal.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace fs = std::filesystem;
namespace train = hvactor::train;

namespace {

/// B deterministic bytes for `epoch`.
std::string payload(int64_t bytes, int epoch) {
  std::string out(static_cast<size_t>(bytes), '\0');
  uint64_t s = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(epoch + 1);
  for (auto& c : out) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    c = static_cast<char>(s & 0xff);
  }
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream in{p, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
}

const char* sparse_name = "sparse ñandú.bin";

/// Marks at the start, the middle and the end of an otherwise empty file.
bool sparse_intact(const fs::path& p, uint64_t size) {
  if (!fs::exists(p) || fs::file_size(p) != size)
    return false;
  int fd = ::open(p.c_str(), O_RDONLY);
  char buf[8] = {};
  bool ok = ::pread(fd, buf, 4, 0) == 4 && std::string(buf, 4) == "head"
            && ::pread(fd, buf, 6, static_cast<off_t>(size / 2)) == 6
            && std::string(buf, 6) == "middle"
            && ::pread(fd, buf, 4, static_cast<off_t>(size - 4)) == 4
            && std::string(buf, 4) == "tail" && ::pread(fd, buf, 4, 4096) == 4
            && std::string(buf, 4) == std::string(4, '\0');
  ::close(fd);
  return ok;
}

void write_sparse(const fs::path& p, uint64_t size) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  bool ok = ::pwrite(fd, "head", 4, 0) == 4
            && ::pwrite(fd, "middle", 6, static_cast<off_t>(size / 2)) == 6
            && ::pwrite(fd, "tail", 4, static_cast<off_t>(size - 4)) == 4;
  ::close(fd);
  if (!ok)
    throw std::runtime_error("cannot write the sparse file");
}

int64_t cfg(const train::context& ctx, const char* key, int64_t fallback) {
  auto it = ctx.config().find(key);
  return it == ctx.config().end() ? fallback : it->second.as_int();
}

void loop(train::context& ctx) {
  auto rank = ctx.world_rank();
  auto& shard = train::get_dataset_shard("train");
  int start = 0;
  if (auto ck = train::get_checkpoint())
    start = std::stoi(read(fs::path{ck.path()} / "epoch")) + 1;
  // What the shard holds: its row count, first x, and every y == 2x.
  double first = shard.count() ? shard["x"].values<double>()[0] : -1;
  bool consistent = true;
  auto xs = shard["x"].values<double>();
  auto ys = shard["y"].values<double>();
  for (size_t i = 0; i < xs.size(); ++i)
    consistent = consistent && ys[i] == 2 * xs[i] && (i == 0 || xs[i] == xs[i - 1] + 1);
  int64_t batched = 0;
  for (auto& b : shard.iter_batches(7, {.shuffle = true, .seed = 1}))
    batched += b.rows();
  auto epochs = cfg(ctx, "epochs", 3);
  auto bytes = cfg(ctx, "ckpt_bytes", 16);
  // allreduce: an average of 1,024 floats per epoch (the collectives the
  // head's dashboard counts).
  bool allreduce = cfg(ctx, "allreduce", 0) != 0;
  if (allreduce)
    hvactor::hvd::init();
  for (int epoch = start; epoch < epochs; ++epoch) {
    if (allreduce) {
      std::vector<float> grad(1024, static_cast<float>(rank));
      hvactor::hvd::allreduce(std::span<float>{grad});
    }
    if (ctx.attempt() == 0 && rank == cfg(ctx, "kill_rank", -1)
        && epoch == cfg(ctx, "kill_epoch", -1))
      ::kill(::getpid(), SIGKILL);
    if (rank == cfg(ctx, "throw_rank", -1) && epoch == cfg(ctx, "throw_epoch", -1))
      throw std::runtime_error("boom at epoch " + std::to_string(epoch));
    if (rank == cfg(ctx, "short_rank", -1) && epoch == epochs - 1)
      return; // reports one time fewer than the others
    // Under the driver's storage folder, which the test removes: a rank
    // stopped mid-report (a peer was killed) never removes its own.
    auto dir = fs::path{ctx.config().at("scratch").as_string()}
               / ("train-driver-" + std::to_string(::getpid()) + "-" + std::to_string(epoch));
    fs::create_directories(dir / "sub");
    std::ofstream{dir / "epoch"} << epoch;
    std::ofstream{dir / "sub" / "payload", std::ios::binary} << payload(bytes, epoch);
    if (auto gib = cfg(ctx, "sparse_gib", 0); gib > 0) {
      fs::create_directories(dir / "empty dir ü");
      std::ofstream{dir / "sub" / "empty file"};
      write_sparse(dir / "sub" / sparse_name, static_cast<uint64_t>(gib) << 30);
    }
    if (ctx.attempt() == 0 && rank == 0 && epoch == cfg(ctx, "kill_mid_report_epoch", -1))
      std::thread{[] {
        std::this_thread::sleep_for(std::chrono::milliseconds{150});
        ::kill(::getpid(), SIGKILL);
      }}.detach();
    train::metrics m{{"epoch", epoch},
                     {"loss", 1.0 / (epoch + 1)},
                     {"rank", rank},
                     {"rows", shard.count()},
                     {"batched", batched},
                     {"first", first},
                     {"consistent", consistent ? 1 : 0},
                     {"host", std::string{std::getenv("HOROVOD_HOSTNAME")}}};
    if (cfg(ctx, "odd_floats", 0)) {
      using lim = std::numeric_limits<double>;
      m["inf"] = lim::infinity();
      m["ninf"] = -lim::infinity();
      m["nan"] = lim::quiet_NaN();
      m["tiny"] = lim::denorm_min();
    }
    if (rank == cfg(ctx, "big_metric_rank", -1) && epoch == epochs - 1)
      m["big"] = std::string(size_t{17} << 20, 'b'); // over the driver's 16 MiB
    // metrics_only: reports without a checkpoint (queued, not awaited).
    if (auto hold = cfg(ctx, "hold_ms", 0); hold > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds{hold});
    if (cfg(ctx, "metrics_only", 0))
      train::report(m);
    else
      train::report(m, train::checkpoint::from_directory(dir.string()));
    fs::remove_all(dir);
  }
}

std::string fields(const train::metrics& m) {
  std::string out;
  for (auto& [k, v] : m)
    out += " " + k + "=" + v.to_string();
  return out;
}

} // namespace

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv, {.num_cpus = 4}};
  auto& args = rt.args();
  auto opt = [&](const std::string& name, const std::string& fallback) {
    for (size_t i = 1; i + 1 < args.size(); ++i)
      if (args[i] == name)
        return args[i + 1];
    return fallback;
  };
  auto num = [&](const std::string& name, int64_t fallback) {
    return std::stoll(opt(name, std::to_string(fallback)));
  };
  try {
    std::vector<std::map<std::string, double>> rows;
    for (int64_t x = 0; x < num("--rows", 100); ++x)
      rows.push_back({{"x", static_cast<double>(x)}, {"y", 2.0 * static_cast<double>(x)}});
    train::trainer_options o;
    o.scaling.num_workers = static_cast<int>(num("--workers", 3));
    o.datasets = {{"train", train::dataset::from_items(rows)}};
    o.dataset_config.equal = num("--equal", 1) != 0;
    o.config["scratch"] = (fs::path{opt("--storage", "")} / "scratch").string();
    o.run.name = opt("--name", "run");
    o.run.storage_path = opt("--storage", "");
    o.run.failure.max_failures = static_cast<int>(num("--max-failures", 0));
    if (auto keep = num("--num-to-keep", 0))
      o.run.checkpoint.num_to_keep = static_cast<int>(keep);
    if (auto resume = opt("--resume", ""); !resume.empty())
      o.resume_from_checkpoint = train::checkpoint::from_directory(resume);
    for (auto key : {"epochs", "ckpt_bytes", "kill_rank", "kill_epoch", "throw_rank",
                     "throw_epoch", "short_rank", "sparse_gib", "kill_mid_report_epoch",
                     "metrics_only", "big_metric_rank", "hold_ms", "allreduce",
                     "odd_floats"}) {
      std::string flag = "--" + std::string{key};
      std::replace(flag.begin(), flag.end(), '_', '-');
      auto v = opt(flag, "");
      if (!v.empty())
        o.config[key] = std::stoll(v);
    }
    train::trainer t{rt, &loop, std::move(o)};
    auto r = t.fit();
    for (auto& m : r.metrics_history)
      std::cout << "history" << fields(m) << "\n";
    if (!r.worker_metrics_history.empty())
      for (auto& m : r.worker_metrics_history.back())
        std::cout << "shard" << fields(m) << "\n";
    if (r.checkpoint) {
      auto dir = fs::path{r.checkpoint.path()};
      auto epoch = std::stoi(read(dir / "epoch"));
      bool intact = read(dir / "sub" / "payload") == payload(num("--ckpt-bytes", 16), epoch);
      if (auto gib = num("--sparse-gib", 0); gib > 0)
        intact = intact && fs::is_directory(dir / "empty dir ü")
                 && fs::file_size(dir / "sub" / "empty file") == 0
                 && sparse_intact(dir / "sub" / sparse_name, static_cast<uint64_t>(gib) << 30);
      std::cout << "checkpoint path=" << dir.string() << " epoch=" << epoch
                << " intact=" << intact << "\n";
    }
    if (r.error) {
      std::string text = r.error_message();
      std::replace(text.begin(), text.end(), '\n', ' ');
      std::cout << "error text=" << text << "\n";
      return 1;
    }
    std::cout << "done\n";
    return 0;
  } catch (const std::exception& e) {
    std::cout << "thrown text=" << e.what() << "\n";
    return 2;
  }
}
