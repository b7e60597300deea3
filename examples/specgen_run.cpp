// specgen-run: run a kernel-optimisation suite with speculative generation.
//
// With no arguments it runs the bundled suite (tasks/suite: 20 tasks, their
// replay traces and the cost table measured on an H200) in `specgen` mode on
// the simulated device, in virtual time, and writes results.json,
// journal.jsonl and timeline.json under ./specgen-out. `--evaluator gpu`
// evaluates every candidate on the real GPUs instead. `--backend openai
// --evaluator gpu --task-files F...` is the whole product: a served model
// writes kernels for one's own tasks and the GPUs judge them, in real time.
// `mpirun -np N specgen-run --evaluator mpi ...` spreads the evaluation over
// the GPUs of the job's hosts: rank 0 searches, the other ranks evaluate.
#include "support/cli.hpp"
#include "support/out_dir.hpp"
#include "support/world.hpp"

#include <specgen/modes.hpp>
#include <specgen/report.hpp>
#include <specgen/results.hpp>
#ifdef SPECGEN_RUN_OPENAI
#include <specgen/backend/openai.hpp>
#endif
#ifdef SPECGEN_RUN_GPU
#include <specgen/gpu/evaluation.hpp>
#include <specgen/gpu/device_info.hpp>
#endif
#ifdef SPECGEN_RUN_MPI
#include <specgen/mpi/gpu_worker.hpp>
#include <specgen/mpi/pool.hpp>
#endif

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>

namespace fs = std::filesystem;
using namespace specgen;
using namespace specgen::policy;

