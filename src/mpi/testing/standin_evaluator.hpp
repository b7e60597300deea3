#pragma once
// A stand-in evaluator for the MPI pool's tests and benchmark: every job takes
// a fixed time on a real-time loop and gets a verdict computed from the
// candidate alone (`judge`), so rank 0 can check what came back. Source text
// decides the verdict: "#error" fails to compile, "wrong" gives a wrong result
// with mismatch statistics (an infinite relative error among them); anything
// else is ok and profiles to a measurement derived from the source's hash.
#include <specgen/clock.hpp>
#include <specgen/evaluator.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>

#include <limits>
#include <map>
#include <stdexcept>

SPECGEN_BEGIN_NAMESPACE
namespace mpi::testing {

/// The outcome the stand-in gives `j` (busy left 0).
inline eval_outcome judge(const eval_job& j) {
  const std::uint64_t h = j.cand->content_hash();
  eval_outcome o;
  o.id = j.id;
  o.kind = j.kind;
  o.device = j.kind == stage::compile ? -1 : j.device;
  const bool broken = j.cand->source.find("#error") != std::string::npos;
  const bool wrong = j.cand->source.find("wrong") != std::string::npos;
  switch (j.kind) {
    case stage::compile:
      o.compile = {.seconds = 0.25 + static_cast<double>(h % 1000) / 3.0,
                   .cache_hit = (h & 1) != 0,
                   .registers = static_cast<int>(h % 255),
                   .spill_bytes = 0,
                   .static_smem_bytes = static_cast<int>(h % 49152)};
      if (broken)
        o.result = {.kind = verdict_kind::compile_error,
                    .summary = "error: #error directive",
                    .log = fmt::format("kernel.cu(1): error: #error directive \"{}\"",
                                       j.for_task ? j.for_task->name : ""),
                    .mismatch = {}};
      break;
    case stage::validate:
      if (wrong)
        o.result = {.kind = verdict_kind::wrong_result,
                    .summary = "out: 3 of 1000 elements outside tolerance",
                    .log = {},
                    .mismatch = mismatch_stats{.output = "out",
                                               .shape = "N=1000",
                                               .max_abs = 1.0 / 3.0,
                                               .max_rel = std::numeric_limits<double>::infinity(),
                                               .count = 3,
                                               .total = 1000,
                                               .first_indices = {7, 99, h % 1000},
                                               .nans = 1,
                                               .worst_index = 99,
                                               .worst_got = 0.1 + static_cast<double>(h % 97),
                                               .worst_want = 0}};
      break;
    case stage::profile: {
      measurement m;
      m.median_us = 1.0 + static_cast<double>(h % 100000) / 7.0;
      m.spread = 0.01 * static_cast<double>(h % 13);
      m.samples_us = {m.median_us * 0.99, m.median_us, m.median_us * 1.01};
      m.baseline_median_us = 2 * m.median_us + 0.1;
      m.speedup = m.baseline_median_us / m.median_us;
      m.sm_clock_mhz = 1980;
      m.metrics = {{"dram_throughput_pct", static_cast<double>(h % 1000) / 10.0}};
      m.baseline_of = "baseline";
      o.timing = std::move(m);
      break;
    }
  }
  return o;
}

/// `devices` devices and `compile_slots` compile slots; each job holds its
/// slot for `latency` (0: answered at once, through the loop).
class standin_evaluator {
 public:
  standin_evaluator(executor& loop, int devices, int compile_slots, duration latency)
      : loop_(loop), devices_(devices), compile_slots_(compile_slots), latency_(latency) {}
  standin_evaluator(const standin_evaluator&) = delete;
  standin_evaluator& operator=(const standin_evaluator&) = delete;
  ~standin_evaluator() {
    for (auto& [id, r] : running_) loop_.cancel(r.timer);
  }

  [[nodiscard]] int devices() const noexcept { return devices_; }
  [[nodiscard]] int compile_slots() const noexcept { return compile_slots_; }

  void submit(eval_job job, eval_callback cb) {
    if (!job.cand) throw std::logic_error(fmt::format("standin_evaluator: job {} has no candidate", job.id));
    const job_id id = job.id;
    eval_outcome o = judge(job);
    o.busy = latency_;
    auto& r = running_[id];
    r.cb = std::move(cb);
    r.kind = job.kind;
    r.device = o.device;
    r.timer = loop_.after(latency_, [this, id, o = std::move(o)]() mutable {
      auto node = running_.extract(id);
      if (!node.empty()) node.mapped().cb(std::move(o));
    });
  }

  bool cancel(job_id id) {
    auto node = running_.extract(id);
    if (node.empty()) return false;
    loop_.cancel(node.mapped().timer);
    eval_outcome o;
    o.id = id;
    o.kind = node.mapped().kind;
    o.device = node.mapped().device;
    o.cancelled = true;
    node.mapped().cb(std::move(o));
    return true;
  }

 private:
  struct running {
    eval_callback cb;
    stage kind = stage::compile;
    int device = -1;
    timer_id timer = 0;
  };
  executor& loop_;
  int devices_;
  int compile_slots_;
  duration latency_;
  std::map<job_id, running> running_;
};

static_assert(evaluator<standin_evaluator>);

}  // namespace mpi::testing
SPECGEN_END_NAMESPACE
