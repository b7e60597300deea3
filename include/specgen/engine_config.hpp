#pragma once
/// One configuration of the engine, as a value: `engine_config` (every policy,
/// the budget, the sampling, the limits), how it is written as JSON, and where
/// each of its fields is read from JSON (`read_config_fields`). modes.hpp
/// names the configurations the paper compares and reads a whole config file
/// (a `mode` to start from, then these fields).
///
/// A configuration is copyable. Resources it refers to (the bytes behind a
/// `backed_kv`, such as a GPU KV store) are shared by the copies, never duplicated.
///
/// @code
///   specgen::engine_config c;
///   c.trigger = specgen::policy::default_trigger();
///   c.budget.max_rounds = 20;
///   specgen::engine_config copy = c;                       // a value: copies are independent
///   auto ok = specgen::read_config_fields(nlohmann::json::parse(R"({"seed": 7})"), copy);
/// @endcode
#include <specgen/backend.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/limits.hpp>
#include <specgen/expected.hpp>
#include <specgen/json.hpp>
#include <specgen/policy/fields.hpp>
#include <specgen/policy/kv.hpp>
#include <specgen/policy/pool.hpp>
#include <specgen/policy/prompt.hpp>
#include <specgen/policy/strategy.hpp>
#include <specgen/policy/termination.hpp>
#include <specgen/policy/trigger.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

SPECGEN_BEGIN_NAMESPACE

/// When a search ends. A zero means "no limit".
struct search_budget {
  int max_rounds = 100;              ///< iterations (the paper runs 100 per task)
  double max_seconds = 0;            ///< wall (or virtual) seconds per search
  std::uint64_t max_tokens = 0;      ///< generated tokens per search (reasoning + answers + forks)
  double target_speedup = 0;         ///< the target for `seconds_to_target`
  bool stop_at_target = false;       ///< end the search as soon as the target is reached
  /// Each field with the range a run can use (docs/policies.md).
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("max_rounds", s.max_rounds, limits::rounds);
    f("max_seconds", s.max_seconds, detail::in_or_zero(1e-3, limits::max_seconds, "none"));
    f("max_tokens", s.max_tokens, detail::in_or_zero<std::uint64_t>(1, 1'000'000 * limits::max_tokens, "none"));
    f("target_speedup", s.target_speedup, limits::target_speedup);
    f("stop_at_target", s.stop_at_target);
  }
  [[nodiscard]] std::string invalid() const {
    if (max_rounds < 1) return "max_rounds must be >= 1";
    if (max_seconds < 0 || target_speedup < 0) return "limits must be >= 0";
    return {};
  }
  friend bool operator==(const search_budget&, const search_budget&) = default;
};

/// Everything that makes one configuration of the engine. The paper's
/// baselines and every ablation step are values of this type (see modes.hpp).
struct engine_config {
  std::uint64_t seed = 1;
  policy::any_strategy strategy{};
  policy::any_trigger trigger = policy::triggers::never{};
  policy::any_termination termination = policy::termination::beats_mean{};
  policy::any_pool pool = policy::static_split{};
  policy::any_kv kv = policy::no_kv{};
  search_budget budget{};
  sampling main_sampling{};
  sampling fork_sampling{.temperature = 0.1, .top_p = 1.0, .max_tokens = 4096};
  int max_streams = 0;                      ///< 0: the backend's limit
  /// The share of the stream slots kept for forks, 0 to 0.9: main lanes
  /// hold at most the other slots (at least one), so a search with more lanes
  /// than slots can still speculate. 0: main lanes may fill every slot, and a
  /// fork goes only where a slot is free and no lane waits.
  double fork_slot_share = 0;
  /// What a winning fork kernel stops: its lane, or its whole round (policy/termination.hpp).
  policy::termination_scope termination_scope = policy::termination_scope::lane;
  bool cancel_running_at_round_end = false; ///< also stop running (not only queued) stale jobs
  bool extract_inline_code = true;          ///< forks of think-then-write traces may answer without fences
  policy::any_prompt_builder prompt{};              ///< renders each lane's prompt and gives the system prompt
};

/// The configuration as JSON: what `config_from_json` (modes.hpp) reads back,
/// and what the journal's run_start records.
inline nlohmann::json to_json(const engine_config& c) {
  return {{"seed", c.seed},
          {"strategy", c.strategy.config()},
          {"trigger", c.trigger.config()},
          {"termination", c.termination.config()},
          {"termination_scope", to_string(c.termination_scope)},
          {"pool", c.pool.config()},
          {"kv", c.kv.config()},
          {"budget", detail::write_fields(c.budget)},
          {"main_sampling", c.main_sampling},
          {"fork_sampling", c.fork_sampling},
          {"max_streams", c.max_streams},
          {"fork_slot_share", c.fork_slot_share},
          {"cancel_running_at_round_end", c.cancel_running_at_round_end},
          {"extract_inline_code", c.extract_inline_code},
          {"prompt", c.prompt.config()}};
}

