// specgen-run: run a kernel-optimisation suite with speculative generation.
//
// With no arguments it runs the bundled replay corpus (procedural, seed 1) in
// `specgen` mode on the simulated device, in virtual time, and writes
// results.json, journal.jsonl and timeline.json under ./specgen-out.
#include "support/args.hpp"
#include "support/world.hpp"

#include <specgen/modes.hpp>
#include <specgen/results.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace fs = std::filesystem;
using namespace specgen;

namespace {

constexpr const char* usage_text = R"(usage: specgen-run [options]

Runs one speculative kernel search per task of a suite and writes the results.

Suite and model:
  --corpus DIR        a replay corpus (tasks/, traces/, cost_table.json); default:
                      the bundled procedural corpus
  --corpus-seed N     seed of the procedural corpus (default 1)
  --tasks N           run only the first N tasks
  --backend NAME      replay (default). openai is not built in this version.
Search:
  --mode MODE         sequential, parallel, evolve, specgen (default),
                      parallel+specgen, evolve+specgen, +spec, +elastic, +priority, +kv
  --config FILE       JSON engine configuration (see docs/policies.md); --mode,
                      --rounds and --seed override it
  --rounds N          iterations per task (default 10)
  --seed N            run seed (default 1)
  --target X          target speedup for seconds_to_target (default 0: none)
Evaluation:
  --devices N         simulated GPUs (default 4)
  --real-time         run at wall-clock speed instead of virtual time
Output:
  --out DIR           results.json, journal.jsonl, timeline.json (default specgen-out)
  --resume            continue the run whose journal is in --out
  --progress-every S  seconds of (virtual) time between progress lines (default 120;
                      2 with --real-time)
  --quiet             no progress lines
)";

std::string tokens_text(std::uint64_t n) {
  return n >= 1000000 ? fmt::format("{:.2f}M", n / 1e6) : n >= 1000 ? fmt::format("{:.1f}K", n / 1e3) : fmt::format("{}", n);
}

