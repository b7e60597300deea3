// The session's judging without a GPU or a worker (judge.hpp): each rule on
// decoded data built here, and the exact messages the verdicts carry.
#include "judge.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

using namespace specgen;
using namespace specgen::gpu;
using namespace specgen::gpu::eval_detail;

namespace {

/// c = a + b over N float32 elements (N = 1 << 20 at the benchmark shape: 12 MB moved).
task sum_task() {
  task t;
  t.name = "sum";
  t.symbols = {"N"};
  t.benchmark_shape = {{"N", 1 << 20}};
  t.validation_shapes = {{{"N", 4}}};
  t.inputs = {{.name = "a", .type = dtype::f32, .shape = {"N"}, .init = distribution::normal, .tol = {}},
              {.name = "b", .type = dtype::f32, .shape = {"N"}, .init = distribution::uniform, .tol = {}}};
  t.outputs = {{.name = "c", .type = dtype::f32, .shape = {"N"}, .init = distribution::normal, .tol = {1e-6, 1e-6}}};
  t.reference = {.source = "ref", .plan = "launch ref grid(1) block(1) args(a, b, c, N)", .host = {}};
  t.baseline = {.source = "base", .plan = "launch base grid(1) block(1) args(a, b, c, N)", .host = {}};
  return t;
}

std::vector<std::byte> floats(std::initializer_list<float> v) {
  std::vector<std::byte> out(v.size() * sizeof(float));
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

json cupti(int runs, int kernels, std::vector<double> kernel_us, std::vector<double> event_us) {
  return {{"cupti",
           {{"available", true}, {"runs", runs}, {"kernels", kernels}, {"kernel_us", kernel_us}, {"event_us", event_us}}}};
}

}  // namespace

TEST_CASE("judge: the baseline is the task's device code, else the reference, else none with a note") {
  task t = sum_task();
  CHECK(choose_baseline(t).base == &t.baseline);
  t.baseline.plan.clear();
  CHECK(choose_baseline(t).base == &t.reference);
  t.reference.plan.clear();
  auto none = choose_baseline(t);
  CHECK(none.base == nullptr);
  CHECK(none.note == "the task has no device baseline: the candidate was timed alone and the speedup is 0");
  t = sum_task();
  t.baseline = {.source = {}, .plan = {}, .host = "numpy_add"};
  auto host = choose_baseline(t);
  CHECK(host.base == nullptr);
  CHECK(host.note == "the baseline is the host callback 'numpy_add', which the worker cannot time: the candidate was "
                     "timed alone and the speedup is 0");
}

TEST_CASE("judge: a recorded baseline time gives the speedup, with a note when it is another GPU's") {
  task t = sum_task();
  t.reference = {.source = {}, .plan = {}, .host = {}, .stored = "sum.specref", .recorded = {}};
  t.baseline = {};
  auto none = choose_baseline(t);
  CHECK(none.base == nullptr);
  CHECK(none.recorded == nullptr);
  CHECK_THAT(none.note, Catch::StartsWith("the task has no baseline (its reference is stored outputs"));
  t.baseline.recorded = recorded_time{.ms = 0.5, .device = "NVIDIA H200", .what = "PyTorch 2.11.0 eager", .details = {}};
  auto recorded = choose_baseline(t);
  CHECK(recorded.recorded == &*t.baseline.recorded);
  CHECK(recorded.note.empty());

  measurement m;
  m.median_us = 125;
  std::vector<std::string> notes;
  apply_recorded(m, *t.baseline.recorded, "NVIDIA H200", notes);
  CHECK(m.baseline_median_us == Approx(500));
  CHECK(m.speedup == Approx(4));
  CHECK(m.baseline_of == "recorded: PyTorch 2.11.0 eager on NVIDIA H200");
  CHECK(notes.empty());
  apply_recorded(m, *t.baseline.recorded, "NVIDIA A100-SXM4-80GB", notes);
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("recorded on NVIDIA H200, and this GPU is NVIDIA A100-SXM4-80GB"));
}

TEST_CASE("judge: uncapped profile runs count warm-up, CUPTI, the range profiler and the checks") {
  profile_config pc;
  pc.warmup = 10;
  pc.cupti_check = true;
  pc.cupti_runs = 5;
  pc.hardware_metrics = false;
  CHECK(uncapped_profile_runs(pc, 2) == 20 + 5 + 0 + 1 + 4);
  pc.cupti_check = false;
  pc.hardware_metrics = true;
  CHECK(uncapped_profile_runs(pc, 1) == 10 + 0 + 10 + 1 + 2);
}

