#include "profile_op.hpp"

#include "cupti_metrics.hpp"

#include "gpu/loader/cupti.hpp"
#include "gpu/loader/nvml.hpp"
#include "op_common.hpp"
#include "sample_stats.hpp"

#include <specgen/plan.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <chrono>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

using json = nlohmann::json;
using steady = std::chrono::steady_clock;

/// Upper bounds on the counts a request may ask for: beyond them the host is broken.
constexpr std::uint64_t max_count = 100000;

/// The sampling rule and the rest of the request's numbers.
struct profile_args {
  std::uint64_t seed = 101;
  std::uint64_t recheck_seed = 102;
  int warmup = 10;
  int min_samples = 20;
  int max_samples = 200;
  double target_noise = 0.005;
  double max_seconds = 10;
  bool flush_l2 = true;
  bool interleave = true;
  bool cupti = true;
  int cupti_runs = 5;
  bool hardware_metrics = false;  // the range-profiler pass (cupti_metrics.hpp)
  std::size_t guard = 256;
  duration deadline = seconds(1);
};

expected<profile_args, failure> read_args(const json& a) {
  profile_args p;
  auto u64 = [&](const char* key, std::uint64_t fallback) { return read_u64(a, key, fallback); };
  auto count = [&](const char* key, int fallback, int& out) -> std::optional<failure> {
    auto v = u64(key, static_cast<std::uint64_t>(fallback));
    if (!v) return v.error();
    if (*v > max_count) return bad_request(fmt::format("\"{}\" must be at most {}", key, max_count));
    out = static_cast<int>(*v);
    return std::nullopt;
  };
  auto number = [&](const char* key, double fallback, double& out) -> std::optional<failure> {
    const json v = a.value(key, json(fallback));
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      return bad_request(fmt::format("\"{}\" must be a non-negative number", key));
    out = v.get<double>();
    return std::nullopt;
  };
  auto flag = [&](const char* key, bool fallback, bool& out) -> std::optional<failure> {
    const json v = a.value(key, json(fallback));
    if (!v.is_boolean()) return bad_request(fmt::format("\"{}\" must be true or false", key));
    out = v.get<bool>();
    return std::nullopt;
  };
  auto seed = u64("seed", p.seed);
  if (!seed) return unexpected(seed.error());
  p.seed = *seed;
  auto recheck = u64("recheck_seed", p.recheck_seed);
  if (!recheck) return unexpected(recheck.error());
  p.recheck_seed = *recheck;
  for (auto f : {count("warmup", p.warmup, p.warmup), count("min_samples", p.min_samples, p.min_samples),
                 count("max_samples", p.max_samples, p.max_samples), count("cupti_runs", p.cupti_runs, p.cupti_runs),
                 number("target_noise", p.target_noise, p.target_noise),
                 number("max_seconds", p.max_seconds, p.max_seconds), flag("flush_l2", p.flush_l2, p.flush_l2),
                 flag("interleave", p.interleave, p.interleave), flag("cupti", p.cupti, p.cupti),
                 flag("hardware_metrics", p.hardware_metrics, p.hardware_metrics)})
    if (f) return unexpected(*f);
  if (p.max_samples < 1) return unexpected(bad_request("\"max_samples\" must be at least 1"));
  auto guard = u64("guard", p.guard);
  if (!guard) return unexpected(guard.error());
  p.guard = static_cast<std::size_t>(*guard);
  auto deadline = read_ms(a, "deadline_ms", 1000);
  if (!deadline) return unexpected(deadline.error());
  p.deadline = *deadline;
  return p;
}

/// The candidate or the baseline: its plan, module, prepared launches and samples.
struct side {
  std::string label;
  resolved_plan plan{};
  std::shared_ptr<loaded_module> mod{};
  std::optional<prepared_plan> prepared{};
  std::vector<double> samples_us{};
  std::string stopped{};  // why sampling ended: "noise", "max_samples", "max_seconds"
};

