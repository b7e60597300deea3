// specgen-bench's GPU subcommands: the evaluator on real GPUs.
//
//   gpu-latency  per-candidate cost of compile (cold and cached), validation
//                and profiling; candidates per second per GPU, serially and
//                through evaluate_batch
//   gpu-spread   one kernel profiled again and again: how far its medians move
//   gpu-cupti    event timing against CUPTI's kernel durations
//   gpu-respawn  a faulting kernel, then the time until the worker serves again
//
// Stage times are wall times measured here, around the synchronous
// device_session calls (steady_clock); the API reports no per-stage split.
// Without a GPU every subcommand prints "no GPU: <reason>" and exits 0.
#include "gpu_support.hpp"
#include "support/cli.hpp"
#include "support/out_dir.hpp"
#include "support/world.hpp"

#include <specgen/gpu/evaluation.hpp>
#include <specgen/gpu/device_info.hpp>
#ifdef SPECGEN_BENCH_KV
#include <specgen/gpu/kv_store.hpp>
#endif
#include <specgen/cost_table.hpp>
#include <specgen/engine.hpp>
#include <specgen/journal.hpp>
#include <specgen/modes.hpp>
#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/trace_gen.hpp>
#include <specgen/task_io.hpp>
#ifdef SPECGEN_BENCH_OPENAI
#include "standin.hpp"

#include <specgen/backend/openai.hpp>
#include <specgen/replay/responsive.hpp>
#endif

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#ifndef SPECGEN_TASKS_DIR
#define SPECGEN_TASKS_DIR "tasks/examples"
#endif