namespace {

/// Every option, with its help text (`specgen-run --help`).
void declare(programs::options& o) {
  o.group("Suite and model")
      .list("task-files", "PATH",
            "one's own tasks: task files (docs/task-format.md) and\n"
            "directories of them (every *.json, by file name); takes the\n"
            "values up to the next --option, and may be repeated. Task\n"
            "names must be unique. With --backend openai --evaluator gpu\n"
            "(task files have no recorded traces to replay)")
      .value("corpus", "DIR",
             "a replay corpus (tasks/, traces/, cost_table.json); default:\n"
             "the bundled suite (tasks/suite, 20 tasks); \"procedural\" for\n"
             "the generated corpus. With --backend openai only its tasks/\n"
             "are read")
      .value("corpus-seed", "N", "seed of the procedural corpus (default 1)")
      .value("tasks", "N", "run only the first N tasks (1 to 10000)")
      .value("backend", "NAME",
             "replay (default): the model replays the corpus's recorded\n"
             "traces; openai: a vLLM, SGLang or other OpenAI-compatible\n"
             "server writes the kernels (with --evaluator gpu; real time)")
      .value("decode-rate", "R",
             "the replay model's decode speed in tokens/s, 1 to 100000\n"
             "(default 70, the calibrated speed of a large reasoning model\n"
             "on an H200)");
  o.group("Search")
      .value("mode", "MODE",
             "sequential, parallel, evolve, specgen (default),\n"
             "parallel+specgen, evolve+specgen, +spec, +elastic, +priority, +kv")
      .value("config", "FILE",
             "JSON engine configuration (see docs/policies.md); --rounds\n"
             "and --seed override it; --mode replaces its \"mode\", and is\n"
             "refused if the file sets a strategy, trigger, termination,\n"
             "pool or kv other than the mode's")
      .value("rounds", "N",
             "iterations per task, 1 to 10000 (default: the rounds the\n"
             "corpus recorded, 3 for the suite; 10 for the procedural corpus\n"
             "and with --backend openai)")
      .value("seed", "N", "run seed (default 1)")
      .value("target", "X",
             "target speedup for seconds_to_target, 0.001 to 1000\n"
             "(default 0: none)");
  o.group("Evaluation")
      .value("evaluator", "KIND",
             "sim (default): the simulated device, answering from the\n"
             "corpus's cost table measured on an H200 (it knows only the\n"
             "kernels it measured: replay backend only); gpu: the GPU pool,\n"
             "compiling, validating and profiling every candidate on real\n"
             "GPUs (real time; the replay model at its calibrated speed);\n"
             "mpi: the GPUs of every host of an MPI job, started with\n"
             "mpirun -np N (rank 0 searches, every other rank evaluates on\n"
             "its host's GPUs; docs/distributed.md)")
      .value("gpus", "LIST",
             "--evaluator gpu: the GPUs to use, e.g. 0,1 (default: all);\n"
             "mpi: the GPUs of each host, shared by its worker ranks")
      .flag("hardware-metrics",
            "--evaluator gpu: also collect CUPTI's hardware counters in each\n"
            "profile (DRAM, L2, SM throughput, occupancy; 8 replays more per\n"
            "profile; needs GPU counter access) and show them in the feedback")
      .value("devices", "N", "--evaluator sim: simulated GPUs, 1 to 1024 (default 4)")
      .flag("real-time", "run at wall-clock speed instead of virtual time")
      .value("stand-in-worker", "PROGRAM",
             "for testing without a GPU: --evaluator gpu runs its jobs in\n"
             "PROGRAM (specgen-fake-worker, built with the tests), which\n"
             "scripts verdicts by kernel name and measures nothing; the GPUs\n"
             "are --gpus, or one. Never for results");
  o.group("OpenAI backend (--backend openai; docs/backends.md)")
      .list("base-url", "URL",
            "the server, e.g. http://127.0.0.1:8000; several servers of the\n"
            "same model (one per node) act as one: repeat the option or give\n"
            "a comma list")
      .value("model", "NAME", "the served model name")
      .value("preset", "NAME",
             "model family: auto (default: from the model name), deepseek-r1,\n"
             "deepseek-v3, qwen3, glm-4.5, generic")
      .value("server", "KIND", "auto (default: asks the server), vllm, sglang or openai")
      .value("api-key-env", "VAR", "the environment variable that holds the API key")
      .value("openai-config", "F",
             "a JSON backend configuration (docs/backends.md); the flags\n"
             "above override it");
  o.group("Output")
      .value("out", "DIR",
             "results.json, journal.jsonl, timeline.json (default specgen-out);\n"
             "one run at a time: a second run on DIR exits with status 2")
      .flag("report",
            "also write report.html in --out at the end: the run's plots in\n"
            "one self-contained page (specgen-report does the same later)")
      .flag("resume",
            "continue the run whose journal is in --out, given the flags it\n"
            "started with (other tasks, configuration or seed are refused)")
      .flag("check",
            "check the flags and the tasks, reach the server and start the\n"
            "GPU pool, say what was found, and exit without searching\n"
            "(nothing is written)")
      .value("progress-every", "S",
             "seconds of (virtual) time between progress lines, 1 to 86400\n"
             "(default 120; 2 with --real-time)")
      .flag("quiet", "no progress lines");
}

constexpr const char* footer_text = R"(Backends and evaluators:
  --backend replay --evaluator sim   (the default) recorded kernels, simulated
                                     device, virtual time
  --backend replay --evaluator gpu   recorded kernels judged on real GPUs
  --backend openai --evaluator gpu   a served model's kernels judged on real GPUs:
                                     one's own tasks (--task-files), a corpus's
                                     tasks or the suite's
  --backend openai --evaluator sim   refused: the simulated device has no honest
                                     verdict for a kernel it never measured
  mpirun -np N specgen-run --evaluator mpi ...
                                     either backend, judged on the GPUs of the
                                     MPI job's worker ranks (rank 0 searches)

Exit status: 0 when every search ran (failed streams are counted in the summary and
results.json); 1 when the run failed, or every stream of a search failed; 2 for bad
flags or task files, a refused combination, an output directory in use, or a
--resume that does not match the journal.)";

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
nlohmann::json read_config_file(const programs::options& a, const std::string& flag) {
  auto j = detail::read_json_file(a.get(flag), detail::file_kinds::config);
  if (!j) throw std::invalid_argument(fmt::format("--{}: {}", flag, j.error().what()));
  if (!j->is_object())
    throw std::invalid_argument(fmt::format("--{}: {}: must be a JSON object {{...}}, got {}", flag, a.get(flag), j->type_name()));
  return std::move(*j);
}

#ifdef SPECGEN_RUN_OPENAI
/// The backend's configuration: --openai-config, then the flags on top.
openai::openai_config openai_config_from(const programs::options& a) {
  nlohmann::json j = nlohmann::json::object();
  if (a.has("openai-config")) j = read_config_file(a, "openai-config");
  const std::pair<const char*, const char*> flags[] = {
      {"model", "model"}, {"preset", "preset"}, {"server", "server"}, {"api-key-env", "api_key_env"}};
  for (const auto& [flag, key] : flags)
    if (a.has(flag)) j[key] = a.get(flag);
  if (a.has("base-url")) {  // replaces the file's server or servers
    std::vector<std::string> urls;
    for (const auto& v : a.values("base-url"))
      for (auto& u : programs::split_list(v)) urls.push_back(std::move(u));
    j.erase("base_url");
    j.erase("base_urls");
    if (urls.size() == 1) j["base_url"] = urls.front();
    else j["base_urls"] = urls;
  }
  auto c = openai::config_from_json(j);
  if (!c) throw std::invalid_argument(c.error().what());
  return *c;
}

