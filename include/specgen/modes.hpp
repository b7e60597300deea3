#pragma once
/// The named configurations of the engine: the paper's baselines, SpecGen on
/// top of each, and every step of the ablation ladder. They are values of
/// `engine_config`, never separate code paths.
///
/// | mode               | strategy  | trigger  | termination         | pool            | KV         |
/// |--------------------|-----------|----------|---------------------|-----------------|------------|
/// | sequential         | refine    | never    | -                   | static, FIFO    | none       |
/// | parallel           | parallel  | never    | -                   | static, FIFO    | none       |
/// | evolve             | evolve    | never    | -                   | static, FIFO    | none       |
/// | +spec              | refine    | paper    | beats mean          | static, FIFO    | none       |
/// | +elastic           | refine    | paper    | beats mean          | elastic, FIFO   | none       |
/// | +priority          | refine    | paper    | beats mean          | elastic, LIFO   | none       |
/// | +kv                | refine    | paper    | beats mean          | elastic, LIFO   | remote GPU |
/// | specgen            | refine    | default  | beats mean          | elastic, LIFO   | remote GPU |
/// | parallel+specgen   | parallel  | default  | beats mean, round   | elastic, LIFO   | remote GPU |
/// | evolve+specgen     | evolve    | default  | beats mean, round   | elastic, LIFO   | remote GPU |
///
/// "round": a winning fork kernel ends its whole round, every lane
/// (`termination_scope::round`), not only the lane that forked it.
///
/// The ablation ladder (+spec to +kv) is the paper's system step by step, with
/// the paper's trigger set (`paper_trigger()`); `specgen` is its last step
/// with the default trigger, which weighs every fork against its cost on the
/// server (`default_trigger()`, policy/trigger.hpp).
///
/// @code
///   auto cfg = specgen::mode_config("specgen");          // expected<engine_config, error>
///   auto cfg2 = specgen::config_from_json(nlohmann::json::parse(
///       R"({"mode": "sequential", "seed": 7, "budget": {"max_rounds": 20}})"));
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/engine_config.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <array>
#include <optional>
#include <vector>
#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE

namespace detail {
/// One row of the table above: which search, and how far up the ablation
/// ladder (0 none, 1 +spec, 2 +elastic, 3 +priority, 4 +kv).
/// `weighed`: the default (cost-weighed) trigger, else the paper's set.
struct mode_row {
  std::string_view name;
  std::string_view strategy;
  int rung;
  bool weighed = false;
};
inline constexpr std::array<mode_row, 10> mode_table{{{"sequential", "refine", 0},
                                                      {"parallel", "parallel", 0},
                                                      {"evolve", "evolve", 0},
                                                      {"specgen", "refine", 4, true},
                                                      {"parallel+specgen", "parallel", 4, true},
                                                      {"evolve+specgen", "evolve", 4, true},
                                                      {"+spec", "refine", 1},
                                                      {"+elastic", "refine", 2},
                                                      {"+priority", "refine", 3},
                                                      {"+kv", "refine", 4}}};
}  // namespace detail

/// Every mode's name, in the table's order.
inline constexpr std::array<std::string_view, detail::mode_table.size()> mode_names = [] {
  std::array<std::string_view, detail::mode_table.size()> names{};
  for (std::size_t i = 0; i < names.size(); ++i) names[i] = detail::mode_table[i].name;
  return names;
}();

/// Knobs shared by the modes (the same in every mode of one comparison).
struct mode_options {
  int parallel_seeds = 4;               ///< lanes of `parallel` modes
  int evolve_lanes = 4;                 ///< children per round of `evolve` modes
  int population = 8;
  double static_validation_fraction = 0.5;
  friend bool operator==(const mode_options&, const mode_options&) = default;
};


