#pragma once
/// The session's verdicts, decided from what the worker measured.
///
/// A device session calls the worker (compile, run, profile) and then judges
/// the answer: guard zones and inputs intact, outputs against the reference,
/// later runs against the first, the recheck after timing, the CUPTI cross-check
/// and the roofline. The judging is here, as functions of decoded data with no
/// GPU and no worker, so every rule and every message is tested without one
/// (tests/judge_test.cpp); session.cpp keeps the calls.
#include "internal.hpp"

#include <specgen/detail/json_fields.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::eval_detail {

/// Per-launch allowance (µs) for the gap between the events and the kernels
/// CUPTI sees: the launch the events also bracket, 3-4 µs per kernel on an H200
/// (docs/benchmarks.md, `gpu-cupti`).
constexpr double launch_allowance_us = 10.0;

inline verdict make(verdict_kind k, std::string summary, std::string log = {}) {
  return verdict{.kind = k, .summary = std::move(summary), .log = std::move(log), .mismatch = {}};
}

inline verdict nonsense(std::string_view what, std::string_view why) {
  return make(verdict_kind::fault, fmt::format("the worker answered nonsense while {}", what), std::string(why));
}

inline std::string megabytes(double bytes) { return fmt::format("{:.2f} MB", bytes / 1e6); }

/// A number field, or nullopt.
inline std::optional<double> number(const json& j, const char* field) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(field);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

/// `notes` appended to `v`'s log, one a line.
inline verdict with_notes(verdict v, const std::vector<std::string>& notes) {
  if (!notes.empty()) v.log = v.log.empty() ? fmt::format("{}", fmt::join(notes, "\n"))
                                            : fmt::format("{}\n{}", v.log, fmt::join(notes, "\n"));
  return v;
}

// ---- validation ------------------------------------------------------------------------

/// The verdict of a run that broke a guard zone or changed an input, if it did.
inline std::optional<verdict> memory_verdict(const task& t, const decoded_run& r, const std::string& where,
                                             const std::string& nth) {
  if (!r.guards_intact) {
    const std::string& name = r.guards_broken.front();
    const bool is_input = std::any_of(t.inputs.begin(), t.inputs.end(), [&](const auto& s) { return s.name == name; });
    return make(verdict_kind::out_of_bounds_write,
                fmt::format("wrote outside {} '{}' at {}{}", is_input ? "input" : "output", name, where, nth),
                fmt::format("guard zones damaged around: {}", fmt::join(r.guards_broken, ", ")));
  }
  if (!r.inputs_intact)
    return make(verdict_kind::input_mutation,
                fmt::format("modified its input '{}' at {}{}", r.inputs_changed.front(), where, nth),
                fmt::format("inputs changed: {}", fmt::join(r.inputs_changed, ", ")));
  return std::nullopt;
}