expected<side, failure> read_side(worker_state& w, gpu_context& ctx, const json& j, const std::string& label,
                                  const task& t, const shape_binding& shape, std::span<const std::byte> binary) {
  if (!j.is_object() || !j.contains("plan") || !j["plan"].is_string())
    return unexpected(bad_request(fmt::format("\"{}\" needs {{\"plan\", \"cubin\" or \"module_key\"}}", label)));
  side s{.label = label};
  auto mod = acquire_module(w, ctx, j, binary, label);
  if (!mod) return unexpected(mod.error());
  s.mod = std::move(*mod);
  auto plan = parse_plan(j["plan"].get<std::string>());
  if (!plan) return unexpected(failure{"invalid_plan", fmt::format("{}: {}", label, plan.error().what())});
  auto resolved = resolve(*plan, t, shape, ctx.info().limits);
  if (!resolved) return unexpected(failure{"invalid_plan", fmt::format("{}: {}", label, resolved.error().what())});
  s.plan = std::move(*resolved);
  return s;
}

json summary(const side& s) {
  const auto finite = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  return {{"samples_us", s.samples_us},
          {"median_us", median_of(s.samples_us)},
          {"noise", finite(relative_noise(s.samples_us))},
          {"spread", relative_spread(s.samples_us)},
          {"stopped", s.stopped},
          {"fresh_module_per_run", s.prepared && s.prepared->fresh_module_per_run()}};
}

/// The profile's shared state: buffers, the L2 flush buffer, the clock reader.
struct profiler {
  gpu_context& ctx;
  context_state& state;
  io_set& io;
  const profile_args& args;
  std::optional<device_buffer> flush{};
  std::optional<nvml_device> nvml{};
  std::vector<unsigned> clocks{};
  std::uint64_t taken = 0;  // timed samples so far, both sides

  /// One run as a sample is taken: a fresh module instance (a cubin with
  /// globals only; synchronous, before anything is queued), poison, scratch
  /// reset, L2 flush, then the plan between the two events. Returns the
  /// event time in µs.
  /// What precedes every timed run: a fresh module instance where needed,
  /// output poison, scratch reset and the L2 flush, all queued.
  expected<void, failure> prepare_run(side& s) {
    if (auto l = s.prepared->reload(); !l) return unexpected(from(l.error()));
    if (auto p = io.poison_outputs_async(); !p) return unexpected(p.error());
    if (auto z = s.prepared->reset_scratch_async(); !z) return unexpected(from(z.error()));
    if (flush)
      if (auto f = state.memset_async(flush->pointer(), static_cast<std::uint8_t>(taken), flush->size()); !f)
        return unexpected(from(f.error()));
    return {};
  }

  expected<double, failure> timed(side& s) {
    auto ms = s.prepared->timed_run(steady::now() + args.deadline, args.deadline);
    if (!ms) return unexpected(from(ms.error()));
    return *ms * 1000.0;
  }

  expected<double, failure> run_once(side& s) {
    return prepare_run(s).and_then([&] { return timed(s); });
  }

  expected<void, failure> sample(side& s) {
    if (nvml && taken % 10 == 0)
      if (auto mhz = nvml->sm_clock_mhz()) clocks.push_back(*mhz);
    auto us = run_once(s);
    if (!us) return unexpected(us.error());
    s.samples_us.push_back(*us);
    ++taken;
    return {};
  }

  [[nodiscard]] bool done(const side& s) const {
    return noise_reached(s.samples_us, args.min_samples, args.target_noise) ||
           static_cast<int>(s.samples_us.size()) >= args.max_samples;
  }
  [[nodiscard]] std::string reason(const side& s) const {
    if (static_cast<int>(s.samples_us.size()) >= args.max_samples) return "max_samples";
    return noise_reached(s.samples_us, args.min_samples, args.target_noise) ? "noise" : "max_seconds";
  }

  /// Samples `s` alone until the rule holds or `until` passes (one sample at least).
  expected<void, failure> sample_alone(side& s, steady::time_point until) {
    do {
      if (auto r = sample(s); !r) return r;
    } while (!done(s) && steady::now() < until);
    s.stopped = reason(s);
    return {};
  }

  /// Candidate, baseline, candidate, ... until the rule holds for both, either
  /// reaches max_samples, or `until` passes (one pair at least).
  expected<void, failure> sample_interleaved(side& c, side& b, steady::time_point until) {
    const auto capped = [&](const side& s) { return static_cast<int>(s.samples_us.size()) >= args.max_samples; };
    do {
      if (auto r = sample(c); !r) return r;
      if (auto r = sample(b); !r) return r;
    } while (!(capped(c) || capped(b)) && !(done(c) && done(b)) && steady::now() < until);
    c.stopped = reason(c);
    b.stopped = reason(b);
    return {};
  }
};