void print_server(const openai::server_info& s, const openai::openai_config& c) {
  std::vector<std::string> shown;
  for (const auto& url : c.servers()) shown.push_back(openai::redact_url(url));
  fmt::print("             {} server{} at {}, model {}, preset {}; forks send {}\n", s.kind, shown.size() > 1 ? "s" : "",
             fmt::join(shown, ", "), c.model, s.family.name,
             s.token_ids_note.empty() ? std::string("token ids where the stream has them") : "text (" + s.token_ids_note + ")");
  for (const auto& why : s.left_out) fmt::print("             left out for now (it rejoins when it answers): {}\n", why);
}

/// Per server: what it ran, and whether it is in rotation (printed when there are several).
nlohmann::json instances_json(const openai::openai_backend& b) {
  nlohmann::json out = nlohmann::json::array();
  const auto in = b.instances();
  for (const auto& i : in) {
    if (in.size() > 1)
      fmt::print("openai: {}: {} reasoning streams, {} forks{}\n", i.base_url, i.reasoning_streams, i.forks,
                 i.in_rotation ? "" : fmt::format(", out of rotation ({})", i.out_reason));
    out.push_back({{"base_url", i.base_url}, {"in_rotation", i.in_rotation}, {"out_reason", i.out_reason},
                   {"reasoning_streams", i.reasoning_streams}, {"forks", i.forks}, {"times_out", i.times_out}});
  }
  return out;
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
          {"retries", st.retries}, {"stream_errors", st.stream_errors}, {"cancels", st.cancels},
          {"instances", instances_json(b)}};
}
#endif

/// What runs: the backend, the evaluator and where the tasks come from. Every
/// combination is decided here, and a refused one says what to use instead.
struct run_plan {
  bool openai = false;   ///< --backend openai (else replay)
  bool on_gpus = false;  ///< --evaluator gpu or mpi (else the simulated device)
  bool mpi = false;      ///< --evaluator mpi: the GPU pools of an MPI job's worker ranks
  bool stand_in = false; ///< --stand-in-worker: the GPU pool's jobs run in a stand-in, verdicts scripted
  std::vector<fs::path> task_files{};
};

run_plan choose_run(const programs::options& a) {
  run_plan p;
  const std::string backend = a.get("backend", "replay");
  if (backend != "replay" && backend != "openai") throw std::invalid_argument(fmt::format("--backend {}: use replay or openai", backend));
  const std::string evaluator = a.get("evaluator", "sim");
  if (evaluator != "sim" && evaluator != "gpu" && evaluator != "mpi")
    throw std::invalid_argument(fmt::format("--evaluator {}: use sim, gpu or mpi", evaluator));
  p.openai = backend == "openai";
  p.mpi = evaluator == "mpi";
  p.on_gpus = evaluator == "gpu" || p.mpi;
  p.stand_in = a.has("stand-in-worker");
  for (const auto& f : a.values("task-files")) p.task_files.emplace_back(f);
  for (const char* flag : {"base-url", "model", "preset", "server", "api-key-env", "openai-config"})
    if (a.has(flag) && !p.openai) throw std::invalid_argument(fmt::format("--{} needs --backend openai", flag));

  if (a.has("task-files") && a.has("corpus"))
    throw std::invalid_argument("--task-files and --corpus: give one or the other (task files are tasks alone; a corpus "
                                "directory holds tasks/ with their recorded traces and cost table)");
  if (p.openai && !p.on_gpus)
    throw std::invalid_argument(
        "--backend openai needs --evaluator gpu: the simulated device answers only for the kernels its cost table "
        "measured, so a model's new kernels cannot get an honest verdict there. Use --evaluator gpu on a machine with "
        "GPUs, or --backend replay to replay recorded kernels on the simulated device");
  if (a.has("task-files") && !p.openai)
    throw std::invalid_argument(
        "--task-files needs --backend openai: the replay backend plays the traces recorded for a corpus, and task files "
        "have none. Use --corpus DIR for a corpus with traces, or --backend openai --evaluator gpu to have a served "
        "model write kernels for these tasks");
  if (p.openai && a.get("corpus") == "procedural")
    throw std::invalid_argument("--corpus procedural is generated for the replay backend; with --backend openai give "
                                "--task-files, a --corpus DIR (its tasks are read), or neither for the bundled suite's tasks");
  if (a.has("decode-rate") && p.openai)
    throw std::invalid_argument("--decode-rate is the replay model's; a server decodes at its own speed");
  if (a.has("devices") && p.on_gpus)
    throw std::invalid_argument("--devices is the simulated device's number of GPUs; with --evaluator gpu choose the GPUs with --gpus");
  if (a.has("gpus") && !p.on_gpus) throw std::invalid_argument("--gpus needs --evaluator gpu");
  if (a.has("hardware-metrics") && !p.on_gpus) throw std::invalid_argument("--hardware-metrics needs --evaluator gpu");
  if (p.stand_in && !p.on_gpus) throw std::invalid_argument("--stand-in-worker needs --evaluator gpu");
  return p;
}

