// The adversarial corpus (tests/gpu/README.md): kernels that try to fool the
// evaluator, and correct but unusual kernels it must accept, each with the
// verdict it has to get.
//
// Without a GPU: every task and corpus entry parses, every kernel compiles with
// NVRTC exactly when it should, and every plan resolves exactly when it should.
// With a GPU (and specgen::gpu_eval built): every entry goes through one reused
// device_session, then through evaluate_batch (the pool path), and no verdict
// may differ from the expected ones.
#include <specgen/gpu/compiler.hpp>
#include <specgen/plan.hpp>
#include <specgen/task.hpp>
#include <specgen/task_io.hpp>
#include <specgen/types.hpp>
#ifdef SPECGEN_WITH_GPU_EVAL
#include <specgen/gpu/evaluation.hpp>
#endif

#include "corpus_support.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace gpu = specgen::gpu;
using specgen::verdict_kind;
using namespace specgen_test;

namespace {

const fs::path test_dir = SPECGEN_GPU_TEST_DIR;
const fs::path tasks_dir = test_dir / "tasks";
const fs::path corpus_dir = test_dir / "corpus";

/// The attack groups the SpecGen paper lists plus the
/// crash/plan/race/guard/NaN cases and the kernels that must pass; every
/// corpus entry names one, and each must be covered.
const std::vector<std::string> attack_groups{
    "stale_output",  "degenerate", "partial", "mutates_input", "hardcoded_shape", "precision",
    "caching",       "escape_timed_region", "impossible_speedup", "guard", "race", "crash",
    "plan",          "nan",         "uninit_shared", "stated_inputs", "must_pass"};

/// A corpus entry: the common keys, its attack group and an optional known gap.
struct entry : corpus_entry {
  std::string attack{};
  std::string known_gap{};  ///< non-empty: a documented hole the evaluator does not close yet
};

entry parse_entry(const fs::path& file) {
  entry e;
  static_cast<corpus_entry&>(e) = parse_corpus_entry(file, {"attack"}, {"known_gap"});
  e.attack = e.json.at("attack").get<std::string>();
  if (std::find(attack_groups.begin(), attack_groups.end(), e.attack) == attack_groups.end())
    throw std::runtime_error(file.filename().string() + ": unknown attack group '" + e.attack + "'");
  if (e.json.contains("known_gap")) e.known_gap = e.json.at("known_gap").get<std::string>();
  return e;
}

std::vector<entry> load_corpus() {
  std::vector<entry> out;
  for (const auto& f : json_files(corpus_dir)) out.push_back(parse_entry(f));
  return out;
}

const std::map<std::string, specgen::task>& tasks() {
  static const std::map<std::string, specgen::task> all = [] {
    std::map<std::string, specgen::task> m;
    for (const auto& f : fs::directory_iterator(tasks_dir)) {
      if (f.path().extension() != ".json") continue;
      auto t = specgen::load_task(f.path());
      if (!t) throw std::runtime_error(t.error().what());
      m.emplace(f.path().filename().string(), std::move(*t));
    }
    return m;
  }();
  return all;
}

}  // namespace

TEST_CASE("every GPU test task loads and every corpus entry parses") {
  const auto& all = tasks();
  REQUIRE(all.size() >= 5);
  auto suite = specgen::load_suite(tasks_dir);  // also rejects duplicate task names
  REQUIRE(suite.has_value());

  std::vector<entry> corpus;
  REQUIRE_NOTHROW(corpus = load_corpus());
  REQUIRE(corpus.size() >= 30);
  std::set<std::string> groups, names;
  for (const auto& e : corpus) {
    INFO(e.file.string());
    CHECK(names.insert(e.name).second);
    CHECK(all.contains(e.task));
    CHECK_FALSE(e.why.empty());
    CHECK_FALSE(e.plan.empty());
    // Only kernels meant to be correct may expect ok, and caching attacks: the
    // worker resets every place they keep state in (a fresh module instance
    // per run for __device__ globals, a fill of non-zero scratch), so what is
    // left of them is an honest kernel. Other attacks never list it.
    if (expects(e, verdict_kind::ok))
      CHECK((e.attack == "must_pass" || e.attack == "escape_timed_region" || e.attack == "impossible_speedup" ||
             e.attack == "caching"));
    groups.insert(e.attack);
  }
  for (const auto& g : attack_groups) {
    INFO("attack group without an entry: " << g);
    CHECK(groups.contains(g));
  }
  for (std::size_t k = 0; k < specgen::verdict_names.size(); ++k) {
    const auto v = static_cast<verdict_kind>(k);
    INFO("no entry expects " << to_string(v));
    CHECK(std::any_of(corpus.begin(), corpus.end(), [&](const entry& e) { return expects(e, v); }));
  }
}

