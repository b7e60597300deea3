// Strategies build each round's prompts from the search so far; the prompt
// renders feedback a model can act on.
#include <specgen/policy/strategy.hpp>
#include <specgen/policy/prompt.hpp>
#include <specgen/prompt.hpp>
#include <specgen/replay/responsive.hpp>

#include <catch2/catch.hpp>

using namespace specgen;
using namespace specgen::policy;

namespace {

task small_task() {
  task t;
  t.name = "softmax";
  t.description = "Row-wise softmax of x into y.";
  t.symbols = {"N", "M"};
  t.benchmark_shape = {{"M", 4096}, {"N", 4096}};
  t.validation_shapes = {{{"M", 33}, {"N", 4099}}};
  t.inputs = {tensor_spec{.name = "x", .type = dtype::f32, .shape = {"M", "N"}}};
  t.outputs = {tensor_spec{.name = "y", .type = dtype::f32, .shape = {"M", "N"}, .tol = {.abs = 1e-5, .rel = 1e-5}}};
  return t;
}

candidate_record record(candidate_id id, int round, int lane, std::optional<double> speedup,
                        verdict_kind v = verdict_kind::ok, origin from = origin::main) {
  auto c = std::make_shared<candidate>();
  c->id = id;
  c->prov.round = round;
  c->prov.lane = lane;
  c->prov.from = from;
  c->source = "extern \"C\" __global__ void k" + std::to_string(id) + "(float* y) {}";
  c->plan = "launch k" + std::to_string(id) + " grid(1) block(1) args(y)";
  evaluation e;
  e.id = id;
  e.result.kind = v;
  if (speedup) e.timing = measurement{.median_us = 100 / *speedup, .baseline_median_us = 100, .speedup = *speedup};
  return candidate_record{.cand = c, .eval = e};
}

std::string prompt_of(const lane_plan& l) { return default_prompt_builder{}.build(l.content); }

}  // namespace

TEST_CASE("refinement builds on the best profiled kernel and quotes the last round's feedback") {
  const task t = small_task();
  std::vector<candidate_record> recs{record(1, 0, 0, 1.2), record(2, 0, 0, 1.9, verdict_kind::ok, origin::fork),
                                     record(3, 1, 0, std::nullopt, verdict_kind::compile_error)};
  recs[2].eval->result.summary = "compilation failed";
  recs[2].eval->result.log = "candidate.cu(1): error: identifier \"tile\" is undefined\n  tile\n  ^\n\n1 error detected";
  const auto lanes = refine_best{}.plan_round({.for_task = &t, .round = 2, .records = recs, .seed = 1});
  REQUIRE(lanes.size() == 1);
  // Refinement shows the best and the last kernel written.
  CHECK(lanes[0].parents == std::vector<candidate_id>{2, 3});
  const std::string prompt = prompt_of(lanes[0]);
  CHECK_THAT(prompt, Catch::Contains(kernel_heading(kernel_tag(*recs[1].cand), "ok") + " (current best; draft from a fork"));
  CHECK_THAT(prompt, Catch::Contains("1.90x the baseline"));
  CHECK_THAT(prompt, Catch::Contains("void k2"));
  CHECK_THAT(prompt, Catch::Contains(kernel_heading(kernel_tag(*recs[2].cand), "compile_error") + " (your last kernel"));
  // The compile log with the candidate's own line quoted under its number.
  CHECK_THAT(prompt, Catch::Contains("line 1: error: identifier \"tile\" is undefined\n       1 | extern \"C\" __global__ void k3"));
  CHECK_THAT(prompt, Catch::Contains("Benchmarked shape: M=4096,N=4096"));
  CHECK(reported_kernels(prompt).size() == 3);
}