namespace specgen::bench {
namespace {

using steady = std::chrono::steady_clock;
double since(steady::time_point t0) { return std::chrono::duration<double>(steady::now() - t0).count(); }

/// Linear interpolation between order statistics (q in [0, 1]).
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}
double median(const std::vector<double>& v) { return quantile(v, 0.5); }

/// A fresh directory for a cold compile cache, removed at the end.
struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(std::string_view tag)
      : path(std::filesystem::temp_directory_path() /
             fmt::format("specgen-bench-{}-{}-{}", tag, ::getpid(), steady::now().time_since_epoch().count())) {
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

std::vector<task> load_tasks(const programs::options& a) {
  const std::string dir = a.get("tasks", SPECGEN_TASKS_DIR);
  auto suite = load_suite(dir);
  if (!suite) throw std::invalid_argument(suite.error().what());
  std::vector<task> out;
  for (auto& t : *suite)
    if (!a.has("task") || t.name == a.get("task")) out.push_back(std::move(t));
  if (out.empty()) throw std::invalid_argument(fmt::format("no task '{}' in {}", a.get("task"), dir));
  return out;
}

/// A level-1-sized kernel: one of a task's own implementations, or a block
/// size variant of one (every "256" of the plan replaced consistently).
struct kernel {
  std::string label;
  implementation impl;
};
std::vector<kernel> kernels_of(const task& t) {
  std::vector<kernel> out;
  auto add = [&](const std::string& label, const implementation& impl) {
    if (impl.is_host()) return;
    out.push_back({label, impl});
    if (impl.plan.find("256") == std::string::npos) return;
    for (const char* block : {"128", "512"}) {
      implementation v = impl;
      for (auto p = v.plan.find("256"); p != std::string::npos; p = v.plan.find("256", p + 3)) v.plan.replace(p, 3, block);
      out.push_back({fmt::format("{}/block{}", label, block), v});
    }
  };
  add("reference", t.reference);
  if (t.baseline != t.reference) add("baseline", t.baseline);
  return out;
}

/// A candidate for `impl` whose source is unique to `salt`, so its compile is really cold.
candidate make_candidate(const task& t, const implementation& impl, std::uint64_t id, std::uint64_t salt) {
  return {.id = id,
          .task = t.name,
          .source = salt ? fmt::format("#define SPECGEN_BENCH_SALT {}\n{}", salt, impl.source) : impl.source,
          .plan = impl.plan};
}

gpu::session_config session_for(int device, const std::string& cache_dir) {
  gpu::session_config c;
  c.device = device;
  c.compiler_settings.cache_dir = cache_dir;
  return c;
}

std::unique_ptr<gpu::device_session> open_session(const gpu::session_config& c) {
  auto s = gpu::device_session::open(c);
  if (!s) throw std::runtime_error(fmt::format("cannot open a session on GPU {}: {}", c.device, s.error().what()));
  return std::move(*s);
}

nlohmann::json device_json(const gpu::device_info& d, int gpus) {
  return {{"name", d.name}, {"arch", d.arch}, {"index", d.index}, {"visible_gpus", gpus}};
}

std::string verdict_text(const verdict& v) {
  return v.kind == verdict_kind::ok ? "ok" : fmt::format("{} ({})", to_string(v.kind), v.summary);
}

// ---- gpu-latency -----------------------------------------------------------------------

int bench_latency(const programs::options& a) {
  const auto tasks = load_tasks(a);
  const int reps = a.number<int>("reps", 3);
  if (reps < 1) throw std::invalid_argument("--reps must be at least 1");
  const auto gpus = gpus_or_explain();
  if (!gpus) return 0;
  const int device = a.number<int>("device", 0);

  temp_dir cold("latency");
  auto config = session_for(device, cold.path.string());
  // --hardware-metrics: the range-profiler pass too (its cost shows in the profile time).
  config.profile.hardware_metrics = a.has("hardware-metrics");
  config.shared_compiler = std::make_shared<gpu::compiler>(config.compiler_settings);
  const auto compiler = config.shared_compiler;
  auto s = open_session(config);
  // The checks as they were before the repeated-call check and the shared-memory
  // poison: each case in its own call, a fresh module every run, no poison.
  // Same compiler and reference outputs; its validation is timed beside the default's.
  auto before_config = s->config();  // its compiler and reference cache
  before_config.validation.same_module = false;
  before_config.validation.shared_memory_poison.clear();
  auto before = open_session(before_config);
  fmt::print("specgen-bench gpu-latency: {} ({}), {} task(s) x their kernels x {} rep(s); cold cache {}\n",
             s->device().name, s->device().arch, tasks.size(), reps, cold.path.string());

  // The first evaluation of a task computes its reference outputs (kept for
  // the rest of the search): done once per task here, outside the timings.
  nlohmann::json warmups = nlohmann::json::object();
  for (const auto& t : tasks) {
    const auto t0 = steady::now();
    const evaluation e = s->evaluate(t, make_candidate(t, t.reference, 0, 0));
    warmups[t.name] = {{"seconds", since(t0)}, {"verdict", to_string(e.result.kind)}};
    (void)before->validate(t, make_candidate(t, t.reference, 0, 0));  // its worker's first context and module
    if (e.result.kind != verdict_kind::ok)
      throw std::runtime_error(fmt::format("{}: the reference itself fails: {}", t.name, verdict_text(e.result)));
  }
  // Started by the warm-up above, so no timing below includes a helper's start.
  fmt::print("compiles run in {}\n", compiler->sandbox());

  struct row {
    std::string name{}, verdict{};
    double cold = 0, cached = 0, validate = 0, profile = 0, total = 0, nvrtc = 0, median_us = 0;
    double validate_before = 0, total_before = 0;  // the checks without repeated calls and shared-memory poison
    std::string verdict_before{};
    bool cold_hit = false;
    std::map<std::string, double> metrics{};  // the profiler's, incl. the worker's phase times
  };
  std::vector<row> rows;
  std::uint64_t salt = 1;
  fmt::print("\n{:<32} {:>8} {:>8} {:>10} {:>9} {:>8} {:>10}  {}\n", "candidate", "cold s", "cached s", "validate s",
             "profile s", "total s", "median us", "verdict");
  for (const auto& t : tasks)
    for (const auto& k : kernels_of(t))
      for (int r = 0; r < reps; ++r) {
        const candidate c = make_candidate(t, k.impl, salt, salt);
        ++salt;
        row w{.name = fmt::format("{}/{}#{}", t.name, k.label, r)};
        auto t0 = steady::now();
        const gpu::compile_outcome built = s->compile(t, c);
        w.cold = since(t0);
        if (built.binary) {
          w.nvrtc = built.binary->seconds;
          w.cold_hit = built.binary->cache_hit;
        }
        t0 = steady::now();
        (void)s->compile(t, c);
        w.cached = since(t0);
        verdict v = built.result;
        if (v.kind == verdict_kind::ok) {
          // Both validations, in alternating order, so neither always runs on a warmer GPU.
          auto time_before = [&] {
            const auto b0 = steady::now();
            w.verdict_before = verdict_text(before->validate(t, c));
            w.validate_before = since(b0);
          };
          if (r % 2 == 1) time_before();
          t0 = steady::now();
          v = s->validate(t, c);
          w.validate = since(t0);
          if (r % 2 == 0) time_before();
        }
        if (v.kind == verdict_kind::ok) {
          t0 = steady::now();
          const evaluation e = s->profile(t, c);
          w.profile = since(t0);
          v = e.result;
          if (e.timing) {
            w.median_us = e.timing->median_us;
            w.metrics = e.timing->metrics;
          }
        }
        w.verdict = verdict_text(v);
        w.total = w.cold + w.validate + w.profile;
        w.total_before = w.cold + w.validate_before + w.profile;
        fmt::print("{:<32} {:>8.3f} {:>8.4f} {:>10.3f} {:>9.3f} {:>8.3f} {:>10.1f}  {}{}\n", w.name, w.cold, w.cached,
                   w.validate, w.profile, w.total, w.median_us, w.verdict, w.cold_hit ? " (compile was a cache hit!)" : "");
        rows.push_back(std::move(w));
      }

  auto column = [&](double row::*field) {
    std::vector<double> v;
    for (const auto& r : rows) v.push_back(r.*field);
    return v;
  };
  const std::vector<std::pair<std::string, double row::*>> stages{{"compile_cold", &row::cold},
                                                                  {"compile_nvrtc", &row::nvrtc},
                                                                  {"compile_cached", &row::cached},
                                                                  {"load_validate", &row::validate},
                                                                  {"load_validate_before", &row::validate_before},
                                                                  {"profile", &row::profile},
                                                                  {"total", &row::total},
                                                                  {"total_before", &row::total_before}};
  nlohmann::json stage_json = nlohmann::json::object();
  fmt::print("\n{:<16} {:>10} {:>10}   over {} candidates\n", "stage (s)", "median", "p90", rows.size());
  for (const auto& [name, field] : stages) {
    const auto v = column(field);
    stage_json[name] = {{"median", median(v)}, {"p90", quantile(v, 0.9)}};
    fmt::print("{:<16} {:>10.4f} {:>10.4f}\n", name, median(v), quantile(v, 0.9));
  }
  double serial_seconds = 0;
  for (const auto& r : rows) serial_seconds += r.total;
  const double serial_rate = static_cast<double>(rows.size()) / serial_seconds;

  // The same candidates (salted anew, cold cache again) through evaluate_batch on every GPU.
  temp_dir cold2("latency-batch");
  gpu::pool_config pool;
  pool.session = session_for(0, cold2.path.string());
  double batch_seconds = 0;
  std::size_t batch_candidates = 0;
  for (const auto& t : tasks) {
    std::vector<candidate> cs;
    for (const auto& k : kernels_of(t))
      for (int r = 0; r < reps; ++r, ++salt) cs.push_back(make_candidate(t, k.impl, salt, salt));
    const auto t0 = steady::now();
    auto evals = gpu::evaluate_batch(pool, t, cs);
    batch_seconds += since(t0);
    if (!evals) throw std::runtime_error(fmt::format("evaluate_batch: {}", evals.error().what()));
    batch_candidates += cs.size();
  }
  const double batch_rate = static_cast<double>(batch_candidates) / batch_seconds;
  const double target = 0.3, med_total = median(column(&row::total));

  fmt::print("\nserially on GPU {}: {:.2f} candidates/s\n", device, serial_rate);
  fmt::print("evaluate_batch on {} GPU(s): {:.2f} candidates/s, {:.2f} per GPU (one batch per task; each starts its "
             "pool and computes its reference outputs)\n",
             *gpus, batch_rate, batch_rate / *gpus);
  const double med_validate = median(column(&row::validate)), med_validate_before = median(column(&row::validate_before));
  fmt::print("validation, side by side on the same candidates: {:.4f} s median with the repeated-call check and the "
             "shared-memory poison, {:.4f} s without (one call per case, a fresh module every run): ratio {:.2f}\n",
             med_validate, med_validate_before, med_validate_before > 0 ? med_validate / med_validate_before : 0.0);
  fmt::print("target: median evaluation (cold compile + validation on all shapes + profiling) <= {:.1f} s: {:.3f} s, "
             "{} (without the new checks: {:.3f} s)\n",
             target, med_total, med_total <= target ? "met" : "missed", median(column(&row::total_before)));

  nlohmann::json cands = nlohmann::json::array();
  for (const auto& r : rows)
    cands.push_back({{"name", r.name}, {"verdict", r.verdict}, {"compile_cold_s", r.cold}, {"compile_nvrtc_s", r.nvrtc},
                     {"compile_cold_was_hit", r.cold_hit}, {"compile_cached_s", r.cached}, {"load_validate_s", r.validate},
                     {"profile_s", r.profile}, {"total_s", r.total}, {"median_us", r.median_us},
                     {"load_validate_before_s", r.validate_before}, {"total_before_s", r.total_before},
                     {"verdict_before", r.verdict_before},
                     {"metrics", r.metrics}});
  write_json(a, {{"benchmark", "gpu-latency"},
                 {"compile_sandbox", compiler->sandbox()},
                 {"method", "wall time around device_session::compile/validate/profile (steady_clock); reference "
                            "outputs computed before timing; salted sources, fresh cache dir"},
                 {"device", device_json(s->device(), *gpus)},
                 {"reps", reps},
                 {"reference_warmup", warmups},
                 {"candidates", cands},
                 {"stages", stage_json},
                 {"serial", {{"candidates", rows.size()}, {"seconds", serial_seconds}, {"candidates_per_second_per_gpu", serial_rate}}},
                 {"batch", {{"gpus", *gpus}, {"candidates", batch_candidates}, {"seconds", batch_seconds},
                            {"candidates_per_second", batch_rate}, {"candidates_per_second_per_gpu", batch_rate / *gpus}}},
                 {"validation_checks", {{"median_validate_s", med_validate},
                                        {"median_validate_before_s", med_validate_before},
                                        {"ratio", med_validate_before > 0 ? med_validate / med_validate_before : 0.0},
                                        {"before", "each case in its own call, a fresh module instance every run, no "
                                                   "shared-memory poison"}}},
                 {"target", {{"median_total_s_max", target}, {"median_total_s", med_total}, {"met", med_total <= target},
                             {"median_total_before_s", median(column(&row::total_before))}}}});
  return 0;
}

// ---- gpu-spread ------------------------------------------------------------------------

int bench_spread(const programs::options& a) {
  const auto tasks = load_tasks(a);
  const int runs = a.number<int>("runs", 20);
  if (runs < 2) throw std::invalid_argument("--runs must be at least 2");
  const auto gpus = gpus_or_explain();
  if (!gpus) return 0;
  auto s = open_session(session_for(a.number<int>("device", 0), ""));
  fmt::print("specgen-bench gpu-spread: {} ({}), each task's baseline profiled {} times as a candidate\n\n",
             s->device().name, s->device().arch, runs);
  fmt::print("{:<12} {:>12} {:>10} {:>10} {:>11} {:>13}  {}\n", "task", "median us", "min us", "max us", "range/med",
             "med speedup", "within 1%");
  const double target = 0.01;
  nlohmann::json out = nlohmann::json::array();
  bool all_met = true;
  for (const auto& t : tasks) {
    if (t.baseline.is_host()) continue;
    const candidate c = make_candidate(t, t.baseline, 1, 0);
    std::vector<double> medians, baseline_medians, speedups;
    for (int r = 0; r < runs; ++r) {
      const evaluation e = s->profile(t, c);
      if (!e.timing) throw std::runtime_error(fmt::format("{}: {}", t.name, verdict_text(e.result)));
      medians.push_back(e.timing->median_us);
      baseline_medians.push_back(e.timing->baseline_median_us);
      speedups.push_back(e.timing->speedup);
    }
    const double med = median(medians), lo = *std::min_element(medians.begin(), medians.end()),
                 hi = *std::max_element(medians.begin(), medians.end()), rel = (hi - lo) / med;
    all_met = all_met && rel <= target;
    fmt::print("{:<12} {:>12.2f} {:>10.2f} {:>10.2f} {:>10.2f}% {:>12.3f}x  {}\n", t.name, med, lo, hi, 100 * rel,
               median(speedups), rel <= target ? "yes" : "no");
    out.push_back({{"task", t.name}, {"runs", runs}, {"medians_us", medians}, {"baseline_medians_us", baseline_medians},
                   {"speedups", speedups}, {"median_of_medians_us", med}, {"min_us", lo}, {"max_us", hi},
                   {"range_over_median", rel}, {"met", rel <= target}});
  }
  fmt::print("\ntarget: (max - min) / median of {} fresh profiles within {:.0f}%: {}\n", runs, 100 * target,
             all_met ? "met" : "missed");
  write_json(a, {{"benchmark", "gpu-spread"},
                 {"method", "device_session::profile called again for the same candidate (the task's baseline, so the "
                            "speedup should be 1); default profile_config"},
                 {"device", device_json(s->device(), *gpus)},
                 {"tasks", out},
                 {"target", {{"range_over_median_max", target}, {"met", all_met}}}});
  return 0;
}

// ---- gpu-cupti -------------------------------------------------------------------------

/// (CUPTI kernel time - event time) / event time, medians over the CUPTI
/// pass's runs, as the profiler reports it; nothing when CUPTI did not run.
std::optional<double> event_vs_cupti(const measurement& m) {
  if (auto it = m.metrics.find("event_vs_cupti"); it != m.metrics.end()) return it->second;
  return std::nullopt;
}

int bench_cupti(const programs::options& a) {
  const auto tasks = load_tasks(a);
  const auto gpus = gpus_or_explain();
  if (!gpus) return 0;
  auto s = open_session(session_for(a.number<int>("device", 0), ""));
  fmt::print("specgen-bench gpu-cupti: {} ({}), event timing vs CUPTI kernel durations\n\n", s->device().name,
             s->device().arch);
  fmt::print("{:<32} {:>10} {:>13}  {}\n", "kernel", "median us", "CUPTI - event", "within 2%");
  const double target = 0.02;
  nlohmann::json out = nlohmann::json::array();
  bool all_met = true, any = false;
  for (const auto& t : tasks)
    for (const auto& k : kernels_of(t)) {
      const evaluation e = s->profile(t, make_candidate(t, k.impl, 1, 0));
      const std::string name = fmt::format("{}/{}", t.name, k.label);
      if (!e.timing) throw std::runtime_error(fmt::format("{}: {}", name, verdict_text(e.result)));
      const auto d = event_vs_cupti(*e.timing);
      if (d) {
        any = true;
        all_met = all_met && std::abs(*d) <= target;
      }
      fmt::print("{:<32} {:>10.2f} {:>13}  {}\n", name, e.timing->median_us,
                 d ? fmt::format("{:+.2f}%", 100 * *d) : "-", d ? (std::abs(*d) <= target ? "yes" : "no") : "not reported");
      nlohmann::json metrics(e.timing->metrics);
      out.push_back({{"kernel", name}, {"median_us", e.timing->median_us},
                     {"event_vs_cupti", d ? nlohmann::json(*d) : nlohmann::json(nullptr)}, {"metrics", metrics}});
    }
  if (any)
    fmt::print("\ntarget: event and CUPTI timings within {:.0f}%: {}\n", 100 * target, all_met ? "met" : "missed");
  else
    fmt::print("\nthe profiler reported no event-vs-CUPTI comparison (measurement.metrics[\"event_vs_cupti\"]); "
               "CUPTI may be unavailable here\n");
  write_json(a, {{"benchmark", "gpu-cupti"},
                 {"method", "device_session::profile with cupti_check on; measurement.metrics[\"event_vs_cupti\"]"},
                 {"device", device_json(s->device(), *gpus)},
                 {"kernels", out},
                 {"target", {{"relative_difference_max", target}, {"met", any && all_met}}}});
  return 0;
}

// ---- gpu-respawn -----------------------------------------------------------------------

constexpr const char* faulting_vector_add = R"cu(
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) *reinterpret_cast<volatile float*>(0x8) = a[i] + b[i];  // illegal address
}
)cu";

