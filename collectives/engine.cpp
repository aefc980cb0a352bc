#include "engine.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "timeline.hpp"

namespace hvactor::hvd::detail {

namespace {

op reduce_kind(op o) {
  return o == op::average ? op::sum : o;
}

std::string describe(const pending_op& p) {
  return fmt::format("allreduce '{}' ({} x {}, {}{})", p.name, to_string(p.type), p.count,
                     to_string(p.reduction), p.device ? ", device" : "");
}

int64_t ns_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The timeline's view of allreduces [begin, end) of `batch` on `b`.
collectives::timeline_event batch_event(const std::vector<std::shared_ptr<pending_op>>& batch,
                                        size_t begin, size_t end, const collectives::backend& b) {
  collectives::timeline_event e;
  e.op = collectives::timeline_op::allreduce;
  e.set_backend(b.name());
  e.tensors = static_cast<uint32_t>(end - begin);
  e.has_type = true;
  e.type = batch[begin]->type;
  for (size_t i = begin; i < end; ++i) {
    e.bytes += batch[i]->count * size_of(batch[i]->type);
    e.has_type = e.has_type && batch[i]->type == e.type;
    e.add_name(batch[i]->name);
  }
  return e;
}

} // namespace

engine::engine(std::unique_ptr<collectives::backend> b, const collectives::topology& topo,
               engine_options opts)
  : backend_(std::move(b)), topo_(topo), opts_(opts), planner_(opts.fusion_threshold) {
  thread_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "hvd.engine");
    loop();
  });
}

engine::~engine() {
  stop();
}

