// Hand-written candidates for the KernelBench test problems
// (tests/kernelbench/problems), judged against the tasks the importer makes
// of them. tests/kernelbench/kernels holds, for each task, a correct kernel
// (expect ok) and one with a realistic bug (expect wrong_result), in the
// corpus entry format of tests/gpu (tests/gpu/README.md) with "task" naming a
// task, not a file.
//
// Without a GPU: every entry parses and names one of the seven tasks, each
// task has a correct and a wrong entry, every source compiles with NVRTC
// (sm_90a), every plan parses, obeys a candidate's rules and launches only
// kernels the source defines. When $SPECGEN_KB_TASKS names the imported task
// directory, every plan must also resolve at every shape of its task.
// With a GPU (and specgen::gpu_eval built) and $SPECGEN_KB_TASKS set: every
// entry is validated, then profiled when it passes, through one
// device_session; its verdict must be the expected one and a correct entry
// must have been timed. One line per entry (verdict, wall seconds of
// validate and of profile), then the median validate latency; the same as
// JSON to $SPECGEN_KB_RESULTS when set.
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
#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace gpu = specgen::gpu;
using specgen::verdict_kind;
using namespace specgen_test;

namespace {

const fs::path kernels_dir = fs::path(SPECGEN_KB_TEST_DIR) / "kernels";

/// The tasks the importer makes of tests/kernelbench/problems/level*/.
const std::array<std::string, 7> kb_tasks{
    "L1_19_ReLU",         "L1_2_Matmul_fp16",         "L1_47_Sum_reduction_over_a_dimension",
    "L1_51_Argmax_over_a_dimension", "L2_9_Matmul_ReLU_Scale", "L2_1_Conv2D_ReLU_BiasAdd",
    "L3_1_MLP"};

std::vector<corpus_entry> load_entries() {
  std::vector<corpus_entry> out;
  for (const auto& f : json_files(kernels_dir)) out.push_back(parse_corpus_entry(f));
  return out;
}

/// $SPECGEN_KB_TASKS, or "" when unset or empty.
std::string tasks_dir() {
  const char* d = std::getenv("SPECGEN_KB_TASKS");
  return d ? std::string(d) : std::string();
}

/// The imported tasks by name, or why not.
specgen::expected<std::map<std::string, specgen::task>, std::string> load_kb_tasks(const std::string& dir) {
  auto suite = specgen::load_suite(dir);
  if (!suite) return specgen::unexpected(std::string(suite.error().what()));
  std::map<std::string, specgen::task> m;
  for (auto& t : *suite) m.emplace(t.name, std::move(t));
  return m;
}

}  // namespace

TEST_CASE("every KernelBench kernel entry parses and names one of the seven tasks") {
  std::vector<corpus_entry> entries;
  REQUIRE_NOTHROW(entries = load_entries());
  REQUIRE(entries.size() == 2 * kb_tasks.size());
  std::set<std::string> names;
  std::map<std::string, std::set<verdict_kind>> expected_by_task;
  for (const auto& e : entries) {
    INFO(e.file.string());
    CHECK(names.insert(e.name).second);
    CHECK(std::find(kb_tasks.begin(), kb_tasks.end(), e.task) != kb_tasks.end());
    CHECK_FALSE(e.why.empty());
    CHECK(e.expect.size() == 1);
    for (auto v : e.expect) expected_by_task[e.task].insert(v);
    // <task>.correct expects ok, <task>.wrong a wrong result.
    if (e.name == e.task + ".correct") CHECK(expects(e, verdict_kind::ok));
    else if (e.name == e.task + ".wrong") CHECK(expects(e, verdict_kind::wrong_result));
    else FAIL_CHECK("an entry is named <task>.correct or <task>.wrong: " << e.name);
  }
  for (const auto& t : kb_tasks) {
    INFO("task " << t);
    CHECK(expected_by_task[t] == std::set<verdict_kind>{verdict_kind::ok, verdict_kind::wrong_result});
  }
}