int bench_respawn(const programs::options& a) {
  const auto tasks = load_tasks(a);
  const auto it = std::find_if(tasks.begin(), tasks.end(), [](const task& t) { return t.name == "vector_add"; });
  if (it == tasks.end()) throw std::invalid_argument("gpu-respawn needs the vector_add task (--tasks DIR)");
  const task& t = *it;
  const int runs = a.number<int>("runs", 10);
  if (runs < 1) throw std::invalid_argument("--runs must be at least 1");
  const auto gpus = gpus_or_explain();
  if (!gpus) return 0;

  // One case, one repeat: the next call is a short validation, so its time is mostly the new worker.
  auto cfg = session_for(a.number<int>("device", 0), "");
  cfg.validation.cases = {{.seed = 1}};
  cfg.validation.repeats = 1;
  auto s = open_session(cfg);
  const candidate good = make_candidate(t, t.reference, 1, 0);
  candidate bad = good;
  bad.id = 2;
  bad.source = faulting_vector_add;
  if (const verdict v = s->validate(t, good); v.kind != verdict_kind::ok)  // warm: references, modules
    throw std::runtime_error("the reference fails: " + verdict_text(v));
  auto t0 = steady::now();
  (void)s->validate(t, good);
  const double steady_call = since(t0);
  fmt::print("specgen-bench gpu-respawn: {} ({}), {} faults; a validation call without a fault takes {:.3f} s\n\n",
             s->device().name, s->device().arch, runs, steady_call);
  fmt::print("{:>4} {:<8} {:>12} {:>12} {:>12}\n", "run", "verdict", "fault call s", "respawn s", "next call s");

  std::vector<double> fault_calls, respawns, next_calls;
  bool all_faulted = true;
  for (int r = 0; r < runs; ++r) {
    const auto before = s->stats().worker.respawns;
    t0 = steady::now();
    const verdict v = s->validate(t, bad);
    fault_calls.push_back(since(t0));
    t0 = steady::now();
    const verdict next = s->validate(t, good);
    next_calls.push_back(since(t0));
    if (next.kind != verdict_kind::ok) throw std::runtime_error("after the fault: " + verdict_text(next));
    const auto st = s->stats().worker;
    respawns.push_back(st.last_respawn_seconds);
    all_faulted = all_faulted && v.kind == verdict_kind::fault && st.respawns > before;
    fmt::print("{:>4} {:<8} {:>12.3f} {:>12.3f} {:>12.3f}\n", r + 1, to_string(v.kind), fault_calls.back(),
               respawns.back(), next_calls.back());
  }
  const double target = 1.0, worst = *std::max_element(respawns.begin(), respawns.end()),
               worst_next = *std::max_element(next_calls.begin(), next_calls.end());
  const bool met = all_faulted && worst <= target && worst_next <= target;
  fmt::print("\nrespawn (failure detected -> new worker's hello): median {:.3f} s, max {:.3f} s\n", median(respawns),
             worst);
  fmt::print("next successful call after a fault: median {:.3f} s, max {:.3f} s (without a fault: {:.3f} s)\n",
             median(next_calls), worst_next, steady_call);
  fmt::print("target: worker ready again within {:.0f} s: {}{}\n", target, met ? "met" : "missed",
             all_faulted ? "" : " (not every run faulted and respawned)");
  write_json(a, {{"benchmark", "gpu-respawn"},
                 {"method", "device_session::validate of an illegal-address kernel, then of a correct one; "
                            "worker_stats.last_respawn_seconds and steady_clock wall times; 1 case x 1 repeat"},
                 {"device", device_json(s->device(), *gpus)},
                 {"runs", runs},
                 {"call_without_fault_s", steady_call},
                 {"fault_call_s", fault_calls},
                 {"respawn_s", respawns},
                 {"next_call_s", next_calls},
                 {"all_faulted_and_respawned", all_faulted},
                 {"target", {{"seconds_max", target}, {"max_respawn_s", worst}, {"max_next_call_s", worst_next}, {"met", met}}}});
  return 0;
}