TEST_CASE("NVRTC compiles exactly the corpus kernels that should compile, and their plans resolve") {
  auto version = gpu::compiler::nvrtc_version();
  if (!version) {
    WARN("NVRTC not available, skipping the compile checks: " << version.error().message);
    return;
  }
  gpu::compiler nvrtc({.memory_entries = 0, .threads = 1});
  const auto& all = tasks();

  SECTION("the tasks' references and baselines") {
    for (const auto& [file, t] : all)
      for (const auto* impl : {&t.reference, &t.baseline}) {
        if (impl->is_host()) continue;
        INFO(file);
        auto r = nvrtc.compile(impl->source, {.arch = "sm_90a", .options = t.compile_options});
        REQUIRE(r.has_value());
        CHECK(plan_problem(t, impl->plan, (*r)->kernels, trust::task_plan).empty());
      }
  }

  SECTION("the corpus") {
    const auto corpus = load_corpus();
    fmt::print("NVRTC {} (sm_90a): corpus of {} entries\n", *version, corpus.size());
    fmt::print("{:<36} {:<28} {:<14} {}\n", "entry", "expected", "compile", "plan / log");
    int wrong = 0;
    for (const auto& e : corpus) {
      INFO(e.name);
      const auto& t = all.at(e.task);
      auto r = nvrtc.compile(e.source, {.arch = "sm_90a", .options = t.compile_options});
      std::string compile_text, detail;
      bool as_expected = true;
      if (!r) {
        compile_text = std::string(to_string(r.error().kind));
        detail = first_line(r.error().log.empty() ? r.error().message : r.error().log);
        as_expected = r.error().kind == gpu::compile_failure_kind::compile_error &&
                      expects(e, verdict_kind::compile_error);
      } else {
        compile_text = fmt::format("ok ({} regs)", gpu::to_report(**r).registers);
        detail = plan_problem(t, e.plan, (*r)->kernels, trust::candidate);
        if (expects(e, verdict_kind::compile_error)) as_expected = false;
        else if (expects(e, verdict_kind::invalid_plan)) as_expected = !detail.empty();
        else as_expected = detail.empty();
        if (detail.empty()) detail = "plan resolves at every shape";
      }
      fmt::print("{:<36} {:<28} {:<14} {}{}\n", e.name, expect_text(e), compile_text, detail,
                 as_expected ? "" : "   <-- NOT AS EXPECTED");
      if (!as_expected) ++wrong;
      CHECK(as_expected);
    }
    fmt::print("{} of {} entries not as expected at compile/plan time\n", wrong, corpus.size());
  }
}

#ifdef SPECGEN_WITH_GPU_EVAL

namespace {

/// $SPECGEN_SEED_OFFSET (default 0) shifts every validation and profiling
/// seed, so repeated runs of the corpus see different inputs.
std::uint64_t seed_offset() {
  const char* s = std::getenv("SPECGEN_SEED_OFFSET");
  return s && *s ? std::strtoull(s, nullptr, 10) : 0;
}

gpu::session_config test_session_config() {
  gpu::session_config c;
  if (const char* w = std::getenv("SPECGEN_WORKER"); w == nullptr || *w == '\0') c.worker_program = SPECGEN_WORKER;
  const std::uint64_t shift = 100 * seed_offset();
  for (auto& vc : c.validation.cases) vc.seed += shift;
  c.profile.seed += shift;
  c.profile.recheck_seed += shift;
  // Validation shapes are small: one second is plenty, and keeps the endless kernel short.
  c.validation.run_deadline = specgen::seconds(1);
  // Enough samples for the verdicts; the corpus is about verdicts, not precise speedups.
  c.profile.max_seconds = 3;
  c.profile.max_samples = 100;
  return c;
}

specgen::candidate to_candidate(const entry& e, const specgen::task& t, specgen::candidate_id id) {
  return specgen::candidate{.id = id, .task = t.name, .source = e.source, .plan = e.plan};
}

struct tally {
  int wrong = 0;
  int gaps_open = 0;
  void record(const entry& e, const specgen::evaluation& ev, const std::string& path) {
    const bool good = expects(e, ev.result.kind);
    std::string mark = good ? "" : "   <-- WRONG";
    if (!good && !e.known_gap.empty()) {
      mark = "   <-- KNOWN GAP (not counted): " + e.known_gap;
      ++gaps_open;
    } else if (!good) {
      ++wrong;
    }
    std::string timing;
    if (ev.timing) timing = fmt::format(" [{:.1f} us, {:.2f}x]", ev.timing->median_us, ev.timing->speedup);
    fmt::print("{:<8} {:<36} {:<28} {:<14} {}{}{}\n", path, e.name, expect_text(e), to_string(ev.result.kind),
               first_line(ev.result.summary), timing, mark);
  }
};

}  // namespace