/// The CUPTI pass: `runs` more candidate runs with concurrent-kernel records.
expected<json, failure> cupti_pass(profiler& p, side& candidate) {
  const int runs = p.args.cupti_runs;
  json out = {{"available", false}, {"reason", ""}, {"runs", runs},
              {"expected_kernels_per_run", candidate.plan.launches.size()}};
  if (!p.args.cupti || runs == 0) {
    out["reason"] = "not requested";
    return out;
  }
  auto activity = cupti_activity::start(p.state.context, p.state.stream);
  if (!activity) {
    out["reason"] = activity.error().message;
    return out;
  }
  std::vector<std::uint64_t> begins;
  std::vector<double> event_us;
  for (int i = 0; i < runs; ++i) {
    begins.push_back((*activity)->timestamp());
    auto us = p.run_once(candidate);
    if (!us) {
      // After a fault or a timeout CUPTI is not touched again (a flush could
      // wait on the hung kernel); the worker exits right after answering.
      if (!p.state.usable) (void)activity->release();
      return unexpected(us.error());
    }
    event_us.push_back(*us);
  }
  // The runs have finished (their stop events completed); nothing can hang here.
  if (auto s = p.io.settle(); !s) return unexpected(s.error());
  auto records = (*activity)->collect();
  const std::uint64_t dropped = (*activity)->dropped();
  const std::uint32_t own_stream = (*activity)->stream_id();
  activity->reset();  // recording stops before the re-check run
  if (!records) {
    out["reason"] = records.error().message;
    return out;
  }
  std::set<std::string> planned, names;
  for (const auto& l : candidate.plan.launches) planned.insert(l.kernel);
  std::vector<double> kernel_us(static_cast<std::size_t>(runs), 0.0);
  std::size_t foreign_kernels = 0, foreign_streams = 0, unplaced = 0;
  for (const auto& k : *records) {
    names.insert(k.name);
    if (!planned.contains(k.name)) ++foreign_kernels;
    if (k.stream_id != own_stream) ++foreign_streams;
    // A record belongs to the last run that began before it started.
    auto after = std::upper_bound(begins.begin(), begins.end(), k.start_ns);
    if (after == begins.begin()) {
      ++unplaced;
      continue;
    }
    const auto run = static_cast<std::size_t>(after - begins.begin() - 1);
    kernel_us[run] += static_cast<double>(k.end_ns - std::min(k.start_ns, k.end_ns)) / 1000.0;
  }
  out["available"] = true;
  out["reason"] = "";
  out["kernels"] = records->size();
  out["kernel_names"] = names;
  out["foreign_kernels"] = foreign_kernels;
  out["foreign_streams"] = foreign_streams;
  out["kernel_us"] = kernel_us;
  out["event_us"] = event_us;
  out["dropped_records"] = dropped;
  out["unplaced_kernels"] = unplaced;
  return out;
}

/// The range-profiler pass: hardware throughput and occupancy of one
/// candidate run, replayed once per counter pass. Opened once per worker and
/// kept (its setup costs more than a pass). Run after the CUPTI activity pass
/// has ended (the two must not overlap) and before the timed check, so the
/// guard and input checks cover the replays.
expected<json, failure> metrics_pass_of(profiler& p, side& candidate) {
  json out = {{"available", false}, {"reason", "not requested"}};
  if (!p.args.hardware_metrics) return out;
  static std::optional<expected<metrics_pass>> opened;
  if (!opened) opened.emplace(metrics_pass::open(p.state.context, p.ctx.info().index));
  if (!*opened) {
    out["reason"] = opened->error().message;
    return out;
  }
  metrics_pass& pass = **opened;
  failure step_failure{};
  auto m = pass.measure(
      [&]() -> expected<void> {
        auto us = p.timed(candidate);
        if (!us) {
          step_failure = us.error();
          return unexpected(error{us.error().message});
        }
        return {};
      },
      [&]() -> expected<void> {
        auto r = p.prepare_run(candidate);
        if (!r) {
          step_failure = r.error();
          return unexpected(error{r.error().message});
        }
        return {};
      });
  if (!m) {
    if (!p.state.usable) {
      // A fault or a timeout in a replay: the candidate's verdict, as in any run.
      pass.abandon();
      return unexpected(step_failure.kind.empty() ? bad_request(m.error().message) : step_failure);
    }
    pass.cleanup();
    out["reason"] = m.error().message;
    return out;
  }
  out["available"] = true;
  out["reason"] = "";
  out["passes"] = m->passes;
  out["values"] = m->values;
  out["seconds"] = m->seconds_spent;
  return out;
}