TEST_CASE("every KernelBench kernel compiles with NVRTC and its plan fits the source") {
  auto version = gpu::compiler::nvrtc_version();
  if (!version) {
    WARN("NVRTC not available, skipping the compile checks: " << version.error().message);
    return;
  }
  // With the imported tasks at hand, plans are also resolved at every shape.
  std::map<std::string, specgen::task> tasks;
  if (const auto dir = tasks_dir(); !dir.empty()) {
    auto loaded = load_kb_tasks(dir);
    INFO("SPECGEN_KB_TASKS=" << dir);
    REQUIRE(loaded.has_value());
    tasks = std::move(*loaded);
  }
  gpu::compiler nvrtc({.memory_entries = 0, .threads = 1});
  const auto entries = load_entries();
  fmt::print("NVRTC {} (sm_90a): {} KernelBench entries; plans {}\n", *version, entries.size(),
             tasks.empty() ? "parsed (set SPECGEN_KB_TASKS to resolve them at the tasks' shapes)"
                           : "resolved at every shape of the imported tasks");
  fmt::print("{:<48} {:<14} {:<14} {}\n", "entry", "expected", "compile", "plan");
  int failed = 0;
  for (const auto& e : entries) {
    INFO(e.name);
    const auto t = tasks.find(e.task);
    if (!tasks.empty()) CHECK(t != tasks.end());
    const std::vector<std::string> options = t != tasks.end() ? t->second.compile_options : std::vector<std::string>{};
    auto r = nvrtc.compile(e.source, {.arch = "sm_90a", .options = options});
    std::string compile_text, detail;
    if (!r) {
      compile_text = std::string(to_string(r.error().kind));
      detail = first_line(r.error().log.empty() ? r.error().message : r.error().log);
    } else {
      compile_text = fmt::format("ok ({} regs)", gpu::to_report(**r).registers);
      detail = t != tasks.end() ? plan_problem(t->second, e.plan, (*r)->kernels, trust::candidate)
                                : plan_problem(e.plan, (*r)->kernels, trust::candidate);
    }
    const bool good = r.has_value() && detail.empty();
    if (good) detail = t != tasks.end() ? "resolves at every shape" : "parses, kernels defined";
    fmt::print("{:<48} {:<14} {:<14} {}{}\n", e.name, expect_text(e), compile_text, detail,
               good ? "" : "   <-- FAILED");
    if (!good) ++failed;
    CHECK(good);
  }
  fmt::print("{} of {} entries failed to compile or to fit their plan\n", failed, entries.size());
}

#ifdef SPECGEN_WITH_GPU_EVAL

