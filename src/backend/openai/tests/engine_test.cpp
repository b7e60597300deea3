// The engine driving the OpenAI backend against the local vLLM stand-in: the
// same engine and modes as with the replay model, with real HTTP streams.
// Forks come from the default trigger and must carry the exact prefix ids.
#include "fixture.hpp"

#include <specgen/engine.hpp>
#include <specgen/modes.hpp>
#include <specgen/replay/trace_gen.hpp>
#include <specgen/sim/simulated_device.hpp>

using namespace fixture;

TEST_CASE("the engine forks from a real stream with the exact prefix ids, and fork usage reaches its results") {
  // 300 tokens of reasoning, a kernel draft, 900 more: the default trigger
  // forks once 256 reasoning tokens have arrived and a validation GPU is idle.
  server_options so{.format = testing::wire::vllm, .tokens_per_s = 3000};
  so.reasoning.clear();
  for (int i = 0; i < 300; ++i) so.reasoning.push_back(i % 10 == 9 ? "\n" : " word");
  for (const char* p : {"```cuda", "\n", "extern", " \"C\"", " __global__", " void", " k", "()", " {}", "\n", "```", "\n"})
    so.reasoning.emplace_back(p);
  for (int i = 0; i < 900; ++i) so.reasoning.push_back(" more");  // time for the forks to finish
  so.answer = {"```cuda\n", "extern \"C\" __global__ void k(float* x) { x[0] = 1; }\n", "```\n",
               "```plan\n", "launch k grid(1) block(1) args(x)\n", "```\n"};
  fake_server server(so);

  auto corpus = replay::generate_corpus({.tasks = 1, .rounds = 1, .lanes = 1}, 3);
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  sim::simulated_device gpus(loop, corpus.costs, {.devices = 2});
  auto cfg = mode_config("specgen");
  REQUIRE(cfg);
  cfg->budget.max_rounds = 1;
  engine eng(loop, *model, gpus, std::move(*cfg));
  eng.add_search(std::make_shared<const task>(corpus.tasks[0]));
  const run_result r = eng.run();

  REQUIRE(r.searches.size() == 1);
  const search_result& s = r.searches[0];
  INFO("end: " << s.end_reason << ", forks " << s.forks << ", skipped " << s.forks_skipped << ", from forks " << s.from_forks);
  CHECK(s.rounds == 1);
  REQUIRE(s.forks >= 1);
  CHECK(s.from_forks >= 1);  // fork answers became candidates
  CHECK(s.candidates == s.from_forks + 1);  // and the main stream's answer
  // The simulated device knows only its cost table's kernels: a real model's
  // get no verdict ("not in the cost table"), never a made-up one, and no crash.
  CHECK(s.verdicts.empty());
  CHECK(s.unjudged > 0);

  const auto rs = server.requests();
  const testing::request_record* chat = nullptr;
  for (const auto& q : rs)
    if (q.path == "/v1/chat/completions") chat = &q;
  REQUIRE(chat);
  int checked = 0;
  for (const auto& q : rs) {
    if (q.path != "/v1/completions") continue;
    const auto& p = q.prompt_ids;
    const auto& suffix = model->server().fork_suffix;
    REQUIRE(p.size() > chat->prompt_ids.size() + suffix.size());
    const std::size_t n = p.size() - chat->prompt_ids.size() - suffix.size();
    CHECK(n >= 256);
    CHECK(std::equal(chat->prompt_ids.begin(), chat->prompt_ids.end(), p.begin()));
    CHECK(std::equal(chat->generated.begin(), chat->generated.begin() + static_cast<std::ptrdiff_t>(n),
                     p.begin() + static_cast<std::ptrdiff_t>(chat->prompt_ids.size())));
    CHECK(std::equal(suffix.begin(), suffix.end(), p.end() - static_cast<std::ptrdiff_t>(suffix.size())));
    CHECK(q.cached_tokens == (chat->prompt_ids.size() + n) / 16 * 16);
    ++checked;
  }
  CHECK(checked == s.forks);
  CHECK(s.tokens.cached_prompt_tokens > 0);
}