void print_progress(const std::vector<search_progress>& ps, double now_s, int rounds) {
  fmt::print("[{:9.1f}s]\n", now_s);
  for (const auto& p : ps)
    fmt::print("  search {:2} {:<24} round {:3}/{:<3} best {:5.2f}x  in flight {:3}  streams {:2}  tokens {:>7}{}\n", p.search,
               p.task, p.round + 1, rounds, p.best_speedup, p.in_flight, p.streams, tokens_text(p.tokens), p.done ? "  done" : "");
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  programs::args a(argc, argv,
                   {"corpus", "corpus-seed", "tasks", "backend", "mode", "config", "rounds", "seed", "target", "devices",
                    "out", "progress-every"},
                   {"help", "real-time", "resume", "quiet"});
  if (a.has("help")) {
    fmt::print("{}", usage_text);
    return 0;
  }
  if (!a.positional().empty()) throw std::invalid_argument(fmt::format("unexpected argument '{}'", a.positional().front()));
  const std::string backend_name = a.get("backend", "replay");
  if (backend_name != "replay")
    throw std::invalid_argument(fmt::format("--backend {}: only the replay backend is built in this version", backend_name));

  // Configuration: a JSON file, then the flags on top.
  nlohmann::json cj = nlohmann::json::object();
  if (a.has("config")) {
    std::ifstream in(a.get("config"));
    if (!in) throw std::invalid_argument(fmt::format("--config: cannot read {}", a.get("config")));
    try {
      cj = nlohmann::json::parse(in, nullptr, true, /*ignore_comments=*/true);
    } catch (const nlohmann::json::parse_error& e) {
      throw std::invalid_argument(fmt::format("--config {}: {}", a.get("config"), e.what()));
    }
  }
  if (a.has("mode")) cj["mode"] = a.get("mode");
  if (a.has("seed")) cj["seed"] = a.number<std::uint64_t>("seed", 1);
  auto cfg = config_from_json(cj);
  if (!cfg) throw std::invalid_argument(fmt::format("{}{}", a.has("config") ? a.get("config") + ": " : "", cfg.error().message));
  if (!cj.contains("budget") || !cj["budget"].contains("max_rounds")) cfg->budget.max_rounds = 10;
  if (a.has("rounds")) cfg->budget.max_rounds = a.number<int>("rounds", 10);
  if (a.has("target")) cfg->budget.target_speedup = a.number<double>("target", 0);
  if (cfg->budget.max_rounds < 1) throw std::invalid_argument("--rounds must be at least 1");

  programs::corpus_choice cc;
  if (a.has("corpus")) cc.dir = a.get("corpus");
  cc.seed = a.number<std::uint64_t>("corpus-seed", 1);
  cc.max_tasks = a.number<int>("tasks", 0);
  cc.params.rounds = std::max(cc.params.rounds, cfg->budget.max_rounds);
  auto corpus = programs::load_or_generate(cc);
  if (!corpus) throw std::invalid_argument(corpus.error().message);

  const fs::path out = a.get("out", "specgen-out");
  fs::create_directories(out);
  programs::run_options o;
  o.sim.devices = a.number<int>("devices", 4);
  o.sim.seed = cfg->seed;
  o.journal = out / "journal.jsonl";
  o.resume = a.has("resume");
  if (!o.resume && fs::exists(*o.journal)) fs::remove(*o.journal);
  o.timeline = out / "timeline.json";
  const bool real_time = a.has("real-time");
  o.progress_every = seconds(a.number<double>("progress-every", real_time ? 2.0 : 120.0));
  const int rounds = cfg->budget.max_rounds;
  if (!a.has("quiet")) o.progress = [rounds](const std::vector<search_progress>& p, double now) { print_progress(p, now, rounds); };

  fmt::print("specgen-run: {} task(s), mode {}, {} round(s), backend replay, evaluator: simulated device ({} GPUs, {} time)\n",
             corpus->tasks.size(), cj.value("mode", std::string("specgen")), rounds, o.sim.devices,
             real_time ? "real" : "virtual");
  fmt::print("             (the GPU evaluator is not finished in this version; the simulated device answers from the corpus's cost table)\n");
  const nlohmann::json config_json = to_json(*cfg);
  auto r = real_time ? programs::run_corpus<steady_clock>(*corpus, std::move(*cfg), o)
                     : programs::run_corpus<virtual_clock>(*corpus, std::move(*cfg), o);
  if (!r) throw std::runtime_error(r.error().message);

  nlohmann::json results = *r;
  results["config"] = config_json;
  results["corpus"] = a.has("corpus") ? a.get("corpus") : fmt::format("procedural (seed {})", cc.seed);
  {
    std::ofstream f(out / "results.json");
    f << results.dump(2) << '\n';
    if (!f) throw std::runtime_error(fmt::format("cannot write {}", (out / "results.json").string()));
  }
  fmt::print("\n{:<26} {:>6} {:>8} {:>9} {:>9} {:>10}  {}\n", "task", "rounds", "best", "profiled", "forks", "tokens", "end");
  for (const auto& s : r->searches)
    fmt::print("{:<26} {:>6} {:>7.2f}x {:>9} {:>9} {:>10}  {}\n", s.task, s.rounds, s.best_speedup, s.profiled, s.forks,
               tokens_text(s.generated_tokens), s.end_reason);
  fmt::print("\nend-to-end {:.1f} s, {} kernels profiled, pool utilisation {:.1f}%, geomean best speedup {:.2f}x\n",
             r->e2e_seconds, r->profiled_kernels, 100 * r->pool_utilization, r->best_speedup_geomean);
  fmt::print("wrote {}, {}, {}\n", (out / "results.json").string(), o.journal->string(), o.timeline->string());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "specgen-run: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "specgen-run: error: {}\n", e.what());
    return 1;
  }
}