/// Refuses what this build of specgen-run cannot do (checked after the tasks
/// load, so a task file's errors are reported by every build).
void check_build([[maybe_unused]] const run_plan& p) {
#ifndef SPECGEN_RUN_OPENAI
  if (p.openai)
    throw std::invalid_argument("--backend openai: this specgen-run was built without libcurl (install libcurl4-openssl-dev and rebuild)");
#endif
#ifndef SPECGEN_RUN_GPU
  if (p.on_gpus)
    throw std::invalid_argument(fmt::format("--evaluator {}: this specgen-run was built without the CUDA Toolkit, so it "
                                            "has no GPU evaluator; rebuild where the toolkit is installed",
                                            p.mpi ? "mpi" : "gpu"));
#endif
#ifndef SPECGEN_RUN_MPI
  if (p.mpi)
    throw std::invalid_argument("--evaluator mpi: this specgen-run was built without MPI (install libopenmpi-dev and "
                                "openmpi-bin, and rebuild)");
#endif
}

/// The evaluator as results.json and the startup line name it.
std::string evaluator_name(const run_plan& p) {
  if (!p.on_gpus) return "simulated_device";
  const std::string pool = p.mpi ? "mpi_pool" : "gpu_pool";
  return p.stand_in ? pool + " (stand-in worker: scripted verdicts, not measured)" : pool;
}

#ifdef SPECGEN_RUN_GPU
/// What a stand-in worker is said to run on: an H200 as the driver describes
/// one (the compiler targets its architecture, the roofline check uses its
/// bandwidth). Nothing runs on it.
gpu::device_info stand_in_device() {
  gpu::device_info d;
  d.name = "stand-in (no GPU)";
  d.sm_major = 9;
  d.sm_minor = 0;
  d.arch = "sm_90a";
  d.l2_bytes = std::int64_t{50} << 20;
  d.memory_bytes = std::int64_t{141} << 30;
  d.multiprocessors = 132;
  d.peak_dram_gbps = 4800;
  return d;
}

/// The GPU pool's configuration from --gpus and --stand-in-worker. On real
/// GPUs every index must be one of this machine's (default: all of them). A
/// stand-in worker needs no GPU: its devices are --gpus, or device 0.
gpu::pool_config pool_config_from(const programs::options& a, const run_plan& p) {
  gpu::pool_config pc;
  int n = std::numeric_limits<int>::max();
  if (p.stand_in) {
    const fs::path w = a.get("stand-in-worker");
    std::error_code ec;
    if (!fs::is_regular_file(w, ec))
      throw std::invalid_argument(fmt::format("--stand-in-worker {}: not a program (no such file)", w.string()));
    pc.session.worker_program = fs::absolute(w, ec).string();
    pc.session.assumed_device = stand_in_device();
  } else {
    auto count = gpu::device_count();
    if (!count || *count == 0)
      throw std::runtime_error(fmt::format("--evaluator gpu: no GPU: {} (to try the flags and the tasks without a GPU: "
                                           "--stand-in-worker, see --help)",
                                           count ? "the driver reports no devices" : count.error().message));
    n = *count;
  }
  if (a.has("gpus")) {
    for (const auto& d : programs::split_list(a.get("gpus"))) {
      int index = -1;
      const auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), index);
      if (ec != std::errc{} || end != d.data() + d.size() || index < 0 || index >= n)
        throw std::invalid_argument(p.stand_in ? fmt::format("--gpus: '{}' is not a GPU index (0, 1, ...)", d)
                                               : fmt::format("--gpus: '{}' is not a GPU index (this machine has {})", d, n));
      pc.devices.push_back(index);
    }
    if (pc.devices.empty()) throw std::invalid_argument("--gpus: give GPU indices, e.g. 0,1");
  }
  if (p.stand_in && pc.devices.empty()) pc.devices = {0};
  // CUPTI's hardware counters (DRAM, L2 and SM throughput, occupancy) in each profile and in the
  // next prompt's feedback; they need GPU counter access, or each profile says why they are missing.
  pc.session.profile.hardware_metrics = a.has("hardware-metrics");
  return pc;
}