TEST_CASE("judge: a timing side decodes, or says what is wrong") {
  auto ok = decode_side({{"samples_us", {3.0, 1.0, 2.0}}, {"median_us", 2.0}, {"noise", 0.01}}, "candidate");
  REQUIRE(ok);
  CHECK(ok->samples_us == std::vector<double>{3.0, 1.0, 2.0});
  CHECK(ok->median_us == 2.0);
  CHECK(ok->noise == 0.01);
  CHECK(ok->spread == 0);
  CHECK(decode_side(json(1), "baseline").error().message == "\"baseline\" is not an object");
  CHECK(decode_side({{"samples_us", json::array()}}, "candidate").error().message ==
        "\"candidate.samples_us\" is missing or empty");
  CHECK(decode_side({{"samples_us", {-1.0}}, {"median_us", 1.0}}, "candidate").error().message ==
        "\"candidate.samples_us\" holds something other than a non-negative time");
  CHECK(decode_side({{"samples_us", {1.0}}, {"median_us", 0.0}}, "candidate").error().message ==
        "\"candidate.median_us\" is missing or not positive");
}

TEST_CASE("judge: the measurement takes the speedup, the worker's phases and the SM clock") {
  const timing_side cs{.samples_us = {10, 10}, .median_us = 10, .noise = 0.02, .spread = 0.5};
  const timing_side bs{.samples_us = {30}, .median_us = 30, .noise = 0, .spread = 0};
  std::vector<std::string> notes;
  const json r{{"launch_gate", true}, {"phases_s", {{"sampling", 1.5}, {"bad", "x"}}}, {"sm_clock_mhz", {{"min", 1000}, {"max", 2000}}}};
  measurement m = measure(r, cs, bs, "reference", notes);
  CHECK(notes.empty());
  CHECK(m.median_us == 10);
  CHECK(m.speedup == 3);
  CHECK(m.baseline_median_us == 30);
  CHECK(m.baseline_of == "reference");
  CHECK(m.sm_clock_mhz == 1500);
  CHECK(m.metrics.at("launch_gate") == 1.0);
  CHECK(m.metrics.at("samples") == 2.0);
  CHECK(m.metrics.at("worker_sampling_s") == 1.5);
  CHECK_FALSE(m.metrics.contains("worker_bad_s"));

  measurement alone = measure(json::object(), cs, std::nullopt, "baseline", notes);
  CHECK(alone.speedup == 0);
  CHECK(alone.baseline_of.empty());
  CHECK(notes == std::vector<std::string>{"the SM clock is unknown (NVML unavailable)"});
}

TEST_CASE("judge: a flag of a profile result with the wrong type is a read error naming its pointer") {
  const timing_side cs{.samples_us = {10}, .median_us = 10, .noise = 0, .spread = 0};
  std::vector<std::string> notes;
  CHECK_THROWS_WITH(measure({{"launch_gate", "yes"}}, cs, std::nullopt, "baseline", notes),
                    "/launch_gate: expected true or false, found string \"yes\"");
  profile_config pc;
  pc.cupti_check = true;
  pc.hardware_metrics = true;
  measurement m;
  CHECK_THROWS_WITH(judge_cupti({{"cupti", {{"available", 1}}}}, pc, 1, "profiling", m, notes),
                    "/cupti/available: expected true or false, found number 1");
  CHECK_THROWS_WITH(read_hardware_metrics({{"hardware_metrics", {{"available", "no"}}}}, pc, m, notes),
                    "/hardware_metrics/available: expected true or false, found string \"no\"");
}

