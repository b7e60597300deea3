// device_session: one GPU driven through its worker. The validator and the
// profiler's decisions live here; the kernels run in the worker, every
// comparison that decides a verdict runs in this process.
#include "internal.hpp"
#include "judge.hpp"
#include "gpu/common/companion.hpp"
#include "gpu/supervisor/worker_host.hpp"

#include <specgen/gpu/evaluation.hpp>
#include <specgen/stored_reference.hpp>

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

double millis(duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

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

  // Stored references opened so far, by path (each checked against its task when opened).
  std::map<std::string, std::shared_ptr<const stored_reference>> stores;

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
    std::string sent;  // a stored case's inputs, sent in the request's binary part ahead of the cubin
    for (const auto& c : sets) {
      if (!c.stored) {
        lists.push_back(inputs_json(t, c));
        continue;
      }
      auto in = stored_buffers(t, *c.stored, stored_part::inputs);
      if (!in) return unexpected(in.error());
      lists.push_back(sent_inputs(t, **in, sent));
    }
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
      request r{.op = "run", .args = args, .binary = sent};
      if (with_cubin) {
        r.args["cubin"] = {{"offset", sent.size()}, {"length", binary.cubin.size()}};
        r.binary.append(reinterpret_cast<const char*>(binary.cubin.data()), binary.cubin.size());
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
      if (!decoded) return unexpected(nonsense(what, decoded.error().message));
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

  /// The stored reference of `t`, opened (and checked against `t`) once per
  /// session and path; a fault verdict when it cannot be read or does not fit.
  expected<std::shared_ptr<const stored_reference>, verdict> store_of(const task& t) {
    if (auto it = stores.find(t.reference.stored); it != stores.end()) return it->second;
    auto opened = stored_reference::open(t.reference.stored);
    if (!opened)
      return unexpected(make(verdict_kind::fault, "the task's stored reference cannot be read: " + opened.error().what()));
    if (auto ok = opened->check(t); !ok)
      return unexpected(make(verdict_kind::fault, "the task's stored reference does not fit the task: " + ok.error().what()));
    auto shared = std::make_shared<const stored_reference>(std::move(*opened));
    stores.emplace(t.reference.stored, shared);
    return shared;
  }

  enum class stored_part { inputs, outputs, terms };

  /// One part of stored case `index` of `t`'s stored reference, in the task's
  /// input or output order (terms: empty for an output without them), read
  /// once and kept in the reference cache; a fault verdict when the file
  /// cannot be read or a buffer fails its checksum.
  expected<std::shared_ptr<const output_set>, verdict> stored_buffers(const task& t, std::size_t index, stored_part part) {
    auto ref = store_of(t);
    if (!ref) return unexpected(ref.error());
    if (index >= (*ref)->cases().size())
      return unexpected(make(verdict_kind::fault, fmt::format("the task's stored reference has no case {}", index)));
    const stored_case& c = (*ref)->cases()[index];
    static constexpr std::array<const char*, 3> names{"inputs", "outputs", "terms"};
    const std::string key =
        fmt::format("stored|{}|{}|{}|{}", t.reference.stored, (*ref)->file_bytes(), index, names[static_cast<int>(part)]);
    if (auto hit = refs->find(key)) {
      count(&session_stats::reference_hits);
      return hit;
    }
    const auto& specs = part == stored_part::inputs ? t.inputs : t.outputs;
    const auto& blobs = part == stored_part::inputs ? c.inputs : part == stored_part::outputs ? c.outputs : c.terms;
    if (part == stored_part::terms && blobs.empty())
      return unexpected(make(verdict_kind::fault, fmt::format("the stored reference holds no terms for {}", case_text(t, {.stored = index, .what = c.what}))));
    auto out = std::make_shared<output_set>();
    for (const auto& spec : specs) {
      auto it = blobs.find(spec.name);
      if (it == blobs.end()) {  // only terms may lack a buffer (`check` saw to the rest)
        out->emplace_back();
        continue;
      }
      auto bytes = (*ref)->read(it->second);
      if (!bytes)
        return unexpected(make(verdict_kind::fault, "the task's stored reference is damaged: " + bytes.error().what()));
      out->push_back(std::move(*bytes));
    }
    count(&session_stats::reference_runs);
    refs->insert(key, out);
    return std::shared_ptr<const output_set>(out);
  }

  /// The input cases of the stored reference at `shape`: every stored case there.
  expected<std::vector<input_case>, verdict> stored_cases(const task& t, const shape_binding& shape) {
    auto ref = store_of(t);
    if (!ref) return unexpected(ref.error());
    std::vector<input_case> out;
    for (std::size_t i : (*ref)->cases_at(shape))
      out.push_back({.seed = (*ref)->cases()[i].seed, .dists = {}, .absolute = false, .floats = {}, .stored = i,
                     .what = (*ref)->cases()[i].what});
    if (out.empty())
      return unexpected(make(verdict_kind::fault, fmt::format("the task's stored reference holds no case at {}", shape_text(shape))));
    return out;
  }

  /// `inputs` appended to `sent`, and the run request's list naming them
  /// (`{"name", "offset", "length"}` into the binary part).
  static json sent_inputs(const task& t, const output_set& inputs, std::string& sent) {
    json list = json::array();
    for (std::size_t i = 0; i < t.inputs.size(); ++i) {
      list.push_back({{"name", t.inputs[i].name}, {"offset", sent.size()}, {"length", inputs[i].size()}});
      sent.append(reinterpret_cast<const char*>(inputs[i].data()), inputs[i].size());
    }
    return list;
  }

  /// Reference outputs for (t, shape, inputs): from the cache, else computed
  /// by the host callback or by the reference plan on the worker. Calls the
  /// worker on a miss, so outputs read in place from an earlier reply must
  /// be copied first.
  expected<std::shared_ptr<const output_set>, verdict> reference(const task& t, const json& task_json,
                                                                 std::uint64_t hash, const shape_binding& shape,
                                                                 const input_case& inputs) {
    if (t.reference.is_stored()) {
      if (!inputs.stored)
        return unexpected(make(verdict_kind::fault,
                               fmt::format("the task's reference is stored outputs, which hold no case for {} at {}",
                                           case_text(t, inputs), shape_text(shape))));
      return stored_buffers(t, *inputs.stored, inputs.absolute ? stored_part::terms : stored_part::outputs);
    }
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
      if (t.reference.is_stored()) {  // the stored cases replace the evaluator's own
        auto stored = stored_cases(t, shape);
        if (!stored) return stored.error();
        cases = std::move(*stored);
      } else {
        for (const auto& vc : config.validation.cases)
          if (case_applies(t, vc)) cases.push_back(make_case(t, si, vc));
      }
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
    auto bad = judge_runs(t, shape, sets, ans->runs, repeats, want, terms);
    if (!bad) return std::nullopt;
    if (!terms_may_clear(*bad)) return bad;
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
    if (any_terms) bad = judge_runs(t, shape, sets, owned, repeats, want, terms);
    if (bad && !notes.empty()) bad->log += "\n" + notes.front();
    return bad;
  }

  /// Everything one profile call needs, gathered before the worker is called.
  struct profile_call {
    const implementation* base = nullptr;    ///< what the candidate is timed against, if anything
    const recorded_time* recorded = nullptr;  ///< or the baseline's recorded time
    std::shared_ptr<const compiled> base_bin;
    json task_json;
    std::uint64_t hash = 0;                  ///< of task_json, for the reference cache
    input_case recheck_inputs;
    std::shared_ptr<const output_set> want;  ///< the reference on recheck_inputs
    request req;
    duration deadline{0};
  };

  /// What a profile call answered, decoded. The recheck's outputs point into
  /// the response, which the caller keeps alive.
  struct profile_answer {
    timing_side candidate;
    std::optional<timing_side> baseline;
    decoded_run recheck;
  };

  /// Phase 1: the baseline compiled, the recheck's reference, the request.
  expected<profile_call, verdict> prepare_profile(const task& t, const candidate& c, const compile_outcome& co,
                                                  const shape_binding& shape, std::vector<std::string>& notes) {
    const profile_config& pc = config.profile;
    profile_call job;
    // The baseline: the task's own when it is device code, else the reference.
    const baseline_choice choice = choose_baseline(t);
    job.base = choice.base;
    job.recorded = choice.recorded;
    if (!choice.note.empty()) notes.push_back(choice.note);
    if (job.base) {
      auto b = comp->compile(job.base->source, options_for(config, dev, t));
      if (!b)
        return unexpected(make(verdict_kind::fault, fmt::format("the task's baseline does not compile: {}",
                                                                first_line(b.error().message)),
                               "baseline: " + b.error().log));
      job.base_bin = *b;
    }

    std::string binary(reinterpret_cast<const char*>(co.binary->cubin.data()), co.binary->cubin.size());
    json cand{{"plan", c.plan},
              {"cubin", {{"offset", 0}, {"length", co.binary->cubin.size()}}},
              {"module_key", co.binary->key}};
    json baseline = nullptr;
    if (job.base_bin) {
      baseline = {{"plan", job.base->plan},
                  {"cubin", {{"offset", binary.size()}, {"length", job.base_bin->cubin.size()}}},
                  {"module_key", job.base_bin->key}};
      binary.append(reinterpret_cast<const char*>(job.base_bin->cubin.data()), job.base_bin->cubin.size());
    }
    job.task_json = to_json(t);
    // The recheck's reference, before the profile call: the outputs of that
    // call are read in place in the worker's bulk region, which the next
    // request (a reference run, on a cache miss) would overwrite.
    job.hash = fnv1a(job.task_json.dump());
    json timed_inputs = nullptr, recheck_inputs = nullptr;
    if (t.reference.is_stored()) {
      // The first stored case at the benchmark shape is timed; the last, on
      // other inputs when there are two, is the recheck.
      auto cases = stored_cases(t, shape);
      if (!cases) return unexpected(cases.error());
      job.recheck_inputs = cases->back();
      auto sent = [&](const input_case& c) -> expected<json, verdict> {
        return stored_buffers(t, *c.stored, stored_part::inputs).transform([&](const auto& in) {
          return sent_inputs(t, *in, binary);
        });
      };
      auto timed = sent(cases->front());
      if (!timed) return unexpected(timed.error());
      timed_inputs = std::move(*timed);
      if (cases->size() < 2) {
        recheck_inputs = timed_inputs;  // the same bytes, sent once
        notes.push_back("the stored reference has one case at the benchmark shape: the recheck ran on the timed inputs");
      } else {
        auto again = sent(cases->back());
        if (!again) return unexpected(again.error());
        recheck_inputs = std::move(*again);
      }
    } else {
      job.recheck_inputs = own_case(t, pc.recheck_seed);
    }
    auto want = reference(t, job.task_json, job.hash, shape, job.recheck_inputs);
    if (!want) return unexpected(want.error());
    job.want = *want;
    json args{{"task", job.task_json},
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
    if (!timed_inputs.is_null()) {
      args["inputs"] = std::move(timed_inputs);
      args["recheck_inputs"] = std::move(recheck_inputs);
    }
    // Sampling stops at max_seconds, but one sample may still take a whole
    // run_deadline; warm-up, CUPTI and recheck runs are not under the cap.
    const int sides = job.base_bin ? 2 : 1;
    job.deadline = seconds(pc.max_seconds) + pc.run_deadline * uncapped_profile_runs(pc, sides) + config.call_margin;
    job.req = request{.op = "profile", .args = std::move(args), .binary = std::move(binary)};
    return job;
  }

  /// Phase 2: the worker times the candidate (and the baseline).
  expected<std::shared_ptr<response>, verdict> launch_profile(profile_call& job, std::string_view what) {
    auto resp = call(std::move(job.req), job.deadline, what);
    if (!resp) return unexpected(resp.error());
    const json& r = (*resp)->result;
    if (!r.is_object() || !r.contains("ok") || !r["ok"].is_boolean())
      return unexpected(nonsense(what, fmt::format("the result is not {{\"ok\": bool, ...}}: {}", r.dump().substr(0, 300))));
    if (!r["ok"].get<bool>()) return unexpected(run_error(r, what));
    return resp;
  }

  /// Phase 3: the timings and the recheck run, decoded.
  expected<profile_answer, verdict> collect_profile(const task& t, const shape_binding& shape, const response& resp,
                                                    bool with_baseline, std::string_view what) {
    const json& r = resp.result;
    auto cs = decode_side(r.value("candidate", json()), "candidate");
    if (!cs) return unexpected(nonsense(what, cs.error().message));
    std::optional<timing_side> bs;
    if (with_baseline) {
      auto b = decode_side(r.value("baseline", json()), "baseline");
      if (!b) return unexpected(nonsense(what, b.error().message));
      bs = std::move(*b);
    }
    // Recheck: the last timed run, on inputs the kernel has not seen.
    auto sizes = output_sizes(t, shape);
    if (!sizes) return unexpected(sizes.error());
    const std::string_view payload = resp.payload();
    const std::span<const std::byte> bin(reinterpret_cast<const std::byte*>(payload.data()), payload.size());
    auto recheck = decode_run(r.value("recheck", json()), bin, t, *sizes);
    if (!recheck) return unexpected(nonsense(what, "recheck: " + recheck.error().message));
    return profile_answer{.candidate = std::move(*cs), .baseline = std::move(bs), .recheck = std::move(*recheck)};
  }

  /// Phase 4: the recheck against the reference, with the terms allowance
  /// when the plain tolerance fails (which may call the worker).
  std::optional<verdict> check_recheck(const task& t, const shape_binding& shape, const profile_call& job,
                                       decoded_run& recheck, std::vector<std::string>& notes) {
    const std::string where = shape_text(shape);
    if (auto bad = memory_verdict(t, recheck, where, " in the last timed run")) return bad;
    std::vector<std::vector<std::byte>> copies;  // the recheck's outputs, once the terms reference needs the worker
    std::shared_ptr<const output_set> terms;
    for (std::size_t k = 0; k < t.outputs.size(); ++k) {
      auto compare = [&] {
        return compare_outputs_parallel(t.outputs[k], recheck.outputs[k], (*job.want)[k], where,
                                        std::thread::hardware_concurrency(), 8,
                                        terms ? std::span<const std::byte>((*terms)[k]) : std::span<const std::byte>());
      };
      comparison cmp = compare();
      if (!cmp.pass && !terms && copies.empty()) {
        copies.reserve(recheck.outputs.size());
        for (auto& o : recheck.outputs) {
          copies.emplace_back(o.begin(), o.end());
          o = copies.back();
        }
        terms = terms_for(t, job.task_json, job.hash, shape, job.recheck_inputs, notes);
        if (terms) cmp = compare();
      }
      if (cmp.pass) continue;
      return recheck_verdict(cmp, config.profile.recheck_seed);
    }
    return std::nullopt;
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
    const std::string what = fmt::format("profiling the candidate at {}", shape_text(shape));
    std::vector<std::string> notes;
    auto finish = [&](verdict v) {
      e.result = with_notes(std::move(v), notes);
      return e;
    };

    auto job = prepare_profile(t, c, co, shape, notes);
    if (!job) return finish(job.error());
    auto resp = launch_profile(*job, what);
    if (!resp) return finish(resp.error());
    auto got = collect_profile(t, shape, **resp, job->base_bin != nullptr, what);
    if (!got) return finish(got.error());
    if (auto bad = check_recheck(t, shape, *job, got->recheck, notes)) return finish(std::move(*bad));

    // Phase 5, the judging (judge.hpp): the measurement, CUPTI, the roofline.
    const json& r = (*resp)->result;
    measurement m;
    try {
      m = measure(r, got->candidate, got->baseline, job->base == &t.reference ? "reference" : "baseline", notes);
      if (job->recorded) apply_recorded(m, *job->recorded, dev.name, notes);
      auto plan = parse_plan(c.plan);
      const auto per_run = static_cast<std::int64_t>(plan ? plan->launches.size() : 0);
      if (auto bad = judge_cupti(r, pc, per_run, what, m, notes)) return finish(std::move(*bad));
      read_hardware_metrics(r, pc, m, notes);
    } catch (specgen::detail::json_read_error& bad) {  // a value of the wrong type: "/result/launch_gate: ..."
      bad.nest("result");
      return finish(nonsense(what, bad.what()));
    }
    if (auto bad = judge_roofline(t, shape, dev.peak_dram_gbps, dev.l2_bytes, pc, m, notes)) return finish(std::move(*bad));
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
    // The hello is open (json_fields.hpp): only its device's name and error are read here.
    namespace d = specgen::detail;
    const json* dev = d::present(s->worker->info().hello, "device");
    try {
      if (dev != nullptr && dev->is_object() &&
          d::nested_in("device", [&] { return d::key_or(*dev, "name", std::string()) == "none"; }))
        return unexpected(error{fmt::format("no GPU: the worker for device {} reports: {}", config.device,
                                            d::nested_in("device", [&] { return d::key_or(*dev, "error", std::string("no device")); }))});
    } catch (const d::json_read_error& e) {
      return unexpected(e.at(fmt::format("the hello of the worker for device {}", config.device)));
    }
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
