// gpu_pool: every configured GPU behind the `evaluator` concept (a session
// and a thread per GPU, compiles on the compiler's threads), and
// evaluate_batch, a blocking pipeline over the pool.
#include "internal.hpp"

#include <specgen/gpu/evaluation.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

using namespace eval_detail;

namespace {
using clk = std::chrono::steady_clock;

duration since(clk::time_point t0) { return std::chrono::duration_cast<duration>(clk::now() - t0); }
}  // namespace

struct gpu_pool::state {
  struct pending {
    eval_job job;
    eval_callback cb;
  };
  struct device_slot {
    std::unique_ptr<device_session> session;
    std::thread thread;
    std::condition_variable cv;
    std::deque<pending> queue;
    std::optional<job_id> running;
    bool running_cancelled = false;
    duration busy{0};
    std::uint64_t jobs = 0;
  };
  struct compile_record {
    eval_job job;
    eval_callback cb;
    clk::time_point started;
  };

  state(executor& e, pool_config c) : loop(e), config(std::move(c)) {}

  executor& loop;
  pool_config config;
  std::shared_ptr<compiler> comp;
  std::vector<std::unique_ptr<device_slot>> slots;

  mutable std::mutex mutex;
  bool stopping = false;
  std::map<job_id, compile_record> compiles;  // reported when their compile ends (or when cancelled)
  int compiles_outstanding = 0;               // compile_async callbacks still to come
  std::condition_variable compiles_cv;
  std::uint64_t compiles_done = 0;
  std::uint64_t cancelled = 0;

  /// Hands `o` to `cb` on the loop's thread and drops the job's hold there.
  void post(eval_callback cb, eval_outcome o) {
    executor& l = loop;
    loop.post([&l, cb = std::move(cb), o = std::move(o)]() mutable {
      cb(std::move(o));
      l.release();
    });
  }

  static eval_outcome cancelled_outcome(const eval_job& j, duration busy) {
    eval_outcome o;
    o.id = j.id;
    o.kind = j.kind;
    o.device = j.kind == stage::compile ? -1 : j.device;
    o.cancelled = true;
    o.busy = busy;
    return o;
  }

  void device_loop(std::size_t index) {
    device_slot& slot = *slots[index];
    while (true) {
      std::unique_lock lock(mutex);
      slot.cv.wait(lock, [&] { return stopping || !slot.queue.empty(); });
      if (slot.queue.empty()) return;  // stopping
      pending p = std::move(slot.queue.front());
      slot.queue.pop_front();
      slot.running = p.job.id;
      slot.running_cancelled = stopping;
      const bool skip = stopping;
      lock.unlock();

      eval_outcome o;
      o.id = p.job.id;
      o.kind = p.job.kind;
      o.device = p.job.device;
      if (!skip && config.before_job) {
        const device_info& dev = slot.session->device();
        try {
          config.before_job(dev.index, job_working_set_bytes(*p.job.for_task, dev));
        } catch (...) {  // advisory: a failing hook must not cost the job its device thread
        }
      }
      const auto t0 = clk::now();
      if (!skip) {
        if (p.job.kind == stage::validate) {
          o.result = slot.session->validate(*p.job.for_task, *p.job.cand);
        } else {
          evaluation e = slot.session->profile(*p.job.for_task, *p.job.cand);
          o.result = std::move(e.result);
          o.compile = e.compile;
          if (o.result.kind == verdict_kind::ok) o.timing = std::move(e.timing);
        }
      }
      o.busy = since(t0);

      lock.lock();
      o.cancelled = slot.running_cancelled;
      slot.running.reset();
      slot.busy += o.busy;
      if (o.cancelled) ++cancelled;
      else ++slot.jobs;
      lock.unlock();
      if (o.cancelled) o = cancelled_outcome(p.job, o.busy);
      post(std::move(p.cb), std::move(o));
    }
  }

  void submit_compile(eval_job job, eval_callback cb) {
    const device_info dev = slots.front()->session->device();
    const compile_options options = options_for(config.session, dev, *job.for_task);
    const job_id id = job.id;
    auto t = job.for_task;
    auto c = job.cand;
    {
      std::lock_guard lock(mutex);
      compiles.emplace(id, compile_record{std::move(job), std::move(cb), clk::now()});
      ++compiles_outstanding;
    }
    comp->compile_async(c->source, options, [this, id, t, c, dev](compiler::result r) {
      compile_outcome co;
      try {
        co = finish_compile(*t, *c, dev, r);
      } catch (const std::exception& e) {
        co.result = verdict{.kind = verdict_kind::compile_error,
                            .summary = fmt::format("internal error while checking the compile: {}", e.what()),
                            .log = {},
                            .mismatch = {}};
      }
      std::lock_guard lock(mutex);
      if (auto node = compiles.extract(id); !node.empty()) {
        compile_record& rec = node.mapped();
        eval_outcome o;
        o.id = id;
        o.kind = stage::compile;
        o.device = -1;
        o.result = std::move(co.result);
        o.compile = co.report;
        o.busy = since(rec.started);
        ++compiles_done;
        post(std::move(rec.cb), std::move(o));
      }
      --compiles_outstanding;
      compiles_cv.notify_all();  // under the lock: the pool may be destroyed right after
    });
  }
};

