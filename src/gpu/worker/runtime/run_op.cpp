#include "run_op.hpp"

#include "op_common.hpp"

#include <specgen/plan.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

using json = nlohmann::json;

/// Largest `repeats` accepted: a validation needs a few; more is a broken host.
constexpr std::uint64_t max_repeats = 1000;

/// The input sets of a run request: `"sets": [[inputs...], ...]`, or the
/// single set `"inputs": [...]`.
expected<std::vector<json>, failure> input_sets(const json& a) {
  if (!a.contains("sets")) return std::vector<json>{a.value("inputs", json::array())};
  const json& sets = a["sets"];
  if (!sets.is_array() || sets.empty() || sets.size() > max_repeats)
    return unexpected(bad_request(fmt::format("\"sets\" must be an array of 1 to {} input lists", max_repeats)));
  if (a.contains("inputs")) return unexpected(bad_request("give \"inputs\" or \"sets\", not both"));
  return std::vector<json>(sets.begin(), sets.end());
}

/// `"smem_poison": [word, ...]`: the 32-bit patterns shared memory is filled
/// with before each run's launches, in turn (run k gets word k mod n).
expected<std::vector<std::uint32_t>, failure> smem_patterns(const json& a) {
  std::vector<std::uint32_t> out;
  if (!a.contains("smem_poison") || a["smem_poison"].is_null()) return out;
  const json& p = a["smem_poison"];
  if (!p.is_array() || p.empty())
    return unexpected(bad_request("\"smem_poison\" must be a non-empty array of 32-bit words"));
  for (const auto& w : p) {
    if (!w.is_number_unsigned() || w.get<std::uint64_t>() > 0xFFFFFFFFull)
      return unexpected(bad_request("\"smem_poison\" must be a non-empty array of 32-bit words"));
    out.push_back(static_cast<std::uint32_t>(w.get<std::uint64_t>()));
  }
  return out;
}