TEST_CASE("the prompt reports each distinct kernel once, marks repeats, diffs against kernels shown, and feeds back answers without a kernel") {
  const task t = small_task();
  std::vector<candidate_record> recs{record(1, 0, 0, 1.5)};
  // Round 1: the same wrong draft from three fork samples, and a final answer that differs from kernel 1 in one line.
  for (candidate_id id : {2, 3, 4}) {
    auto r = record(id, 1, 0, std::nullopt, verdict_kind::wrong_result, origin::fork);
    auto c = std::make_shared<candidate>(*r.cand);
    c->source = "extern \"C\" __global__ void kw(float* y) { y[0] = 1; }";
    c->plan = "launch kw grid(1) block(1) args(y)";
    c->prov.trigger = "code_fence";
    c->prov.prefix_tokens = 1200;
    r.cand = c;
    r.eval->result.mismatch = mismatch_stats{.output = "y", .shape = "M=33,N=4099", .max_abs = 3, .max_rel = 1, .count = 5,
                                             .total = 135267, .first_indices = {4100}, .nans = 2, .worst_index = 4101,
                                             .worst_got = -1, .worst_want = 2};
    recs.push_back(r);
  }
  auto last = record(5, 1, 0, 1.2);
  {
    auto c = std::make_shared<candidate>(*recs[0].cand);
    c->id = 5;
    c->prov.round = 1;
    std::string src;
    for (int i = 0; i < 30; ++i) src += "// line " + std::to_string(i) + "\n";
    auto c1 = std::make_shared<candidate>(*recs[0].cand);
    c1->source = src + "extern \"C\" __global__ void k1(float* y) {}";
    recs[0].cand = c1;
    c->source = src + "extern \"C\" __global__ void k1(float* y) { y[0] = 0; }";
    last.cand = c;
  }
  recs.push_back(last);
  const std::vector<extract_miss> misses{{.prov = {.round = 1, .from = origin::fork, .trigger = "design_decision", .prefix_tokens = 800},
                                          .reason = "no_plan", .message = "kernels found, but no plan block", .excerpt = "}\nThat is it."}};
  const auto lanes = refine_best{}.plan_round({.for_task = &t, .round = 2, .records = recs, .seed = 1, .misses = misses});
  const std::string prompt = prompt_of(lanes[0]);
  INFO(prompt);
  const auto reported = reported_kernels(prompt);
  // Best (k1) and last (k5) to build on; in the feedback: the wrong kernel once, and k5 again ("shown above").
  REQUIRE(reported.size() == 4);
  CHECK(reported[2].verdict == "wrong_result");
  CHECK_THAT(prompt, Catch::Contains("written 3 times"));
  CHECK_THAT(prompt, Catch::Contains("draft from a fork at 1,200 reasoning tokens (trigger code_fence), round 2"));
  CHECK_THAT(prompt, Catch::Contains("5 of 135267 elements outside the tolerance (abs 1e-05 + rel 1e-05 x |expected| + "
                                     "16 roundoffs of the magnitude of its terms)"));
  CHECK_THAT(prompt, Catch::Contains("2 of them NaN"));
  // Flat 4101 of a 33 x 4099 output is row 1, column 2.
  CHECK_THAT(prompt, Catch::Contains("Worst at y[1, 2] (flat 4101): got -1, expected 2."));
  // The last kernel is a one-line change of the best: shown as a diff.
  CHECK_THAT(prompt, Catch::Contains("Source: kernel " + kernel_tag(*recs[0].cand) + " with these lines changed"));
  CHECK_THAT(prompt, Catch::Contains("- extern \"C\" __global__ void k1(float* y) {}\n+ extern \"C\" __global__ void k1(float* y) { y[0] = 0; }"));
  CHECK_THAT(prompt, Catch::Contains("Shown above, under \"Kernels to build on\"."));
  CHECK_THAT(prompt, Catch::Contains("### Answer without a kernel [no_plan] (draft from a fork at 800 reasoning tokens (trigger design_decision), round 2)"));
  CHECK_THAT(prompt, Catch::Contains("That is it."));
}

