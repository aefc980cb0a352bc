#include "allreduce_gloo.hpp"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

namespace hvactor::bench {

raw_gloo::raw_gloo(int rank, int size, const std::string& store_dir,
                   std::chrono::milliseconds timeout)
  : timeout_(timeout) {
  gloo::transport::tcp::attr attr{"127.0.0.1"};
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout);
  gloo::rendezvous::FileStore file_store{store_dir};
  gloo::rendezvous::PrefixStore store{"raw_gloo", file_store};
  context->connectFullMesh(store, device);
  context_ = std::move(context);
}

raw_gloo::~raw_gloo() = default;

void raw_gloo::allreduce(float* data, size_t count, collectives::allreduce_algorithm algorithm) {
  gloo::AllreduceOptions opts{context_};
  opts.setAlgorithm(algorithm == collectives::allreduce_algorithm::bcube
                      ? gloo::AllreduceOptions::Algorithm::BCUBE
                      : gloo::AllreduceOptions::Algorithm::RING);
  opts.setOutput(data, count);
  using reduce_fn = void (*)(void*, const void*, const void*, size_t);
  opts.setReduceFunction(static_cast<reduce_fn>(&gloo::sum<float>));
  opts.setTag(0);
  opts.setTimeout(timeout_);
  gloo::allreduce(opts);
}

void raw_gloo::barrier() {
  gloo::BarrierOptions opts{context_};
  opts.setTag(1);
  opts.setTimeout(timeout_);
  gloo::barrier(opts);
}

} // namespace hvactor::bench
