// Strategies build each round's prompts from the search so far; the prompt
// renders feedback a model can act on.
#include <specgen/policy/strategy.hpp>
#include <specgen/prompt.hpp>

#include <catch2/catch.hpp>

using namespace specgen;

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

}  // namespace

TEST_CASE("refinement builds on the best profiled kernel and quotes the last round's feedback") {
  const task t = small_task();
  std::vector<candidate_record> recs{record(1, 0, 0, 1.2), record(2, 0, 0, 1.9, verdict_kind::ok, origin::fork),
                                     record(3, 1, 0, std::nullopt, verdict_kind::compile_error)};
  recs[2].eval->result.summary = "compilation failed";
  recs[2].eval->result.log = "kernel.cu(3): error: identifier \"tile\" is undefined";
  const auto lanes = refine_best{}.plan_round({.for_task = &t, .round = 2, .records = recs, .seed = 1});
  REQUIRE(lanes.size() == 1);
  CHECK(lanes[0].parents == std::vector<candidate_id>{2});
  CHECK_THAT(lanes[0].prompt, Catch::Contains("Current best kernel (speedup 1.90x)"));
  CHECK_THAT(lanes[0].prompt, Catch::Contains("void k2"));
  CHECK_THAT(lanes[0].prompt, Catch::Contains("identifier \"tile\" is undefined"));
  CHECK_THAT(lanes[0].prompt, Catch::Contains("Benchmarked shape: M=4096,N=4096"));
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
  CHECK_THAT(lanes[2].prompt, Catch::Contains("wrong_result"));
  CHECK_THAT(lanes[0].prompt, !Catch::Contains("wrong_result"));  // each lane sees its own feedback only
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
  CHECK(ev->to_json() == nlohmann::json::parse(R"({"evolve": {"lanes": 2, "population": 4, "tournament": 3, "inspirations": 1}})"));
  CHECK_THAT(make_strategy("beam").error().message, Catch::Contains("unknown kind 'beam'"));
  CHECK_THAT(make_strategy(nlohmann::json::parse(R"({"parallel": {"seed": 2}})")).error().message,
             Catch::Contains("unknown parameter 'seed'"));
  CHECK_THAT(make_strategy(nlohmann::json::parse(R"({"evolve": {"lanes": 0}})")).error().message,
             Catch::Contains("strategy evolve.lanes: must be an integer in [1, 256], got 0"));
}

TEST_CASE("feedback says what went wrong in terms a model can act on") {
  auto wrong = record(7, 0, 0, std::nullopt, verdict_kind::wrong_result);
  wrong.eval->result.summary = "output y differs from the reference";
  wrong.eval->result.mismatch = mismatch_stats{.output = "y", .shape = "M=33,N=4099", .max_abs = 0.25, .max_rel = 3.5,
                                               .count = 17, .total = 135267, .first_indices = {4096, 4097}};
  const auto w = render_feedback(wrong);
  CHECK_THAT(w, Catch::Contains("17 of 135267 elements out of tolerance"));
  CHECK_THAT(w, Catch::Contains("first at flat index 4096 4097"));

  auto fast = record(8, 0, 0, 2.0);
  fast.eval->timing->metrics = {{"dram_throughput_pct", 81.5}};
  fast.eval->compile.registers = 40;
  const auto f = render_feedback(fast);
  CHECK_THAT(f, Catch::Contains("speedup 2.00x"));
  CHECK_THAT(f, Catch::Contains("dram_throughput_pct: 81.5"));
  CHECK_THAT(f, Catch::Contains("Registers/thread 40"));

  auto long_log = record(9, 0, 0, std::nullopt, verdict_kind::compile_error);
  for (int i = 0; i < 40; ++i) long_log.eval->result.log += "error line " + std::to_string(i) + "\n";
  const auto l = render_feedback(long_log, {.log_lines = 5});
  CHECK_THAT(l, Catch::Contains("error line 4"));
  CHECK_THAT(l, !Catch::Contains("error line 5"));
  CHECK_THAT(l, Catch::Contains("[...]"));

  candidate_record cancelled{.cand = wrong.cand, .eval = std::nullopt, .cancelled = true};
  CHECK_THAT(render_feedback(cancelled), Catch::Contains("superseded"));
}

TEST_CASE("strategy sizes are read within ranges, and out-of-range params in code are a programming error") {
  for (const char* text : {R"({"parallel": {"seeds": 1000000}})", R"({"evolve": {"lanes": 2147483647}})",
                           R"({"evolve": {"population": 1000000000}})", R"({"evolve": {"tournament": 1000000}})",
                           R"({"evolve": {"inspirations": 1000}})"})
    CHECK_FALSE(make_strategy(nlohmann::json::parse(text)));
  CHECK_THROWS_AS(any_strategy(parallel_seeds{{.seeds = 1'000'000, .prompt = {}}}), std::invalid_argument);
}