/// Judges the runs of one validation call: set k's runs are
/// [k * repeats, (k + 1) * repeats), checked against `want[k]` with the
/// terms allowance `terms[k]` (null: none). All runs shared one module, so
/// a set after the first sees what earlier calls left behind.
inline std::optional<verdict> judge_runs(const task& t, const shape_binding& shape, const std::vector<input_case>& sets,
                                         const std::vector<decoded_run>& runs, int repeats,
                                         const std::vector<std::shared_ptr<const output_set>>& want,
                                         const std::vector<std::shared_ptr<const output_set>>& terms) {
  const std::string where = shape_text(shape);
  const unsigned threads = std::thread::hardware_concurrency();
  auto terms_of = [&](std::size_t set, std::size_t k) {
    return terms[set] ? std::span<const std::byte>((*terms[set])[k]) : std::span<const std::byte>();
  };
  for (std::size_t set = 0; set < sets.size(); ++set) {
    const std::string note = fmt::format("case: {}{}", case_text(t, sets[set]),
                                         set > 0 ? fmt::format(" (call {} in one loaded module)", set + 1) : "");
    auto noted = [&](verdict v) {
      v.log = v.log.empty() ? note : v.log + "\n" + note;
      return v;
    };
    const std::size_t first = set * static_cast<std::size_t>(repeats);
    for (std::size_t i = first; i < first + static_cast<std::size_t>(repeats); ++i) {
      const decoded_run& r = runs[i];
      const std::string nth =
          repeats > 1 ? fmt::format(" (run {} of {} on these inputs)", i - first + 1, repeats) : std::string();
      if (auto bad = memory_verdict(t, r, where, nth)) return noted(std::move(*bad));
      for (std::size_t k = 0; k < t.outputs.size(); ++k) {
        const auto& spec = t.outputs[k];
        comparison c = compare_outputs_parallel(spec, r.outputs[k], (*want[set])[k], where, threads, 8,
                                                terms_of(set, k));
        if (c.pass) continue;
        if (i == first) {
          verdict v = make_wrong_result_verdict(c);
          // A later call that returns an earlier call's answer kept state across calls.
          for (std::size_t earlier = 0; earlier < set; ++earlier)
            if (compare_outputs(spec, r.outputs[k], (*want[earlier])[k], where, 0, terms_of(earlier, k)).pass) {
              v.kind = verdict_kind::wrong_result;
              v.summary = fmt::format("call {} in one loaded module returned what call {} should have (state kept "
                                      "across calls, such as a result cached in a __device__ variable): {}",
                                      set + 1, earlier + 1, v.summary);
              break;
            }
          return noted(std::move(v));
        }
        if (c.unwritten == c.stats.total && c.stats.total > 0)
          return noted(make(verdict_kind::wrong_result,
                            fmt::format("a later run left output '{}' unwritten although the first wrote it, on "
                                        "the same inputs in one loaded module (state kept across calls, such as "
                                        "a 'done' flag in a __device__ variable){}",
                                        spec.name, nth)));
        comparison agree = outputs_agree(spec, runs[first].outputs[k], r.outputs[k], where, 8, terms_of(set, k));
        verdict v = !agree.pass ? make_unstable_verdict(agree)
                                : verdict{.kind = verdict_kind::unstable,
                                          .summary = fmt::format("a later run disagrees with the reference "
                                                                 "although the first on these inputs agreed: {}",
                                                                 specgen::detail::describe(c)),
                                          .log = {},
                                          .mismatch = c.stats};
        v.summary += nth;
        return noted(std::move(v));
      }
    }
  }
  return std::nullopt;
}

/// Whether a validation verdict may change once the terms allowance is known:
/// only outputs out of the abs/rel tolerance can; broken memory never does.
inline bool terms_may_clear(const verdict& bad) {
  return is_wrong_output(bad.kind) && bad.kind != verdict_kind::input_mutation &&
         bad.kind != verdict_kind::out_of_bounds_write;
}

// ---- profile ---------------------------------------------------------------------------

/// What the candidate is timed against: the task's baseline when it is
/// device code, else the reference; none (with the note saying why) when
/// neither runs on the device.
struct baseline_choice {
  const implementation* base = nullptr;
  const recorded_time* recorded = nullptr;  ///< a recorded time instead of a timed baseline
  std::string note{};  ///< set when both are null
};

inline baseline_choice choose_baseline(const task& t) {
  if (!t.baseline.is_host() && !t.baseline.plan.empty()) return {.base = &t.baseline};
  if (t.baseline.recorded) return {.recorded = &*t.baseline.recorded};
  if (t.baseline.is_host())
    return {.note = fmt::format("the baseline is the host callback '{}', which the worker cannot time: the candidate "
                                "was timed alone and the speedup is 0",
                                t.baseline.host)};
  if (!t.reference.is_host() && !t.reference.plan.empty()) return {.base = &t.reference};
  if (t.reference.is_stored())
    return {.note = "the task has no baseline (its reference is stored outputs, and it records no baseline time): "
                    "the candidate was timed alone and the speedup is 0"};
  return {.note = "the task has no device baseline: the candidate was timed alone and the speedup is 0"};
}

/// The speedup against a recorded baseline time: `ms` over the candidate's
/// median. A note when it was recorded on another GPU than `device`, whose
/// speedup then compares two GPUs.
inline void apply_recorded(measurement& m, const recorded_time& r, std::string_view device,
                           std::vector<std::string>& notes) {
  m.baseline_median_us = r.ms * 1000.0;
  m.speedup = m.median_us > 0 ? m.baseline_median_us / m.median_us : 0.0;
  m.baseline_of = fmt::format("recorded: {} on {}", r.what.empty() ? std::string("a recorded time") : r.what, r.device);
  if (r.device != device)
    notes.push_back(fmt::format("the baseline time was recorded on {}, and this GPU is {}: the speedup compares two "
                                "GPUs; import the task again on this GPU for a like-for-like speedup",
                                r.device, device));
}

