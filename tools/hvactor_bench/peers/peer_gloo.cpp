// The raw Gloo peer of hvactor-bench: `hvactor-bench __peer-gloo ...` (a
// mode of the tool itself, started once per rank and round by the driver,
// measuring every size of the sweep in that one process):
// a Gloo context of its own over TCP on 127.0.0.1 (or --ip: the address of
// its node in an emulated cluster), full mesh through a FileStore, no hvactor in the path, measured as peer_protocol.hpp says. Its
// allreduce uses the algorithm hvactor's Gloo path picks for the size.

#include "tools/hvactor_bench/peers/peer.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "collectives/backends/allreduce_algorithm.hpp"
#include "tools/hvactor_bench/peers/peer_protocol.hpp"

namespace hvactor::bench_tool {

namespace {

using reduce_fn = void (*)(void*, const void*, const void*, size_t);
constexpr std::chrono::seconds gloo_timeout{60};

template <class T>
void reduce(const std::shared_ptr<gloo::Context>& ctx, T* data, size_t count, reduce_fn fn,
            uint32_t tag) {
  gloo::AllreduceOptions opts{ctx};
  opts.setOutput(data, count);
  opts.setReduceFunction(fn);
  opts.setTag(tag);
  opts.setTimeout(gloo_timeout);
  gloo::allreduce(opts);
}

} // namespace

int run_gloo_peer(int argc, char** argv) {
  auto a = parse_peer_args(argc, argv, 2);
  auto device = gloo::transport::tcp::CreateDevice(gloo::transport::tcp::attr{a.ip.c_str()});
  auto context = std::make_shared<gloo::rendezvous::Context>(a.rank, a.size);
  context->setTimeout(gloo_timeout);
  gloo::rendezvous::FileStore store{a.store};
  context->connectFullMesh(store, device);
  std::shared_ptr<gloo::Context> ctx = context;

  // hvactor's automatic choice per size, or the one HVACTOR_GLOO_ALLREDUCE forces.
  const char* forced = std::getenv("HVACTOR_GLOO_ALLREDUCE");
  auto policy = collectives::allreduce_algorithm_policy::parse(forced ? forced : "",
                                                               "HVACTOR_GLOO_ALLREDUCE");
  if (a.ip.rfind("127.", 0) != 0)
    policy = policy.over_network();
  for_each_size(a, [&] {
    size_t count = peer_count(a, a.size);
    std::vector<float> in(count, 1.0f), out;
    if (a.kind == "allgather")
      out.resize(count * static_cast<size_t>(a.size));
    auto algorithm = policy.choose(a.bytes, a.size);
    auto run = [&] {
      if (a.kind == "allreduce") {
        gloo::AllreduceOptions opts{ctx};
        opts.setAlgorithm(algorithm == collectives::allreduce_algorithm::bcube
                            ? gloo::AllreduceOptions::Algorithm::BCUBE
                            : gloo::AllreduceOptions::Algorithm::RING);
        opts.setOutput(in.data(), in.size());
        opts.setReduceFunction(static_cast<reduce_fn>(&gloo::sum<float>));
        opts.setTag(0);
        opts.setTimeout(gloo_timeout);
        gloo::allreduce(opts);
      } else if (a.kind == "broadcast") {
        gloo::BroadcastOptions opts{ctx};
        opts.setOutput(in.data(), in.size());
        opts.setRoot(0);
        opts.setTag(0);
        opts.setTimeout(gloo_timeout);
        gloo::broadcast(opts);
      } else {
        gloo::AllgatherOptions opts{ctx};
        opts.setInput(in.data(), in.size());
        opts.setOutput(out.data(), out.size());
        opts.setTag(0);
        opts.setTimeout(gloo_timeout);
        gloo::allgather(opts);
      }
    };
    double wrong = 0;
    if (a.check) {
      fill_check(in, a.rank);
      run();
      wrong = static_cast<double>(count_wrong(a.kind, in, out, count, a.size));
    }
    reduce(ctx, &wrong, 1, static_cast<reduce_fn>(&gloo::sum<double>), 1);
    auto timed = bench::measure_calls(a.warmup, a.iters, run, [&] {
      gloo::BarrierOptions opts{ctx};
      opts.setTag(2);
      opts.setTimeout(gloo_timeout);
      gloo::barrier(opts);
    });
    double loop_us = timed.loop_us;
    reduce(ctx, &loop_us, 1, static_cast<reduce_fn>(&gloo::max<double>), 3);
    if (a.rank == 0)
      print_point(a, loop_us, static_cast<int64_t>(wrong), timed.samples_us);
  });
  return 0;
}

} // namespace hvactor::bench_tool
