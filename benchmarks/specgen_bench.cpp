// specgen-bench: the project's benchmarks.
//
//   specgen-bench e2e     every mode on the same tasks, traces and seed, in
//                         virtual time, with ratios against each baseline and
//                         against the oracle bound
//   specgen-bench engine  the engine's own cost: microseconds per event and
//                         wall time to simulate 1,000 search rounds
//
// Ratios are measured side by side in one run; nothing here asserts a time.
#include "support/cli.hpp"
#include "support/world.hpp"

#include <specgen/extract.hpp>
#include <specgen/modes.hpp>
#include <specgen/contention.hpp>
#include <specgen/results.hpp>
#include <specgen/sim/profile_model.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>

using namespace specgen;
using namespace specgen::policy;

namespace {

/// e2e's options (`specgen-bench e2e --help`).
void declare_e2e(programs::options& o) {
  o.value("modes", "LIST", "comma-separated modes (default: all ten)")
      .value("corpus", "DIR",
             "a replay corpus (default: the bundled suite, tasks/suite);\n"
             "\"procedural\" for the generated corpus")
      .value("tasks", "N", "tasks of the procedural corpus, 1 to 10000 (default 8)")
      .value("rounds", "N",
             "iterations per task, 1 to 3333 (default: the rounds a loaded\n"
             "corpus recorded, 3 for the suite; 20 for the procedural corpus)")
      .value("corpus-seed", "N", "seed of the procedural corpus (default 1)")
      .value("seed", "N", "run seed (default 1)")
      .value("seeds", "N",
             "run seeds (and procedural corpora) to average over, 1 to 100\n"
             "(default 3); each ratio is reported with its spread")
      .flag("no-equal-time", "skip the runs that give every mode sequential's time")
      .value("devices", "N", "simulated evaluation GPUs, 1 to 1024 (default 4)")
      .value("streams", "N", "backend stream limit, 1 to 65536 (default 64)")
      .value("target", "X",
             "target speedup for seconds_to_target, 0.001 to 1000, or 0\n"
             "for none (default 2.0)")
      .value("prefix-hit", "F",
             "fraction of a fork's prefix the server still caches, 0 to 1\n"
             "(limited memory budget; default 0.25)")
      .value("contention", "LIST",
             "decode contention levels to run at, each low|middle|high (the\n"
             "band fitted to published serving measurements) or a slowdown per\n"
             "extra sequence in [0, 1] (default low,middle,high)")
      .value("termination", "JSON",
             "every mode's termination policy, e.g. '\"never\"' or\n"
             "'{\"best_so_far\": {}}' (what stopping early costs; default: each mode's own)")
      .value("spec-config", "JSON",
             "config keys read onto every speculative mode (one whose trigger is not\n"
             "'never'), e.g. '{\"trigger\": \"paper\"}' or '{\"fork_slot_share\": 0}'")
      .flag("responsive",
            "main streams answer feedback: each plays the round after the latest\n"
            "one whose kernels its prompt reports, and never repeats a kernel\n"
            "reported as failing (the stand-in server's model, in virtual time)")
      .value("out", "FILE", "write the JSON results")
      .value("journal-dir", "DIR",
             "write every run's journal there (<mode>.jsonl, <mode>-equal-time.jsonl,\n"
             "-seedN with several seeds): specgen-report DIR shows them overlaid");
}

/// engine's options.
void declare_engine(programs::options& o) {
  o.value("tasks", "N", "procedural tasks, 1 to 10000 (default 20)")
      .value("rounds", "N", "rounds per task, 1 to 10000 (default 50: 20 x 50 = 1,000 rounds)")
      .value("seed", "N", "seed of the procedural corpus (default 1)")
      .value("out", "FILE", "write the JSON results");
}

/// The options of the real-GPU benchmarks (gpu-latency, gpu-spread, gpu-cupti,
/// gpu-respawn, calibrate, e2e-live): one set, each saying which use it.
void declare_gpu(programs::options& o) {
  o.value("tasks", "DIR", "task files (default tasks/examples)")
      .value("task", "NAME", "only that task")
      .value("device", "N", "the GPU of the single-session benchmarks (default 0)")
      .value("reps", "N", "gpu-latency: salted copies of each kernel (default 3)")
      .flag("hardware-metrics", "gpu-latency: also run the CUPTI range-profiler pass")
      .value("runs", "N", "gpu-spread: profiles per kernel (default 20); gpu-respawn: faults (default 10)")
      .value("suite", "DIR", "calibrate: the suite (tasks/ and candidates/; default tasks/suite)")
      .value("table", "FILE", "calibrate: write the measured cost table (specgen-cost-table/1)")
      .value("corpus", "DIR", "e2e-live: the corpus (default tasks/suite)")
      .value("live-tasks", "N", "e2e-live: the N tasks with the least reasoning in those rounds (default 4)")
      .value("rounds", "N", "e2e-live: rounds (default 2)")
      .value("target", "X", "e2e-live: target speedup (default 2.0)")
      .value("max-seconds", "S", "e2e-live: seconds per search (default 240)")
      .value("modes", "LIST",
             "e2e-live: the modes (default sequential,specgen); the same subset\n"
             "also runs in virtual time on the simulated device, reported side by side")
      .value("kv", "gpu",
             "e2e-live: swap the modes' KV policy for the real GPU KV store (live\n"
             "runs only; the pool makes room in it before each job)")
      .value("server", "standin",
             "e2e-live: the live runs' model is the stand-in server over HTTP\n"
             "(OpenAI backend, token-id forks, a model that answers feedback); the\n"
             "virtual twins play the same responsive traces, also at both ends of\n"
             "the contention band; the fork latency (trigger to the request's first\n"
             "byte) is measured")
      .value("tokens-per-s", "R", "e2e-live: decode speed per stream (default 70)")
      .value("termination", "JSON", "e2e-live: every mode's termination policy (default: each mode's own)")
      .value("contention", "LEVEL",
             "e2e-live: low|middle|high|A slowdown per extra sequence (the band\n"
             "fitted to published serving measurements: 0.017, 0.028, 0.040;\n"
             "default middle)")
      .value("journal-dir", "DIR", "e2e-live: write each live mode's journal there (<mode>.jsonl)")
      .value("json", "FILE", "write the JSON results");
}

/// The GPU KV store's benchmarks (kv-bandwidth, kv-prefix, kv-stress; docs/kv-store.md).
void declare_kv(programs::options& o) {
  o.value("device", "N", "the GPU receiving the blocks (default 0)")
      .value("peer-device", "N", "the GPU holding them for the GPU-to-GPU routes (default 1 when there are two)")
      .value("reps", "N", "timed repetitions after a warm-up, the median reported (default 5)")
      .value("block-kib", "LIST",
             "kv-bandwidth: block sizes in KiB (default 64,256,1024,4096);\n"
             "kv-stress: the block size (default 64)")
      .value("batches", "LIST", "kv-bandwidth: batch sizes in blocks (default 1,8,64,256,1024)")
      .value("max-mib", "N", "kv-bandwidth: cap on a batch's bytes on the GPU (default 4096)")
      .value("max-host-mib", "N", "kv-bandwidth: cap on a batch's bytes in host memory (default 1024)")
      .value("chunk-mib", "N", "staging chunk of a transfer (default 256; 0: the whole transfer at once)")
      .value("tokens", "N", "kv-prefix: the prefix length (default 16384: 4 GiB of a 32B-class model)")
      .value("threads", "N", "kv-stress: threads (default 4)")
      .value("iterations", "N", "kv-stress: iterations per thread (default 2000)")
      .value("seed", "N", "kv-stress: seed (default 1)")
      .flag("verify", "checksum every block (kv-bandwidth, kv-prefix; kv-stress always does)")
      .value("json", "FILE", "write the JSON results");
}

/// openai-client's options (the OpenAI backend against a local vLLM stand-in).
void declare_openai(programs::options& o) {
  o.value("streams", "N", "reasoning streams (default 64)")
      .value("rate", "TOKENS_PER_S", "each stream's decode speed (default 100)")
      .value("seconds", "S", "each stream's length in seconds (default 10)")
      .value("samples", "K", "each stream's fork (default 2)")
      .value("burst-streams", "N", "streams of the burst (default 8)")
      .value("burst-tokens", "N", "tokens per burst stream (default 4000)")
      .value("json", "FILE", "write the JSON results");
}

using programs::geomean;

/// One mode's run on one corpus and run seed.
struct mode_run {
  double e2e_seconds = 0;
  /// Each search's own time, from the start to its end, in task order: the
  /// per-task view the paper's geometric means take.
  std::vector<double> search_seconds{};
  std::vector<double> to_target{};   ///< of the searches that reached the target
  std::vector<double> best{};        ///< best speedup per search at the round budget (1 without a kernel)
  std::vector<double> best_equal{};  ///< the same, with every mode given sequential's time
  double equal_time_rounds = 0;      ///< mean rounds per search in that time
  double profiled_kernels = 0, pool_utilization = 0, tokens = 0, terminations = 0, forks = 0;
  double idle_while_queued = 0;  ///< GPU-seconds idle while a GPU job waited
  double wall_seconds = 0;
};

/// One mode over every seed of a run: the table's row.
struct mode_metrics {
  std::string mode;
  double e2e_seconds = 0;                   ///< mean over seeds
  std::optional<double> seconds_to_target; ///< geometric mean over (seed, task) pairs that reached it
  int tasks_at_target = 0;                  ///< (seed, task) pairs
  double profiled_kernels = 0;              ///< mean over seeds
  double pool_utilization = 0;              ///< mean over seeds
  double idle_while_queued = 0;             ///< mean over seeds
  double tokens = 0;                        ///< mean over seeds
  double best_speedup_geomean = 0;          ///< over every (seed, task)
  double equal_time_best_geomean = 0;       ///< the same, with every mode given sequential's time
  double equal_time_rounds = 0;             ///< mean rounds per search in that time
  double terminations = 0, forks = 0;       ///< means over seeds
  std::vector<double> search_seconds{};     ///< every (seed, task) search, seed-major
  double wall_seconds = 0;                  ///< total
};

mode_metrics summarize(const std::string& mode, const std::vector<const mode_run*>& runs) {
  mode_metrics m;
  m.mode = mode;
  std::vector<double> ttt, best, best_equal;
  const auto n = static_cast<double>(runs.size());
  for (const auto* r : runs) {
    m.e2e_seconds += r->e2e_seconds / n;
    m.profiled_kernels += r->profiled_kernels / n;
    m.pool_utilization += r->pool_utilization / n;
    m.idle_while_queued += r->idle_while_queued / n;
    m.tokens += r->tokens / n;
    m.terminations += r->terminations / n;
    m.forks += r->forks / n;
    m.equal_time_rounds += r->equal_time_rounds / n;
    m.wall_seconds += r->wall_seconds;
    m.search_seconds.insert(m.search_seconds.end(), r->search_seconds.begin(), r->search_seconds.end());
    ttt.insert(ttt.end(), r->to_target.begin(), r->to_target.end());
    best.insert(best.end(), r->best.begin(), r->best.end());
    best_equal.insert(best_equal.end(), r->best_equal.begin(), r->best_equal.end());
  }
  m.tasks_at_target = static_cast<int>(ttt.size());
  if (!ttt.empty()) m.seconds_to_target = geomean(ttt);
  m.best_speedup_geomean = geomean(best);
  m.equal_time_best_geomean = geomean(best_equal);
  return m;
}

/// The ratios of `m` against baseline `b` on one seed: baseline / mode for
/// times, mode / baseline for profiled kernels and speedups. A ratio with no
/// value on this seed (no search reached the target) is left out.
std::map<std::string, double> ratios_of(const mode_run& b, const mode_run& m) {
  std::map<std::string, double> r{
      {"e2e_speedup", b.e2e_seconds / m.e2e_seconds},
      {"search_time_speedup_geomean", programs::search_time_ratio(b.search_seconds, m.search_seconds)},
      {"profiled_ratio", b.profiled_kernels > 0 ? m.profiled_kernels / b.profiled_kernels : 0.0},
      {"best_speedup_ratio", geomean(m.best) / geomean(b.best)}};
  if (!b.best_equal.empty() && !m.best_equal.empty()) r["equal_time_best_ratio"] = geomean(m.best_equal) / geomean(b.best_equal);
  if (!b.to_target.empty() && !m.to_target.empty()) r["target_speedup"] = geomean(b.to_target) / geomean(m.to_target);
  return r;
}

/// A ratio over seeds: its mean, and its lowest and highest value.
struct spread {
  double mean = 0, low = 0, high = 0;
  int seeds = 0;
};
std::map<std::string, spread> over_seeds(const std::vector<std::map<std::string, double>>& per_seed) {
  std::map<std::string, spread> out;
  for (const auto& seed : per_seed)
    for (const auto& [k, v] : seed) {
      auto& s = out[k];
      s.low = s.seeds == 0 ? v : std::min(s.low, v);
      s.high = s.seeds == 0 ? v : std::max(s.high, v);
      s.mean += v;
      ++s.seeds;
    }
  for (auto& [k, s] : out) s.mean /= s.seeds;
  return out;
}
std::string show(const spread& s) {
  return s.seeds > 1 ? fmt::format("{:.2f}x [{:.2f}-{:.2f}]", s.mean, s.low, s.high) : fmt::format("{:.2f}x", s.mean);
}
nlohmann::json spread_json(const std::map<std::string, spread>& m) {
  nlohmann::json j = nlohmann::json::object(), sp = nlohmann::json::object();
  for (const auto& [k, s] : m) {
    j[k] = s.mean;
    sp[k] = {s.low, s.high};
  }
  j["spread"] = std::move(sp);
  j["seeds"] = m.empty() ? 0 : m.begin()->second.seeds;
  return j;
}

/// The oracle bound for one task: in the earliest round whose traces hold a
/// fork outcome meeting the target, the earliest such fork position, plus the
/// fork's generation and that kernel's evaluation; each earlier round costs
/// the time to its earliest fork yielding any valid kernel, plus evaluating it
/// (an oracle that stops every round as soon as feedback could exist).
/// It decodes at the speed of one stream among `streams` on the server: 1 is
/// the server to itself; the number of searches is the least load a run's
/// searches share while every one of them is still reasoning.
std::optional<double> oracle_seconds(const replay::corpus& c, const std::string& task, double target,
                                     const replay::replay_params& rp, const sim::sim_params& sp, const cost_table& costs,
                                     int streams = 1) {
  const double rate =
      rp.decode_tokens_per_s / (1.0 + rp.slowdown_per_sequence * static_cast<double>(std::max(streams - 1, 0)));
  std::map<int, std::vector<const replay::trace*>> rounds;
  for (const auto& t : c.traces)
    if (t.task == task) rounds[t.round].push_back(&t);
  const profile_params prof = sp.profile.value_or(costs.profile);
  auto eval_seconds = [&](const cost_entry& e) {
    return e.compile_s + to_seconds(sim::validation_time(e, sp)) + to_seconds(sim::simulate_profile(e, prof, 1).device_time);
  };
  double elapsed = 0;
  for (const auto& [round, traces] : rounds) {
    std::optional<double> best_target, best_valid;
    for (const auto* t : traces)
      for (const auto& fp : t->forks)
        for (const auto& s : fp.samples) {
          auto ex = extract_candidate(s.text, {.require_plan = true, .allow_inline_code = true});
          if (!ex) continue;
          const auto* e = costs.find(source_key(ex->source));
          if (!e || e->verdict != verdict_kind::ok) continue;
          const double t_gen =
              rp.first_token_overhead_s + static_cast<double>(fp.at_token) / rate + static_cast<double>(s.tokens) / rate;
          const double t = t_gen + eval_seconds(*e);
          if (!best_valid || t < *best_valid) best_valid = t;
          if (e->baseline_us / e->runtime_us >= target && (!best_target || t < *best_target)) best_target = t;
        }
    if (best_target) return elapsed + *best_target;
    if (!best_valid) return std::nullopt;  // the oracle cannot get past a round with no valid kernel
    elapsed += *best_valid;
  }
  return std::nullopt;
}

nlohmann::json metrics_json(const mode_metrics& m) {
  return {{"e2e_seconds", m.e2e_seconds},
          {"search_seconds_geomean", geomean(m.search_seconds)},
          {"seconds_to_target", m.seconds_to_target ? nlohmann::json(*m.seconds_to_target) : nlohmann::json(nullptr)},
          {"tasks_at_target", m.tasks_at_target},
          {"profiled_kernels", m.profiled_kernels},
          {"pool_utilization", m.pool_utilization},
          {"idle_while_queued_seconds", m.idle_while_queued},
          {"tokens", m.tokens},
          {"best_speedup_geomean", m.best_speedup_geomean},
          {"equal_time_best_speedup_geomean", m.equal_time_best_geomean},
          {"equal_time_rounds", m.equal_time_rounds},
          {"terminations", m.terminations},
          {"forks", m.forks},
          {"wall_seconds", m.wall_seconds}};
}

/// A contention level of `--contention`: a preset's name or a number.
struct named_level {
  std::string name;
  double slowdown_per_sequence = 0;
};
std::vector<named_level> contention_list(const programs::options& a) {
  std::vector<named_level> out;
  for (const auto& item : programs::split_list(a.has("contention") ? a.get("contention") : "low,middle,high")) {
    const auto v = parse_contention(item);
    if (!v || *v > 1)
      throw std::invalid_argument(fmt::format(
          "--contention: '{}' is not low, middle, high or a slowdown per extra sequence in [0, 1]", item));
    out.push_back({item, *v});
  }
  return out;
}

int bench_e2e(const programs::options& a) {
  const std::vector<std::string> all(mode_names.begin(), mode_names.end());
  const auto modes = a.has("modes") ? programs::split_list(a.get("modes")) : all;
  programs::corpus_choice cc;
  cc.dir = programs::corpus_dir(a.has("corpus") ? std::optional<std::string>(a.get("corpus")) : std::nullopt);
  // Rounds: --rounds, else what a loaded corpus recorded (the suite: 3), else 20.
  // A loaded corpus is the same for every seed: read once. A procedural one is generated per seed.
  std::optional<replay::corpus> loaded;
  if (cc.dir) {
    auto c = programs::load_or_generate(cc);
    if (!c) throw std::invalid_argument(c.error().what());
    loaded = std::move(*c);
  }
  // The equal-time runs generate 3x the rounds: --rounds stays within a corpus's limit.
  int rounds = a.number<int>("rounds", 20, detail::in(1, limits::max_rounds / 3));
  if (loaded && !a.has("rounds")) rounds = programs::recorded_rounds(*loaded);
  const int seeds = a.number<int>("seeds", 3, detail::in(1, 100));
  const double target = a.number<double>("target", 2.0, limits::target_speedup);
  const bool equal_time = std::find(modes.begin(), modes.end(), "sequential") != modes.end() && !a.has("no-equal-time");
  const std::uint64_t corpus_seed = a.number<std::uint64_t>("corpus-seed", 1);
  cc.params.tasks = a.number<int>("tasks", 8, detail::in(1, 10'000));
  // Enough recorded rounds for the equal-time runs, where faster modes run more rounds.
  cc.params.rounds = equal_time ? rounds * 3 : rounds;
  cc.params.lanes = 4;  // the parallel and evolve modes run 4 lanes
  const auto levels = contention_list(a);
  std::optional<policy::any_termination> termination;
  if (a.has("termination")) {
    auto t = policy::make_termination(nlohmann::json::parse(a.get("termination"), nullptr, false));
    if (!t) throw std::invalid_argument(fmt::format("--termination: {}", t.error().what()));
    termination = std::move(*t);
  }
  std::optional<nlohmann::json> spec_config;
  if (a.has("spec-config")) {
    spec_config = nlohmann::json::parse(a.get("spec-config"), nullptr, false);
    engine_config probe;
    if (auto r = read_config_fields(*spec_config, probe); !r) throw std::invalid_argument(fmt::format("--spec-config: {}", r.error().what()));
  }

  programs::run_options o;
  o.sim.devices = a.number<int>("devices", 4, limits::devices);
  o.replay.max_concurrent_streams = a.number<int>("streams", 64, detail::in(1, 65'536));
  o.replay.server_prefix_hit = a.number<double>("prefix-hit", 0.25, detail::in(0.0, 1.0));
  const std::uint64_t run_seed = a.number<std::uint64_t>("seed", 1);

  fmt::print("specgen-bench e2e: {}, {} rounds x {} seeds, {} simulated GPUs, target {:.2f}x, server prefix hit {:.2f}, "
             "virtual time{}\n",
             cc.dir ? cc.dir->string() : fmt::format("procedural corpus, {} tasks", cc.params.tasks), rounds, seeds,
             o.sim.devices, target, o.replay.server_prefix_hit, a.has("responsive") ? ", a model that answers feedback" : "");
  // --journal-dir: every run's journal, named [<level>/]<mode>[-equal-time][-seedN].jsonl (specgen-report reads a directory).
  const std::optional<std::filesystem::path> journal_root =
      a.has("journal-dir") ? std::optional<std::filesystem::path>(a.get("journal-dir")) : std::nullopt;
  // The corpora, generated once and shared by every level.
  std::vector<replay::corpus> corpora;
  for (int k = 0; k < seeds; ++k) {
    cc.seed = corpus_seed + static_cast<std::uint64_t>(k);
    auto corpus = loaded ? expected<replay::corpus, error>(*loaded) : programs::load_or_generate(cc);
    if (!corpus) throw std::invalid_argument(corpus.error().what());
    corpora.push_back(std::move(*corpus));
  }
  // --responsive: one model that answers feedback per corpus, shared by every run on it.
  const bool responsive = a.has("responsive");
  std::vector<std::shared_ptr<const replay::responsive_traces>> answering;
  if (responsive)
    for (const auto& c : corpora) answering.push_back(std::make_shared<const replay::responsive_traces>(c.traces));

  nlohmann::json out = {{"benchmark", "e2e"},
                        {"clock", "virtual"},
                        {"tasks_per_seed", cc.params.tasks},
                        {"seeds", seeds},
                        {"rounds", rounds},
                        {"devices", o.sim.devices},
                        {"target_speedup", target},
                        {"server_prefix_hit", o.replay.server_prefix_hit},
                        {"corpus", cc.dir ? programs::corpus_label(*cc.dir) : fmt::format("procedural (seeds {}..{})", corpus_seed, corpus_seed + seeds - 1)},
                        {"run_seeds", fmt::format("{}..{}", run_seed, run_seed + seeds - 1)},
                        {"termination", termination ? termination->config() : nlohmann::json("each mode's own")},
                        {"spec_config", spec_config ? *spec_config : nlohmann::json(nullptr)},
                        {"responsive", responsive},
                        {"levels", nlohmann::json::object()}};
  for (const auto& level : levels) {
    o.replay.slowdown_per_sequence = level.slowdown_per_sequence;
    std::optional<std::filesystem::path> journal_dir = journal_root;
    if (journal_dir && levels.size() > 1) *journal_dir /= level.name;
    if (journal_dir) std::filesystem::create_directories(*journal_dir);
    fmt::print("\n== contention {}: decode slowdown {:.4f} per extra sequence ({:.2f} of a lone stream's speed at 32) ==\n",
               level.name, level.slowdown_per_sequence, 1.0 / (1.0 + level.slowdown_per_sequence * 31));
    auto run_one = [&](const replay::corpus& corpus, const std::string& mode, std::uint64_t seed, search_budget budget,
                       bool equal_time_run, double& wall) {
      auto cfg = mode_config(mode);
      if (!cfg) throw std::invalid_argument(cfg.error().what());
      cfg->seed = seed;
      cfg->budget = budget;
      if (termination) cfg->termination = *termination;
      if (spec_config && cfg->trigger.name() != "never")
        if (auto r = read_config_fields(*spec_config, *cfg); !r) throw std::invalid_argument(r.error().what());
      o.sim.seed = seed;
      o.responsive = responsive ? answering[static_cast<std::size_t>(&corpus - corpora.data())] : nullptr;
      o.journal.reset();
      if (journal_dir) {
        o.journal = *journal_dir / fmt::format("{}{}{}.jsonl", mode, equal_time_run ? "-equal-time" : "",
                                               seeds > 1 ? fmt::format("-seed{}", seed) : std::string());
        std::filesystem::remove(*o.journal);
      }
      const auto w0 = std::chrono::steady_clock::now();
      auto r = programs::run_corpus<virtual_clock>(corpus, std::move(*cfg), o);
      if (!r) throw std::runtime_error(fmt::format("mode {}: {}", mode, r.error().what()));
      wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      return std::move(*r);
    };
    std::vector<std::map<std::string, mode_run>> per_seed(static_cast<std::size_t>(seeds));
    std::vector<double> oracle;                 // every (seed, task) the oracle reaches the target on
    std::vector<double> oracle_per_seed;        // its geometric mean per seed (0: none)
    std::vector<double> loaded, loaded_per_seed;  // the same oracle among the run's searches' main streams
    int tasks_total = 0;
    for (int k = 0; k < seeds; ++k) {
      const auto& corpus = corpora[static_cast<std::size_t>(k)];
      tasks_total += static_cast<int>(corpus.tasks.size());
      const std::uint64_t seed = run_seed + static_cast<std::uint64_t>(k);
      auto& runs = per_seed[static_cast<std::size_t>(k)];
      for (const auto& mode : modes) {
        auto& m = runs[mode];
        const auto r = run_one(corpus, mode, seed, {.max_rounds = rounds, .target_speedup = target}, false, m.wall_seconds);
        m.e2e_seconds = r.e2e_seconds;
        m.profiled_kernels = static_cast<double>(r.profiled_kernels);
        m.pool_utilization = r.pool_utilization;
        m.idle_while_queued = r.idle_while_queued_seconds;
        m.tokens = static_cast<double>(r.generated_tokens);
        for (const auto& s : r.searches) {
          m.terminations += static_cast<double>(s.terminations);
          m.forks += static_cast<double>(s.forks);
          if (s.seconds_to_target) m.to_target.push_back(*s.seconds_to_target);
          m.search_seconds.push_back(s.end_seconds);
          m.best.push_back(s.best_speedup > 0 ? s.best_speedup : 1.0);
        }
      }
      // Equal time: every mode gets the time sequential refinement needed for
      // its iteration budget (the paper's "fixed time budget" comparison).
      if (equal_time)
        for (const auto& mode : modes) {
          auto& m = runs[mode];
          const auto r = run_one(corpus, mode, seed,
                                 {.max_rounds = cc.params.rounds, .max_seconds = runs["sequential"].e2e_seconds, .target_speedup = target},
                                 true, m.wall_seconds);
          for (const auto& s : r.searches) {
            m.best_equal.push_back(s.best_speedup > 0 ? s.best_speedup : 1.0);
            m.equal_time_rounds += static_cast<double>(s.rounds) / static_cast<double>(r.searches.size());
          }
        }
      std::vector<double> seed_oracle, seed_loaded;
      for (const auto& t : corpus.tasks) {
        if (auto s = oracle_seconds(corpus, t.name, target, o.replay, o.sim, corpus.costs)) seed_oracle.push_back(*s);
        if (auto s = oracle_seconds(corpus, t.name, target, o.replay, o.sim, corpus.costs,
                                    static_cast<int>(corpus.tasks.size())))
          seed_loaded.push_back(*s);
      }
      oracle.insert(oracle.end(), seed_oracle.begin(), seed_oracle.end());
      oracle_per_seed.push_back(geomean(seed_oracle));
      loaded.insert(loaded.end(), seed_loaded.begin(), seed_loaded.end());
      loaded_per_seed.push_back(geomean(seed_loaded));
      fmt::print("  seed {} done\n", seed);
    }
    std::vector<mode_metrics> results;
    for (const auto& mode : modes) {
      std::vector<const mode_run*> runs;
      for (const auto& s : per_seed) runs.push_back(&s.at(mode));
      results.push_back(summarize(mode, runs));
    }
    // 0 when the oracle reaches the target on no task (a plain double: gcc 12 misreads optionals here).
    const double oracle_ttt = geomean(oracle), loaded_ttt = geomean(loaded);

    fmt::print("\nmeans over {} seeds; 'idle q' = GPU-seconds idle while a GPU job waited; 'best' = geomean best speedup at the "
               "iteration budget, 'best@T' = with sequential's time\n", seeds);
    fmt::print("{:<17} {:>9} {:>10} {:>7} {:>9} {:>7} {:>8} {:>8} {:>7} {:>7} {:>7}\n", "mode", "e2e (s)", "to target", "reached",
               "profiled", "util", "idle q", "tokens", "best", "best@T", "rnd@T");
    for (const auto& m : results)
      fmt::print("{:<17} {:>9.0f} {:>10} {:>7} {:>9.1f} {:>6.1f}% {:>7.1f}s {:>7.2f}M {:>6.2f}x {:>6.2f}x {:>7.1f}\n", m.mode,
                 m.e2e_seconds, m.seconds_to_target ? fmt::format("{:.0f}", *m.seconds_to_target) : "-",
                 fmt::format("{}/{}", m.tasks_at_target, tasks_total), m.profiled_kernels, 100 * m.pool_utilization,
                 m.idle_while_queued, m.tokens / 1e6, m.best_speedup_geomean, m.equal_time_best_geomean, m.equal_time_rounds);
    fmt::print("{:<17} {:>9} {:>10} {:>7}\n", "oracle bound", "-", oracle_ttt > 0 ? fmt::format("{:.0f}", oracle_ttt) : "-",
               fmt::format("{}/{}", oracle.size(), tasks_total));
    fmt::print("{:<17} {:>9} {:>10} {:>7}   (the oracle decoding among {} main streams)\n", "oracle under load", "-",
               loaded_ttt > 0 ? fmt::format("{:.0f}", loaded_ttt) : "-", fmt::format("{}/{}", loaded.size(), tasks_total),
               corpora.front().tasks.size());

    nlohmann::json lj = {{"slowdown_per_sequence", level.slowdown_per_sequence},
                         {"oracle", {{"seconds_to_target", oracle_ttt > 0 ? nlohmann::json(oracle_ttt) : nlohmann::json(nullptr)},
                                     {"tasks", oracle.size()}}},
                         {"oracle_under_load", {{"seconds_to_target", loaded_ttt > 0 ? nlohmann::json(loaded_ttt) : nlohmann::json(nullptr)},
                                                {"tasks", loaded.size()},
                                                {"streams", corpora.front().tasks.size()}}},
                         {"modes", nlohmann::json::object()}};
    const std::vector<std::string> baselines{"sequential", "parallel", "evolve"};
    fmt::print("\nratios, mean over seeds [lowest-highest] (baseline / mode for times, mode / baseline for profiled kernels "
               "and speedups; e2e: until the last search ends; per task: geometric mean over searches of each search's own time):\n");
    std::string oracle_lines;
    for (const auto& m : results) {
      auto j = metrics_json(m);
      nlohmann::json vs = nlohmann::json::object();
      for (const auto& bname : baselines) {
        if (bname == m.mode || std::find(modes.begin(), modes.end(), bname) == modes.end()) continue;
        std::vector<std::map<std::string, double>> seed_ratios;
        for (const auto& s : per_seed) seed_ratios.push_back(ratios_of(s.at(bname), s.at(m.mode)));
        const auto r = over_seeds(seed_ratios);
        vs[bname] = spread_json(r);
        auto part = [&](std::string_view label, const char* key) {
          auto it = r.find(key);
          return it == r.end() ? std::string() : fmt::format("  {} {}", label, show(it->second));
        };
        fmt::print("  {:<17} vs {:<10}:{}{}{}{}{}{}\n", m.mode, bname, part("e2e", "e2e_speedup"),
                   part("per task", "search_time_speedup_geomean"), part("profiled", "profiled_ratio"),
                   part("best", "best_speedup_ratio"), part("best@T", "equal_time_best_ratio"), part("to target", "target_speedup"));
      }
      // Time to target over the oracle bound, alone and under load, per seed.
      std::vector<std::map<std::string, double>> to_oracle;
      for (std::size_t k = 0; k < per_seed.size(); ++k) {
        const auto& run = per_seed[k].at(m.mode);
        if (oracle_per_seed[k] > 0 && loaded_per_seed[k] > 0 && !run.to_target.empty())
          to_oracle.push_back({{"target_time_ratio", geomean(run.to_target) / oracle_per_seed[k]},
                               {"loaded_target_time_ratio", geomean(run.to_target) / loaded_per_seed[k]}});
      }
      if (!to_oracle.empty()) {
        const auto r = over_seeds(to_oracle);
        vs["oracle"] = spread_json(r);
        oracle_lines += fmt::format("  {:<17} time to target / oracle bound: {}, / oracle under load: {}\n", m.mode,
                                    show(r.at("target_time_ratio")), show(r.at("loaded_target_time_ratio")));
      }
      j["vs"] = vs;
      lj["modes"][m.mode] = j;
    }
    fmt::print("{}", oracle_lines);
    out["levels"][level.name] = std::move(lj);
  }
  if (a.has("out")) {
    std::ofstream f(a.get("out"));
    f << out.dump(2) << '\n';
    if (!f) throw std::runtime_error(fmt::format("cannot write {}", a.get("out")));
    fmt::print("wrote {}\n", a.get("out"));
  }
  return 0;
}

int bench_engine(const programs::options& a) {
  programs::corpus_choice cc;
  cc.params.tasks = a.number<int>("tasks", 20, detail::in(1, 10'000));
  cc.params.rounds = a.number<int>("rounds", 50, limits::rounds);
  cc.params.lanes = 1;
  cc.seed = a.number<std::uint64_t>("seed", 1);
  const auto g0 = std::chrono::steady_clock::now();
  auto corpus = programs::load_or_generate(cc);
  if (!corpus) throw std::invalid_argument(corpus.error().what());
  const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count();

  auto cfg = mode_config("specgen");
  cfg->budget.max_rounds = cc.params.rounds;
  programs::run_options o;
  o.sim.devices = 8;
  const auto w0 = std::chrono::steady_clock::now();
  auto r = programs::run_corpus<virtual_clock>(*corpus, std::move(*cfg), o);
  if (!r) throw std::runtime_error(r.error().what());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  int rounds = 0;
  for (const auto& s : r->searches) rounds += s.rounds;
  const double us_per_event = 1e6 * wall / static_cast<double>(r->events);
  fmt::print("specgen-bench engine: {} searches, {} rounds simulated ({:.0f} s of virtual time) in {:.2f} s wall\n",
             r->searches.size(), rounds, r->e2e_seconds, wall);
  fmt::print("  {} events, {:.2f} us per event (engine + replay model + simulated device); corpus generation {:.2f} s\n",
             r->events, us_per_event, gen_s);
  if (a.has("out")) {
    std::ofstream f(a.get("out"));
    f << nlohmann::json{{"benchmark", "engine"},      {"searches", r->searches.size()}, {"rounds", rounds},
                        {"events", r->events},        {"wall_seconds", wall},           {"us_per_event", us_per_event},
                        {"virtual_seconds", r->e2e_seconds}, {"corpus_generation_seconds", gen_s}}
             .dump(2)
      << '\n';
  }
  return 0;
}

}  // namespace

namespace specgen::bench {
void add_pool_bench(programs::subcommands& benchmarks);  // pool_bench.cpp
}
#ifdef SPECGEN_BENCH_GPU
namespace specgen::bench {
int run_gpu_bench(const std::string& cmd, const programs::options& a);  // gpu_bench.cpp
}
#endif
#ifdef SPECGEN_BENCH_OPENAI
namespace specgen::bench {
int run_openai_bench(const programs::options& a);  // openai_bench.cpp
}
#endif
#ifdef SPECGEN_BENCH_KV
namespace specgen::bench {
int run_kv_bench(const std::string& cmd, const programs::options& a);  // kv_bench.cpp
}
#endif

namespace {

int run_gpu(const std::string& cmd, const programs::options& a) {
#ifdef SPECGEN_BENCH_GPU
  return bench::run_gpu_bench(cmd, a);
#else
  (void)cmd, (void)a;
  fmt::print("no GPU: specgen-bench was built without the CUDA Toolkit\n");
  return 0;
#endif
}

int run_kv(const std::string& cmd, const programs::options& a) {
#ifdef SPECGEN_BENCH_KV
  return bench::run_kv_bench(cmd, a);
#else
  (void)cmd, (void)a;
  fmt::print("no GPU: specgen-bench was built without the CUDA Toolkit\n");
  return 0;
#endif
}

int run_openai(const std::string&, const programs::options& a) {
#ifdef SPECGEN_BENCH_OPENAI
  return bench::run_openai_bench(a);
#else
  (void)a;
  fmt::print("specgen-bench was built without libcurl: no OpenAI backend to measure\n");
  return 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CLI::App app("specgen-bench: the project's benchmarks. Ratios are measured side by side in one run; nothing\n"
                 "here asserts a time. `specgen-bench BENCHMARK --help` lists a benchmark's options.",
                 "specgen-bench");
    programs::configure(app);
    programs::subcommands benchmarks(app);
    declare_e2e(benchmarks.add("e2e",
                               "every mode on the same tasks, traces and seed, in virtual time, with ratios against "
                               "each baseline and against the oracle bound",
                               [](const std::string&, const programs::options& a) { return bench_e2e(a); }));
    declare_engine(benchmarks.add("engine",
                                  "the engine's own cost: microseconds per event and wall time to simulate 1,000 "
                                  "search rounds",
                                  [](const std::string&, const programs::options& a) { return bench_engine(a); }));
    bench::add_pool_bench(benchmarks);
    const std::pair<const char*, const char*> gpu[] = {
        {"gpu-latency", "real GPUs: the latency of compiling, validating and profiling each task's kernels"},
        {"gpu-spread", "real GPUs: the spread of repeated profiles of one kernel"},
        {"gpu-cupti", "real GPUs: the CUPTI profiler's readings against CUDA events"},
        {"gpu-respawn", "real GPUs: how fast a worker is ready again after a fault"},
        {"calibrate", "real GPUs: measure the suite's candidates into a cost table"},
        {"e2e-live", "real GPUs, real time: modes on the replay model at its calibrated speed, beside their virtual twins"}};
    for (const auto& [name, help] : gpu) declare_gpu(benchmarks.add(name, std::string(help) + " (\"no GPU: <reason>\" and exit 0 without one)", run_gpu));
    const std::pair<const char*, const char*> kv[] = {
        {"kv-bandwidth", "the GPU KV store: transfer bandwidth by route, block and batch size"},
        {"kv-prefix", "the GPU KV store: moving a long prefix's blocks"},
        {"kv-stress", "the GPU KV store: concurrent puts, gets and evictions, every block checksummed"}};
    for (const auto& [name, help] : kv) declare_kv(benchmarks.add(name, std::string(help) + " (\"no GPU: <reason>\" and exit 0 without one)", run_kv));
    declare_openai(benchmarks.add("openai-client", "the OpenAI backend against a local vLLM stand-in", run_openai));

    if (argc < 2) {
      fmt::print("{}", app.help());
      return 2;
    }
    std::vector<std::string> extra;
    if (!programs::parse(app, argc, argv, &extra)) return 0;
    if (!benchmarks.given()) {
      fmt::print(stderr, "specgen-bench: unknown benchmark '{}'\n{}", extra.empty() ? std::string() : extra.front(), app.help());
      return 2;
    }
    if (!extra.empty()) throw std::invalid_argument(fmt::format("unexpected argument '{}'", extra.front()));
    return benchmarks.run();
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "specgen-bench: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "specgen-bench: error: {}\n", e.what());
    return 1;
  }
}