TEST_CASE("on a GPU, every corpus entry gets its expected verdict through one device session") {
  auto session = gpu::device_session::open(test_session_config());
  if (!session) {
    fmt::print("{}\n", no_gpu_text(session.error().message));
    WARN(no_gpu_text(session.error().message));
    return;
  }
  fmt::print("device: {} ({}, {} SMs, {:.0f} GB/s peak DRAM); seed offset {}\n", (*session)->device().name,
             (*session)->device().arch, (*session)->device().multiprocessors, (*session)->device().peak_dram_gbps,
             seed_offset());
  const auto corpus = load_corpus();
  const auto& all = tasks();
  tally t;
  fmt::print("{:<8} {:<36} {:<28} {:<14} {}\n", "path", "entry", "expected", "got", "summary");
  specgen::candidate_id id = 1;
  for (const auto& e : corpus) {
    const auto& task = all.at(e.task);
    const auto ev = (*session)->evaluate(task, to_candidate(e, task, id++));
    t.record(e, ev, "session");
  }
  fmt::print("session: {} wrong verdicts, {} known gaps still open, of {} entries\n", t.wrong, t.gaps_open,
             corpus.size());
  if (t.gaps_open > 0) WARN(t.gaps_open << " known gap(s) of the evaluator still open; see tests/gpu/README.md");
  CHECK(t.wrong == 0);
}

TEST_CASE("on a GPU, the whole corpus through evaluate_batch gets the same verdicts") {
  const auto corpus = load_corpus();
  const auto& all = tasks();
  std::map<std::string, std::vector<const entry*>> by_task;
  for (const auto& e : corpus) by_task[e.task].push_back(&e);

  gpu::pool_config pool{.devices = {}, .session = test_session_config()};
  tally t;
  bool header = false;
  specgen::candidate_id id = 1000;
  for (const auto& [file, entries] : by_task) {
    const auto& task = all.at(file);
    std::vector<specgen::candidate> cands;
    for (const auto* e : entries) cands.push_back(to_candidate(*e, task, id++));
    std::size_t progress_calls = 0;
    auto r = gpu::evaluate_batch(pool, task, cands, [&](std::size_t, const specgen::evaluation&) { ++progress_calls; });
    if (!r) {
      fmt::print("{}\n", no_gpu_text(r.error().message));
      WARN("evaluate_batch: " << r.error().message);
      return;
    }
    if (!header) fmt::print("{:<8} {:<36} {:<28} {:<14} {}\n", "path", "entry", "expected", "got", "summary");
    header = true;
    REQUIRE(r->size() == entries.size());
    CHECK(progress_calls == entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      CHECK((*r)[i].id == cands[i].id);
      t.record(*entries[i], (*r)[i], "batch");
    }
  }
  fmt::print("batch: {} wrong verdicts, {} known gaps still open, of {} entries\n", t.wrong, t.gaps_open,
             corpus.size());
  CHECK(t.wrong == 0);
}

#else

TEST_CASE("on a GPU, every corpus entry gets its expected verdict") {
  fmt::print("GPU part not built: specgen::gpu_eval is not available in this build\n");
  WARN("GPU part not built: specgen::gpu_eval is not available in this build");
}

#endif