/// Start the GPU pool on `loop` and say what it runs on.
std::unique_ptr<gpu::gpu_pool> start_pool(event_loop<steady_clock>& loop, gpu::pool_config pc, const run_plan& p) {
  const std::string worker = pc.session.worker_program;
  auto pool = gpu::gpu_pool::create(loop, std::move(pc));
  if (!pool) throw std::runtime_error(fmt::format("cannot start the GPU pool: {}", pool.error().what()));
  std::string names;
  for (int i = 0; i < (*pool)->devices(); ++i)
    names += fmt::format("{}{} ({})", i ? ", " : "", (*pool)->device(i).index, (*pool)->device(i).name);
  if (p.stand_in)
    fmt::print("             {} device(s) in the pool, every job in the stand-in worker {}: verdicts are scripted, "
               "nothing is measured\n", (*pool)->devices(), worker);
  else
    fmt::print("             {} GPU(s) in the pool: {}\n", (*pool)->devices(), names);
  return std::move(*pool);
}
#endif

#if defined(SPECGEN_RUN_GPU) && defined(SPECGEN_RUN_MPI)
/// A worker rank of --evaluator mpi: its share of its host's GPUs (or of the
/// stand-in's devices) in a GPU pool, serving rank 0's jobs until rank 0 says
/// stop. One that cannot start its pool tells rank 0 why. Prints only errors.
int serve_as_worker(const programs::options& a, const run_plan& p, const replay::corpus& c,
                    const mpi::environment& env) {
  std::optional<gpu::pool_config> config;
  expected<void, error> served;
  try {
    config = pool_config_from(a, p);
  } catch (const std::exception& e) {  // the flags this host cannot honour (--gpus, --stand-in-worker)
    served = mpi::refuse(e.what());
  }
  if (config) served = mpi::serve_gpus(env, c.tasks, std::move(*config));
  if (!served) {
    fmt::print(stderr, "specgen-run: rank {}: {}\n", env.rank(), served.error().what());
    return 1;
  }
  return 0;
}

/// Rank 0's pool over the worker ranks. A lost rank is said on stderr and
/// journaled through `sink` (set while the run lasts).
std::unique_ptr<mpi::mpi_pool> start_mpi_pool(executor& loop, std::shared_ptr<programs::evaluator_event_sink> sink) {
  mpi::pool_config pc;
  pc.on_rank_lost = [sink](const mpi::rank_loss& l) {
    fmt::print(stderr,
               "specgen-run: MPI rank {} lost (nothing heard from it for {:.1f} s): {} of its job(s) sent to other "
               "ranks, {} answered unjudged; {} worker rank(s) left\n",
               l.rank, static_cast<double>(l.silent.count()) / 1e3, l.resent, l.unjudged, l.ranks_left);
    if (*sink)
      (*sink)("rank_lost", {{"rank", l.rank},
                            {"silent_s", static_cast<double>(l.silent.count()) / 1e3},
                            {"resent_jobs", l.resent},
                            {"unjudged_jobs", l.unjudged},
                            {"ranks_left", l.ranks_left}});
  };
  auto pool = mpi::mpi_pool::create(loop, std::move(pc));
  if (!pool) throw std::runtime_error(fmt::format("cannot start the MPI pool: {}", pool.error().what()));
  return std::move(*pool);
}

