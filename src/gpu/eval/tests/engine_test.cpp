// The engine driving gpu_pool: the same engine, modes and replay backend as
// the simulated device's runs, with candidates compiled by NVRTC and judged by
// the GPU evaluator. The kernels run in specgen-fake-worker (no GPU needed);
// on a GPU the same code path runs them in specgen-worker.
#include "fixture.hpp"

#include <specgen/engine.hpp>
#include <specgen/modes.hpp>
#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/trace.hpp>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <memory>

using namespace fixture;

namespace {

std::string answer(const std::string& kernel) {
  return "Here is the kernel.\n\n```cuda\n" + add_source(kernel) + "```\n\n```plan\n" + add_plan(kernel) + "\n```\n";
}

nlohmann::json trace_json(int round, const std::string& early, const std::string& final_kernel) {
  return {{"task", "sum"},
          {"round", round},
          {"lane", "any"},
          {"style", "draft_early"},
          {"segments",
           {{{"text", "The task adds two vectors. A first draft:\n```cuda\n" + add_source(early) + "```\n"}},
            {{"filler", 120}, {"topic", "considering memory coalescing"}}}},
          {"answer", {{"text", answer(final_kernel)}}},
          {"forks", {{{"at_token", 1}, {"samples", {{{"text", answer(early)}}}}}}}};
}

}  // namespace

TEST_CASE("the engine searches with gpu_pool as its evaluator, in real time") {
  const nlohmann::json file = {
      {"format", "specgen-trace/1"},
      {"traces", {trace_json(0, "first_add", "wrong_add"), trace_json(1, "second_add", "third_add")}}};
  auto traces = replay::parse_traces(file, "<engine test>");
  REQUIRE(traces);

  event_loop<steady_clock> loop;
  replay::replay_params rp;
  rp.decode_tokens_per_s = 4000;  // a fast model: the test takes about a second
  rp.first_token_overhead_s = 0.001;
  replay::replay_model model(loop, *traces, rp);

  pool_config pc;
  pc.devices = {0, 1};
  pc.session = fake_config();
  auto pool = gpu_pool::create(loop, pc);
  REQUIRE(pool);

  auto cfg = mode_config("specgen");
  REQUIRE(cfg);
  cfg->budget.max_rounds = 2;
  engine eng(loop, model, **pool, std::move(*cfg));
  eng.add_search(std::make_shared<const task>(sum_task()));
  const specgen::run_result r = eng.run();

  REQUIRE(r.searches.size() == 1);
  const auto& s = r.searches[0];
  INFO("end reason: " << s.end_reason << ", candidates " << s.candidates << ", forks " << s.forks
                       << ", verdicts " << nlohmann::json(s.verdicts).dump());
  CHECK(s.rounds == 2);
  // The answers compiled with NVRTC and were judged: round 0's by the
  // validator (fake worker: element 0 off by one), round 1's profiled.
  CHECK(s.verdicts.at("wrong_result") >= 1);
  CHECK(s.verdicts.at("ok") >= 1);
  CHECK(s.profiled >= 1);
  CHECK(r.profiled_kernels >= 1);
  // Fake timings: candidate 100 us against a 200 us baseline.
  CHECK(s.best_speedup == Approx(2.0).epsilon(0.01));
  // Busy time was measured by the pool, so utilisation is a real fraction.
  CHECK(r.pool_utilization > 0);
  CHECK(r.pool_utilization <= 1.0);
  const auto st = (*pool)->stats();
  CHECK(st.jobs.size() == 2);
  CHECK(st.jobs[0] + st.jobs[1] >= 3);  // validate x2 (one wrong), profile x1
}