TEST_CASE("over the feedback limit, final answers and correct kernels are kept and the rest summarised") {
  const task t = small_task();
  std::vector<candidate_record> recs;
  for (candidate_id id = 1; id <= 10; ++id) recs.push_back(record(id, 0, 0, std::nullopt, verdict_kind::compile_error, origin::fork));
  recs.push_back(record(11, 0, 0, 1.3));
  const auto lanes = refine_best{}.plan_round({.for_task = &t, .round = 1, .records = recs, .seed = 1});
  const std::string prompt = default_prompt_builder{{.max_feedback_kernels = 3}}.build(lanes[0].content);
  CHECK_THAT(prompt, Catch::Contains("(8 more kernels not shown: 8 compile_error)"));
  CHECK_THAT(prompt, Catch::Contains(kernel_heading(kernel_tag(*recs[10].cand), "ok")));
}

TEST_CASE("a prompt builder is a policy: the engine config holds one, and JSON picks the default's knobs") {
  auto b = make_prompt_builder(nlohmann::json::parse(R"({"default": {"log_lines": 20}})"));
  REQUIRE(b);
  CHECK(b->config() == nlohmann::json::parse(R"({"default": {"log_lines": 20, "max_feedback_kernels": 8}})"));
  CHECK_THAT(make_prompt_builder("fancy").error().what(), Catch::StartsWith("/: unknown prompt kind 'fancy'; known: default"));
  CHECK_FALSE(make_prompt_builder(nlohmann::json::parse(R"({"default": {"log_lines": 0}})")));
  struct terse {
    std::string name() const { return "terse"; }
    std::string system() const { return "Write CUDA."; }
    std::string build(const prompt_content& c) const { return c.for_task->name + ": " + c.instruction; }
  };
  any_prompt_builder custom = terse{};
  CHECK(custom.config() == nlohmann::json{{"custom", "terse"}});
  const task t = small_task();
  CHECK(custom.build({.for_task = &t, .instruction = "go"}) == "softmax: go");
}

TEST_CASE("parallel seeds refine one lineage per lane") {
  const task t = small_task();
  std::vector<candidate_record> recs{record(1, 0, 0, 1.1), record(2, 0, 1, 2.5), record(3, 0, 2, std::nullopt,
                                                                                    verdict_kind::wrong_result)};
  const auto lanes = parallel_seeds{{.seeds = 3}}.plan_round({.for_task = &t, .round = 1, .records = recs, .seed = 1});
  REQUIRE(lanes.size() == 3);
  CHECK(lanes[0].parents == std::vector<candidate_id>{1});
  CHECK(lanes[1].parents == std::vector<candidate_id>{2});
  CHECK(lanes[2].parents.empty());
  CHECK_THAT(prompt_of(lanes[2]), Catch::Contains("wrong_result"));
  CHECK_THAT(prompt_of(lanes[0]), !Catch::Contains("wrong_result"));  // each lane sees its own feedback only
}

TEST_CASE("evolution picks parents from the population by tournament, deterministically in the seed") {
  const task t = small_task();
  std::vector<candidate_record> recs;
  for (candidate_id i = 1; i <= 12; ++i) recs.push_back(record(i, 0, static_cast<int>(i % 4), 1.0 + 0.1 * static_cast<double>(i)));
  const evolve e{{.lanes = 4, .population = 5, .tournament = 3, .inspirations = 1}};
  const search_view v{.for_task = &t, .round = 1, .records = recs, .seed = 42};
  const auto a = e.plan_round(v), b = e.plan_round(v);
  REQUIRE(a.size() == 4);
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].parents == b[i].parents);
    REQUIRE(!a[i].parents.empty());
    for (auto p : a[i].parents) CHECK(p >= 8);  // only the 5 fastest (ids 8..12) are in the population
  }
  auto other = v;
  other.seed = 43;
  bool differs = false;
  const auto c = e.plan_round(other);
  for (std::size_t i = 0; i < a.size(); ++i) differs |= a[i].parents != c[i].parents;
  CHECK(differs);
}