/// Runs of one profile call that `max_seconds` does not cap: warm-up, CUPTI,
/// the range profiler's passes (8 for the default metrics, 10 allowed), the
/// timed check and the recheck. `sides`: 2 with a baseline, else 1.
inline int uncapped_profile_runs(const profile_config& pc, int sides) {
  return pc.warmup * sides + (pc.cupti_check ? pc.cupti_runs : 0) + (pc.hardware_metrics ? 10 : 0) + 1 + 2 * sides;
}

/// Timing statistics of one side of a profile: {"samples_us", "median_us", "noise", "spread"}.
struct timing_side {
  std::vector<double> samples_us;
  double median_us = 0, noise = 0, spread = 0;
};

inline expected<timing_side> decode_side(const json& j, std::string_view who) {
  if (!j.is_object()) return unexpected(error{fmt::format("\"{}\" is not an object", who)});
  timing_side s;
  auto samples = j.find("samples_us");
  if (samples == j.end() || !samples->is_array() || samples->empty())
    return unexpected(error{fmt::format("\"{}.samples_us\" is missing or empty", who)});
  for (const auto& v : *samples) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      return unexpected(error{fmt::format("\"{}.samples_us\" holds something other than a non-negative time", who)});
    s.samples_us.push_back(v.get<double>());
  }
  auto m = number(j, "median_us");
  if (!m || *m <= 0) return unexpected(error{fmt::format("\"{}.median_us\" is missing or not positive", who)});
  s.median_us = *m;
  s.noise = number(j, "noise").value_or(0);
  s.spread = number(j, "spread").value_or(0);
  return s;
}

/// The verdict when the recheck (the last timed run, on fresh inputs) disagrees
/// with the reference: the kernel skipped work or cached results across calls.
inline verdict recheck_verdict(const comparison& cmp, std::uint64_t recheck_seed) {
  verdict v = make_wrong_result_verdict(cmp);
  v.summary = "the last timed run, on fresh inputs, disagrees with the reference (work skipped or cached across "
              "calls): " + v.summary;
  v.log = fmt::format("recheck seed {}", recheck_seed);
  return v;
}

/// The measurement of a profile result `r`: the candidate's timing `cs`, the
/// baseline's `bs` (when timed; `baseline_of` names it) and the worker's
/// phases and clocks. A note when the SM clock is unknown. A flag of the
/// wrong type throws json_read_error (json_fields.hpp), naming its pointer.
inline measurement measure(const json& r, const timing_side& cs, const std::optional<timing_side>& bs,
                           std::string_view baseline_of, std::vector<std::string>& notes) {
  measurement m;
  m.median_us = cs.median_us;
  m.spread = cs.spread;
  m.samples_us = cs.samples_us;
  m.metrics["noise"] = cs.noise;
  m.metrics["samples"] = static_cast<double>(cs.samples_us.size());
  // 1 when the timed runs were gated (executor.hpp, context_state::hold).
  m.metrics["launch_gate"] = specgen::detail::key_or(r, "launch_gate", false) ? 1.0 : 0.0;
  // Where the worker's time went (seconds): setup, warmup, sampling, cupti, timed_check, recheck, total.
  if (auto ph = r.find("phases_s"); ph != r.end() && ph->is_object())
    for (const auto& [name, v] : ph->items())
      if (v.is_number()) m.metrics["worker_" + name + "_s"] = v.get<double>();
  if (bs) {
    m.baseline_median_us = bs->median_us;
    m.speedup = bs->median_us / cs.median_us;
    m.baseline_of = std::string(baseline_of);
  }
  if (auto clk = r.find("sm_clock_mhz"); clk != r.end() && clk->is_object()) {
    auto lo = number(*clk, "min"), hi = number(*clk, "max");
    m.sm_clock_mhz = lo && hi ? 0.5 * (*lo + *hi) : hi.value_or(0);
  } else {
    notes.push_back("the SM clock is unknown (NVML unavailable)");
  }
  return m;
}