/// Says what the MPI pool's worker ranks run on.
void print_workers(const mpi::mpi_pool& pool, const run_plan& p) {
  const auto ws = pool.workers();
  fmt::print("             MPI: {} worker rank(s), {} device(s){}\n", ws.size(), pool.devices(),
             p.stand_in ? ", every job in stand-in workers: verdicts are scripted, nothing is measured" : "");
  for (const auto& w : ws) {
    std::string devices;
    for (std::size_t d = 0; d < w.devices.size(); ++d)
      devices += fmt::format("{}{} ({})", d ? ", " : "", w.first_device + static_cast<int>(d), w.devices[d]);
    fmt::print("               rank {}{}: {}{}\n", w.rank, w.host.empty() ? "" : " on " + w.host, devices,
               w.cores > 0 ? fmt::format(", {} CPU core(s)", w.cores) : "");
  }
  // A rank bound to a core or two compiles and drives its GPUs on them, with its MPI thread polling.
  for (const auto& w : ws)
    if (w.cores > 0 && w.cores < 4)
      fmt::print("             warning: rank {} may run on {} CPU core(s) only (the MPI launcher bound it): its "
                 "compiles and GPU workers share them and evaluations slow down; start it with mpirun --bind-to none\n",
                 w.rank, w.cores);
}

/// The MPI pool in results.json: each worker rank, what it answered, what was lost.
nlohmann::json mpi_summary(const mpi::mpi_pool& pool) {
  const auto st = pool.stats();
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& w : pool.workers())
    workers.push_back({{"rank", w.rank}, {"host", w.host}, {"devices", w.devices}, {"first_device", w.first_device},
                       {"compile_slots", w.compile_slots}, {"cores", w.cores}, {"alive", w.alive}, {"jobs", w.jobs}});
  return {{"workers", workers}, {"cancelled_jobs", st.cancelled}, {"resent_jobs", st.requeued}, {"lost_ranks", st.lost_ranks}};
}
#endif

#ifdef SPECGEN_RUN_MPI
using mpi_environment = std::optional<mpi::environment>;
#else
using mpi_environment = std::optional<int>;  // no MPI in this build: never set
#endif

