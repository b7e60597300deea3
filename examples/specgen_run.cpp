// specgen-run: run a kernel-optimisation suite with speculative generation.
//
// With no arguments it runs the bundled suite (tasks/suite: 20 tasks, their
// replay traces and the cost table measured on an H200) in `specgen` mode on
// the simulated device, in virtual time, and writes results.json,
// journal.jsonl and timeline.json under ./specgen-out. `--evaluator gpu`
// evaluates every candidate on the real GPUs instead.
#include "support/args.hpp"
#include "support/out_dir.hpp"
#include "support/world.hpp"

#include <specgen/modes.hpp>
#include <specgen/results.hpp>
#ifdef SPECGEN_RUN_OPENAI
#include <specgen/backend/openai.hpp>
#endif
#ifdef SPECGEN_RUN_GPU
#include <specgen/gpu/evaluation.hpp>
#endif

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

namespace fs = std::filesystem;
using namespace specgen;

namespace {

constexpr const char* usage_text = R"(usage: specgen-run [options]

Runs one speculative kernel search per task of a suite and writes the results.

Suite and model:
  --corpus DIR        a replay corpus (tasks/, traces/, cost_table.json); default:
                      the bundled suite (tasks/suite, 20 tasks); "procedural" for
                      the generated corpus
  --corpus-seed N     seed of the procedural corpus (default 1)
  --tasks N           run only the first N tasks (1 to 10000)
  --backend NAME      replay (default), or openai: a vLLM, SGLang or other
                      OpenAI-compatible server (runs in real time)
  --decode-rate R     the replay model's decode speed in tokens/s, 1 to 100000
                      (default 70, the calibrated speed of a large reasoning model
                      on an H200)
Search:
  --mode MODE         sequential, parallel, evolve, specgen (default),
                      parallel+specgen, evolve+specgen, +spec, +elastic, +priority, +kv
  --config FILE       JSON engine configuration (see docs/policies.md); --rounds
                      and --seed override it; --mode replaces its "mode", and is
                      refused if the file sets a strategy, trigger, termination,
                      pool or kv other than the mode's
  --rounds N          iterations per task, 1 to 10000 (default: the rounds the
                      corpus recorded, 3 for the suite; 10 for the procedural corpus)
  --seed N            run seed (default 1)
  --target X          target speedup for seconds_to_target, 0.001 to 1000
                      (default 0: none)
Evaluation:
  --evaluator KIND    sim (default): the simulated device, answering from the
                      corpus's cost table measured on an H200; gpu: the GPU pool,
                      compiling, validating and profiling every candidate on real
                      GPUs (real time; the replay model at its calibrated speed)
  --gpus LIST         --evaluator gpu: the GPUs to use, e.g. 0,1 (default: all)
  --devices N         simulated GPUs, 1 to 1024 (default 4)
  --real-time         run at wall-clock speed instead of virtual time
OpenAI backend (--backend openai; docs/backends.md):
  --base-url URL      the server, e.g. http://127.0.0.1:8000
  --model NAME        the served model name
  --preset NAME       model family: auto (default: from the model name), deepseek-r1,
                      deepseek-v3, qwen3, glm-4.5, generic
  --server KIND       auto (default: asks the server), vllm, sglang or openai
  --api-key-env VAR   the environment variable that holds the API key
  --openai-config F   a JSON backend configuration (docs/backends.md); the flags
                      above override it
Output:
  --out DIR           results.json, journal.jsonl, timeline.json (default specgen-out);
                      one run at a time: a second run on DIR exits with status 2
  --resume            continue the run whose journal is in --out, given the flags it
                      started with (another corpus, configuration or seed is refused)
  --progress-every S  seconds of (virtual) time between progress lines, 1 to 86400
                      (default 120; 2 with --real-time)
  --quiet             no progress lines

Exit status: 0 when every search ran (failed streams are counted in the summary and
results.json); 1 when the run failed, or every stream of a search failed; 2 for bad
flags, an output directory in use, or a --resume that does not match the journal.
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

/// The JSON object in the file a flag names (a regular file of at most 1 MiB;
/// comments allowed).
nlohmann::json read_config_file(const programs::args& a, const std::string& flag) {
  auto j = detail::read_json_file(a.get(flag), detail::file_kinds::config);
  if (!j) throw std::invalid_argument(fmt::format("--{}: {}", flag, j.error().message));
  if (!j->is_object())
    throw std::invalid_argument(fmt::format("--{}: {}: must be a JSON object {{...}}, got {}", flag, a.get(flag), j->type_name()));
  return std::move(*j);
}

#ifdef SPECGEN_RUN_OPENAI
/// The backend's configuration: --openai-config, then the flags on top.
openai::openai_config openai_config_from(const programs::args& a) {
  nlohmann::json j = nlohmann::json::object();
  if (a.has("openai-config")) j = read_config_file(a, "openai-config");
  const std::pair<const char*, const char*> flags[] = {
      {"base-url", "base_url"}, {"model", "model"}, {"preset", "preset"}, {"server", "server"}, {"api-key-env", "api_key_env"}};
  for (const auto& [flag, key] : flags)
    if (a.has(flag)) j[key] = a.get(flag);
  auto c = openai::config_from_json(j);
  if (!c) throw std::invalid_argument(c.error().message);
  return *c;
}

void print_server(const openai::server_info& s, const openai::openai_config& c) {
  fmt::print("             {} server at {}, model {}, preset {}; forks send {}\n", s.kind, openai::redact_url(c.base_url), c.model, s.family.name,
             s.token_ids_note.empty() ? std::string("token ids where the stream has them") : "text (" + s.token_ids_note + ")");
}

/// What the backend did, for the summary and results.json.
nlohmann::json openai_summary(const openai::openai_backend& b) {
  const openai::backend_stats st = b.stats();
  const double hit = st.fork_prompt_tokens ? 100.0 * static_cast<double>(st.fork_cached_tokens) / static_cast<double>(st.fork_prompt_tokens) : 0;
  fmt::print("openai: {} reasoning streams, {} forks ({} by token ids, {} as text), prefix cache {} of {} fork prompt tokens "
             "({:.1f}%, from {} usage reports), {} retries, {} stream errors\n",
             st.reasoning_streams, st.forks, st.forks_token_ids, st.forks_text, st.fork_cached_tokens, st.fork_prompt_tokens, hit,
             st.fork_usage_reports, st.retries, st.stream_errors);
  return {{"name", "openai"}, {"server", b.server().kind}, {"model", b.config().model}, {"preset", b.server().family.name},
          {"reasoning_streams", st.reasoning_streams}, {"forks", st.forks}, {"forks_token_ids", st.forks_token_ids},
          {"forks_text", st.forks_text}, {"fork_prompt_tokens", st.fork_prompt_tokens},
          {"fork_cached_tokens", st.fork_cached_tokens}, {"fork_usage_reports", st.fork_usage_reports},
          {"retries", st.retries}, {"stream_errors", st.stream_errors}, {"cancels", st.cancels}};
}
#endif

#ifdef SPECGEN_RUN_GPU
/// The search on real GPUs: the replay model in real time and the GPU pool
/// (a worker per GPU) evaluating every candidate the traces produce.
expected<run_result, programs::run_error> run_on_gpus(const programs::args& a, const replay::corpus& corpus, engine_config cfg,
                                        const programs::run_options& o) {
  auto n = gpu::device_count();
  if (!n || *n == 0)
    return unexpected(error{fmt::format("--evaluator gpu: no GPU: {}", n ? "the driver reports no devices" : n.error().message)});
  gpu::pool_config pc;
  if (a.has("gpus"))
    for (const auto& d : programs::split_list(a.get("gpus"))) {
      int index = -1;
      if (std::from_chars(d.data(), d.data() + d.size(), index).ec != std::errc{} || index < 0 || index >= *n)
        return unexpected(error{fmt::format("--gpus: '{}' is not a GPU index (this machine has {})", d, *n)});
      pc.devices.push_back(index);
    }
  event_loop<steady_clock> loop;
  auto pool = gpu::gpu_pool::create(loop, pc);
  if (!pool) return unexpected(error{fmt::format("cannot start the GPU pool: {}", pool.error().message)});
  fmt::print("             {} GPU(s) in the pool\n", (*pool)->devices());
  replay::replay_model model(loop, corpus.traces, o.replay);
  return programs::run_corpus_on(loop, model, **pool, corpus, std::move(cfg), o);
}
#endif

int run(int argc, char** argv) {
  programs::args a(argc, argv,
                   {"corpus", "corpus-seed", "tasks", "backend", "mode", "config", "rounds", "seed", "target", "devices",
                    "evaluator", "gpus", "decode-rate", "out", "progress-every", "base-url", "model", "preset", "server", "api-key-env", "openai-config"},
                   {"help", "real-time", "resume", "quiet"});
  if (a.has("help")) {
    fmt::print("{}", usage_text);
    return 0;
  }
  if (!a.positional().empty()) throw std::invalid_argument(fmt::format("unexpected argument '{}'", a.positional().front()));
  const std::string backend_name = a.get("backend", "replay");
  if (backend_name != "replay" && backend_name != "openai")
    throw std::invalid_argument(fmt::format("--backend {}: use replay or openai", backend_name));
  for (const char* flag : {"base-url", "model", "preset", "server", "api-key-env", "openai-config"})
    if (a.has(flag) && backend_name != "openai") throw std::invalid_argument(fmt::format("--{} needs --backend openai", flag));
#ifdef SPECGEN_RUN_OPENAI
  std::optional<openai::openai_config> openai_cfg;
  if (backend_name == "openai") openai_cfg = openai_config_from(a);
#else
  if (backend_name == "openai")
    throw std::invalid_argument("--backend openai: this specgen-run was built without libcurl (install libcurl4-openssl-dev and rebuild)");
#endif

  // Configuration: a JSON file, then the flags on top.
  nlohmann::json cj = nlohmann::json::object();
  if (a.has("config")) cj = read_config_file(a, "config");
  if (a.has("seed")) cj["seed"] = a.number<std::uint64_t>("seed", 1);
  // --mode replaces the config's "mode"; a policy the config sets must then agree with it.
  auto cfg = a.has("mode") ? config_with_mode(cj, a.get("mode")) : config_from_json(cj);
  if (!cfg)
    throw std::invalid_argument(fmt::format("{}{}{}", a.has("config") ? a.get("config") + ": " : "",
                                            a.has("mode") && a.has("config") ? "--mode: " : "", cfg.error().message));
  if (a.has("mode")) cj["mode"] = a.get("mode");
  if (a.has("target")) cfg->budget.target_speedup = a.number<double>("target", 0, limits::target_speedup);

  // Rounds: --rounds, else the configuration's, else what the corpus recorded
  // (the suite: 3 per task) or 10 for the procedural corpus (generated to fit).
  programs::corpus_choice cc;
  cc.dir = programs::corpus_dir(a.has("corpus") ? std::optional<std::string>(a.get("corpus")) : std::nullopt);
  cc.seed = a.number<std::uint64_t>("corpus-seed", 1);
  cc.max_tasks = a.number<int>("tasks", 0, detail::in(1, 10'000));
  const bool rounds_given = a.has("rounds") || (cj.contains("budget") && cj["budget"].contains("max_rounds"));
  if (a.has("rounds")) cfg->budget.max_rounds = a.number<int>("rounds", 10, limits::rounds);
  else if (!rounds_given) cfg->budget.max_rounds = 10;
  cc.params.rounds = std::max(cc.params.rounds, cfg->budget.max_rounds);
  auto corpus = programs::load_or_generate(cc);
  if (!corpus) throw std::invalid_argument(corpus.error().message);
  if (cc.dir && !rounds_given) cfg->budget.max_rounds = std::max(1, programs::recorded_rounds(*corpus));

  const fs::path out = a.get("out", "specgen-out");
  // One run per output directory, from before its journal is read until its results are written.
  auto out_lock = programs::out_dir_lock::acquire(out);
  if (!out_lock) throw std::invalid_argument(out_lock.error().message);
  programs::run_options o;
  o.sim.devices = a.number<int>("devices", 4, limits::devices);
  if (a.has("decode-rate")) {
    if (backend_name != "replay") throw std::invalid_argument("--decode-rate is the replay model's; a server decodes at its own speed");
    o.replay.decode_tokens_per_s = a.number<double>("decode-rate", o.replay.decode_tokens_per_s, detail::in(1.0, 1e5));
  }
  o.sim.seed = cfg->seed;
  o.journal = out / "journal.jsonl";
  o.resume = a.has("resume");
  if (!o.resume && fs::exists(*o.journal)) fs::remove(*o.journal);
  o.timeline = out / "timeline.json";
  const bool on_gpus = a.get("evaluator", "sim") == "gpu";
  if (a.has("evaluator") && a.get("evaluator") != "gpu" && a.get("evaluator") != "sim")
    throw std::invalid_argument(fmt::format("--evaluator {}: use sim or gpu", a.get("evaluator")));
  if (a.has("gpus") && !on_gpus) throw std::invalid_argument("--gpus needs --evaluator gpu");
#ifndef SPECGEN_RUN_GPU
  if (on_gpus)
    throw std::invalid_argument("--evaluator gpu: this specgen-run was built without the CUDA Toolkit, so it has no GPU "
                                "evaluator; rebuild where the toolkit is installed");
#endif
  if (on_gpus && backend_name != "replay")
    throw std::invalid_argument("--evaluator gpu runs with the replay backend in this version");
  // A real server streams in real time, and real GPUs evaluate in it.
  const bool real_time = a.has("real-time") || backend_name == "openai" || on_gpus;
  o.progress_every = seconds(a.number<double>("progress-every", real_time ? 2.0 : 120.0, detail::in(1.0, 86'400.0)));
  const int rounds = cfg->budget.max_rounds;
  if (!a.has("quiet")) o.progress = [rounds](const std::vector<search_progress>& p, double now) { print_progress(p, now, rounds); };

  const std::string corpus_name = cc.dir ? cc.dir->string() : fmt::format("procedural (seed {})", cc.seed);
  if (on_gpus)
    fmt::print("specgen-run: {} task(s) of {}, mode {}, {} round(s), backend {}, evaluator: the GPU pool (real time)\n",
               corpus->tasks.size(), corpus_name, cj.value("mode", std::string("specgen")), rounds, backend_name);
  else
    fmt::print("specgen-run: {} task(s) of {}, mode {}, {} round(s), backend {}, evaluator: simulated device ({} GPUs, {} "
               "time, answering from the corpus's measured cost table)\n",
               corpus->tasks.size(), corpus_name, cj.value("mode", std::string("specgen")), rounds, backend_name,
               o.sim.devices, real_time ? "real" : "virtual");
  const nlohmann::json config_json = to_json(*cfg);
  nlohmann::json backend_json;  // what the OpenAI backend did; null for replay
  expected<run_result, programs::run_error> r;
#ifdef SPECGEN_RUN_OPENAI
  if (openai_cfg) {
    event_loop<steady_clock> loop;
    auto model = openai::openai_backend::create(loop, *openai_cfg);
    if (!model) throw std::runtime_error(model.error().message);
    print_server((*model)->server(), (*model)->config());
    r = programs::run_corpus_with(loop, **model, *corpus, std::move(*cfg), o);
    backend_json = openai_summary(**model);
  }
#endif
  if (backend_name == "replay" && on_gpus) {
#ifdef SPECGEN_RUN_GPU
    r = run_on_gpus(a, *corpus, std::move(*cfg), o);
#endif
  } else if (backend_name == "replay") {
    r = real_time ? programs::run_corpus<steady_clock>(*corpus, std::move(*cfg), o)
                  : programs::run_corpus<virtual_clock>(*corpus, std::move(*cfg), o);
  }
  if (!r && r.error().why == programs::run_error::kind::other_run)
    throw std::invalid_argument(fmt::format(
        "{}. With specgen-run: give the --corpus, --tasks, --mode, --config, --rounds, --seed and --target the run "
        "started with, or run without --resume into a new --out",
        r.error().message));
  if (!r && r.error().why == programs::run_error::kind::refused) throw std::invalid_argument(r.error().message);
  if (!r) throw std::runtime_error(r.error().message);

  nlohmann::json results = *r;
  results["config"] = config_json;
  if (!backend_json.is_null()) results["backend"] = backend_json;
  results["corpus"] = corpus_name;
  results["evaluator"] = on_gpus ? "gpu_pool" : "simulated_device";
  {
    std::ofstream f(out / "results.json");
    f << results.dump(2) << '\n';
    if (!f) throw std::runtime_error(fmt::format("cannot write {}", (out / "results.json").string()));
  }
  fmt::print("\n{:<26} {:>6} {:>8} {:>9} {:>9} {:>10}  {}\n", "task", "rounds", "best", "profiled", "forks", "tokens", "end");
  for (const auto& s : r->searches)
    fmt::print("{:<26} {:>6} {:>7.2f}x {:>9} {:>9} {:>10}  {}\n", s.task, s.rounds, s.best_speedup, s.profiled, s.forks,
               tokens_text(s.generated_tokens), s.end_reason);
  fmt::print("\nend-to-end {:.1f} s, {} kernels profiled, pool utilisation {:.1f}%{}, geomean best speedup {:.2f}x\n",
             r->e2e_seconds, r->profiled_kernels, 100 * r->pool_utilization,
             r->pool_utilization_whole_run ? "" : " (this segment only: an earlier one was killed)", r->best_speedup_geomean);
  if (r->segments.size() > 1)
    fmt::print("the run was resumed: {} segments, its figures cover all of them (timeline.json shows the last)\n",
               r->segments.size());
  fmt::print("wrote {}, {}, {}\n", (out / "results.json").string(), o.journal->string(), o.timeline->string());
  // Failed streams are reported; a search none of whose streams ran is a failed run.
  std::string failures, dead;
  const search_result* first_dead = nullptr;
  for (const auto& s : r->searches) {
    if (s.stream_failures > 0) failures += fmt::format("{}search {} ({}): {}", failures.empty() ? "" : ", ", s.search, s.task, s.stream_failures);
    if (s.every_stream_failed()) {
      dead += fmt::format("{}search {} ({})", dead.empty() ? "" : ", ", s.search, s.task);
      if (!first_dead) first_dead = &s;
    }
  }
  if (r->stream_failures > 0)
    fmt::print("{} stream(s) failed: {} (each error is in the journal)\n", r->stream_failures, failures);
  if (first_dead) {
    fmt::print(stderr, "specgen-run: error: every stream of {} failed, so it produced nothing; the first error: {}\n", dead,
               first_dead->first_stream_error);
    return 1;
  }
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