// ---- calibrate ---------------------------------------------------------------------------

/// One labelled candidate of a suite (tasks/suite/candidates/<task>/<name>.json).
struct labelled {
  std::string task, name, source, plan;
  std::vector<std::string> expect;  ///< any of these verdicts (a race may show as either)
  std::string speed, why;
};

std::vector<labelled> load_candidates(const std::filesystem::path& dir) {
  std::vector<labelled> out;
  if (!std::filesystem::is_directory(dir)) return out;
  std::vector<std::filesystem::path> files;
  for (const auto& task_dir : std::filesystem::directory_iterator(dir))
    if (task_dir.is_directory())
      for (const auto& f : std::filesystem::directory_iterator(task_dir.path()))
        if (f.path().extension() == ".json") files.push_back(f.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f);
    const auto j = nlohmann::json::parse(in, nullptr, true, true);
    auto text = [&](const char* key) {
      const auto& v = j.at(key);
      if (!v.is_array()) return v.get<std::string>();
      std::string lines;
      for (const auto& l : v) lines += l.get<std::string>() + "\n";
      return lines;
    };
    labelled c{.task = j.at("task").get<std::string>(),
               .name = j.at("name").get<std::string>(),
               .source = {},
               .plan = text("plan"),
               .expect = j.at("expect").is_array() ? j.at("expect").get<std::vector<std::string>>()
                                                   : std::vector<std::string>{j.at("expect").get<std::string>()},
               .speed = j.value("speed", ""),
               .why = j.value("why", "")};
    std::ifstream src(f.parent_path() / j.at("source_file").get<std::string>(), std::ios::binary);
    if (!src) throw std::runtime_error(fmt::format("{}: cannot read its source_file", f.string()));
    c.source.assign(std::istreambuf_iterator<char>(src), std::istreambuf_iterator<char>());
    out.push_back(std::move(c));
  }
  return out;
}

/// Relative standard deviation of one sample, robustly (1.4826 MAD / median).
double sample_noise(std::vector<double> v) {
  if (v.size() < 2) return 0;
  const double m = median(v);
  for (auto& x : v) x = std::abs(x - m);
  return m > 0 ? 1.4826 * median(v) / m : 0;
}