int run(int argc, char** argv, [[maybe_unused]] mpi_environment& mpi_env) {
  CLI::App app("Runs one speculative kernel search per task of a suite and writes the results.", "specgen-run");
  programs::configure(app);
  app.footer(footer_text);
  programs::options a(app);
  declare(a);
  if (!programs::parse(app, argc, argv)) return 0;
  const run_plan plan = choose_run(a);
  const std::string backend_name = plan.openai ? "openai" : "replay";
#ifdef SPECGEN_RUN_OPENAI
  std::optional<openai::openai_config> openai_cfg;
  if (plan.openai) openai_cfg = openai_config_from(a);
#endif

  // Configuration: a JSON file, then the flags on top.
  nlohmann::json cj = nlohmann::json::object();
  if (a.has("config")) cj = read_config_file(a, "config");
  if (a.has("seed")) cj["seed"] = a.number<std::uint64_t>("seed", 1);
  // --mode replaces the config's "mode"; a policy the config sets must then agree with it.
  auto cfg = a.has("mode") ? config_with_mode(cj, a.get("mode")) : config_from_json(cj);
  if (!cfg)
    throw std::invalid_argument(fmt::format("{}{}{}", a.has("config") ? a.get("config") + ": " : "",
                                            a.has("mode") && a.has("config") ? "--mode: " : "", cfg.error().what()));
  if (a.has("mode")) cj["mode"] = a.get("mode");
  if (a.has("target")) cfg->budget.target_speedup = a.number<double>("target", 0, limits::target_speedup);

  // The tasks: task files, a corpus (with the openai backend, its tasks alone), or the procedural corpus.
  // Rounds: --rounds, else the configuration's, else what the corpus recorded (the suite: 3 per task),
  // else 10 (the procedural corpus, generated to fit; tasks without traces).
  programs::corpus_choice cc;
  cc.task_files = plan.task_files;
  if (plan.task_files.empty()) cc.dir = programs::corpus_dir(a.has("corpus") ? std::optional<std::string>(a.get("corpus")) : std::nullopt);
  cc.tasks_only = plan.openai;
  cc.seed = a.number<std::uint64_t>("corpus-seed", 1);
  cc.max_tasks = a.number<int>("tasks", 0, detail::in(1, 10'000));
  const bool rounds_given = a.has("rounds") || (cj.contains("budget") && cj["budget"].contains("max_rounds"));
  if (a.has("rounds")) cfg->budget.max_rounds = a.number<int>("rounds", 10, limits::rounds);
  else if (!rounds_given) cfg->budget.max_rounds = 10;
  cc.params.rounds = std::max(cc.params.rounds, cfg->budget.max_rounds);
  auto corpus = programs::load_or_generate(cc);
  if (!corpus) throw std::invalid_argument(corpus.error().what());
  if (cc.dir && !cc.tasks_only && !rounds_given) cfg->budget.max_rounds = std::max(1, programs::recorded_rounds(*corpus));
  check_build(plan);

#if defined(SPECGEN_RUN_GPU) && defined(SPECGEN_RUN_MPI)
  // Every rank of an MPI job gets here with the same flags and tasks; the
  // workers evaluate, rank 0 goes on and searches.
  std::optional<event_loop<steady_clock>> mpi_loop;
  std::unique_ptr<mpi::mpi_pool> mpi_pool;
  auto rank_events = std::make_shared<programs::evaluator_event_sink>();
  if (plan.mpi) {
    mpi_env.emplace(argc, argv);
    if (mpi_env->rank() != 0) return serve_as_worker(a, plan, *corpus, *mpi_env);
    mpi_loop.emplace();
    mpi_pool = start_mpi_pool(*mpi_loop, rank_events);
  }
#endif

  programs::run_options o;
  o.sim.devices = a.number<int>("devices", 4, limits::devices);
  if (a.has("decode-rate"))
    o.replay.decode_tokens_per_s = a.number<double>("decode-rate", o.replay.decode_tokens_per_s, detail::in(1.0, 1e5));
  o.sim.seed = cfg->seed;
#ifdef SPECGEN_RUN_GPU
  std::optional<gpu::pool_config> pool_cfg;
  if (plan.on_gpus && !plan.mpi) pool_cfg = pool_config_from(a, plan);
#endif
  // A real server streams in real time, and real GPUs evaluate in it.
  const bool real_time = a.has("real-time") || plan.openai || plan.on_gpus;
  o.progress_every = seconds(a.number<double>("progress-every", real_time ? 2.0 : 120.0, detail::in(1.0, 86'400.0)));
  const int rounds = cfg->budget.max_rounds;
  if (!a.has("quiet")) o.progress = [rounds](const std::vector<search_progress>& p, double now) { print_progress(p, now, rounds); };

  std::string corpus_name;
  for (const auto& f : plan.task_files) corpus_name += (corpus_name.empty() ? "" : ", ") + f.string();
  if (plan.task_files.empty()) corpus_name = cc.dir ? cc.dir->string() : fmt::format("procedural (seed {})", cc.seed);
  const std::string what = fmt::format("specgen-run: {} task(s) {} {}, mode {}, {} round(s), backend {}", corpus->tasks.size(),
                                       plan.task_files.empty() ? "of" : "from", corpus_name,
                                       cj.value("mode", std::string("specgen")), rounds, backend_name);
  if (plan.mpi)
    fmt::print("{}, evaluator: the MPI pool{} (real time)\n", what,
               plan.stand_in ? " with stand-in workers (for testing: scripted verdicts, not measured)" : "");
  else if (plan.stand_in)
    fmt::print("{}, evaluator: the GPU pool with a stand-in worker (for testing: scripted verdicts, not measured; real time)\n", what);
  else if (plan.on_gpus)
    fmt::print("{}, evaluator: the GPU pool (real time)\n", what);
  else
    fmt::print("{}, evaluator: simulated device ({} GPUs, {} time, answering from the corpus's measured cost table)\n", what,
               o.sim.devices, real_time ? "real" : "virtual");
  const bool check = a.has("check");
  if (check)
    for (const auto& t : corpus->tasks)
      fmt::print("  task {}: {} input(s), {} output(s), {} validation shape(s), benchmark shape {}{}\n", t.name, t.inputs.size(),
                 t.outputs.size(), t.validation_shapes.size(), detail::binding_text(t.benchmark_shape),
                 t.file.empty() ? "" : " (" + t.file + ")");

  // One run per output directory, from before its journal is read until its results are written.
  const fs::path out = a.get("out", "specgen-out");
  std::optional<programs::out_dir_lock> out_lock;
  if (!check) {
    auto lock = programs::out_dir_lock::acquire(out);
    if (!lock) throw std::invalid_argument(lock.error().what());
    out_lock.emplace(std::move(*lock));
    o.journal = out / "journal.jsonl";
    o.resume = a.has("resume");
    if (!o.resume && fs::exists(*o.journal)) fs::remove(*o.journal);
    o.timeline = out / "timeline.json";
  }
  const auto checked = [&] {
    fmt::print("check passed: the flags, {} task(s){}{}; nothing was run or written\n", corpus->tasks.size(),
               plan.openai ? ", the server" : "", plan.mpi ? ", the MPI pool" : plan.on_gpus ? ", the GPU pool" : "");
    return 0;
  };

  const nlohmann::json config_json = to_json(*cfg);
  nlohmann::json backend_json;  // what the OpenAI backend did; null for replay
  nlohmann::json evaluator_json;  // the MPI pool's ranks and what they did; null otherwise
  expected<run_result, programs::run_error> r;
  if (!plan.on_gpus) {
    // The replay model and the simulated device (the openai backend needs the GPUs: choose_run).
    if (check) return checked();
    r = real_time ? programs::run_corpus<steady_clock>(*corpus, std::move(*cfg), o)
                  : programs::run_corpus<virtual_clock>(*corpus, std::move(*cfg), o);
  } else {
#ifdef SPECGEN_RUN_GPU
    // The replay model or a server, and the GPU pool (or the MPI pool), on one real-time loop.
    std::optional<event_loop<steady_clock>> local_loop;
#ifdef SPECGEN_RUN_MPI
    event_loop<steady_clock>& loop = mpi_loop ? *mpi_loop : local_loop.emplace();
#else
    event_loop<steady_clock>& loop = local_loop.emplace();
#endif
#ifdef SPECGEN_RUN_OPENAI
    std::unique_ptr<openai::openai_backend> server;
    if (plan.openai) {
      auto created = openai::openai_backend::create(loop, *openai_cfg);
      if (!created) throw std::runtime_error(created.error().what());
      server = std::move(*created);
      print_server(server->server(), server->config());
    }
#endif
    auto search = [&](auto& evaluator) {
#ifdef SPECGEN_RUN_OPENAI
      if (server) {
        r = programs::run_corpus_on(loop, *server, evaluator, *corpus, std::move(*cfg), o);
        if (r || r.error().why == programs::run_error::kind::failed) backend_json = openai_summary(*server);
        return;
      }
#endif
      replay::replay_model model(loop, corpus->traces, o.replay);
      r = programs::run_corpus_on(loop, model, evaluator, *corpus, std::move(*cfg), o);
    };
#ifdef SPECGEN_RUN_MPI
    if (mpi_pool) {
      print_workers(*mpi_pool, plan);
      if (check) return checked();
      o.evaluator_events = [rank_events](programs::evaluator_event_sink sink) { *rank_events = std::move(sink); };
      search(*mpi_pool);
      evaluator_json = mpi_summary(*mpi_pool);
    }
#endif
    if (!plan.mpi) {
      auto pool = start_pool(loop, std::move(*pool_cfg), plan);
      if (check) return checked();
      search(*pool);
    }
#endif
  }
  if (!r && r.error().why == programs::run_error::kind::other_run)
    throw std::invalid_argument(fmt::format(
        "{}. With specgen-run: give the --task-files or --corpus, --tasks, --mode, --config, --rounds, --seed and "
        "--target the run started with, or run without --resume into a new --out",
        r.error().message));
  if (!r && r.error().why == programs::run_error::kind::refused) throw std::invalid_argument(r.error().message);
  if (!r) throw std::runtime_error(r.error().message);

  nlohmann::json results = *r;
  results["config"] = config_json;
  if (!backend_json.is_null()) results["backend"] = backend_json;
  results["corpus"] = corpus_name;
  results["evaluator"] = evaluator_name(plan);
  if (!evaluator_json.is_null()) results["mpi"] = evaluator_json;
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
  if (a.has("report")) {
    // The journal is complete (the run has ended): the report reads it as specgen-report would.
    const fs::path page = out / "report.html";
    auto runs = load_report_runs(out);
    if (!runs) throw std::runtime_error(fmt::format("the report: {}", runs.error().what()));
    std::ofstream f(page, std::ios::binary);
    f << render_report(*runs);
    if (!f) throw std::runtime_error(fmt::format("cannot write {}", page.string()));
    fmt::print("wrote {}: open it in a browser\n", page.string());
  } else {
    fmt::print("see the run: specgen-report {} (writes {}), or run with --report\n", out.string(),
               (out / "report.html").string());
  }
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
  // An MPI job's environment outlives run() so that an error is printed before
  // MPI_Finalize lets the other ranks end.
  mpi_environment mpi_env;
  try {
    return run(argc, argv, mpi_env);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "specgen-run: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "specgen-run: error: {}\n", e.what());
    return 1;
  }
}