std::uint64_t job_working_set_bytes(const task& t, const device_info& d) {
  std::vector<shape_binding> shapes = t.validation_shapes;
  shapes.push_back(t.benchmark_shape);
  std::uint64_t largest = 0;
  for (const auto& shape : shapes) {
    std::uint64_t sum = 0;
    for (const auto* list : {&t.inputs, &t.outputs})
      for (const auto& spec : *list)
        if (auto b = tensor_bytes(spec, shape)) sum += *b;
    largest = std::max(largest, sum);
  }
  return 2 * largest + 2 * static_cast<std::uint64_t>(std::max<std::int64_t>(d.l2_bytes, 0)) + (256ull << 20);
}

expected<std::unique_ptr<gpu_pool>, error> gpu_pool::create(executor& loop, pool_config config) {
  if (loop.is_virtual())
    return unexpected(error{"gpu_pool needs a real-time executor (event_loop<steady_clock>): its threads post results"});
  std::vector<int> devices = config.devices;
  if (devices.empty()) {
    if (config.session.assumed_device) {
      devices.push_back(config.session.assumed_device->index);
    } else {
      auto n = device_count();
      if (!n) return unexpected(error{"no GPU: " + n.error().message});
      if (*n == 0) return unexpected(error{"no GPU: the driver sees no devices"});
      devices.resize(static_cast<std::size_t>(*n));
      std::iota(devices.begin(), devices.end(), 0);
    }
  }
  if (!config.session.shared_compiler)
    config.session.shared_compiler = std::make_shared<compiler>(config.session.compiler_settings);
  if (!config.session.references)
    config.session.references = std::make_shared<reference_cache>(config.session.reference_cache_bytes);
  config.devices = devices;
  auto s = std::make_unique<state>(loop, config);
  s->comp = config.session.shared_compiler;
  for (int d : devices) {
    session_config sc = config.session;
    sc.device = d;
    if (sc.assumed_device) sc.assumed_device->index = d;
    auto session = device_session::open(std::move(sc));
    if (!session) return unexpected(error{fmt::format("device {}: {}", d, session.error().message)});
    auto slot = std::make_unique<state::device_slot>();
    slot->session = std::move(*session);
    s->slots.push_back(std::move(slot));
  }
  for (std::size_t i = 0; i < s->slots.size(); ++i)
    s->slots[i]->thread = std::thread([st = s.get(), i] { st->device_loop(i); });
  return std::unique_ptr<gpu_pool>(new gpu_pool(std::move(s)));
}

gpu_pool::gpu_pool(std::unique_ptr<state> s) : state_(std::move(s)) {}

gpu_pool::~gpu_pool() {
  state& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    s.stopping = true;
    for (auto& [id, rec] : s.compiles) {
      ++s.cancelled;
      s.post(std::move(rec.cb), state::cancelled_outcome(rec.job, since(rec.started)));
    }
    s.compiles.clear();
    for (auto& slot : s.slots) {
      for (auto& p : slot->queue) {
        ++s.cancelled;
        s.post(std::move(p.cb), state::cancelled_outcome(p.job, duration{0}));
      }
      slot->queue.clear();
      if (slot->running) {
        slot->running_cancelled = true;
        slot->session->cancel();
      }
      slot->cv.notify_all();
    }
  }
  for (auto& slot : s.slots)
    if (slot->thread.joinable()) slot->thread.join();
  // NVRTC cannot be interrupted: wait for the compiles whose callbacks point here.
  std::unique_lock lock(s.mutex);
  s.compiles_cv.wait(lock, [&] { return s.compiles_outstanding == 0; });
}

int gpu_pool::devices() const noexcept { return static_cast<int>(state_->slots.size()); }

int gpu_pool::compile_slots() const noexcept {
  const unsigned t = state_->comp->config().threads;
  return static_cast<int>(t ? t : std::max(1u, std::thread::hardware_concurrency()));
}