/// Read a search budget: `{"max_rounds": 100, "max_seconds": 0, "max_tokens": 0,
/// "target_speedup": 1.5, "stop_at_target": false}`. Each field has a range
/// (docs/policies.md): max_rounds 1..10,000; max_seconds 0 (none) or up to
/// 10^7 s; target_speedup 0 (none) or 0.001..1000.
/// `pointer` is where the budget sits in its document ("/budget" in an engine config).
inline expected<search_budget, error> budget_from_json(const nlohmann::json& j, std::string_view pointer = "") {
  if (!j.is_object()) return unexpected(detail::must_be(pointer, "an object", j));
  return detail::read_fields<search_budget>(j, pointer);
}

namespace detail {
/// Refuses the first key of object `j` (at `pointer`) outside `known`.
inline expected<void, error> check_known_keys(const nlohmann::json& j, std::string_view pointer,
                                              std::initializer_list<std::string_view> known) {
  if (auto k = unknown_key(j, known)) return unexpected(json_error("", fmt::format("{}/{}", pointer, pointer_token(*k)), unknown_key_problem(*k, known)));
  return {};
}

/// Refuses a config key that `read_config_fields` does not read (nor `mode`).
inline expected<void, error> check_config_keys(const nlohmann::json& j) {
  return check_known_keys(j, "", {"mode", "seed", "strategy", "trigger", "termination", "termination_scope", "pool", "kv", "budget",
                                        "main_sampling", "fork_sampling", "max_streams", "fork_slot_share", "cancel_running_at_round_end",
                                        "extract_inline_code", "prompt"});
}

/// Reads the policy at `key` of `j`, if present, into `out` through its family's table.
template <class Family, class Any>
expected<void, error> read_policy(const nlohmann::json& j, const char* key, Any& out) {
  if (!j.contains(key)) return {};
  return policy::make<Family>(j[key], fmt::format("/{}", key)).transform([&](Any p) { out = std::move(p); });
}
}  // namespace detail

/// The keys of a config that choose a policy; a mode sets each of them.
inline constexpr std::array<std::string_view, 5> policy_keys{"strategy", "trigger", "termination", "pool", "kv"};

/**
 * Reads the fields of a JSON config onto `c`: `seed`, `strategy`, `trigger`,
 * `termination`, `termination_scope` (`"lane"` or `"round"`), `pool`, `kv`, `prompt`, `budget`, `main_sampling`,
 * `fork_sampling`, `max_streams`, `fork_slot_share`, `cancel_running_at_round_end`,
 * `extract_inline_code`; absent keys keep `c`'s values. `mode` is accepted
 * and left to the caller (modes.hpp); any other key is an error. Every
 * error's `where` is the JSON pointer of the value at fault
 * (`/pool/elastic/interval_s`); after an error `c` may be partly updated.
 */
inline expected<void, error> read_config_fields(const nlohmann::json& j, engine_config& c) {
  if (!j.is_object()) return unexpected(detail::must_be("", "a JSON object", j));
  if (auto r = detail::check_config_keys(j); !r) return r;
  using namespace detail;
  // A plain value of the config, read against its range.
  auto value = [&](const char* key, auto& out, const auto&... r) -> expected<void, error> {
    if (!j.contains(key)) return {};
    return read_value(j[key], out, fmt::format("/{}", key), r...);
  };
  if (auto r = value("seed", c.seed); !r) return r;
  if (auto r = read_policy<policy::strategy_family>(j, "strategy", c.strategy); !r) return r;
  if (auto r = read_policy<policy::trigger_family>(j, "trigger", c.trigger); !r) return r;
  if (auto r = read_policy<policy::termination_family>(j, "termination", c.termination); !r) return r;
  if (auto r = value("termination_scope", c.termination_scope); !r) return r;
  if (auto r = read_policy<policy::pool_family>(j, "pool", c.pool); !r) return r;
  if (auto r = read_policy<policy::kv_family>(j, "kv", c.kv); !r) return r;
  if (auto r = read_policy<policy::prompt_family>(j, "prompt", c.prompt); !r) return r;
  if (j.contains("budget")) {
    auto b = budget_from_json(j["budget"], "/budget");
    if (!b) return unexpected(std::move(b.error()));
    c.budget = *b;
  }
  // 0: the backend's own limit on concurrent streams.
  if (auto r = value("max_streams", c.max_streams, in_or_zero(1, 65'536, "the backend's limit")); !r) return r;
  if (auto r = value("fork_slot_share", c.fork_slot_share, in(0.0, 0.9)); !r) return r;
  for (auto [key, target] : {std::pair{"main_sampling", &c.main_sampling}, std::pair{"fork_sampling", &c.fork_sampling}}) {
    if (!j.contains(key)) continue;
    auto s = read_fields<sampling>(j[key], fmt::format("/{}", key), *target);
    if (!s) return unexpected(s.error());
    *target = *s;
  }
  if (auto r = value("extract_inline_code", c.extract_inline_code); !r) return r;
  if (auto r = value("cancel_running_at_round_end", c.cancel_running_at_round_end); !r) return r;
  return {};
}

SPECGEN_END_NAMESPACE