expected<json, failure> profile(worker_state& w, const request& r, reply_binary& out_binary) {
  const json& a = r.args;
  if (!a.is_object() || !a.contains("task") || !a.contains("shape") || !a.contains("candidate"))
    return unexpected(bad_request("profile needs args {task, shape, candidate, ...}"));
  auto t = read_task(a["task"]);
  if (!t) return unexpected(t.error());
  auto shape = read_shape(a["shape"]);
  if (!shape) return unexpected(shape.error());
  auto args = read_args(a);
  if (!args) return unexpected(args.error());
  const auto binary = binary_of(r);

  // Wall time of each phase, reported so the host can see where a profile goes.
  const auto started = steady::now();
  auto phase_mark = started;
  json phases = json::object();
  auto phase = [&](const char* name) {
    const auto now = steady::now();
    phases[name] = std::chrono::duration<double>(now - phase_mark).count();
    phase_mark = now;
  };
  auto ctx_or = w.context();
  if (!ctx_or) return unexpected(from(ctx_or.error()));
  gpu_context& ctx = **ctx_or;
  auto& state = context_access::state(ctx);
  auto candidate = read_side(w, ctx, a["candidate"], "candidate", *t, *shape, binary);
  if (!candidate) return unexpected(candidate.error());
  std::optional<side> baseline;
  if (a.contains("baseline") && !a["baseline"].is_null()) {
    auto b = read_side(w, ctx, a["baseline"], "baseline", *t, *shape, binary);
    if (!b) return unexpected(b.error());
    baseline = std::move(*b);
  }

  phase("setup_modules");
  auto io = io_set::allocate(ctx, *t, *shape, args->guard, std::byte{0xA5}, std::nullopt);
  if (!io) return unexpected(io.error());
  // The inputs of the timed runs and of the re-check: listed in the request
  // (a stored reference's, sent in the binary part), else each generated from a seed.
  const auto inputs_of = [&](const char* key, std::uint64_t seed) {
    if (a.contains(key)) return a[key];
    json list = json::array();
    for (const auto& spec : t->inputs) list.push_back({{"name", spec.name}, {"seed", seed}});
    return list;
  };
  if (auto g = load_inputs(*io, *t, inputs_of("inputs", args->seed), binary); !g) return unexpected(g.error());
  phase("setup_io");
  const auto pointers = io->pointers();
  for (side* s : {&*candidate, baseline ? &*baseline : nullptr}) {
    if (!s) continue;
    auto p = prepared_plan::prepare(ctx, s->plan, s->mod->mod, pointers, s->mod->fresh_cubin);
    if (!p) return unexpected(from(p.error()));
    s->prepared = std::move(*p);
  }

  phase("setup_plans");
  profiler p{.ctx = ctx, .state = state, .io = *io, .args = *args};
  const auto l2 = static_cast<std::size_t>(std::max<std::int64_t>(0, ctx.info().l2_bytes));
  if (args->flush_l2 && l2 > 0) {
    auto f = ctx.allocate(2 * l2);
    if (!f) return unexpected(from(f.error()));
    p.flush = std::move(*f);
  }
  phase("setup_flush");
  if (!ctx.info().pci_bus_id.empty()) {
    // Opened once per worker: the device does not change between requests.
    static std::map<std::string, expected<nvml_device>> opened;
    auto it = opened.find(ctx.info().pci_bus_id);
    if (it == opened.end())
      it = opened.emplace(ctx.info().pci_bus_id, nvml_device::open(ctx.info().pci_bus_id)).first;
    if (it->second) p.nvml = *it->second;
  }
  phase("setup_nvml");
  if (auto g = io->fill_guards(); !g) return unexpected(g.error());
  if (auto s = io->settle(); !s) return unexpected(s.error());  // uploads and fills before the stream's work
  phase("setup_guards");
  const bool persisting_reset = state.api->cuCtxResetPersistingL2Cache() == CUDA_SUCCESS;
  phase("setup_l2_reset");

  for (int i = 0; i < args->warmup; ++i)
    for (side* s : {&*candidate, baseline ? &*baseline : nullptr})
      if (s)
        if (auto u = p.run_once(*s); !u) return unexpected(u.error());

  phase("warmup");
  const auto t0 = steady::now();
  const auto budget = std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(args->max_seconds));
  if (baseline && args->interleave) {
    if (auto s = p.sample_interleaved(*candidate, *baseline, t0 + budget); !s) return unexpected(s.error());
  } else if (baseline) {
    // One after the other, each with half the time.
    if (auto s = p.sample_alone(*candidate, t0 + budget / 2); !s) return unexpected(s.error());
    if (auto s = p.sample_alone(*baseline, t0 + budget); !s) return unexpected(s.error());
  } else {
    if (auto s = p.sample_alone(*candidate, t0 + budget); !s) return unexpected(s.error());
  }
  const double sampling_seconds = std::chrono::duration<double>(steady::now() - t0).count();
  phase("sampling");

  auto cupti = cupti_pass(p, *candidate);
  if (!cupti) return unexpected(cupti.error());
  phase("cupti");
  auto hardware = metrics_pass_of(p, *candidate);
  if (!hardware) return unexpected(hardware.error());
  phase("hardware_metrics");

  // Everything since the guards were filled: warm-up, samples, baseline and CUPTI runs.
  auto timed_check = io->check();
  if (!timed_check) return unexpected(timed_check.error());
  phase("timed_check");

  // The re-check: inputs the kernel has not seen, fresh guards and poison.
  if (auto g = load_inputs(*io, *t, inputs_of("recheck_inputs", args->recheck_seed), binary); !g)
    return unexpected(g.error());
  if (auto g = io->fill_guards(); !g) return unexpected(g.error());
  if (auto s = io->settle(); !s) return unexpected(s.error());
  phase("recheck_inputs");
  if (auto l = candidate->prepared->reload(); !l) return unexpected(from(l.error()));
  if (auto po = io->poison_outputs_async(); !po) return unexpected(po.error());
  if (auto z = candidate->prepared->reset_scratch_async(); !z) return unexpected(from(z.error()));
  auto recheck_ms = candidate->prepared->timed_run(steady::now() + args->deadline, args->deadline);
  if (!recheck_ms) return unexpected(from(recheck_ms.error()));
  phase("recheck_run");
  auto recheck_check = io->check();
  if (!recheck_check) return unexpected(recheck_check.error());
  phase("recheck_check");
  auto outputs = io->append_outputs({}, out_binary);
  if (!outputs) return unexpected(outputs.error());
  phase("recheck_outputs");
  phases["total"] = std::chrono::duration<double>(steady::now() - started).count();

  json recheck = {{"seed", args->recheck_seed}, {"elapsed_ms", *recheck_ms}};
  put_check(recheck, *recheck_check);
  recheck["outputs"] = std::move(*outputs);
  json timed;
  put_check(timed, *timed_check);
  json clock = nullptr;
  if (p.nvml && !p.clocks.empty())
    clock = {{"min", *std::min_element(p.clocks.begin(), p.clocks.end())},
             {"max", *std::max_element(p.clocks.begin(), p.clocks.end())},
             {"samples", p.clocks.size()},
             {"readings", p.clocks}};
  return json{{"ok", true},
              {"candidate", summary(*candidate)},
              {"baseline", baseline ? summary(*baseline) : json(nullptr)},
              {"sampling_seconds", sampling_seconds},
              {"phases_s", std::move(phases)},
              {"sm_clock_mhz", clock},
              {"l2_flush_bytes", p.flush ? p.flush->size() : 0},
              {"persisting_l2_reset", persisting_reset},
              {"launch_gate", p.state.gate_flag != nullptr},
              {"cupti", std::move(*cupti)},
              {"hardware_metrics", std::move(*hardware)},
              {"timed_check", std::move(timed)},
              {"recheck", std::move(recheck)},
              {"device", device_json(ctx)}};
}

}  // namespace

run_outcome profile_op(worker_state& w, const request& r) {
  reply_binary binary(w.reply_region);
  expected<nlohmann::json, failure> result = unexpected(bad_request("profile: no result"));
  try {
    result = profile(w, r, binary);
  } catch (const nlohmann::json::exception& e) {
    result = unexpected(bad_request(fmt::format("profile: a malformed argument: {}", e.what())));
  }
  return {reply_from(std::move(result), std::move(binary)), w.must_exit()};
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