void gpu_pool::submit(eval_job job, eval_callback done) {
  state& s = *state_;
  if (!job.cand || !job.for_task)
    throw std::logic_error(fmt::format("gpu_pool: job {} has no candidate or no task", job.id));
  if (job.kind != stage::compile && (job.device < 0 || job.device >= devices()))
    throw std::logic_error(fmt::format("gpu_pool: job {} names device {}, but there are {} (0..{})", job.id,
                                       job.device, devices(), devices() - 1));
  s.loop.hold();
  if (job.kind == stage::compile) {
    job.device = -1;
    s.submit_compile(std::move(job), std::move(done));
    return;
  }
  std::lock_guard lock(s.mutex);
  auto& slot = *s.slots[static_cast<std::size_t>(job.device)];
  slot.queue.push_back({std::move(job), std::move(done)});
  slot.cv.notify_all();
}

bool gpu_pool::cancel(job_id id) {
  state& s = *state_;
  std::lock_guard lock(s.mutex);
  if (auto node = s.compiles.extract(id); !node.empty()) {
    // The compile itself runs on (NVRTC cannot be stopped); its result is dropped.
    ++s.cancelled;
    s.post(std::move(node.mapped().cb), state::cancelled_outcome(node.mapped().job, since(node.mapped().started)));
    return true;
  }
  for (auto& slot : s.slots) {
    auto q = std::find_if(slot->queue.begin(), slot->queue.end(), [&](const auto& p) { return p.job.id == id; });
    if (q != slot->queue.end()) {
      ++s.cancelled;
      s.post(std::move(q->cb), state::cancelled_outcome(q->job, duration{0}));
      slot->queue.erase(q);
      return true;
    }
    if (slot->running == id) {
      if (!slot->running_cancelled) {
        slot->running_cancelled = true;
        slot->session->cancel();
      }
      return true;
    }
  }
  return false;
}

const device_info& gpu_pool::device(int index) const {
  return state_->slots.at(static_cast<std::size_t>(index))->session->device();
}

pool_stats gpu_pool::stats() const {
  const state& s = *state_;
  pool_stats out;
  std::lock_guard lock(s.mutex);
  for (const auto& slot : s.slots) {
    out.busy_seconds.push_back(to_seconds(slot->busy));
    out.jobs.push_back(slot->jobs);
    out.respawns += slot->session->stats().worker.respawns;
  }
  out.compiles = s.compiles_done;
  out.cancelled = s.cancelled;
  return out;
}

expected<std::vector<evaluation>, error> evaluate_batch(const pool_config& config, const task& t,
                                                        const std::vector<candidate>& candidates,
                                                        const batch_progress& progress) {
  event_loop<steady_clock> loop;
  auto created = gpu_pool::create(loop, config);
  if (!created) return unexpected(created.error());
  gpu_pool& pool = **created;

  const std::size_t n = candidates.size();
  std::vector<evaluation> results(n);
  std::vector<std::shared_ptr<const candidate>> cands;
  for (const auto& c : candidates) cands.push_back(std::make_shared<const candidate>(c));
  const auto tp = std::make_shared<const task>(t);
  std::deque<std::size_t> to_compile(n), to_validate, to_profile;
  std::iota(to_compile.begin(), to_compile.end(), std::size_t{0});
  std::vector<bool> device_busy(static_cast<std::size_t>(pool.devices()), false);
  int compiling = 0;
  job_id next_id = 1;

  auto final = [&](std::size_t i, verdict v, std::optional<measurement> timing) {
    results[i].id = cands[i]->id;
    results[i].result = std::move(v);
    results[i].timing = std::move(timing);
    if (progress) progress(i, results[i]);
  };
  std::function<void()> pump = [&] {
    while (compiling < pool.compile_slots() && !to_compile.empty()) {
      const std::size_t i = to_compile.front();
      to_compile.pop_front();
      ++compiling;
      pool.submit({.id = next_id++, .kind = stage::compile, .device = -1, .cand = cands[i], .for_task = tp},
                  [&, i](eval_outcome o) {
                    --compiling;
                    results[i].compile = o.compile;
                    if (o.result.kind != verdict_kind::ok) final(i, std::move(o.result), std::nullopt);
                    else to_validate.push_back(i);
                    pump();
                  });
    }
    for (std::size_t d = 0; d < device_busy.size(); ++d) {
      if (device_busy[d]) continue;
      const bool profile = !to_profile.empty();
      if (!profile && to_validate.empty()) break;
      auto& queue = profile ? to_profile : to_validate;
      const std::size_t i = queue.front();
      queue.pop_front();
      device_busy[d] = true;
      pool.submit({.id = next_id++,
                   .kind = profile ? stage::profile : stage::validate,
                   .device = static_cast<int>(d),
                   .cand = cands[i],
                   .for_task = tp},
                  [&, i, d, profile](eval_outcome o) {
                    device_busy[d] = false;
                    if (profile) final(i, std::move(o.result), std::move(o.timing));
                    else if (o.result.kind != verdict_kind::ok) final(i, std::move(o.result), std::nullopt);
                    else to_profile.push_back(i);
                    pump();
                  });
    }
  };
  pump();
  loop.run();
  return results;
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