namespace {

gpu::session_config kb_session_config() {
  gpu::session_config c;
  if (const char* w = std::getenv("SPECGEN_WORKER"); w == nullptr || *w == '\0') c.worker_program = SPECGEN_WORKER;
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

TEST_CASE("on a GPU, every KernelBench kernel gets its expected verdict against the imported tasks") {
  const auto dir = tasks_dir();
  if (dir.empty()) {
    fmt::print("SPECGEN_KB_TASKS is not set: no imported KernelBench tasks to judge the kernels against; "
               "skipping the GPU part\n");
    WARN("SPECGEN_KB_TASKS is not set; the GPU part of gpu_kernelbench_test is skipped");
    return;
  }
  auto loaded = load_kb_tasks(dir);
  INFO("SPECGEN_KB_TASKS=" << dir);
  REQUIRE(loaded.has_value());
  const auto& tasks = *loaded;
  for (const auto& name : kb_tasks) {
    INFO("task " << name << " is missing from " << dir);
    CHECK(tasks.contains(name));
  }

  auto session = gpu::device_session::open(kb_session_config());
  if (!session) {
    fmt::print("{}\n", no_gpu_text(session.error().message));
    WARN(no_gpu_text(session.error().message));
    return;
  }
  const auto& dev = (*session)->device();
  fmt::print("device: {} ({}, {} SMs); tasks from {}\n", dev.name, dev.arch, dev.multiprocessors, dir);
  fmt::print("{:<48} {:<14} {:<14} {:>9} {:>10} {:>9} {:>10} {:>12} {:>9}  {}\n", "entry", "expected", "got",
             "compile_s", "validate_s", "warm_s", "profile_s", "median_us", "speedup", "summary");

  const auto entries = load_entries();
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> validate_seconds;
  int wrong = 0;
  specgen::candidate_id id = 1;
  for (const auto& e : entries) {
    INFO(e.name);
    const auto t = tasks.find(e.task);
    REQUIRE(t != tasks.end());
    const specgen::candidate cand{.id = id++, .task = e.task, .source = e.source, .plan = e.plan};

    // Compiling first, so that the validation's time is the judging alone (its compile is a
    // cache hit); the first validation of a task also reads its stored reference, a second
    // one finds every case in the session's cache, as the later candidates of a search do.
    auto t0 = std::chrono::steady_clock::now();
    (void)(*session)->compile(t->second, cand);
    const double compile_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const specgen::verdict v = (*session)->validate(t->second, cand);
    const double validate_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const specgen::verdict again = (*session)->validate(t->second, cand);
    const double warm_s = seconds_since(t0);
    CHECK(again.kind == v.kind);
    validate_seconds.push_back(warm_s);

    specgen::verdict result = v;
    std::optional<specgen::measurement> timing;
    std::optional<double> profile_s;
    if (v.kind == verdict_kind::ok) {
      t0 = std::chrono::steady_clock::now();
      const specgen::evaluation ev = (*session)->profile(t->second, cand);
      profile_s = seconds_since(t0);
      result = ev.result;
      timing = ev.timing;
    }

    const bool good = expects(e, result.kind);
    if (!good) ++wrong;
    CHECK(good);
    if (expects(e, verdict_kind::ok)) {
      INFO("a correct kernel must have been timed");
      CHECK(timing.has_value());
      if (timing) CHECK(timing->median_us > 0);
    }
    fmt::print("{:<48} {:<14} {:<14} {:>9.3f} {:>10.3f} {:>9.3f} {:>10} {:>12} {:>9}  {}{}\n", e.name, expect_text(e),
               to_string(result.kind), compile_s, validate_s, warm_s, profile_s ? fmt::format("{:.3f}", *profile_s) : "-",
               timing ? fmt::format("{:.2f}", timing->median_us) : "-",
               timing ? fmt::format("{:.2f}x", timing->speedup) : "-", first_line(result.summary),
               good ? "" : "   <-- WRONG");
    nlohmann::json row{{"name", e.name},
                       {"task", e.task},
                       {"expected", expect_text(e)},
                       {"verdict", to_string(result.kind)},
                       {"summary", first_line(result.summary)},
                       {"compile_s", compile_s},
                       {"validate_s", validate_s},
                       {"validate_warm_s", warm_s},
                       {"profile_s", profile_s ? nlohmann::json(*profile_s) : nlohmann::json()}};
    if (timing) {
      row["median_us"] = timing->median_us;
      row["baseline_median_us"] = timing->baseline_median_us;
      row["baseline_of"] = timing->baseline_of;
      row["speedup"] = timing->speedup;
    }
    rows.push_back(std::move(row));
  }
  const double median_validate = median(validate_seconds);
  fmt::print("{} wrong verdicts of {} entries; median validate latency with the stored cases cached {:.3f} s\n", wrong,
             entries.size(), median_validate);
  CHECK(wrong == 0);

  if (const char* out = std::getenv("SPECGEN_KB_RESULTS"); out && *out) {
    const nlohmann::json doc{{"device", dev.name},
                             {"tasks", dir},
                             {"entries", rows},
                             {"wrong_verdicts", wrong},
                             {"median_validate_warm_s", median_validate}};
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f << doc.dump(2) << '\n';
    INFO("SPECGEN_KB_RESULTS=" << out);
    CHECK(f.good());
  }
}

#else

TEST_CASE("on a GPU, every KernelBench kernel gets its expected verdict") {
  fmt::print("GPU part not built: specgen::gpu_eval is not available in this build\n");
  WARN("GPU part not built: specgen::gpu_eval is not available in this build");
}

#endif