/// The engine configuration of a named mode (see the table above).
inline expected<engine_config, error> mode_config(std::string_view mode, const mode_options& o = {}) {
  const auto row = std::find_if(detail::mode_table.begin(), detail::mode_table.end(),
                                [&](const detail::mode_row& r) { return r.name == mode; });
  if (row == detail::mode_table.end())
    return unexpected(error{fmt::format("unknown mode '{}' (known: {})", mode, fmt::join(mode_names, ", "))});
  using namespace policy;
  engine_config c;
  if (row->strategy == "refine") c.strategy = refine_best{};
  else if (row->strategy == "parallel") c.strategy = parallel_seeds{{.seeds = o.parallel_seeds}};
  else c.strategy = evolve{{.lanes = o.evolve_lanes, .population = o.population, .tournament = 3, .inspirations = 1}};

  const auto order = row->rung >= 3 ? queue_order::lifo : queue_order::fifo;
  if (row->rung >= 2) c.pool = elastic{.min_validation = 1, .min_profiling = 1, .validation = order, .interval = seconds(5)};
  else c.pool = static_split{.validation_fraction = o.static_validation_fraction, .validation = queue_order::fifo};
  if (row->rung >= 1) {
    c.trigger = row->weighed ? default_trigger() : paper_trigger();
    c.termination = default_termination();
    // A parallel or evolve round ends when one lane's fork wins; refine has one lane either way.
    if (row->strategy != "refine") c.termination_scope = termination_scope::round;
    // An eighth of the stream slots stay free for forks, so a search with
    // more lanes than slots still speculates (docs/policies.md, "Stream slots").
    if (row->weighed) c.fork_slot_share = 0.125;
  }
  if (row->rung >= 4) c.kv = remote_gpu_kv{};
  return c;
}

namespace detail {
inline expected<engine_config, error> config_from(const nlohmann::json& j, std::optional<std::string_view> mode,
                                                  const mode_options& o);

}  // namespace detail

/// An engine configuration from JSON: a `mode` to start from (default
/// "specgen"), then any of `seed`, `strategy`, `trigger`, `termination`,
/// `pool`, `kv`, `budget`, `main_sampling`, `fork_sampling`, `max_streams`,
/// `cancel_running_at_round_end`, `extract_inline_code` overriding it. Every
/// error's `where` is the JSON pointer of the value at fault, and `what()`
/// reads like `/trigger/any_of/1/fence_closed/samples: must be an integer in
/// [1, 64], got 0`; a caller that read the config from a file sets `file`.
inline expected<engine_config, error> config_from_json(const nlohmann::json& j, const mode_options& o = {}) {
  return detail::config_from(j, std::nullopt, o);
}

/**
 * A configuration whose mode is chosen apart from the config (specgen-run's
 * `--mode` beside `--config`): `mode` replaces the config's own "mode" key,
 * and every policy the config sets (strategy, trigger, termination, pool, kv)
 * must be the one `mode` sets. A config that sets another is an error naming
 * the keys: `--mode sequential` with a config that sets a trigger would
 * otherwise run forks under the name "sequential".
 *
 * @code
 *   auto cfg = specgen::config_with_mode(nlohmann::json::parse(R"({"trigger": "default"})"), "sequential");
 *   // error: "mode 'sequential' contradicts the config's trigger: ..."
 * @endcode
 */
inline expected<engine_config, error> config_with_mode(const nlohmann::json& j, std::string_view mode,
                                                       const mode_options& o = {}) {
  auto base = mode_config(mode, o);
  if (!base) return unexpected(base.error());
  auto cfg = detail::config_from(j, mode, o);
  if (!cfg) return cfg;
  const nlohmann::json want = to_json(*base), got = to_json(*cfg);
  std::vector<std::string> conflicts;
  for (auto key : policy_keys)
    if (j.contains(key) && got[std::string(key)] != want[std::string(key)]) conflicts.emplace_back(key);
  if (!conflicts.empty())
    return unexpected(error{fmt::format(
        "mode '{}' contradicts the config's {}: the mode sets {} itself, and the config sets {} otherwise. Drop the "
        "mode to run the config as written (its own \"mode\" key says where it starts from), or drop {} from the "
        "config to run mode '{}'",
        mode, fmt::join(conflicts, " and "), conflicts.size() == 1 ? "this policy" : "these policies",
        conflicts.size() == 1 ? "it" : "them", conflicts.size() == 1 ? "that key" : "those keys", mode)});
  return cfg;
}

namespace detail {

inline expected<engine_config, error> config_from(const nlohmann::json& j, std::optional<std::string_view> mode,
                                                  const mode_options& o) {
  if (!j.is_object()) return unexpected(must_be("", "a JSON object", j));
  // Unknown keys first, as before the mode is looked at.
  if (auto r = check_config_keys(j); !r) return unexpected(r.error());
  std::string start = "specgen";
  if (mode) {
    start = std::string(*mode);
  } else if (j.contains("mode")) {
    if (!j["mode"].is_string()) return unexpected(must_be("/mode", "a mode name", j["mode"]));
    start = j["mode"].get<std::string>();
  }
  auto base = mode_config(start, o);
  if (!base) return unexpected(json_error("", "/mode", base.error().message));
  engine_config c = std::move(*base);
  if (auto r = read_config_fields(j, c); !r) return unexpected(r.error());
  return c;
}

}  // namespace detail

SPECGEN_END_NAMESPACE