void engine::stop() {
  {
    std::lock_guard<std::mutex> lk{mu_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void engine::run(std::string name, const std::function<void(collectives::backend&)>& fn) {
  std::unique_lock<std::mutex> lk{mu_};
  if (stopping_)
    throw not_started("hvd: " + name + " after hvd::shutdown()");
  if (queue_.empty() && !busy_) {
    // Nothing ahead of us: run here and spare the hand-off.
    busy_ = true;
    lk.unlock();
    auto err = execute_one(name, fn, {});
    lk.lock();
    busy_ = false;
    // Wake the engine only if work arrived meanwhile: a needless wake-up
    // per call costs a scheduler tick on an oversubscribed machine.
    bool queued = !queue_.empty();
    lk.unlock();
    if (queued)
      cv_.notify_all();
    if (err)
      std::rethrow_exception(err);
    return;
  }
  auto p = std::make_shared<pending_op>();
  p->name = std::move(name);
  p->run = fn;
  p->submitted = std::chrono::steady_clock::now();
  queue_.push_back(p);
  lk.unlock();
  cv_.notify_all();
  wait(*p);
}

std::shared_ptr<pending_op> engine::submit(void* data, size_t count, dtype t, op o,
                                           std::string name, bool device) {
  auto p = std::make_shared<pending_op>();
  p->name = std::move(name);
  p->fusible = true;
  p->device = device;
  p->data = data;
  p->count = count;
  p->type = t;
  p->reduction = o;
  p->submitted = std::chrono::steady_clock::now();
  bool wake = false;
  {
    std::lock_guard<std::mutex> lk{mu_};
    if (stopping_)
      throw not_started("hvd: allreduce_async('" + p->name + "') after hvd::shutdown()");
    queue_.push_back(p);
    // The engine sleeps until the queue is non-empty, then until the batch
    // closes; only the first entry and a full batch need to wake it.
    wake = queue_.size() == 1 || run_closed();
  }
  if (wake)
    cv_.notify_all();
  return p;
}

void engine::wait(pending_op& p) {
  using namespace std::chrono_literals;
  if (p.done.wait_for(0s) != std::future_status::ready) {
    {
      std::lock_guard<std::mutex> lk{mu_};
      ++flush_;
    }
    cv_.notify_all();
    auto bound = 2 * opts_.timeout + 10s;
    auto status = p.done.wait_for(bound);
    bool dequeued = false;
    {
      std::lock_guard<std::mutex> lk{mu_};
      --flush_;
      if (status != std::future_status::ready) {
        // Still queued: drop it, so the engine never runs a closure whose
        // caller (and the buffers it captured) is gone. Already running:
        // keep waiting; every transfer under it has its own timeout.
        auto i = std::find_if(queue_.begin(), queue_.end(),
                              [&](const std::shared_ptr<pending_op>& q) { return q.get() == &p; });
        if (i != queue_.end()) {
          queue_.erase(i);
          dequeued = true;
        }
      }
    }
    if (status != std::future_status::ready && !dequeued)
      status = (p.done.wait(), std::future_status::ready);
    if (status != std::future_status::ready)
      throw collective_error(fmt::format(
        "hvd: {} on rank {} did not finish within {} s although every transfer has a timeout; "
        "the collectives engine is stuck (please report this)",
        p.fusible ? describe(p) : p.name, topo_.rank,
        std::chrono::duration_cast<std::chrono::seconds>(bound).count()));
  }
  p.done.get();
}

void engine::complete(pending_op& p, std::exception_ptr error) {
  if (error)
    p.promise.set_exception(error);
  else
    p.promise.set_value();
}

// True when the fusible run at the queue's front cannot grow any more.
bool engine::run_closed() const {
  std::vector<collectives::fusion_entry> run;
  for (auto& p : queue_) {
    if (!p->fusible)
      return true;
    run.push_back({p->count * size_of(p->type), p->type, p->reduction});
  }
  return planner_.batch_size(run) < run.size();
}

void engine::loop() {
  std::unique_lock<std::mutex> lk{mu_};
  for (;;) {
    cv_.wait(lk, [&] { return !busy_ && (!queue_.empty() || stopping_); });
    if (queue_.empty())
      return;
    auto head = queue_.front();
    if (!head->fusible) {
      queue_.pop_front();
      busy_ = true;
      lk.unlock();
      complete(*head, execute_one(head->name, head->run, head->submitted));
      lk.lock();
      busy_ = false;
      cv_.notify_all();
      continue;
    }
    // Let the batch grow for one cycle unless someone needs it now.
    cv_.wait_until(lk, head->submitted + opts_.cycle_time,
                   [&] { return flush_ > 0 || stopping_ || run_closed(); });
    std::vector<std::shared_ptr<pending_op>> run;
    std::vector<collectives::fusion_entry> entries;
    for (auto& p : queue_) {
      if (!p->fusible)
        break;
      run.push_back(p);
      entries.push_back({p->count * size_of(p->type), p->type, p->reduction, p->device});
    }
    size_t local = planner_.batch_size(entries);
    run.resize(local);
    busy_ = true;
    lk.unlock();
    size_t k = local;
    std::exception_ptr err;
    auto* tl = opts_.timeline;
    int64_t t0 = tl ? tl->now() : 0;
    try {
      k = negotiate(run, local);
    } catch (...) {
      err = std::current_exception();
    }
    run.resize(k);
    if (tl) {
      auto e = batch_event(run, 0, k, *backend_);
      tl->record(e, collectives::timeline_phase::queue, ns_of(run.front()->submitted), t0);
      e.failed = err != nullptr;
      tl->record(e, collectives::timeline_phase::negotiate, t0, tl->now());
    }
    lk.lock();
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(k));
    lk.unlock();
    if (err) {
      for (auto& p : run)
        complete(*p, err);
    } else {
      execute_batch(run);
    }
    lk.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

// Runs one operation that is not fused, on the calling thread; a
// `submitted` time (ops that were queued) adds their QUEUE span.
std::exception_ptr engine::execute_one(const std::string& name,
                                       const std::function<void(collectives::backend&)>& fn,
                                       std::chrono::steady_clock::time_point submitted) {
  auto* tl = opts_.timeline;
  int64_t t0 = tl ? tl->now() : 0, t1 = t0;
  std::exception_ptr err;
  try {
    if (opts_.check_names) {
      agree({name}, false);
      t1 = tl ? tl->now() : 0;
    }
    fn(*backend_);
  } catch (...) {
    err = std::current_exception();
  }
  if (tl) {
    collectives::timeline_event e;
    e.op = collectives::timeline_op_of(name);
    bool on_device = device_ && name.find("(device") != std::string::npos;
    e.set_backend(on_device ? device_->name() : backend_->name());
    e.add_name(name);
    if (submitted != std::chrono::steady_clock::time_point{})
      tl->record(e, collectives::timeline_phase::queue, ns_of(submitted), t0);
    if (t1 != t0)
      tl->record(e, collectives::timeline_phase::negotiate, t0, t1);
    e.failed = err != nullptr;
    tl->record(e, collectives::timeline_phase::op, t1, tl->now());
  }
  return err;
}

// Every rank proposes how many queued allreduces it has; all take the
// smallest count, which is a prefix of the same sequence everywhere.
size_t engine::negotiate(const std::vector<std::shared_ptr<pending_op>>& run, size_t local) {
  if (opts_.check_names) {
    std::vector<std::string> names;
    for (auto& p : run)
      names.push_back(describe(*p));
    return agree(names, true);
  }
  if (topo_.size == 1)
    return local;
  int64_t k = static_cast<int64_t>(local);
  backend_->allreduce(&k, 1, dtype::int64, op::min);
  return static_cast<size_t>(std::max<int64_t>(1, std::min<int64_t>(k, local)));
}

std::vector<std::string> engine::gather_strings(const std::string& mine) {
  auto n = static_cast<size_t>(topo_.size);
  std::vector<int64_t> lengths(n);
  int64_t my_length = static_cast<int64_t>(mine.size());
  std::vector<size_t> ones(n, 1);
  backend_->allgatherv(&my_length, lengths.data(), ones, dtype::int64);
  // Bytes travel as int32 words: Gloo has no char type here.
  std::vector<size_t> words(n);
  size_t total = 0;
  for (size_t r = 0; r < n; ++r)
    total += words[r] = (static_cast<size_t>(lengths[r]) + 3) / 4;
  std::vector<int32_t> in(words[static_cast<size_t>(topo_.rank)], 0);
  if (!mine.empty())
    std::memcpy(in.data(), mine.data(), mine.size());
  std::vector<int32_t> out(total);
  backend_->allgatherv(in.data(), out.data(), words, dtype::int32);
  std::vector<std::string> result;
  size_t offset = 0;
  for (size_t r = 0; r < n; ++r) {
    result.emplace_back(reinterpret_cast<const char*>(out.data() + offset),
                        static_cast<size_t>(lengths[r]));
    offset += words[r];
  }
  return result;
}

// HVACTOR_CHECK_NAMES: every rank shows the others what it is about to run
// and all of them stop at the first difference.
size_t engine::agree(const std::vector<std::string>& descriptors, bool batch) {
  std::string mine = batch ? "B" : "S";
  for (auto& d : descriptors)
    mine += d + '\n';
  auto all = gather_strings(mine);
  std::vector<std::vector<std::string>> lists;
  size_t common = descriptors.size();
  for (auto& text : all) {
    std::vector<std::string> list;
    size_t pos = 1;
    while (pos < text.size()) {
      auto end = text.find('\n', pos);
      list.push_back(text.substr(pos, end - pos));
      pos = end + 1;
    }
    common = std::min(common, list.size());
    lists.push_back(std::move(list));
  }
  auto what = [](const std::string& text, const std::vector<std::string>& list, size_t i) {
    if (i < list.size())
      return list[i];
    return std::string{text.empty() || text[0] == 'B' ? "an async allreduce" : "another operation"};
  };
  for (size_t r = 1; r < lists.size(); ++r) {
    bool kinds_differ = all[r][0] != all[0][0];
    for (size_t i = 0; i < std::max<size_t>(common, 1); ++i) {
      if (!kinds_differ && i < common && lists[r][i] == lists[0][i])
        continue;
      throw collective_error(fmt::format(
        "hvd: ranks disagree on collective operation #{}: rank 0 runs {} where rank {} runs {} "
        "(seen on rank {}). Every rank must submit the same collectives, with the same names, "
        "types and sizes, in the same order",
        checked_ops_ + i, what(all[0], lists[0], i), r, what(all[r], lists[r], i), topo_.rank));
    }
  }
  size_t k = batch ? std::max<size_t>(common, 1) : 1;
  checked_ops_ += k;
  return k;
}

void engine::execute_batch(std::vector<std::shared_ptr<pending_op>>& batch) {
  std::vector<collectives::fusion_entry> entries;
  for (auto& p : batch)
    entries.push_back({p->count * size_of(p->type), p->type, p->reduction, p->device});
  for (auto [begin, end] : collectives::fusion_planner::groups(entries)) {
    try {
      reduce_group(batch, begin, end);
    } catch (...) {
      auto err = std::current_exception();
      for (size_t i = begin; i < end; ++i)
        complete(*batch[i], err);
    }
  }
}

// One reduction for entries [begin, end) of one dtype and reduction; more
// than one entry goes through the fusion buffer.
void engine::reduce_group(std::vector<std::shared_ptr<pending_op>>& batch, size_t begin,
                          size_t end) {
  auto& first = *batch[begin];
  if (first.device && !device_)
    throw error(fmt::format("hvd::allreduce_async('{}') of device memory: no GPU backend in "
                            "this process ({})",
                            first.name, "see hvd::gpu_backend()"));
  auto& b = first.device ? *device_ : *backend_;
  auto elem = size_of(first.type);
  auto kind = reduce_kind(first.reduction);
  auto* tl = opts_.timeline;
  int64_t t0 = tl ? tl->now() : 0;
  if (end - begin == 1) {
    b.allreduce(first.data, first.count, first.type, kind);
    if (first.reduction == op::average)
      b.scale(first.data, first.count, first.type, topo_.size);
    b.finish();
    if (tl)
      tl->record(batch_event(batch, begin, end, b), collectives::timeline_phase::op, t0,
                 tl->now());
    complete(first, nullptr);
    return;
  }
  size_t total = 0;
  for (size_t i = begin; i < end; ++i)
    total += collectives::fusion_planner::padded(batch[i]->count * elem);
  char* buf = nullptr;
  if (first.device) {
    buf = static_cast<char*>(b.scratch(total));
  } else {
    if (fusion_buffer_.size() < total)
      fusion_buffer_.resize(std::max(total, std::min(opts_.fusion_threshold, 2 * total)));
    buf = fusion_buffer_.data();
  }
  size_t offset = 0;
  for (size_t i = begin; i < end; ++i) {
    auto bytes = batch[i]->count * elem;
    auto padded = collectives::fusion_planner::padded(bytes);
    b.copy(buf + offset, batch[i]->data, bytes);
    b.zero(buf + offset + bytes, padded - bytes);
    offset += padded;
  }
  int64_t t1 = tl ? tl->now() : 0;
  b.allreduce(buf, total / elem, first.type, kind);
  int64_t t2 = tl ? tl->now() : 0;
  offset = 0;
  for (size_t i = begin; i < end; ++i) {
    auto& p = *batch[i];
    auto bytes = p.count * elem;
    b.copy(p.data, buf + offset, bytes);
    if (p.reduction == op::average)
      b.scale(p.data, p.count, p.type, topo_.size);
    offset += collectives::fusion_planner::padded(bytes);
  }
  b.finish();
  if (tl) {
    // Device backends copy and reduce asynchronously: their spans show
    // when the work was queued, and MEMCPY_OUT includes the wait for all.
    auto e = batch_event(batch, begin, end, b);
    tl->record(e, collectives::timeline_phase::memcpy_in, t0, t1);
    tl->record(e, collectives::timeline_phase::op, t1, t2);
    tl->record(e, collectives::timeline_phase::memcpy_out, t2, tl->now());
  }
  for (size_t i = begin; i < end; ++i)
    complete(*batch[i], nullptr);
}

void engine::set_device_backend(std::unique_ptr<collectives::backend> b) {
  device_ = std::move(b);
}

} // namespace hvactor::hvd::detail