TEST_CASE("judge: CUPTI's cross-check") {
  profile_config pc;
  pc.cupti_check = true;
  pc.cupti_tolerance = 0.2;
  measurement m;
  m.median_us = 100;
  std::vector<std::string> notes;
  const std::string what = "profiling the candidate at N=1048576";

  SECTION("off, absent or unavailable: a note") {
    pc.cupti_check = false;
    CHECK_FALSE(judge_cupti(json::object(), pc, 1, what, m, notes));
    pc.cupti_check = true;
    CHECK_FALSE(judge_cupti(json::object(), pc, 1, what, m, notes));
    CHECK_FALSE(judge_cupti({{"cupti", {{"available", false}, {"reason", "no permission"}}}}, pc, 1, what, m, notes));
    CHECK(notes == std::vector<std::string>{"the CUPTI cross-check is off", "the worker ran no CUPTI cross-check",
                                            "CUPTI unavailable: no permission"});
  }
  SECTION("missing counts are nonsense") {
    auto v = judge_cupti({{"cupti", {{"available", true}}}}, pc, 1, what, m, notes);
    REQUIRE(v);
    CHECK(v->kind == verdict_kind::fault);
    CHECK(v->summary == "the worker answered nonsense while " + what);
    CHECK(v->log == "cupti: \"runs\" or \"kernels\" is missing");
  }
  SECTION("a kernel count other than the plan's is suspicious") {
    auto v = judge_cupti(cupti(10, 30, {100}, {100}), pc, 2, what, m, notes);
    REQUIRE(v);
    CHECK(v->kind == verdict_kind::suspicious);
    CHECK(v->summary == "CUPTI saw 30 kernels in 10 runs, but the plan launches 2 per run (launches outside the plan, "
                        "or skipped)");
    CHECK(v->log == "CUPTI: 10 runs, 30 kernels (2 per run expected), 0 foreign kernels, 0 on foreign streams");
  }
  SECTION("kernels on a foreign stream are suspicious; foreign names alone are a note") {
    json r = cupti(10, 10, {100}, {100});
    r["cupti"]["foreign_streams"] = 3;
    auto v = judge_cupti(r, pc, 1, what, m, notes);
    REQUIRE(v);
    CHECK(v->summary == "CUPTI saw 3 kernel records on a stream other than the worker's");
    r["cupti"]["foreign_streams"] = 0;
    r["cupti"]["foreign_kernels"] = 2;
    r["cupti"]["kernel_names"] = {"k1", "k2"};
    CHECK_FALSE(judge_cupti(r, pc, 1, what, m, notes));
    CHECK(notes == std::vector<std::string>{"CUPTI named 2 of the 10 kernels differently from the plan (names seen: k1, "
                                            "k2); the count matches the plan"});
    CHECK(m.metrics.at("event_vs_cupti_same_runs") == 0);
  }
  SECTION("CUPTI's time above the events': work escapes the timed region") {
    auto v = judge_cupti(cupti(4, 4, {130, 130, 130}, {100, 100, 100}), pc, 1, what, m, notes);
    REQUIRE(v);
    CHECK(v->summary == "CUPTI's kernel time (130.00 us median) exceeds the event time (100.00 us) by 30%: work "
                        "escapes the timed region");
    CHECK(m.metrics.at("cupti_kernel_us") == 130);
    CHECK(m.metrics.at("event_vs_cupti") == Approx(0.3));
  }
  SECTION("the events' time above CUPTI's beyond the launch allowance: time outside the kernels") {
    CHECK_FALSE(judge_cupti(cupti(4, 4, {100}, {129}), pc, 1, what, m, notes));  // within 20% + 10 us
    auto v = judge_cupti(cupti(4, 4, {100}, {131}), pc, 1, what, m, notes);
    REQUIRE(v);
    CHECK(v->summary == "the event time (131.00 us median) exceeds CUPTI's kernel time (100.00 us) by 24%: time in "
                        "the timed region outside the plan's kernels");
  }
}

TEST_CASE("judge: hardware metrics are feedback only") {
  profile_config pc;
  pc.hardware_metrics = true;
  measurement m;
  std::vector<std::string> notes;
  read_hardware_metrics({{"hardware_metrics", {{"available", false}, {"reason", "counters locked"}}}}, pc, m, notes);
  read_hardware_metrics(json::object(), pc, m, notes);
  CHECK(notes == std::vector<std::string>{"hardware metrics unavailable: counters locked",
                                          "hardware metrics unavailable: the worker ran no range-profiler pass"});
  read_hardware_metrics({{"hardware_metrics", {{"available", true}, {"values", {{"dram__bytes.sum", 5.0}, {"x.y", 1.0}}}}}},
                        pc, m, notes);
  CHECK(m.metrics.at("hw_dram_bytes") == 5.0);
  CHECK(m.metrics.at("hw_x.y") == 1.0);
  pc.hardware_metrics = false;
  notes.clear();
  read_hardware_metrics(json::object(), pc, m, notes);
  CHECK(notes.empty());
}