/// CUPTI's cross-check of a profile result `r`: every kernel accounted for
/// (`per_run` launches in each run), and its time agreeing with the events'.
/// A verdict when it fails (`suspicious`, or nonsense while `what`); notes and
/// the accuracy metrics otherwise. A flag of the wrong type throws json_read_error.
inline std::optional<verdict> judge_cupti(const json& r, const profile_config& pc, std::int64_t per_run,
                                          std::string_view what, measurement& m, std::vector<std::string>& notes) {
  auto cupti = r.find("cupti");
  if (!pc.cupti_check) {
    notes.push_back("the CUPTI cross-check is off");
    return std::nullopt;
  }
  if (cupti == r.end() || !cupti->is_object()) {
    notes.push_back("the worker ran no CUPTI cross-check");
    return std::nullopt;
  }
  if (!specgen::detail::nested_in("cupti", [&] { return specgen::detail::key_or(*cupti, "available", false); })) {
    auto reason = cupti->find("reason");
    notes.push_back(fmt::format("CUPTI unavailable: {}",
                                reason != cupti->end() && reason->is_string() ? reason->get<std::string>() : "?"));
    return std::nullopt;
  }
  auto integer = [&](const char* f) -> std::optional<std::int64_t> {
    auto it = cupti->find(f);
    if (it == cupti->end() || !it->is_number_integer()) return std::nullopt;
    return it->get<std::int64_t>();
  };
  auto list = [&](const char* f) {
    std::vector<double> v;
    if (auto it = cupti->find(f); it != cupti->end() && it->is_array())
      for (const auto& x : *it)
        if (x.is_number()) v.push_back(x.get<double>());
    return v;
  };
  const auto runs = integer("runs"), kernels = integer("kernels");
  const auto foreign_k = integer("foreign_kernels").value_or(0), foreign_s = integer("foreign_streams").value_or(0);
  if (!runs || !kernels) return nonsense(what, "cupti: \"runs\" or \"kernels\" is missing");
  const std::string numbers = fmt::format("CUPTI: {} runs, {} kernels ({} per run expected), {} foreign kernels, "
                                          "{} on foreign streams",
                                          *runs, *kernels, per_run, foreign_k, foreign_s);
  if (*kernels != *runs * per_run)
    return make(verdict_kind::suspicious,
                fmt::format("CUPTI saw {} kernels in {} runs, but the plan launches {} per run (launches "
                            "outside the plan, or skipped)",
                            *kernels, *runs, per_run),
                numbers);
  if (foreign_s > 0)
    return make(verdict_kind::suspicious,
                fmt::format("CUPTI saw {} kernel records on a stream other than the worker's", foreign_s), numbers);
  if (foreign_k > 0) {
    // The count matched: every run launched exactly the plan's kernels,
    // and a kernel launched from inside one (dynamic parallelism) would
    // have added to it. On an H200, correct kernels were reported under
    // other names after the worker's module cache had unloaded modules
    // (likely a reused function handle), so a name alone decides nothing.
    std::vector<std::string> seen;
    if (auto it = cupti->find("kernel_names"); it != cupti->end() && it->is_array())
      for (const auto& n : *it)
        if (n.is_string()) seen.push_back(n.get<std::string>());
    notes.push_back(fmt::format("CUPTI named {} of the {} kernels differently from the plan (names seen: {}); the "
                                "count matches the plan",
                                foreign_k, *kernels, fmt::join(seen, ", ")));
  }
  const double km = median(list("kernel_us")), em = median(list("event_us"));
  if (em > 0) {
    const double rel = (km - em) / em;
    // Accuracy of the reported time: CUPTI's kernel time against the
    // sampled event median (runs without CUPTI, whose tracing adds about
    // 1 us to every event pair of its own pass).
    if (m.median_us > 0) m.metrics["event_vs_cupti"] = (km - m.median_us) / m.median_us;
    // The same runs on both clocks: what the `suspicious` rules below compare.
    m.metrics["event_vs_cupti_same_runs"] = rel;
    m.metrics["cupti_kernel_us"] = km;
    if (km > em * (1 + pc.cupti_tolerance))
      return make(verdict_kind::suspicious,
                  fmt::format("CUPTI's kernel time ({:.2f} us median) exceeds the event time ({:.2f} us) "
                              "by {:.0f}%: work escapes the timed region",
                              km, em, 100 * rel),
                  numbers);
    if (em > km * (1 + pc.cupti_tolerance) + launch_allowance_us * static_cast<double>(per_run))
      return make(verdict_kind::suspicious,
                  fmt::format("the event time ({:.2f} us median) exceeds CUPTI's kernel time ({:.2f} us) "
                              "by {:.0f}%: time in the timed region outside the plan's kernels",
                              em, km, -100 * rel),
                  numbers);
  }
  return std::nullopt;
}