/// Every candidate of a suite through compile, validate and profile on one
/// GPU: the cost table the simulated device answers from, and each observed
/// verdict and speed checked against its label.
int bench_calibrate(const programs::options& a) {
  const std::filesystem::path suite = a.has("suite") ? std::filesystem::path(a.get("suite")) : programs::default_suite_dir();
  auto tasks = load_suite(suite / "tasks");
  if (!tasks) throw std::runtime_error(tasks.error().what());
  std::vector<labelled> cands = load_candidates(suite / "candidates");
  if (a.has("task"))
    std::erase_if(cands, [&](const labelled& c) { return c.task != a.get("task"); });
  const auto gpus = gpus_or_explain();
  if (!gpus) return 0;
  temp_dir cache("calibrate");
  auto config = session_for(a.number<int>("device", 0), cache.path.string());
  auto s = open_session(config);
  const auto started = steady::now();
  fmt::print("specgen-bench calibrate: {} ({}), {} tasks, {} candidates\n", s->device().name, s->device().arch,
             tasks->size(), cands.size());

  cost_table table;
  nlohmann::json rows = nlohmann::json::array();
  nlohmann::json task_rows = nlohmann::json::array();
  std::vector<double> overheads;
  int verdict_mismatches = 0, speed_mismatches = 0;
  fmt::print("{:<18} {:<30} {:>8} {:>8} {:>8} {:>10} {:>10} {:>7}  {:<14} {}\n", "task", "candidate", "compile", "validate",
             "profile", "median us", "base us", "speedup", "verdict", "label check");
  for (const auto& t : *tasks) {
    if (std::none_of(cands.begin(), cands.end(), [&](const labelled& c) { return c.task == t.name; })) continue;
    // The first evaluation of a task computes its reference outputs: outside
    // the candidates' timings. It also times the reference against the
    // baseline, interleaved on this GPU: the suite's reference and baseline times.
    const evaluation warm = s->evaluate(t, make_candidate(t, t.reference, 0, 0));
    if (warm.result.kind != verdict_kind::ok)
      fmt::print("{}: the reference itself gets {}\n", t.name, verdict_text(warm.result));
    if (warm.timing)
      task_rows.push_back({{"task", t.name},
                           {"reference_us", warm.timing->median_us},
                           {"baseline_us", warm.timing->baseline_median_us},
                           {"baseline_speedup_over_reference", warm.timing->speedup},
                           {"verdict", to_string(warm.result.kind)}});
    for (const auto& c : cands) {
      if (c.task != t.name) continue;
      const candidate cand{.id = table.kernels.size() + 1, .task = t.name, .source = c.source, .plan = c.plan};
      cost_entry e{.task = t.name, .label = c.name};
      auto t0 = steady::now();
      const gpu::compile_outcome built = s->compile(t, cand);
      e.compile_s = built.binary ? built.binary->seconds : since(t0);
      verdict v = built.result;
      if (v.kind == verdict_kind::ok) {
        t0 = steady::now();
        v = s->validate(t, cand);
        e.validate_s = since(t0);
      }
      std::optional<measurement> m;
      double profile_wall = 0;
      if (v.kind == verdict_kind::ok) {
        t0 = steady::now();
        const evaluation ev = s->profile(t, cand);
        profile_wall = since(t0);
        v = ev.result;
        m = ev.timing;
      }
      e.verdict = v.kind;
      e.summary = v.summary;
      e.log = v.log.substr(0, 2000);
      double speedup = 0;
      if (m) {
        e.runtime_us = m->median_us;
        e.baseline_us = m->baseline_median_us;
        e.noise = sample_noise(m->samples_us);
        speedup = m->speedup;
        if (auto it = m->metrics.find("worker_sampling_s"); it != m->metrics.end())
          overheads.push_back(profile_wall - it->second);
      }
      const bool verdict_ok = std::find(c.expect.begin(), c.expect.end(), to_string(v.kind)) != c.expect.end();
      std::string speed_seen;
      if (v.kind == verdict_kind::ok && speedup > 0)
        speed_seen = speedup >= 1.1 ? "faster" : speedup <= 0.9 ? "slower" : "similar";  // docs/suite.md
      const bool speed_ok = c.speed.empty() || speed_seen.empty() || c.speed == speed_seen;
      verdict_mismatches += verdict_ok ? 0 : 1;
      speed_mismatches += speed_ok ? 0 : 1;
      const std::string check = !verdict_ok ? fmt::format("VERDICT expected {}", fmt::join(c.expect, " or "))
                                : !speed_ok ? fmt::format("SPEED labelled {}, measured {}", c.speed, speed_seen)
                                            : "as labelled";
      fmt::print("{:<18} {:<30} {:>8.3f} {:>8.3f} {:>8.3f} {:>10.1f} {:>10.1f} {:>7.2f}  {:<14} {}\n", t.name, c.name,
                 e.compile_s, e.validate_s, profile_wall, e.runtime_us, e.baseline_us, speedup, to_string(v.kind), check);
      rows.push_back({{"task", t.name},
                      {"candidate", c.name},
                      {"expect", c.expect},
                      {"speed_label", c.speed},
                      {"verdict", to_string(v.kind)},
                      {"summary", v.summary},
                      {"speed_seen", speed_seen},
                      {"speedup", speedup},
                      {"compile_s", e.compile_s},
                      {"validate_s", e.validate_s},
                      {"profile_s", profile_wall},
                      {"median_us", e.runtime_us},
                      {"baseline_us", e.baseline_us},
                      {"noise", e.noise},
                      {"metrics", m ? nlohmann::json(m->metrics) : nlohmann::json(nullptr)},
                      {"verdict_as_labelled", verdict_ok},
                      {"speed_as_labelled", speed_ok}});
      table.kernels[source_key(c.source)] = std::move(e);
    }
  }
  const auto driver = []() -> std::string {
    std::ifstream v("/proc/driver/nvidia/version");
    std::string line;
    std::getline(v, line);
    return line;
  }();
  if (!overheads.empty()) table.profile.overhead_s = median(overheads);
  table.profile.min_samples = config.profile.min_samples;
  table.profile.max_samples = config.profile.max_samples;
  table.profile.warmup = config.profile.warmup;
  table.profile.noise_target = config.profile.target_noise;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  table.device = fmt::format("{} ({}), {}, measured {} by specgen-bench calibrate", s->device().name,
                             s->device().arch, driver.empty() ? "driver unknown" : driver, date);
  fmt::print("\n{} candidates in {:.0f} s: {} verdicts and {} speed labels differ from their labels; profile overhead "
             "median {:.3f} s\n",
             rows.size(), since(started), verdict_mismatches, speed_mismatches, table.profile.overhead_s);
  fmt::print("\n{:<22} {:>14} {:>14} {:>10}\n", "task", "reference us", "baseline us", "ref/base");
  for (const auto& r : task_rows)
    fmt::print("{:<22} {:>14.1f} {:>14.1f} {:>9.2f}x\n", r["task"].get<std::string>(), r["reference_us"].get<double>(),
               r["baseline_us"].get<double>(), r["baseline_speedup_over_reference"].get<double>());
  if (a.has("table")) {
    std::ofstream f(a.get("table"));
    f << nlohmann::json(table).dump(2) << '\n';
    if (!f) throw std::runtime_error(fmt::format("cannot write {}", a.get("table")));
    fmt::print("wrote {}\n", a.get("table"));
  }
  write_json(a, {{"benchmark", "calibrate"},
                 {"device", table.device},
                 {"tasks", task_rows},
                 {"candidates", rows},
                 {"verdict_mismatches", verdict_mismatches},
                 {"speed_mismatches", speed_mismatches},
                 {"seconds", since(started)}});
  return 0;
}