TEST_CASE("strategies come from JSON, and mistakes are named") {
  CHECK(make_strategy("refine")->name() == "refine");
  CHECK(make_strategy(nlohmann::json::parse(R"({"parallel": {"seeds": 6}})"))->lanes() == 6);
  auto ev = make_strategy(nlohmann::json::parse(R"({"evolve": {"lanes": 2, "population": 4}})"));
  REQUIRE(ev);
  CHECK(ev->config() == nlohmann::json::parse(R"({"evolve": {"lanes": 2, "population": 4, "tournament": 3, "inspirations": 1}})"));
  CHECK_THAT(make_strategy("beam").error().what(), Catch::StartsWith("/: unknown strategy kind 'beam'"));
  CHECK_THAT(make_strategy(nlohmann::json::parse(R"({"parallel": {"seed": 2}})")).error().what(),
             Catch::StartsWith("/parallel/seed: unknown key 'seed' (did you mean 'seeds'?)"));
  CHECK(make_strategy(nlohmann::json::parse(R"({"evolve": {"lanes": 0}})")).error().what() ==
        "/evolve/lanes: must be an integer in [1, 256], got 0");
}

TEST_CASE("feedback says what went wrong in terms a model can act on") {
  auto wrong = record(7, 0, 0, std::nullopt, verdict_kind::wrong_result);
  wrong.eval->result.summary = "output y differs from the reference";
  wrong.eval->result.mismatch = mismatch_stats{.output = "y", .shape = "M=33,N=4099", .max_abs = 0.25, .max_rel = 3.5,
                                               .count = 17, .total = 135267, .first_indices = {4096, 4097}};
  const auto w = render_feedback(wrong);
  CHECK_THAT(w, Catch::Contains("17 of 135267 elements outside the tolerance"));
  CHECK_THAT(w, Catch::Contains("First outside the tolerance: y[4096], y[4097]."));

  auto fast = record(8, 0, 0, 2.0);
  fast.eval->timing->metrics = {{"hw_dram_pct", 81.5}, {"roofline_fraction", 0.62}, {"effective_dram_gbps", 2980}};
  fast.eval->compile.registers = 40;
  const auto f = render_feedback(fast);
  CHECK_THAT(f, Catch::Contains("Runs in 50.0 us against 100.0 us for the baseline: 2.00x"));
  CHECK_THAT(f, Catch::Contains("Roofline: 62% of the time bound"));
  CHECK_THAT(f, Catch::Contains("(2980 GB/s effective)"));
  CHECK_THAT(f, Catch::Contains("Hardware counters (of peak): DRAM 82%"));
  CHECK_THAT(f, Catch::Contains("Registers/thread 40"));
  fast.eval->timing->baseline_of = "reference";
  CHECK_THAT(render_feedback(fast), Catch::Contains("for the reference (the task has no separate baseline)"));

  auto long_log = record(9, 0, 0, std::nullopt, verdict_kind::compile_error);
  for (int i = 0; i < 40; ++i) long_log.eval->result.log += "error line " + std::to_string(i) + "\n";
  const auto l = render_feedback(long_log, {.log_lines = 5});
  CHECK_THAT(l, Catch::Contains("error line 4"));
  CHECK_THAT(l, !Catch::Contains("error line 5"));
  CHECK_THAT(l, Catch::Contains("[...]"));

  candidate_record cancelled{.cand = wrong.cand, .eval = std::nullopt, .cancelled = true};
  CHECK_THAT(render_feedback(cancelled), Catch::Contains("superseded"));
  candidate_record unjudged{.cand = wrong.cand, .eval = std::nullopt, .cancelled = true, .reused = false,
                            .not_judged = "simulated device: kernel 0x12 is not in the cost table"};
  CHECK_THAT(render_feedback(unjudged), Catch::Contains("not evaluated: simulated device"));
}