/// The range profiler's hardware metrics of a profile result `r`, when asked
/// for: feedback only, never a verdict. A flag of the wrong type throws json_read_error.
inline void read_hardware_metrics(const json& r, const profile_config& pc, measurement& m,
                                  std::vector<std::string>& notes) {
  if (!pc.hardware_metrics) return;
  auto hw = r.find("hardware_metrics");
  if (hw == r.end() || !hw->is_object() ||
      !specgen::detail::nested_in("hardware_metrics", [&] { return specgen::detail::key_or(*hw, "available", false); })) {
    const std::string why = hw != r.end() && hw->is_object() && hw->contains("reason") && (*hw)["reason"].is_string()
                                ? (*hw)["reason"].get<std::string>()
                                : std::string("the worker ran no range-profiler pass");
    notes.push_back("hardware metrics unavailable: " + why);
  } else if (auto values = hw->find("values"); values != hw->end() && values->is_object()) {
    static const std::map<std::string, std::string> short_names{
        {"dram__throughput.avg.pct_of_peak_sustained_elapsed", "hw_dram_pct"},
        {"lts__throughput.avg.pct_of_peak_sustained_elapsed", "hw_l2_pct"},
        {"sm__throughput.avg.pct_of_peak_sustained_elapsed", "hw_sm_pct"},
        {"sm__warps_active.avg.pct_of_peak_sustained_active", "hw_occupancy_pct"},
        {"dram__bytes.sum", "hw_dram_bytes"},
        {"gpu__time_duration.sum", "hw_duration_ns"}};
    for (const auto& [name, v] : values->items()) {
      if (!v.is_number()) continue;
      auto it = short_names.find(name);
      m.metrics[it != short_names.end() ? it->second : "hw_" + name] = v.get<double>();
    }
  }
}

/// The roofline: no kernel moves its inputs and outputs faster than DRAM
/// allows (`peak_dram_gbps`, 0 when unknown). `suspicious` when the median
/// beats it by more than the margin; skipped (with a note) when L2 is not
/// flushed and the buffers fit in it (`l2_bytes`).
inline std::optional<verdict> judge_roofline(const task& t, const shape_binding& shape, double peak_dram_gbps,
                                             std::int64_t l2_bytes, const profile_config& pc, measurement& m,
                                             std::vector<std::string>& notes) {
  double bytes = 0;
  for (const auto* list : {&t.inputs, &t.outputs})
    for (const auto& spec : *list)
      if (auto b = tensor_bytes(spec, shape)) bytes += static_cast<double>(*b);
  m.metrics["effective_dram_gbps"] = bytes / (m.median_us * 1e3);
  if (peak_dram_gbps <= 0) {
    notes.push_back("roofline check skipped: the device reports no peak DRAM bandwidth");
    return std::nullopt;
  }
  const double bound_us = bytes / (peak_dram_gbps * 1e3);
  m.metrics["roofline_fraction"] = bound_us / m.median_us;
  const bool fits_in_l2 = !pc.flush_l2 && bytes <= 2.0 * static_cast<double>(l2_bytes);
  if (fits_in_l2) {
    notes.push_back("roofline check skipped: L2 is not flushed and the buffers fit in it");
    return std::nullopt;
  }
  if (m.median_us < pc.roofline_margin * bound_us)
    return make(verdict_kind::suspicious,
                fmt::format("the median {:.2f} us is below {} x the {:.2f} us needed to move {} once at "
                            "peak DRAM bandwidth ({:.0f} GB/s): work skipped or results cached",
                            m.median_us, pc.roofline_margin, bound_us, megabytes(bytes), peak_dram_gbps),
                fmt::format("effective bandwidth {:.0f} GB/s", bytes / (m.median_us * 1e3)));
  return std::nullopt;
}

}  // namespace gpu::eval_detail
SPECGEN_END_NAMESPACE