// ---- e2e-live ----------------------------------------------------------------------------

/// Wraps a backend and notes, for each fork, when the library began working
/// on it: the arrival of the reasoning chunk whose delivery fired the trigger
/// (the fork is requested inside that delivery), or the fork call itself for a
/// trigger fired outside one (idle GPUs). Matched afterwards with the time the
/// server received the request's first byte.
template <backend B>
class fork_timer : private stream_sink {
 public:
  explicit fork_timer(B& inner) : inner_(inner) {}
  backend_limits limits() const { return inner_.limits(); }
  expected<stream_id, error> start_reasoning(const reasoning_request& r, stream_sink& sink) {
    auto id = inner_.start_reasoning(r, *this);
    if (id) sinks_[*id] = &sink;
    return id;
  }
  expected<stream_id, error> fork(const fork_request& f, stream_sink& sink) {
    const auto began = delivering_ ? *delivering_ : steady::now();
    auto id = inner_.fork(f, *this);
    if (id) {
      sinks_[*id] = &sink;
      began_[*id] = began;
    }
    return id;
  }
  void cancel(stream_id id) { inner_.cancel(id); }
  [[nodiscard]] const std::map<stream_id, steady::time_point>& fork_began() const { return began_; }

 private:
  void on_chunk(const stream_chunk& c) override {
    delivering_ = steady::now();
    sinks_.at(c.id)->on_chunk(c);
    delivering_.reset();
  }
  void on_end(const stream_end& e) override {
    auto it = sinks_.find(e.id);
    if (it != sinks_.end()) it->second->on_end(e);
  }
  B& inner_;
  std::map<stream_id, stream_sink*> sinks_;
  std::map<stream_id, steady::time_point> began_;
  std::optional<steady::time_point> delivering_;
};

