// device_session: one GPU driven through its worker. The validator and the
// profiler's decisions live here; the kernels run in the worker, every
// comparison that decides a verdict runs in this process.
#include "internal.hpp"
#include "gpu/common/companion.hpp"
#include "gpu/supervisor/worker_host.hpp"

#include <specgen/gpu/evaluation.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <mutex>
#include <ranges>
#include <set>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#ifndef SPECGEN_DEFAULT_WORKER
#define SPECGEN_DEFAULT_WORKER "specgen-worker"
#endif

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

using namespace eval_detail;

namespace {

/// Per-launch allowance (µs) for the gap between the events and the kernels
/// CUPTI sees: the launch the events also bracket, 3-4 µs per kernel on an H200
/// (docs/benchmarks.md, `gpu-cupti`).
constexpr double launch_allowance_us = 10.0;

verdict make(verdict_kind k, std::string summary, std::string log = {}) {
  return verdict{.kind = k, .summary = std::move(summary), .log = std::move(log), .mismatch = {}};
}

verdict nonsense(std::string_view what, std::string_view why) {
  return make(verdict_kind::fault, fmt::format("the worker answered nonsense while {}", what), std::string(why));
}

double millis(duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string megabytes(double bytes) { return fmt::format("{:.2f} MB", bytes / 1e6); }

/// A number field, or nullopt.
std::optional<double> number(const json& j, const char* field) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(field);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

/// Timing statistics of one side of a profile: {"samples_us", "median_us", "noise", "spread"}.
struct timing_side {
  std::vector<double> samples_us;
  double median_us = 0, noise = 0, spread = 0;
};

expected<timing_side, std::string> decode_side(const json& j, std::string_view who) {
  if (!j.is_object()) return unexpected(fmt::format("\"{}\" is not an object", who));
  timing_side s;
  auto samples = j.find("samples_us");
  if (samples == j.end() || !samples->is_array() || samples->empty())
    return unexpected(fmt::format("\"{}.samples_us\" is missing or empty", who));
  for (const auto& v : *samples) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      return unexpected(fmt::format("\"{}.samples_us\" holds something other than a non-negative time", who));
    s.samples_us.push_back(v.get<double>());
  }
  auto m = number(j, "median_us");
  if (!m || *m <= 0) return unexpected(fmt::format("\"{}.median_us\" is missing or not positive", who));
  s.median_us = *m;
  s.noise = number(j, "noise").value_or(0);
  s.spread = number(j, "spread").value_or(0);
  return s;
}

}  // namespace

std::string find_worker_program(const std::string& configured) {
#ifndef SPECGEN_INSTALLED_WORKER
#define SPECGEN_INSTALLED_WORKER ""
#endif
  return detail::find_companion_program(configured, "SPECGEN_WORKER", "specgen-worker", SPECGEN_INSTALLED_WORKER,
                                        SPECGEN_DEFAULT_WORKER);
}

struct device_session::state {
  session_config config;
  device_info dev;
  std::shared_ptr<compiler> comp;
  std::shared_ptr<reference_cache> refs;
  std::unique_ptr<worker_host> worker;

  // Module keys the current worker has loaded (as far as this session knows).
  std::set<std::string> loaded;
  int loaded_pid = -1;

  mutable std::mutex stats_mutex;
  session_stats counters;

  std::atomic<int> depth{0};
  std::atomic<bool> cancel_flag{false};

  /// Marks the outermost public call, so `cancel` knows something runs.
  struct scope {
    state& s;
    explicit scope(state& st) : s(st) {
      if (s.depth.fetch_add(1) == 0) s.cancel_flag = false;
    }
    ~scope() { s.depth.fetch_sub(1); }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
  };

  void count(std::uint64_t session_stats::*field) {
    std::lock_guard lock(stats_mutex);
    ++(counters.*field);
  }

  verdict cancelled(std::string_view what) const {
    return make(verdict_kind::fault, fmt::format("cancelled while {}", what),
                "the evaluation was cancelled; its worker was killed and replaced");
  }

  /// One worker call; every way it can fail becomes a verdict.
  expected<std::shared_ptr<response>, verdict> call(request r, duration deadline, std::string_view what) {
    if (cancel_flag) return unexpected(cancelled(what));
    auto resp = worker->call(r, deadline);
    if (cancel_flag) return unexpected(cancelled(what));
    if (!resp) {
      const worker_failure& f = resp.error();
      switch (f.what) {
        case worker_failure::kind::timeout:
          return unexpected(make(verdict_kind::timeout,
                                 fmt::format("no answer from the worker within {:.1f} s while {}; the worker was "
                                             "killed and replaced",
                                             to_seconds(deadline), what),
                                 f.message));
        case worker_failure::kind::crashed:
          return unexpected(make(verdict_kind::fault, fmt::format("the worker crashed while {}", what), f.message));
        case worker_failure::kind::protocol_error:
          return unexpected(
              make(verdict_kind::fault, fmt::format("the worker broke the protocol while {}", what), f.message));
        case worker_failure::kind::cancelled: return unexpected(cancelled(what));
        case worker_failure::kind::spawn_failed:
          return unexpected(make(verdict_kind::fault, fmt::format("no worker could be started while {}", what),
                                 f.message));
      }
    }
    if (!resp->ok)
      return unexpected(make(verdict_kind::fault, fmt::format("the worker refused \"{}\" while {}", r.op, what),
                             resp->error));
    return std::make_shared<response>(std::move(*resp));
  }