TEST_CASE("judge: the roofline") {
  const task t = sum_task();  // 12 MiB moved at the benchmark shape
  profile_config pc;
  pc.flush_l2 = true;
  pc.roofline_margin = 0.9;
  std::vector<std::string> notes;
  measurement m;
  m.median_us = 1;
  CHECK_FALSE(judge_roofline(t, t.benchmark_shape, 0, 0, pc, m, notes));
  CHECK(notes == std::vector<std::string>{"roofline check skipped: the device reports no peak DRAM bandwidth"});
  CHECK(m.metrics.at("effective_dram_gbps") == Approx(12582912.0 / 1e3));

  auto v = judge_roofline(t, t.benchmark_shape, 4800, 50 << 20, pc, m, notes);
  REQUIRE(v);
  CHECK(v->kind == verdict_kind::suspicious);
  CHECK(v->summary == "the median 1.00 us is below 0.9 x the 2.62 us needed to move 12.58 MB once at peak DRAM "
                      "bandwidth (4800 GB/s): work skipped or results cached");
  CHECK(v->log == "effective bandwidth 12583 GB/s");

  m.median_us = 10;
  CHECK_FALSE(judge_roofline(t, t.benchmark_shape, 4800, 50 << 20, pc, m, notes));
  CHECK(m.metrics.at("roofline_fraction") == Approx(0.262144));

  pc.flush_l2 = false;
  notes.clear();
  m.median_us = 1;
  CHECK_FALSE(judge_roofline(t, t.benchmark_shape, 4800, 50 << 20, pc, m, notes));
  CHECK(notes == std::vector<std::string>{"roofline check skipped: L2 is not flushed and the buffers fit in it"});
}

TEST_CASE("judge: guard zones and inputs; a run's outputs against the reference and the first run") {
  const task t = sum_task();
  decoded_run r;
  CHECK_FALSE(memory_verdict(t, r, "N=4", ""));
  r.inputs_intact = false;
  r.inputs_changed = {"b", "a"};
  auto mut = memory_verdict(t, r, "N=4", " (run 2 of 3 on these inputs)");
  REQUIRE(mut);
  CHECK(mut->kind == verdict_kind::input_mutation);
  CHECK(mut->summary == "modified its input 'b' at N=4 (run 2 of 3 on these inputs)");
  CHECK(mut->log == "inputs changed: b, a");
  r.guards_intact = false;
  r.guards_broken = {"a"};
  auto oob = memory_verdict(t, r, "N=4", "");
  REQUIRE(oob);
  CHECK(oob->kind == verdict_kind::out_of_bounds_write);
  CHECK(oob->summary == "wrote outside input 'a' at N=4");
  r.guards_broken = {"c"};
  CHECK(memory_verdict(t, r, "N=4", "")->summary == "wrote outside output 'c' at N=4");
  CHECK_FALSE(terms_may_clear(*oob));
  CHECK_FALSE(terms_may_clear(*mut));

  // Two runs on one input set: the first right, the second not.
  const shape_binding shape{{"N", 4}};
  const std::vector<input_case> sets{own_case(t, 1)};
  const auto want = std::make_shared<const output_set>(output_set{floats({1, 2, 3, 4})});
  const auto right = floats({1, 2, 3, 4}), wrong = floats({1, 2, 3, 5});
  std::vector<decoded_run> runs(2);
  runs[0].outputs = {right};
  runs[1].outputs = {right};
  CHECK_FALSE(judge_runs(t, shape, sets, runs, 2, {want}, {nullptr}));
  runs[1].outputs = {wrong};
  auto later = judge_runs(t, shape, sets, runs, 2, {want}, {nullptr});
  REQUIRE(later);
  CHECK(later->kind == verdict_kind::unstable);
  CHECK(later->summary.ends_with(" (run 2 of 2 on these inputs)"));
  CHECK(later->log.ends_with("case: " + case_text(t, sets[0])));
  runs[0].outputs = {wrong};
  auto first = judge_runs(t, shape, sets, runs, 2, {want}, {nullptr});
  REQUIRE(first);
  CHECK(first->kind == verdict_kind::wrong_result);
  CHECK(terms_may_clear(*first));

  // The recheck after timing: the same comparison, its own message.
  auto cmp = compare_outputs(t.outputs[0], wrong, (*want)[0], "N=4");
  REQUIRE_FALSE(cmp.pass);
  verdict rv = recheck_verdict(cmp, 77);
  CHECK(rv.kind == make_wrong_result_verdict(cmp).kind);
  CHECK(rv.summary == "the last timed run, on fresh inputs, disagrees with the reference (work skipped or cached "
                      "across calls): " + make_wrong_result_verdict(cmp).summary);
  CHECK(rv.log == "recheck seed 77");
}

TEST_CASE("judge: notes go to the end of a verdict's log") {
  CHECK(with_notes(make(verdict_kind::ok, {}), {}).log.empty());
  CHECK(with_notes(make(verdict_kind::ok, {}), {"a", "b"}).log == "a\nb");
  CHECK(with_notes(make(verdict_kind::fault, "x", "log"), {"a"}).log == "log\na");
}