expected<json, failure> run(worker_state& w, const request& r, reply_binary& out_binary) {
  const json& a = r.args;
  if (!a.is_object() || !a.contains("task") || !a.contains("plan") || !a["plan"].is_string() || !a.contains("shape"))
    return unexpected(bad_request("run needs args {task, plan, shape, cubin or module_key, inputs or sets}"));
  auto t = read_task(a["task"]);
  if (!t) return unexpected(t.error());
  auto shape = read_shape(a["shape"]);
  if (!shape) return unexpected(shape.error());
  const std::size_t guard = a.value("guard", std::size_t{256});
  const auto guard_pattern = static_cast<std::byte>(a.value("guard_pattern", 0xA5));
  std::optional<std::byte> poison;
  if (a.contains("poison") && !a["poison"].is_null()) {
    if (!a["poison"].is_number_unsigned() || a["poison"].get<unsigned>() > 255)
      return unexpected(bad_request("\"poison\" must be a byte value (0 to 255), or absent for the dtype patterns"));
    poison = static_cast<std::byte>(a["poison"].get<unsigned>());
  }
  auto deadline = read_ms(a, "deadline_ms", 1000);
  if (!deadline) return unexpected(deadline.error());
  auto repeats = read_u64(a, "repeats", 1);
  if (!repeats) return unexpected(repeats.error());
  if (*repeats < 1 || *repeats > max_repeats)
    return unexpected(bad_request(fmt::format("\"repeats\" must be between 1 and {}", max_repeats)));
  auto sets = input_sets(a);
  if (!sets) return unexpected(sets.error());
  if (sets->size() * *repeats > max_repeats)
    return unexpected(bad_request(fmt::format("{} sets x {} repeats exceed {} runs", sets->size(), *repeats, max_repeats)));
  auto patterns = smem_patterns(a);
  if (!patterns) return unexpected(patterns.error());
  const json same = a.value("same_module", json(false));
  if (!same.is_boolean()) return unexpected(bad_request("\"same_module\" must be true or false"));
  const bool same_module = same.get<bool>();
  const std::vector<std::string> wanted = a.value("outputs", std::vector<std::string>{});
  const auto binary = binary_of(r);
  if (!a.contains("cubin") && !a.contains("module_key"))
    return unexpected(bad_request("run needs \"cubin\" or \"module_key\""));

  auto ctx = w.context();
  if (!ctx) return unexpected(from(ctx.error()));
  auto mod = acquire_module(w, **ctx, a, binary, "run");
  if (!mod) return unexpected(mod.error());
  auto plan = parse_plan(a["plan"].get<std::string>());
  if (!plan) return unexpected(failure{"invalid_plan", plan.error().what()});
  auto resolved = resolve(*plan, *t, *shape, (*ctx)->info().limits);
  if (!resolved) return unexpected(failure{"invalid_plan", resolved.error().what()});

  auto io = io_set::allocate(**ctx, *t, *shape, guard, guard_pattern, poison);
  if (!io) return unexpected(io.error());
  const auto pointers = io->pointers();
  // Prepared once for every run: scratch is reset before each and, for a
  // cubin with writable globals, the module is a fresh instance at the first
  // run and, unless `same_module`, before every later one too.
  auto prepared = prepared_plan::prepare(**ctx, *resolved, (*mod)->mod, pointers, (*mod)->fresh_cubin);
  if (!prepared) return unexpected(from(prepared.error()));
  auto& state = context_access::state(**ctx);

  json runs = json::array();
  std::size_t run_index = 0;
  for (const json& inputs : *sets) {
    if (auto l = load_inputs(*io, *t, inputs, binary); !l) return unexpected(l.error());
    // The inputs went through the legacy stream; the poison copies are queued on the context's own.
    if (auto s = io->settle(); !s) return unexpected(s.error());
    for (std::uint64_t i = 0; i < *repeats; ++i, ++run_index) {
      // Guards are filled again before every run, so each run reports its own
      // writes out of bounds; inputs are compared with what was uploaded last.
      if (auto g = io->fill_guards(); !g) return unexpected(g.error());
      if (!same_module || run_index == 0)
        if (auto l = prepared->reload(); !l) return unexpected(from(l.error()));
      if (!patterns->empty())
        if (auto p = prepared->poison_shared_memory((*patterns)[run_index % patterns->size()]); !p)
          return unexpected(from(p.error()));
      if (auto p = io->poison_outputs_async(); !p) return unexpected(p.error());
      if (auto z = prepared->reset_scratch_async(); !z) return unexpected(from(z.error()));
      // The guard fills went through the legacy stream, which the context's
      // non-blocking stream does not wait for.
      if (auto c = state.check(state.api->cuCtxSynchronize(), runtime_error::kind::internal,
                               "cuCtxSynchronize before the plan");
          !c)
        return unexpected(from(c.error()));
      auto ran = prepared->timed_run(std::chrono::steady_clock::now() + *deadline, *deadline);
      if (!ran) return unexpected(from(ran.error()));
      auto checked = io->check();
      if (!checked) return unexpected(checked.error());
      auto listed = io->append_outputs(wanted, out_binary);
      if (!listed) return unexpected(listed.error());
      json entry = {{"elapsed_ms", *ran}};
      put_check(entry, *checked);
      entry["outputs"] = std::move(*listed);
      runs.push_back(std::move(entry));
    }
  }
  json result = runs[0];  // the first run's fields, as before repeats existed
  result["ok"] = true;
  result["runs"] = std::move(runs);
  result["fresh_module_per_run"] = prepared->fresh_module_per_run() && !same_module;
  result["same_module"] = same_module;
  result["device"] = device_json(**ctx);
  return result;
}

}  // namespace

run_outcome run_op(worker_state& w, const request& r) {
  reply_binary binary(w.reply_region);
  expected<nlohmann::json, failure> result = unexpected(bad_request("run: no result"));
  try {
    result = run(w, r, binary);
  } catch (const nlohmann::json::exception& e) {
    result = unexpected(bad_request(fmt::format("run: a malformed argument: {}", e.what())));
  }
  return {reply_from(std::move(result), std::move(binary)), w.must_exit()};
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