  /// After a fault or timeout the worker exits once it has answered: make
  /// the host notice now (an echo to the dying worker fails and replaces
  /// it), so the next candidate does not inherit the crash.
  void settle_worker() {
    (void)worker->call({.op = "echo", .args = json::object(), .binary = {}},
                       config.worker.startup_timeout + seconds(2));
    loaded.clear();
  }

  /// A failed run result ({"ok": false, "error_kind", ...}) as a verdict.
  verdict run_error(const json& result, std::string_view what) {
    auto text = [&](const char* f) {
      auto it = result.find(f);
      return it != result.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    const std::string kind = text("error_kind"), message = text("message"), cuda = text("cuda_error");
    const std::string detail = cuda.empty() ? message : fmt::format("{} ({})", message, cuda);
    if (kind == "fault") {
      kernel_faulted = true;
      settle_worker();
      return make(verdict_kind::fault, fmt::format("the kernel faulted while {}: {}", what, first_line(detail)), detail);
    }
    if (kind == "timeout") {
      settle_worker();
      return make(verdict_kind::timeout, fmt::format("the kernels missed their deadline while {}", what), detail);
    }
    if (kind == "launch_failed" || kind == "invalid_plan")
      return make(verdict_kind::invalid_plan, fmt::format("{} ({})", first_line(detail), what), detail);
    if (kind == "load_failed")
      return make(verdict_kind::compile_error, fmt::format("the driver rejected the cubin: {}", first_line(detail)),
                  detail);
    if (kind == "out_of_memory")
      return make(verdict_kind::fault, fmt::format("out of device memory while {}", what), detail);
    if (kind.empty()) return nonsense(what, fmt::format("a failed result without an error_kind: {}", result.dump().substr(0, 300)));
    return make(verdict_kind::fault, fmt::format("the worker could not run the plan ({}) while {}", kind, what), detail);
  }

  /// The worker's loaded-module set belongs to one process.
  void track_worker() {
    const int pid = worker->info().pid;
    if (pid != loaded_pid) {
      loaded.clear();
      loaded_pid = pid;
    }
  }

  struct run_answer {
    std::shared_ptr<response> resp;  // the outputs point into its binary
    std::vector<decoded_run> runs;
  };

  /// Set by run_error when the worker reports that the kernels themselves
  /// faulted (not the worker, not the protocol); run_plan clears it.
  bool kernel_faulted = false;

  /// `run` op: `plan` on worker-generated inputs at `shape`, every set in
  /// turn, each `repeats` times. With `checked` the call is a candidate's
  /// validation: all runs share one loaded module (as a caller's would) and,
  /// with `poison`, shared memory is poisoned before every launch.
  expected<run_answer, verdict> run_plan(const task& t, const json& task_json, const shape_binding& shape,
                                         const std::vector<input_case>& sets, const std::string& plan,
                                         const compiled& binary, int repeats, bool checked,
                                         const std::vector<std::size_t>& output_bytes, std::string_view what,
                                         bool poison = true) {
    kernel_faulted = false;
    json lists = json::array();
    for (const auto& c : sets) lists.push_back(inputs_json(t, c));
    json args{{"task", task_json},
              {"plan", plan},
              {"shape", shape},
              {"module_key", binary.key},
              {"sets", std::move(lists)},
              {"repeats", repeats},
              {"guard", config.validation.guard_bytes},
              {"deadline_ms", millis(config.validation.run_deadline)}};
    if (checked) {
      args["same_module"] = config.validation.same_module;
      if (poison && !config.validation.shared_memory_poison.empty())
        args["smem_poison"] = config.validation.shared_memory_poison;
    }
    const int runs = repeats * static_cast<int>(sets.size());
    const duration deadline = config.validation.run_deadline * runs + config.call_margin;
    track_worker();
    bool with_cubin = !loaded.contains(binary.key);
    for (int attempt = 0;; ++attempt) {
      request r{.op = "run", .args = args, .binary = {}};
      if (with_cubin) {
        r.args["cubin"] = {{"offset", 0}, {"length", binary.cubin.size()}};
        r.binary.assign(reinterpret_cast<const char*>(binary.cubin.data()), binary.cubin.size());
      }
      auto resp = call(std::move(r), deadline, what);
      if (!resp) {
        loaded.clear();
        return unexpected(resp.error());
      }
      track_worker();
      const json& result = (*resp)->result;
      if (!result.is_object() || !result.contains("ok") || !result["ok"].is_boolean())
        return unexpected(nonsense(what, fmt::format("the result is not {{\"ok\": bool, ...}}: {}",
                                                     result.dump().substr(0, 300))));
      if (!result["ok"].get<bool>()) {
        const bool missing = result.value("error_kind", json()).is_string() &&
                             result["error_kind"].get<std::string>() == "module_missing";
        if (missing && attempt == 0) {
          loaded.erase(binary.key);
          with_cubin = true;
          count(&session_stats::module_resends);
          continue;
        }
        if (missing)
          return unexpected(nonsense(what, "the worker asked for the module again after it was sent with the cubin"));
        return unexpected(run_error(result, what));
      }
      loaded.insert(binary.key);
      const std::string_view payload = (*resp)->payload();
      const std::span<const std::byte> bin(reinterpret_cast<const std::byte*>(payload.data()), payload.size());
      auto decoded = decode_runs(result, bin, t, output_bytes, runs);
      if (!decoded) return unexpected(nonsense(what, decoded.error()));
      return run_answer{*resp, std::move(*decoded)};
    }
  }

  expected<std::vector<std::size_t>, verdict> output_sizes(const task& t, const shape_binding& shape) {
    std::vector<std::size_t> out;
    for (const auto& o : t.outputs) {
      auto b = tensor_bytes(o, shape);
      if (!b) return unexpected(make(verdict_kind::fault, fmt::format("the task's output sizes fail at {}", shape_text(shape)),
                                     "task: " + b.error().message));
      out.push_back(*b);
    }
    return out;
  }

  /// Reference outputs for (t, shape, inputs): from the cache, else computed
  /// by the host callback or by the reference plan on the worker. Calls the
  /// worker on a miss, so outputs read in place from an earlier reply must
  /// be copied first.
  expected<std::shared_ptr<const output_set>, verdict> reference(const task& t, const json& task_json,
                                                                 std::uint64_t hash, const shape_binding& shape,
                                                                 const input_case& inputs) {
    const std::string key = reference_key(hash, shape, inputs);
    if (auto hit = refs->find(key)) {
      count(&session_stats::reference_hits);
      return hit;
    }
    const std::string on = inputs.absolute ? " on the absolute values of the inputs" : "";
    auto fail = [&](std::string why, std::string log) {
      return unexpected(make(verdict_kind::fault,
                             fmt::format("the task's reference failed at {}{}: {}", shape_text(shape), on, first_line(why)),
                             "reference: " + (log.empty() ? why : why + "\n" + log)));
    };
    auto sizes = output_sizes(t, shape);
    if (!sizes) return unexpected(sizes.error());
    auto out = std::make_shared<output_set>();
    if (t.reference.is_host()) {
      auto fn = config.host_references.find(t.reference.host);
      if (fn == config.host_references.end() || !fn->second)
        return fail(fmt::format("no host reference named '{}' is registered in session_config::host_references",
                                t.reference.host),
                    {});
      std::vector<std::vector<std::byte>> generated;
      std::vector<std::span<const std::byte>> views;
      for (std::size_t i = 0; i < t.inputs.size(); ++i) {
        auto n = element_count(t.inputs[i], shape);
        if (!n) return fail(n.error().message, {});
        generated.push_back(make_input(t.inputs[i], *n, inputs.seed, inputs.dists.at(i)));
        if (inputs.absolute) make_absolute(generated.back(), t.inputs[i].type);
      }
      for (const auto& in : generated) views.emplace_back(in);
      try {
        *out = fn->second(t, shape, views);
      } catch (const std::exception& e) {
        return fail(fmt::format("the host reference '{}' threw: {}", t.reference.host, e.what()), {});
      }
      if (out->size() != t.outputs.size())
        return fail(fmt::format("the host reference '{}' returned {} outputs; the task has {}", t.reference.host,
                                out->size(), t.outputs.size()),
                    {});
      for (std::size_t k = 0; k < out->size(); ++k)
        if ((*out)[k].size() != (*sizes)[k])
          return fail(fmt::format("the host reference '{}' returned {} bytes for output '{}'; the shape needs {}",
                                  t.reference.host, (*out)[k].size(), t.outputs[k].name, (*sizes)[k]),
                      {});
    } else {
      auto bin = comp->compile(t.reference.source, options_for(config, dev, t));
      if (!bin) return fail("it does not compile: " + bin.error().message, bin.error().log);
      const std::string what = fmt::format("running the reference at {}{}", shape_text(shape), on);
      auto ans = run_plan(t, task_json, shape, {inputs}, t.reference.plan, **bin, 1, false, *sizes, what);
      if (!ans) {
        if (cancel_flag) return unexpected(ans.error());
        return fail(ans.error().summary, ans.error().log);
      }
      const decoded_run& run = ans->runs.front();
      if (!run.guards_intact) return fail(fmt::format("it wrote outside '{}'", run.guards_broken.front()), {});
      if (!run.inputs_intact) return fail(fmt::format("it modified its input '{}'", run.inputs_changed.front()), {});
      for (const auto& o : run.outputs) out->emplace_back(o.begin(), o.end());
    }
    count(&session_stats::reference_runs);
    refs->insert(key, out);
    return std::shared_ptr<const output_set>(out);
  }

  /// The reference on the absolute values of the inputs, when some float
  /// output of `t` has a `terms` allowance; null otherwise, or (with a note)
  /// when it cannot be computed: the comparison then goes without it.
  std::shared_ptr<const output_set> terms_for(const task& t, const json& task_json, std::uint64_t hash,
                                              const shape_binding& shape, input_case inputs,
                                              std::vector<std::string>& notes) {
    const bool wanted = std::any_of(t.outputs.begin(), t.outputs.end(), [](const tensor_spec& o) {
      return specgen::detail::is_float(o.type) && o.tol.terms > 0;
    });
    if (!wanted) return nullptr;
    inputs.absolute = true;
    auto got = reference(t, task_json, hash, shape, inputs);
    if (got) return *got;
    notes.push_back("no terms allowance: " + got.error().summary);
    return nullptr;
  }

  /// The verdict of a run that broke a guard zone or changed an input, if it did.
  static std::optional<verdict> memory_verdict(const task& t, const decoded_run& r, const std::string& where,
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
  std::optional<verdict> judge(const task& t, const shape_binding& shape, const std::vector<input_case>& sets,
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

  compile_outcome compile(const task& t, const candidate& c) {
    try {
      return finish_compile(t, c, dev, comp->compile(c.source, options_for(config, dev, t)));
    } catch (const std::exception& e) {
      compile_outcome out;
      out.result = make(verdict_kind::compile_error, fmt::format("internal error while compiling: {}", e.what()));
      return out;
    }
  }

  verdict validate(const task& t, const candidate& c) {
    auto co = compile(t, c);
    if (co.result.kind != verdict_kind::ok) return co.result;
    count(&session_stats::validations);
    const json task_json = to_json(t);
    const std::uint64_t hash = fnv1a(task_json.dump());
    const int repeats = std::max(config.validation.repeats, 1);
    for (std::size_t si = 0; si < t.validation_shapes.size(); ++si) {
      const shape_binding& shape = t.validation_shapes[si];
      auto sizes = output_sizes(t, shape);
      if (!sizes) return sizes.error();
      std::vector<input_case> cases;
      for (const auto& vc : config.validation.cases)
        if (case_applies(t, vc)) cases.push_back(make_case(t, si, vc));
      // One call in one loaded module for every case, or (same_module off) one call per case.
      std::vector<std::vector<input_case>> calls;
      if (config.validation.same_module) calls.push_back(cases);
      else
        for (const auto& ic : cases) calls.push_back({ic});
      for (const auto& sets : calls) {
        if (sets.empty()) continue;
        if (auto bad = validate_call(t, c, co, task_json, hash, shape, sets, repeats, *sizes)) return *bad;
      }
    }
    return make(verdict_kind::ok, {});
  }

  /// A kernel that faulted with shared memory poisoned runs once more
  /// without the poison. When it then completes, the fault came from what it
  /// read in shared memory it never wrote (or wrote racily): the verdict stays
  /// a fault (a real caller's leftover shared memory can hold the same bits),
  /// and its summary says where to look, since the model's next attempt
  /// depends on it.
  verdict explain_fault(const task& t, const json& task_json, const shape_binding& shape,
                        const std::vector<input_case>& sets, const candidate& c, const compile_outcome& co,
                        int repeats, const std::vector<std::size_t>& sizes, std::string_view what, verdict fault) {
    if (fault.kind != verdict_kind::fault || !kernel_faulted || config.validation.shared_memory_poison.empty() ||
        cancel_flag)
      return fault;
    count(&session_stats::poison_fault_reruns);
    const std::string again = fmt::format("{}, again without the shared-memory poison", what);
    auto plain = run_plan(t, task_json, shape, sets, c.plan, *co.binary, repeats, true, sizes, again, false);
    if (!plain && plain.error().kind == verdict_kind::fault) {
      fault.log += "\nit faults as well when shared memory is not poisoned first";
      return fault;
    }
    if (!plain && plain.error().kind != verdict_kind::timeout) return fault;
    fault.summary += fmt::format(
        "; it {} when shared memory is not filled with poison words ({}) first, so the fault likely comes from "
        "reading shared memory before it is written (never written, or another warp's slot read without a "
        "barrier in between)",
        plain ? "runs to completion" : "does not fault (it times out)",
        fmt::join(config.validation.shared_memory_poison | std::views::transform([](std::uint32_t w) {
                    return fmt::format("{:#010x}", w);
                  }),
                  ", "));
    return fault;
  }

  /// One validation call at `shape`: the candidate on every input set of
  /// `sets`, `repeats` times each; what is wrong, or nothing.
  std::optional<verdict> validate_call(const task& t, const candidate& c, const compile_outcome& co,
                                       const json& task_json, std::uint64_t hash, const shape_binding& shape,
                                       const std::vector<input_case>& sets, int repeats,
                                       const std::vector<std::size_t>& sizes) {
    // Every reference first: a reference run on a cache miss is a worker
    // call, which would overwrite the candidate's outputs read in place.
    std::vector<std::shared_ptr<const output_set>> want, terms(sets.size());
    for (const auto& ic : sets) {
      auto w = reference(t, task_json, hash, shape, ic);
      if (!w) return w.error();
      want.push_back(*w);
    }
    const std::string what =
        sets.size() > 1 ? fmt::format("running the candidate at {} ({} input sets in one loaded module)", shape_text(shape), sets.size())
                        : fmt::format("running the candidate at {} ({})", shape_text(shape), case_text(t, sets.front()));
    auto ans = run_plan(t, task_json, shape, sets, c.plan, *co.binary, repeats, true, sizes, what);
    if (!ans) return explain_fault(t, task_json, shape, sets, c, co, repeats, sizes, what, ans.error());
    auto bad = judge(t, shape, sets, ans->runs, repeats, want, terms);
    if (!bad) return std::nullopt;
    if (!is_wrong_output(bad->kind) || bad->kind == verdict_kind::input_mutation ||
        bad->kind == verdict_kind::out_of_bounds_write)
      return bad;
    // Out of the abs/rel tolerance: judge again with the terms allowance, on
    // copies (computing it may call the worker, whose reply region holds the outputs).
    std::vector<std::string> notes;
    bool any_terms = false;
    std::vector<std::vector<std::vector<std::byte>>> copies;  // kept alive while `owned` points into them
    std::vector<decoded_run> owned = ans->runs;
    copies.reserve(owned.size());
    for (auto& r : owned) {
      copies.emplace_back();
      copies.back().reserve(r.outputs.size());
      for (auto& o : r.outputs) {
        copies.back().emplace_back(o.begin(), o.end());
        o = copies.back().back();
      }
    }
    ans->resp.reset();
    for (std::size_t k = 0; k < sets.size(); ++k) {
      terms[k] = terms_for(t, task_json, hash, shape, sets[k], notes);
      any_terms = any_terms || terms[k];
    }
    if (any_terms) bad = judge(t, shape, sets, owned, repeats, want, terms);
    if (bad && !notes.empty()) bad->log += "\n" + notes.front();
    return bad;
  }

  evaluation profile(const task& t, const candidate& c) {
    evaluation e{.id = c.id, .result = {}, .compile = {}, .timing = {}};
    auto co = compile(t, c);
    e.compile = co.report;
    if (co.result.kind != verdict_kind::ok) {
      e.result = co.result;
      return e;
    }
    count(&session_stats::profiles);
    const profile_config& pc = config.profile;
    const shape_binding& shape = t.benchmark_shape;
    const std::string where = shape_text(shape);
    const std::string what = fmt::format("profiling the candidate at {}", where);
    std::vector<std::string> notes;
    auto finish = [&](verdict v) {
      if (!notes.empty()) v.log = v.log.empty() ? fmt::format("{}", fmt::join(notes, "\n"))
                                                : fmt::format("{}\n{}", v.log, fmt::join(notes, "\n"));
      e.result = std::move(v);
      return e;
    };

    // The baseline: the task's own when it is device code, else the reference.
    const implementation* base = nullptr;
    if (!t.baseline.is_host() && !t.baseline.plan.empty()) base = &t.baseline;
    else if (t.baseline.is_host())
      notes.push_back(fmt::format("the baseline is the host callback '{}', which the worker cannot time: the candidate "
                                  "was timed alone and the speedup is 0",
                                  t.baseline.host));
    else if (!t.reference.is_host() && !t.reference.plan.empty()) base = &t.reference;
    else notes.push_back("the task has no device baseline: the candidate was timed alone and the speedup is 0");
    std::shared_ptr<const compiled> base_bin;
    if (base) {
      auto b = comp->compile(base->source, options_for(config, dev, t));
      if (!b)
        return finish(make(verdict_kind::fault, fmt::format("the task's baseline does not compile: {}",
                                                            first_line(b.error().message)),
                           "baseline: " + b.error().log));
      base_bin = *b;
    }

    std::string binary(reinterpret_cast<const char*>(co.binary->cubin.data()), co.binary->cubin.size());
    json cand{{"plan", c.plan},
              {"cubin", {{"offset", 0}, {"length", co.binary->cubin.size()}}},
              {"module_key", co.binary->key}};
    json baseline = nullptr;
    if (base_bin) {
      baseline = {{"plan", base->plan},
                  {"cubin", {{"offset", binary.size()}, {"length", base_bin->cubin.size()}}},
                  {"module_key", base_bin->key}};
      binary.append(reinterpret_cast<const char*>(base_bin->cubin.data()), base_bin->cubin.size());
    }
    const json task_json = to_json(t);
    // The recheck's reference, before the profile call: the outputs of that
    // call are read in place in the worker's bulk region, which the next
    // request (a reference run, on a cache miss) would overwrite.
    const std::uint64_t hash = fnv1a(task_json.dump());
    const input_case recheck_inputs = own_case(t, pc.recheck_seed);
    auto want = reference(t, task_json, hash, shape, recheck_inputs);
    if (!want) return finish(want.error());
    json args{{"task", task_json},
              {"shape", shape},
              {"candidate", std::move(cand)},
              {"baseline", baseline},
              {"seed", pc.seed},
              {"recheck_seed", pc.recheck_seed},
              {"warmup", pc.warmup},
              {"min_samples", pc.min_samples},
              {"max_samples", pc.max_samples},
              {"target_noise", pc.target_noise},
              {"max_seconds", pc.max_seconds},
              {"flush_l2", pc.flush_l2},
              {"interleave", pc.interleave_baseline},
              {"cupti", pc.cupti_check},
              {"cupti_runs", pc.cupti_runs},
              {"hardware_metrics", pc.hardware_metrics},
              {"guard", config.validation.guard_bytes},
              {"deadline_ms", millis(pc.run_deadline)}};
    // Sampling stops at max_seconds, but one sample may still take a whole
    // run_deadline; warm-up, CUPTI and recheck runs are not under the cap.
    const int sides = base_bin ? 2 : 1;
    // The range profiler replays the candidate once per counter pass (8 for the default metrics).
    const int uncapped_runs =
        pc.warmup * sides + (pc.cupti_check ? pc.cupti_runs : 0) + (pc.hardware_metrics ? 10 : 0) + 1 + 2 * sides;
    const duration deadline =
        seconds(pc.max_seconds) + pc.run_deadline * uncapped_runs + config.call_margin;
    auto resp = call({.op = "profile", .args = std::move(args), .binary = std::move(binary)}, deadline, what);
    if (!resp) return finish(resp.error());
    const json& r = (*resp)->result;
    if (!r.is_object() || !r.contains("ok") || !r["ok"].is_boolean())
      return finish(nonsense(what, fmt::format("the result is not {{\"ok\": bool, ...}}: {}", r.dump().substr(0, 300))));
    if (!r["ok"].get<bool>()) return finish(run_error(r, what));

    auto cs = decode_side(r.value("candidate", json()), "candidate");
    if (!cs) return finish(nonsense(what, cs.error()));
    std::optional<timing_side> bs;
    if (base_bin) {
      auto b = decode_side(r.value("baseline", json()), "baseline");
      if (!b) return finish(nonsense(what, b.error()));
      bs = std::move(*b);
    }

    // Recheck: the last timed run, on inputs the kernel has not seen.
    auto sizes = output_sizes(t, shape);
    if (!sizes) return finish(sizes.error());
    const std::string_view payload = (*resp)->payload();
    const std::span<const std::byte> bin(reinterpret_cast<const std::byte*>(payload.data()), payload.size());
    auto recheck = decode_run(r.value("recheck", json()), bin, t, *sizes);
    if (!recheck) return finish(nonsense(what, "recheck: " + recheck.error()));
    if (auto bad = memory_verdict(t, *recheck, where, " in the last timed run")) return finish(std::move(*bad));
    std::vector<std::vector<std::byte>> copies;  // the recheck's outputs, once the terms reference needs the worker
    std::shared_ptr<const output_set> terms;
    for (std::size_t k = 0; k < t.outputs.size(); ++k) {
      auto compare = [&] {
        return compare_outputs_parallel(t.outputs[k], recheck->outputs[k], (**want)[k], where,
                                        std::thread::hardware_concurrency(), 8,
                                        terms ? std::span<const std::byte>((*terms)[k]) : std::span<const std::byte>());
      };
      comparison cmp = compare();
      if (!cmp.pass && !terms && copies.empty()) {
        copies.reserve(recheck->outputs.size());
        for (auto& o : recheck->outputs) {
          copies.emplace_back(o.begin(), o.end());
          o = copies.back();
        }
        terms = terms_for(t, task_json, hash, shape, recheck_inputs, notes);
        if (terms) cmp = compare();
      }
      if (cmp.pass) continue;
      verdict v = make_wrong_result_verdict(cmp);
      v.summary = "the last timed run, on fresh inputs, disagrees with the reference (work skipped or cached across "
                  "calls): " + v.summary;
      v.log = fmt::format("recheck seed {}", pc.recheck_seed);
      return finish(std::move(v));
    }

    measurement m;
    m.median_us = cs->median_us;
    m.spread = cs->spread;
    m.samples_us = cs->samples_us;
    m.metrics["noise"] = cs->noise;
    m.metrics["samples"] = static_cast<double>(cs->samples_us.size());
    // 1 when the timed runs were gated (executor.hpp, context_state::hold).
    m.metrics["launch_gate"] = r.value("launch_gate", false) ? 1.0 : 0.0;
    // Where the worker's time went (seconds): setup, warmup, sampling, cupti, timed_check, recheck, total.
    if (auto ph = r.find("phases_s"); ph != r.end() && ph->is_object())
      for (const auto& [name, v] : ph->items())
        if (v.is_number()) m.metrics["worker_" + name + "_s"] = v.get<double>();
    if (bs) {
      m.baseline_median_us = bs->median_us;
      m.speedup = bs->median_us / cs->median_us;
      m.baseline_of = base == &t.reference ? "reference" : "baseline";
    }
    if (auto clk = r.find("sm_clock_mhz"); clk != r.end() && clk->is_object()) {
      auto lo = number(*clk, "min"), hi = number(*clk, "max");
      m.sm_clock_mhz = lo && hi ? 0.5 * (*lo + *hi) : hi.value_or(0);
    } else {
      notes.push_back("the SM clock is unknown (NVML unavailable)");
    }

    // CUPTI: every kernel accounted for, and its time agreeing with the events'.
    auto plan = parse_plan(c.plan);
    const auto per_run = static_cast<std::int64_t>(plan ? plan->launches.size() : 0);
    auto cupti = r.find("cupti");
    if (!pc.cupti_check) {
      notes.push_back("the CUPTI cross-check is off");
    } else if (cupti == r.end() || !cupti->is_object()) {
      notes.push_back("the worker ran no CUPTI cross-check");
    } else if (!cupti->value("available", false)) {
      auto reason = cupti->find("reason");
      notes.push_back(fmt::format("CUPTI unavailable: {}",
                                  reason != cupti->end() && reason->is_string() ? reason->get<std::string>() : "?"));
    } else {
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
      if (!runs || !kernels) return finish(nonsense(what, "cupti: \"runs\" or \"kernels\" is missing"));
      const std::string numbers = fmt::format("CUPTI: {} runs, {} kernels ({} per run expected), {} foreign kernels, "
                                              "{} on foreign streams",
                                              *runs, *kernels, per_run, foreign_k, foreign_s);
      if (*kernels != *runs * per_run)
        return finish(make(verdict_kind::suspicious,
                           fmt::format("CUPTI saw {} kernels in {} runs, but the plan launches {} per run (launches "
                                       "outside the plan, or skipped)",
                                       *kernels, *runs, per_run),
                           numbers));
      if (foreign_s > 0)
        return finish(make(verdict_kind::suspicious,
                           fmt::format("CUPTI saw {} kernel records on a stream other than the worker's", foreign_s),
                           numbers));
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
          return finish(make(verdict_kind::suspicious,
                             fmt::format("CUPTI's kernel time ({:.2f} us median) exceeds the event time ({:.2f} us) "
                                         "by {:.0f}%: work escapes the timed region",
                                         km, em, 100 * rel),
                             numbers));
        if (em > km * (1 + pc.cupti_tolerance) + launch_allowance_us * static_cast<double>(per_run))
          return finish(make(verdict_kind::suspicious,
                             fmt::format("the event time ({:.2f} us median) exceeds CUPTI's kernel time ({:.2f} us) "
                                         "by {:.0f}%: time in the timed region outside the plan's kernels",
                                         em, km, -100 * rel),
                             numbers));
      }
    }

    // Hardware metrics (range profiler), when asked for: feedback only, never a verdict.
    if (pc.hardware_metrics) {
      auto hw = r.find("hardware_metrics");
      if (hw == r.end() || !hw->is_object() || !hw->value("available", false)) {
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

    // Roofline: no kernel moves its inputs and outputs faster than DRAM allows.
    double bytes = 0;
    for (const auto* list : {&t.inputs, &t.outputs})
      for (const auto& spec : *list)
        if (auto b = tensor_bytes(spec, shape)) bytes += static_cast<double>(*b);
    m.metrics["effective_dram_gbps"] = bytes / (m.median_us * 1e3);
    if (dev.peak_dram_gbps <= 0) {
      notes.push_back("roofline check skipped: the device reports no peak DRAM bandwidth");
    } else {
      const double bound_us = bytes / (dev.peak_dram_gbps * 1e3);
      m.metrics["roofline_fraction"] = bound_us / m.median_us;
      const bool fits_in_l2 = !pc.flush_l2 && bytes <= 2.0 * static_cast<double>(dev.l2_bytes);
      if (fits_in_l2) {
        notes.push_back("roofline check skipped: L2 is not flushed and the buffers fit in it");
      } else if (m.median_us < pc.roofline_margin * bound_us) {
        return finish(make(verdict_kind::suspicious,
                           fmt::format("the median {:.2f} us is below {} x the {:.2f} us needed to move {} once at "
                                       "peak DRAM bandwidth ({:.0f} GB/s): work skipped or results cached",
                                       m.median_us, pc.roofline_margin, bound_us, megabytes(bytes), dev.peak_dram_gbps),
                           fmt::format("effective bandwidth {:.0f} GB/s", bytes / (m.median_us * 1e3))));
      }
    }
    e.timing = std::move(m);
    return finish(make(verdict_kind::ok, {}));
  }
};

expected<std::unique_ptr<device_session>, error> device_session::open(session_config config) {
  auto s = std::make_unique<state>();
  if (config.assumed_device) {
    s->dev = *config.assumed_device;
  } else {
    auto n = device_count();
    if (!n) return unexpected(error{"no GPU: " + n.error().message});
    if (*n == 0) return unexpected(error{"no GPU: the driver sees no devices"});
    if (config.device < 0 || config.device >= *n)
      return unexpected(error{fmt::format("no GPU: device {} does not exist ({} visible)", config.device, *n)});
    auto d = query_device(config.device);
    if (!d) return unexpected(error{"no GPU: " + d.error().message});
    s->dev = std::move(*d);
  }
  if (!config.shared_compiler) config.shared_compiler = std::make_shared<compiler>(config.compiler_settings);
  if (!config.references) config.references = std::make_shared<reference_cache>(config.reference_cache_bytes);
  s->comp = config.shared_compiler;
  s->refs = config.references;
  worker_config wc = config.worker;
  wc.program = find_worker_program(config.worker_program);
  wc.device = config.device;
  s->worker = std::make_unique<worker_host>(wc);
  if (auto started = s->worker->start(); !started)
    return unexpected(error{fmt::format("could not start the worker '{}' for device {}: {}", wc.program, config.device,
                                        started.error().message)});
  if (!config.assumed_device) {
    const json hello = s->worker->info().hello;
    const json dev = hello.value("device", json::object());
    if (dev.is_object() && dev.value("name", std::string()) == "none")
      return unexpected(error{fmt::format("no GPU: the worker for device {} reports: {}", config.device,
                                          dev.value("error", std::string("no device")))});
  }
  s->config = std::move(config);
  return std::unique_ptr<device_session>(new device_session(std::move(s)));
}

device_session::device_session(std::unique_ptr<state> s) : state_(std::move(s)) {}
device_session::~device_session() = default;

const device_info& device_session::device() const noexcept { return state_->dev; }
const session_config& device_session::config() const noexcept { return state_->config; }

compile_outcome device_session::compile(const task& t, const candidate& c) {
  state::scope sc(*state_);
  return state_->compile(t, c);
}

verdict device_session::validate(const task& t, const candidate& c) {
  state::scope sc(*state_);
  try {
    return state_->validate(t, c);
  } catch (const std::exception& e) {
    return make(verdict_kind::fault, fmt::format("internal error in the validator: {}", e.what()));
  }
}

evaluation device_session::profile(const task& t, const candidate& c) {
  state::scope sc(*state_);
  try {
    return state_->profile(t, c);
  } catch (const std::exception& e) {
    return evaluation{.id = c.id,
                      .result = make(verdict_kind::fault, fmt::format("internal error in the profiler: {}", e.what())),
                      .compile = {},
                      .timing = {}};
  }
}

evaluation device_session::evaluate(const task& t, const candidate& c) {
  state::scope sc(*state_);
  evaluation e{.id = c.id, .result = {}, .compile = {}, .timing = {}};
  auto co = state_->compile(t, c);
  e.compile = co.report;
  if (co.result.kind != verdict_kind::ok) {
    e.result = co.result;
    return e;
  }
  verdict v = validate(t, c);
  if (v.kind != verdict_kind::ok) {
    e.result = std::move(v);
    return e;
  }
  evaluation p = profile(t, c);
  p.compile = co.report;
  return p;
}

bool device_session::cancel() {
  if (state_->depth.load() == 0) return false;
  state_->cancel_flag = true;
  state_->worker->cancel();
  return true;
}

session_stats device_session::stats() const {
  session_stats out;
  {
    std::lock_guard lock(state_->stats_mutex);
    out = state_->counters;
  }
  out.worker = state_->worker->stats();
  return out;
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