TEST_CASE("strategy sizes are read within ranges, and out-of-range params in code are a programming error") {
  for (const char* text : {R"({"parallel": {"seeds": 1000000}})", R"({"evolve": {"lanes": 2147483647}})",
                           R"({"evolve": {"population": 1000000000}})", R"({"evolve": {"tournament": 1000000}})",
                           R"({"evolve": {"inspirations": 1000}})"})
    CHECK_FALSE(make_strategy(nlohmann::json::parse(text)));
  CHECK_THROWS_AS(any_strategy(parallel_seeds{{.seeds = 1'000'000}}), std::invalid_argument);
}


TEST_CASE("the task's scalars are listed with type and value, and the system prompt says how to pass them") {
  task t = small_task();
  CHECK_THAT(render_task(t), !Catch::Contains("Scalars"));
  t.scalars = {{.name = "eps", .type = scalar_type::f32, .real = 1e-5},
               {.name = "seed", .type = scalar_type::u64, .value = -1}};
  const std::string s = render_task(t);
  CHECK_THAT(s, Catch::Contains("Scalars (pass each by its name in args, where it arrives as its declared type; a cast "
                                "such as NAME:f64 converts it; other constants are typed literals such as 1e-5:f32 or "
                                "3:u32):\n"
                                "- eps: f32 = 1e-05 (a 'float' parameter)\n"
                                "- seed: u64 = 18446744073709551615 (an 'unsigned long long' parameter)\n"));
  CHECK_THAT(system_prompt(), Catch::Contains("A task scalar is passed by its name") &&
                                  Catch::Contains("1e-5:f32 (float), 0.5:f64 (double), 3:u32, -1:i64"));
}

TEST_CASE("feedback keeps the verdict kinds of a wrong output apart") {
  const mismatch_stats m{.output = "y", .shape = "N=7", .max_abs = 1, .max_rel = 1, .count = 1, .total = 7,
                         .first_indices = {3}, .nans = 1, .worst_index = 3, .worst_got = 0, .worst_want = 2};
  auto nan = record(9, 0, 0, std::nullopt, verdict_kind::nonfinite_output);
  nan.eval->result.summary = "1 element is NaN or inf where the reference is finite: output 'y' at N=7: ...";
  nan.eval->result.mismatch = m;
  const auto n = render_feedback(nan);
  CHECK_THAT(n, Catch::StartsWith("1 element is NaN or inf where the reference is finite"));
  CHECK_THAT(n, Catch::Contains("1 of them NaN"));
  // A later call returning an earlier call's result: the summary says so, the details follow.
  auto stale = record(10, 0, 0, std::nullopt, verdict_kind::wrong_result);
  stale.eval->result.summary = "call 2 in one loaded module returned what call 1 should have (state kept across calls)";
  stale.eval->result.mismatch = m;
  const auto st = render_feedback(stale);
  CHECK_THAT(st, Catch::StartsWith("call 2 in one loaded module returned what call 1 should have"));
  CHECK_THAT(st, Catch::Contains("Worst at y[3]: got 0, expected 2."));
  // Input mutation and out-of-bounds writes: the summary and the log.
  auto clobber = record(11, 0, 0, std::nullopt, verdict_kind::input_mutation);
  clobber.eval->result.summary = "modified its input 'x' at N=7";
  clobber.eval->result.log = "inputs changed: x";
  const auto c = render_feedback(clobber);
  CHECK_THAT(c, Catch::Contains("modified its input 'x' at N=7"));
  CHECK_THAT(c, Catch::Contains("inputs changed: x"));
  CHECK(replay::is_bad_verdict("out_of_bounds_write"));
  CHECK(is_wrong_output(verdict_kind::input_mutation));
  CHECK_FALSE(is_wrong_output(verdict_kind::fault));
}