/// The e2e comparison on real GPUs in real time: the replay model at its
/// calibrated decode speed, `gpu_pool` on every visible GPU as the evaluator,
/// a subset of a corpus small enough for minutes. The same subset also runs
/// in virtual time on the simulated device (the corpus's measured cost
/// table), so the two are reported side by side.
int bench_e2e_live(const programs::options& a) {
  // --journal-dir is an output directory: one run at a time may write its journals.
  std::optional<programs::out_dir_lock> journal_lock;
  if (a.has("journal-dir")) {
    auto lock = programs::out_dir_lock::acquire(a.get("journal-dir"));
    if (!lock) throw std::invalid_argument(lock.error().what());
    journal_lock.emplace(std::move(*lock));
  }
  const std::filesystem::path dir = a.has("corpus") ? std::filesystem::path(a.get("corpus")) : programs::default_suite_dir();
  auto corpus = replay::load_corpus(dir);
  if (!corpus) throw std::runtime_error(corpus.error().what());
  const int keep = a.number<int>("live-tasks", 4);
  const int rounds = a.number<int>("rounds", 2);
  const double target = a.number<double>("target", 2.0);
  const double max_seconds = a.number<double>("max-seconds", 240);
  if (a.has("task")) {
    std::erase_if(corpus->tasks, [&](const task& t) { return t.name != a.get("task"); });
  } else if (static_cast<int>(corpus->tasks.size()) > keep) {
    // The tasks whose first `rounds` rounds take the least reasoning: real time is the cost here.
    std::map<std::string, std::map<int, std::uint64_t>> per_round;
    for (const auto& tr : corpus->traces)
      if (tr.round < rounds) per_round[tr.task][tr.round] = std::max(per_round[tr.task][tr.round], tr.reasoning_tokens());
    auto cost = [&](const task& t) {
      std::uint64_t sum = 0;
      for (const auto& [round, n] : per_round[t.name]) sum += n;
      return sum;
    };
    std::stable_sort(corpus->tasks.begin(), corpus->tasks.end(),
                     [&](const task& x, const task& y) { return cost(x) < cost(y); });
    corpus->tasks.resize(static_cast<std::size_t>(keep));
  }
  std::erase_if(corpus->traces, [&](const replay::trace& tr) {
    return std::none_of(corpus->tasks.begin(), corpus->tasks.end(), [&](const task& t) { return t.name == tr.task; });
  });
  const std::vector<std::string> chosen =
      a.has("modes") ? programs::split_list(a.get("modes")) : std::vector<std::string>{"sequential", "specgen"};
  // --server standin: the live runs' model is the stand-in server over HTTP (the
  // OpenAI backend, token-id forks, a model that answers its prompts' feedback);
  // their virtual twins play the same responsive traces in the replay model.
  const std::string server_kind = a.get("server", "replay");
  if (server_kind != "replay" && server_kind != "standin")
    throw std::invalid_argument(fmt::format("--server {}: use replay or standin", server_kind));
  const bool standin = server_kind == "standin";
#ifndef SPECGEN_BENCH_OPENAI
  if (standin) throw std::invalid_argument("--server standin: specgen-bench was built without libcurl (the OpenAI backend)");
#endif
  replay::replay_params rp;  // the calibrated decode speed (docs/replay-model.md)
  rp.decode_tokens_per_s = a.number<double>("tokens-per-s", rp.decode_tokens_per_s, detail::in(1.0, 1e5));
  // The decode slowdown per extra sequence (contention_levels: the published band).
  const std::string level = a.get("contention", standin ? "middle" : "");
  if (!level.empty()) {
    const auto slowdown = parse_contention(level);
    if (!slowdown || *slowdown > 1)
      throw std::invalid_argument(fmt::format("--contention {}: use low, middle, high or a number in [0, 1]", level));
    rp.slowdown_per_sequence = *slowdown;
  }
  const auto gpus = gpus_or_explain();
  if (!gpus) return 0;
  fmt::print("specgen-bench e2e-live: {} tasks x {} rounds on {} GPU(s), {} at {:.0f} tokens/s per stream (slowdown {:g} per "
             "extra sequence), target {:.2f}x\n",
             corpus->tasks.size(), rounds, *gpus, standin ? "the stand-in server over HTTP" : "replay", rp.decode_tokens_per_s,
             rp.slowdown_per_sequence, target);

  nlohmann::json out = {{"benchmark", "e2e-live"}, {"corpus", programs::corpus_label(dir)}, {"rounds", rounds}, {"gpus", *gpus},
                        {"server", server_kind}, {"decode_tokens_per_s", rp.decode_tokens_per_s},
                        {"slowdown_per_sequence", rp.slowdown_per_sequence}, {"target_speedup", target},
                        {"tasks", nlohmann::json::array()}, {"live", nlohmann::json::object()},
                        {"virtual", nlohmann::json::object()}};
  for (const auto& t : corpus->tasks) out["tasks"].push_back(t.name);
  auto summary = [](const run_result& r) {
    nlohmann::json searches = nlohmann::json::array();
    for (const auto& s : r.searches)
      searches.push_back({{"task", s.task}, {"rounds", s.rounds}, {"best_speedup", s.best_speedup},
                          {"profiled", s.profiled}, {"forks", s.forks}, {"terminations", s.terminations},
                          {"end_reason", s.end_reason}, {"end_seconds", s.end_seconds},
                          {"seconds_to_target", s.seconds_to_target ? nlohmann::json(*s.seconds_to_target) : nlohmann::json()},
                          {"tokens", s.generated_tokens}, {"verdicts", s.verdicts}, {"unjudged", s.unjudged}});
    double busy = 0;
    nlohmann::json per_gpu = nlohmann::json::array();
    for (auto b : r.scheduler.device_busy) {
      busy += to_seconds(b);
      per_gpu.push_back(to_seconds(b));
    }
    return nlohmann::json{{"e2e_seconds", r.e2e_seconds}, {"profiled_kernels", r.profiled_kernels},
                          {"pool_utilization", r.pool_utilization}, {"gpu_busy_seconds", busy},
                          {"gpu_busy_seconds_per_device", per_gpu}, {"tokens", r.generated_tokens},
                          {"best_speedup_geomean", r.best_speedup_geomean}, {"searches", searches}};
  };
#ifdef SPECGEN_BENCH_OPENAI
  const auto responsive = standin ? std::make_shared<const replay::responsive_traces>(corpus->traces) : nullptr;
#endif
  // A virtual run: the simulated device answering from the measured cost table; under --server
  // standin the replay model plays what the stand-in would (the responsive traces).
  auto run_virtual = [&](engine_config cfg, const replay::replay_params& params, const programs::run_options& o) {
    event_loop<virtual_clock> vloop;
    replay::replay_model vmodel(vloop, corpus->traces, params);
#ifdef SPECGEN_BENCH_OPENAI
    if (responsive) vmodel.set_trace_chooser(replay::responsive_chooser(responsive));
#endif
    return programs::run_corpus_with(vloop, vmodel, *corpus, std::move(cfg), o);
  };
  if (a.has("kv") && a.get("kv") != "gpu" && a.get("kv") != "modelled")
    throw std::invalid_argument(fmt::format("--kv: 'gpu' or 'modelled', got '{}'", a.get("kv")));
  // --kv: with the replay default (the server's prefix cache covers every
  // prefix) a lease saves nothing; like `e2e`, leave the server a quarter of
  // it, in the live and the virtual runs of every mode alike.
  const double kv_prefix_hit = 0.25;
  if (a.has("kv")) {
    rp.server_prefix_hit = kv_prefix_hit;
    out["server_prefix_hit"] = kv_prefix_hit;
    out["kv"] = a.get("kv");
  }
#ifdef SPECGEN_BENCH_KV
  // --kv gpu: in the live runs a mode's KV policy (the +kv step) becomes the
  // real GPU store (docs/kv-store.md), and the pool makes room in it before
  // each job; the virtual runs keep the modelled one. --kv modelled keeps the
  // modelled policy live too: the control for the store's own cost.
  const bool kv_gpu = a.get("kv") == "gpu";
  std::shared_ptr<gpu::kv_store> live_kv;  // set while a live run's config is built
#else
  if (a.get("kv") == "gpu") throw std::invalid_argument("--kv gpu: specgen-bench was built without the GPU KV store");
#endif
  std::optional<policy::any_termination> termination;  // --termination: every mode's own otherwise
  if (a.has("termination")) {
    auto t = policy::make_termination(nlohmann::json::parse(a.get("termination"), nullptr, false));
    if (!t) throw std::invalid_argument(fmt::format("--termination: {}", t.error().what()));
    termination = std::move(*t);
    out["termination"] = termination->config();
  }
  std::map<std::string, std::map<std::string, run_result>> runs;  // clock -> mode -> result
  for (const auto& mode : chosen) {
    auto config = [&] {
      auto cfg = mode_config(mode);
      if (!cfg) throw std::invalid_argument(cfg.error().what());
      cfg->budget = {.max_rounds = rounds, .max_seconds = max_seconds, .target_speedup = target};
      if (termination) cfg->termination = *termination;
#ifdef SPECGEN_BENCH_KV
      if (live_kv && cfg->kv.name() != "no_kv") cfg->kv = gpu::make_gpu_kv(live_kv, kv_model{});
#endif
      return std::move(*cfg);
    };
    // Virtual time, simulated device answering from the measured cost table.
    programs::run_options o;
    o.sim.devices = *gpus;
    if (a.has("kv")) o.replay.server_prefix_hit = kv_prefix_hit;  // the virtual run as the live one
    auto v = run_virtual(config(), rp, o);
    if (!v) throw std::runtime_error(fmt::format("{} (virtual): {}", mode, v.error().what()));
    out["virtual"][mode] = summary(*v);
    runs["virtual"][mode] = *v;
    if (standin)
      // The same comparison at each end of the published contention band, on the simulated clock.
      for (const auto& [name, slowdown] : contention_levels) {
        auto bp = rp;
        bp.slowdown_per_sequence = slowdown;
        auto b = run_virtual(config(), bp, o);
        if (!b) throw std::runtime_error(fmt::format("{} (virtual, contention {}): {}", mode, name, b.error().what()));
        out["virtual_band"][std::string(name)][mode] = summary(*b);
        runs["virtual " + std::string(name)][mode] = *b;
      }
    // Real time, real GPUs.
    event_loop<steady_clock> loop;
    std::optional<replay::replay_model> replayed;
    if (!standin) replayed.emplace(loop, corpus->traces, rp);
    gpu::pool_config pc;
    temp_dir cache("e2e-live");
    pc.session = session_for(0, cache.path.string());
#ifdef SPECGEN_BENCH_KV
    if (kv_gpu) {
      auto s = gpu::kv_store::create({.block_bytes = kv_model{}.bytes_per_block()});
      if (!s) throw std::runtime_error(fmt::format("cannot create the GPU KV store: {}", s.error().what()));
      live_kv = *s;
      pc.before_job = [s = *s](int device, std::uint64_t bytes) { s->make_room(device, bytes); };
    }
#endif
    auto pool = gpu::gpu_pool::create(loop, pc);
    if (!pool) throw std::runtime_error(fmt::format("cannot start the GPU pool: {}", pool.error().what()));
    // --journal-dir: each live mode's journal (every candidate, verdict, fork
    // and termination with its time), to see afterwards where a mode's time went.
    std::unique_ptr<journal_writer> journal;
    if (a.has("journal-dir")) {
      journal = std::make_unique<journal_writer>(std::filesystem::path(a.get("journal-dir")) / (mode + ".jsonl"), false);
    }
#ifdef SPECGEN_BENCH_KV
    const auto store_used = std::exchange(live_kv, nullptr);  // the next mode's virtual run keeps the modelled policy
#endif
    const auto w0 = steady::now();
    auto run_live = [&](auto& backend) {
      engine eng(loop, backend, **pool, config(), journal.get());
      for (const auto& t : corpus->tasks) eng.add_search(std::make_shared<const task>(t));
      return eng.run();
    };
    run_result r;
    nlohmann::json fork_latency;
    if (replayed) {
      r = run_live(*replayed);
    } else {
#ifdef SPECGEN_BENCH_OPENAI
      openai::testing::standin_options so;
      so.tokens_per_s = rp.decode_tokens_per_s;
      so.slowdown_per_sequence = rp.slowdown_per_sequence;
      openai::testing::fake_server server(openai::testing::standin_server_options(responsive, so));
      openai::openai_config oc;
      oc.base_url = server.base_url();
      oc.model = so.model;
      auto served = openai::openai_backend::create(loop, oc);
      if (!served) throw std::runtime_error(fmt::format("cannot reach the stand-in server: {}", served.error().what()));
      fork_timer<openai::openai_backend> timed(**served);
      r = run_live(timed);
      // From the chunk that fired a trigger reaching the library to the fork request's first byte at the server.
      std::vector<double> lat;
      for (const auto& q : server.requests()) {
        if (q.path != "/v1/completions") continue;
        const auto dash = q.rid.rfind('-');
        if (dash == std::string::npos) continue;
        const auto it = timed.fork_began().find(std::stoull(q.rid.substr(dash + 1)));
        if (it != timed.fork_began().end()) lat.push_back(std::chrono::duration<double>(q.first_byte - it->second).count());
      }
      std::sort(lat.begin(), lat.end());
      auto pct = [&](double p) { return lat.empty() ? 0.0 : lat[static_cast<std::size_t>(p * static_cast<double>(lat.size() - 1))]; };
      fork_latency = {{"forks", lat.size()}, {"p50_s", pct(0.5)}, {"p99_s", pct(0.99)}, {"max_s", pct(1.0)}};
      fmt::print("{:<12} fork latency (trigger chunk to the request's first byte at the server): {} forks, median {:.3f} ms, "
                 "p99 {:.3f} ms, max {:.3f} ms ({} 1 ms at the median)\n",
                 mode, lat.size(), 1e3 * pct(0.5), 1e3 * pct(0.99), 1e3 * pct(1.0), pct(0.5) <= 1e-3 ? "within" : "ABOVE");
#endif
    }
    out["live"][mode] = summary(r);
    if (!fork_latency.is_null()) out["live"][mode]["fork_latency"] = fork_latency;
    runs["live"][mode] = r;
#ifdef SPECGEN_BENCH_KV
    if (store_used) {
      const auto st = store_used->stats();
      out["live"][mode]["kv_store"] = {{"fetches", st.fetches},         {"fetched_bytes", st.fetched_bytes},
                                       {"put_blocks", st.put_blocks},   {"demoted", st.demoted},
                                       {"dropped", st.dropped},         {"slabs_freed", st.slabs_freed},
                                       {"corrupt", st.corrupt},         {"caller_seconds", st.caller_seconds},
                                       {"caller_max_seconds", st.caller_max_seconds},
                                       {"make_room_seconds", st.make_room_seconds}};
      fmt::print("{:<12} GPU KV store: {} fetches, {:.1f} GiB fetched, {} blocks put, {} slabs released for jobs; "
                 "the engine's thread spent {:.2f} s in the store (longest call {:.3f} s), make_room {:.2f} s\n",
                 mode, st.fetches, static_cast<double>(st.fetched_bytes) / (1ull << 30), st.put_blocks, st.slabs_freed,
                 st.caller_seconds, st.caller_max_seconds, st.make_room_seconds);
    }
#endif
    fmt::print("{:<12} live: {:7.1f} s, {:3} profiled, utilisation {:5.1f}%, best {:.2f}x | virtual: {:7.1f} s, {:3} "
               "profiled, utilisation {:5.1f}%, best {:.2f}x  (wall {:.0f} s)\n",
               mode, r.e2e_seconds, r.profiled_kernels, 100 * r.pool_utilization, r.best_speedup_geomean,
               v->e2e_seconds, v->profiled_kernels, 100 * v->pool_utilization, v->best_speedup_geomean, since(w0));
  }
  if (runs["live"].contains("sequential"))
    for (const auto& mode : chosen) {
      if (mode == "sequential") continue;
      std::vector<std::string> clocks{"live", "virtual"};
      if (standin) clocks.insert(clocks.end(), {"virtual low", "virtual high"});
      for (const auto& clock : clocks) {
        const run_result& b = runs[clock]["sequential"];
        const run_result& m = runs[clock][mode];
        const double e2e = b.e2e_seconds / m.e2e_seconds;
        const double prof = b.profiled_kernels > 0 ? static_cast<double>(m.profiled_kernels) / b.profiled_kernels : 0.0;
        // Per task: each search's own time, as `specgen-bench e2e` reports it.
        const double per_task = programs::search_time_ratio(programs::search_seconds(b), programs::search_seconds(m));
        const nlohmann::json ratios = {{"e2e_speedup", e2e}, {"search_time_speedup_geomean", per_task}, {"profiled_ratio", prof}};
        if (clock.starts_with("virtual ")) out["virtual_band"][clock.substr(8)][mode]["vs_sequential"] = ratios;
        else out[clock][mode]["vs_sequential"] = ratios;
        fmt::print("{:<12} vs sequential ({:<7}): e2e {:.2f}x lower (last search), per task {:.2f}x, profiled {:.2f}x, "
                   "utilisation {:.2f}\n",
                   mode, clock, e2e, per_task, prof, m.pool_utilization);
      }
    }
  write_json(a, out);
  return 0;
}

}  // namespace

/// Runs `specgen-bench gpu-...` (and calibrate, e2e-live) with its options.
int run_gpu_bench(const std::string& cmd, const programs::options& a) {
  if (cmd == "gpu-latency") return bench_latency(a);
  if (cmd == "gpu-spread") return bench_spread(a);
  if (cmd == "gpu-cupti") return bench_cupti(a);
  if (cmd == "gpu-respawn") return bench_respawn(a);
  if (cmd == "calibrate") return bench_calibrate(a);
  if (cmd == "e2e-live") return bench_e2e_live(a);
  throw std::invalid_argument(fmt::format("unknown benchmark '{}'", cmd));
}

}  // namespace specgen::bench
