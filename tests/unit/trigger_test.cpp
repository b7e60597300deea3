#include <specgen/policy/trigger.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

using namespace specgen;
using namespace specgen::policy;

namespace {

// A draft-early trace: kernels appear early in cuda fences and are revised.
constexpr std::string_view draft_early = R"TXT(Okay, so I need a softmax over the rows of an N x M matrix. Rows are independent, so each block handles one row. I'll use 256 threads and a warp-level reduction for the max and the sum.

Let me write a first version:

```cuda
extern "C" __global__ void softmax(const float* x, float* y, int N, int M) {
  int row = blockIdx.x;
  float m = -INFINITY;  // running max {not a brace}
  for (int i = threadIdx.x; i < M; i += blockDim.x) { m = fmaxf(m, x[row * M + i]); }
  m = warp_max(m);
  for (int i = threadIdx.x; i < M; i += blockDim.x) { y[row * M + i] = __expf(x[row * M + i] - m); }
}
```

Hmm, that only reduces within one warp, and I never divide by the sum. Actually, let me fix the block reduction:

```cuda
extern "C" __global__ void softmax(const float* x, float* y, int N, int M) {
  __shared__ float red[32];
  int row = blockIdx.x;
  const char* tag = "}";
  float m = block_max(x + row * M, M, red);
  float s = block_sum_exp(x + row * M, M, m, red);
  for (int i = threadIdx.x; i < M; i += blockDim.x) { y[row * M + i] = __expf(x[row * M + i] - m) / s; }
}
```

And the launch plan:

```plan
launch softmax grid=(N) block=(256)
```

That should be correct now. The tile size does not matter here (in the code above each thread computes a strided slice).
)TXT";

// A think-then-write trace: no fences at all; the code is inline in prose.
constexpr std::string_view think_then_write = R"TXT(Alright, we need an elementwise ReLU over n floats. This is purely memory bound, so the only thing that matters is bandwidth. The plan is to have each thread computes one float4 so the loads are vectorized; the tail needs care when n is not a multiple of four.

Let me think about the grid. With 256 threads per block and n = 16M, that is 16K blocks, fine. A grid-stride loop would also work but adds instructions for no gain at this size.

Now the kernel: __global__ void relu(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { y[i] = x[i] > 0.f ? x[i] : 0.f; } } and the launch uses cdiv(n, 256) blocks.

Wait, the float4 version is better. The kernel will cast the pointers to float4 and handle the remainder with a scalar loop; I think that's the final design, so the answer should contain that kernel.
)TXT";

/// Feeds `text` in chunks of the given sizes (cycled) and returns the end
/// offset of every chunk on which the trigger fired.
std::vector<std::size_t> fire_offsets(any_trigger t, std::string_view text, const std::vector<std::size_t>& sizes,
                                      std::vector<std::string>* names = nullptr) {
  std::vector<std::size_t> out;
  std::size_t pos = 0, k = 0;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.size(), pos + sizes[k++ % sizes.size()]);
    if (auto f = t.on_chunk({.text = text.substr(0, end), .new_from = pos, .tokens = end / 4}, {})) {
      out.push_back(end);
      if (names) names->push_back(f->trigger);
    }
    pos = end;
  }
  return out;
}

std::vector<std::size_t> char_by_char(const any_trigger& t, std::string_view text) { return fire_offsets(t, text, {1}); }

/// Offset just past the first occurrence of `needle` plus `extra` characters.
std::size_t after(std::string_view text, std::string_view needle, std::size_t extra = 0) {
  const auto p = text.find(needle);
  REQUIRE(p != std::string_view::npos);
  return p + needle.size() + extra;
}

/// Fires with K = 1 on every call: the gate tests' inner trigger.
struct always {
  std::optional<trigger_fire> on_chunk(const stream_view&, const trigger_context&) { return trigger_fire{"always", 1}; }
  std::string name() const { return "always"; }
};

}  // namespace

TEST_CASE("fence_closed fires when each cuda fence closes and ignores other languages") {
  const auto fires = char_by_char(triggers::fence_closed{}, draft_early);
  const auto first_close = draft_early.find("}\n```\n") + 6;
  const auto second_close = draft_early.find("}\n```\n", first_close) + 6;
  CHECK(fires == std::vector<std::size_t>{first_close, second_close});  // the plan fence does not count
  CHECK(char_by_char(triggers::fence_closed{}, think_then_write).empty());
}

TEST_CASE("fence_closed matches language tags case-insensitively and honours a custom list") {
  const std::string text = "x\n```CUDA\nk\n```\n```python\np\n```\n~~~cu extra\nq\n~~~\n";
  CHECK(char_by_char(triggers::fence_closed{}, text).size() == 2);
  CHECK(char_by_char(triggers::fence_closed{{.samples = 1, .languages = {"Python"}}}, text).size() == 1);
}

TEST_CASE("fence_closed reads the language tag up to an attribute block") {
  const std::string text = "```cuda{.numberLines}\nk\n```\n";
  CHECK(char_by_char(triggers::fence_closed{}, text) == std::vector<std::size_t>{text.size()});
}

TEST_CASE("a fence closes only with the same fence character, at least as long, alone on its line") {
  const std::string text = "````cuda\na\n```\n~~~~\n```` trailing\n````\n";
  // "```" is too short, "~~~~" is another character, "```` trailing" has text: only the last line closes.
  CHECK(char_by_char(triggers::fence_closed{}, text) == std::vector<std::size_t>{text.size()});
}

TEST_CASE("design_decision fires at the end of each sentence that states a design choice") {
  const auto fires = char_by_char(triggers::design_decision{}, draft_early);
  // "each block handles" ends its sentence at "row." and "I'll use ... warp-level" at "sum.";
  // "tile size" and "each thread computes" in the last paragraph share one sentence that ends the text.
  REQUIRE(fires.size() == 3);
  CHECK(fires[0] == after(draft_early, "one row.", 1));
  CHECK(fires[1] == after(draft_early, "the sum.", 1));
  CHECK(fires[2] == after(draft_early, "strided slice).", 1));
}

TEST_CASE("design_decision carries think-then-write traces without fences") {
  const auto fires = char_by_char(triggers::design_decision{}, think_then_write);
  // "The plan is ... each thread computes" is one clause (ends at "vectorized;"); "A grid-stride loop" another.
  REQUIRE(fires.size() == 2);
  CHECK(fires[0] == after(think_then_write, "loads are vectorized;", 1));
  CHECK(fires[1] == after(think_then_write, "at this size.", 1));
}

TEST_CASE("phrases inside code fences do not fire unless prose_only is off") {
  const std::string text = "```cuda\n// each thread computes one element\n```\nDone.\n";
  CHECK(char_by_char(triggers::design_decision{}, text).empty());
  CHECK(char_by_char(triggers::design_decision{{.prose_only = false}}, text).size() == 1);
}

TEST_CASE("phrase matching is case-insensitive, whole-word, and reads typographic apostrophes") {
  triggers::design_decision::params p{.phrases = {"use shared memory", "I'll use"}};
  CHECK(char_by_char(triggers::design_decision{p}, "We USE SHARED MEMORY here.\n").size() == 1);
  CHECK(char_by_char(triggers::design_decision{p}, "We reuse shared memory here.\n").empty());
  CHECK(char_by_char(triggers::design_decision{p}, "So I\xE2\x80\x99ll use tiles.\n").size() == 1);
}

TEST_CASE("a phrase with no sentence end fires after max_wait_chars") {
  const std::string text = "I'll use " + std::string(100, 'x');
  const auto fires = char_by_char(triggers::design_decision{{.max_wait_chars = 20}}, text);
  CHECK(fires == std::vector<std::size_t>{after(text, "I'll use", 21)});
}

TEST_CASE("implementation_hint fires on write and revision cues in both trace styles") {
  const auto draft = char_by_char(triggers::implementation_hint{}, draft_early);
  REQUIRE(draft.size() == 2);
  CHECK(draft[0] == after(draft_early, "a first version:", 1));
  CHECK(draft[1] == after(draft_early, "block reduction:", 1));

  const auto think = char_by_char(triggers::implementation_hint{}, think_then_write);
  REQUIRE(think.size() == 2);
  CHECK(think[0] == after(think_then_write, "Now the kernel:", 1));
  CHECK(think[1] == after(think_then_write, "with a scalar loop;", 1));  // "The kernel will ..."
}

TEST_CASE("function_body_complete fires when a __global__ body closes, in fences and in prose") {
  const auto draft = char_by_char(triggers::function_body_complete{}, draft_early);
  REQUIRE(draft.size() == 2);  // braces in comments and string literals are skipped
  CHECK(draft[0] == draft_early.find("}\n```") + 1);
  CHECK(draft[1] == draft_early.find("}\n```", draft[0]) + 1);

  const auto think = char_by_char(triggers::function_body_complete{}, think_then_write);
  CHECK(think == std::vector<std::size_t>{after(think_then_write, "0.f; } }")});
}

TEST_CASE("function_body_complete ignores prose that mentions __global__ without a body") {
  const std::string text =
      "A __global__ function cannot return a value; so the result goes to y. Later { braces } in prose.\n";
  CHECK(char_by_char(triggers::function_body_complete{}, text).empty());
  const std::string abandoned = "```cuda\n__global__ void k(int* x) {\n  x[0] = 1;\n```\nThen { and } later.\n";
  CHECK(char_by_char(triggers::function_body_complete{}, abandoned).empty());
}

TEST_CASE("function_body_complete is not blinded by comment or quote marks in the prose before a function") {
  const std::string text =
      "See https://docs.nvidia.com, files like src/*.cu and Let's \"go. Now __global__ void k(int* x) { x[0] = 1; } done";
  CHECK(char_by_char(triggers::function_body_complete{}, text) == std::vector<std::size_t>{after(text, "x[0] = 1; }")});
}

TEST_CASE("function_body_complete fires for a rewrite that follows an abandoned inline draft") {
  const std::string text =
      "__global__ void k(int* x) { if (x) { x[0] = 1; Hmm, no, simpler: __global__ void k(int* x) { x[0] = 2; } ok";
  CHECK(char_by_char(triggers::function_body_complete{}, text) == std::vector<std::size_t>{after(text, "x[0] = 2; }")});
}

TEST_CASE("function_body_complete still fires for a body whose comment mentions __global__") {
  const std::string text = "__global__ void k(int* x) {\n  // a __global__ void f() cannot return\n  x[0] = 1;\n}\n";
  CHECK(char_by_char(triggers::function_body_complete{}, text) == std::vector<std::size_t>{text.size() - 1});
}

TEST_CASE("text triggers fire at the same places whatever the chunking") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> size(1, 40);
  for (const auto text : {draft_early, think_then_write}) {
    for (const any_trigger& proto :
         {any_trigger(triggers::fence_closed{}), any_trigger(triggers::design_decision{}),
          any_trigger(triggers::implementation_hint{}), any_trigger(triggers::function_body_complete{})}) {
      const auto fine = char_by_char(proto, text);
      for (int round = 0; round < 5; ++round) {
        std::vector<std::size_t> sizes;
        for (int i = 0; i < 64; ++i) sizes.push_back(size(rng));
        const auto coarse = fire_offsets(proto, text, sizes);
        // Expected: each fine fire reported at the end of the chunk holding its character.
        std::vector<std::size_t> ends, expected;
        for (std::size_t pos = 0, k = 0; pos < text.size(); ++k) ends.push_back(pos = std::min(text.size(), pos + sizes[k % sizes.size()]));
        for (auto f : fine) {
          const auto e = *std::lower_bound(ends.begin(), ends.end(), f);
          if (expected.empty() || expected.back() != e) expected.push_back(e);
        }
        INFO(proto.name() << " round " << round);
        CHECK(coarse == expected);
      }
    }
  }
}

TEST_CASE("token_interval fires once per crossed multiple of its interval") {
  triggers::token_interval t{{.samples = 3, .every_tokens = 100}};
  std::vector<std::uint64_t> fired_at;
  for (std::uint64_t tokens : {50, 99, 100, 150, 260, 299, 300, 301}) {
    if (auto f = t.on_chunk({.text = "", .new_from = 0, .tokens = tokens}, {})) {
      CHECK(f->samples == 3);
      fired_at.push_back(tokens);
    }
  }
  CHECK(fired_at == std::vector<std::uint64_t>{100, 260, 300});
}

TEST_CASE("idle_resources fires on idle validation with an empty queue and nothing in flight, once per min_tokens") {
  triggers::idle_resources t{{.samples = 1, .min_tokens = 500}};
  const trigger_context idle{.idle_validation = 1};
  auto at = [&](std::uint64_t tokens, trigger_context c) { return t.on_chunk({.tokens = tokens}, c).has_value(); };
  CHECK_FALSE(at(400, idle));                                           // prefix too short
  CHECK_FALSE(at(600, {.idle_validation = 0}));                         // nothing idle
  CHECK_FALSE(at(600, {.idle_validation = 2, .validation_queue = 1}));  // work is queued
  CHECK_FALSE(at(600, {.idle_validation = 2, .forks_in_flight = 1}));   // a fork will feed it soon
  CHECK(at(600, idle));
  CHECK_FALSE(at(900, idle));  // less than min_tokens since the last fire
  CHECK(at(1100, idle));
}

TEST_CASE("never never fires") {
  triggers::never t;
  CHECK_FALSE(t.on_chunk({.text = draft_early, .new_from = 0, .tokens = 5000}, {.idle_validation = 8}));
  CHECK(char_by_char(triggers::never{}, draft_early).empty());
}

TEST_CASE("any_of reports the first member that fires and keeps every member's state current") {
  triggers::any_of both{triggers::fence_closed{{.samples = 3}}, triggers::function_body_complete{{.samples = 5}}};
  std::vector<std::string> names;
  const auto fires = fire_offsets(both, draft_early, {1}, &names);
  // Body closes first, then its fence: four fires, alternating members.
  CHECK(names == std::vector<std::string>{"function_body_complete", "fence_closed", "function_body_complete", "fence_closed"});

  // Both fire on the same chunk: the first listed wins, and the other is not left behind.
  triggers::any_of t{triggers::fence_closed{{.samples = 3}}, triggers::function_body_complete{{.samples = 5}}};
  const std::string text = "```cuda\n__global__ void k() { }\n```\n```cuda\n__global__ void k() { }\n```\n";
  auto f = t.on_chunk({.text = text, .new_from = 0, .tokens = 10}, {});
  REQUIRE(f);
  CHECK(*f == trigger_fire{"fence_closed", 3});
}

TEST_CASE("the gate drops fires below the token gap, prefix, round and in-flight limits") {
  triggers::gated t{always{}, {.min_gap_tokens = 100, .min_prefix_tokens = 300, .max_forks_per_round = 2,
                               .max_forks_in_flight = 1}};
  auto fires = [&](std::uint64_t tokens, trigger_context c) { return t.on_chunk({.tokens = tokens}, c).has_value(); };
  const trigger_context ok{.tokens_since_fork = 500};
  CHECK_FALSE(fires(299, ok));
  CHECK(fires(300, ok));
  CHECK_FALSE(fires(400, {.tokens_since_fork = 99}));
  CHECK(fires(400, {.tokens_since_fork = 100}));
  CHECK_FALSE(fires(900, {.forks_in_flight = 1, .tokens_since_fork = 500}));
  CHECK_FALSE(fires(900, {.tokens_since_fork = 500, .forks_this_round = 2}));
  CHECK(fires(900, {.forks_in_flight = 0, .tokens_since_fork = 500, .forks_this_round = 1}));
  CHECK(t.name() == "always");
}

TEST_CASE("a gated text trigger keeps scanning while its gate is shut") {
  triggers::gated t{triggers::fence_closed{}, {.min_prefix_tokens = 1000}};
  const std::string first = "```cuda\na\n```\n";
  CHECK_FALSE(t.on_chunk({.text = first, .new_from = 0, .tokens = 10}, {.tokens_since_fork = 10}));
  const std::string both = first + "```cuda\nb\n```\n";
  CHECK(t.on_chunk({.text = both, .new_from = first.size(), .tokens = 2000}, {.tokens_since_fork = 2000}));
}

TEST_CASE("choose_fork asks for one sample where a fork's samples repeat each other, and for all where they differ") {
  const fork_pricing m{.slowdown_per_sequence = 0.03, .prior_win = 0.2, .prior_forks = 4, .sample_tokens = 500,
                       .reasoning_tokens = 6000};
  const trigger_context base{.sequences = 21, .main_streams = 20};
  // No record yet: prior_win is the chance of the 3 samples asked for, and every sample counts (prior_distinct 1).
  // K = 1, 2, 3 win with 1 - 0.8^(K/3); B - C = 199, 369, 515 stream-tokens: all three.
  auto v = choose_fork(m, "idle_resources", 3, 2000, base);
  CHECK(v.samples == 3);
  CHECK(v.chance == Approx(0.2));
  CHECK(appraise_fork(m, "idle_resources", 1, 2000, base, 3).chance == Approx(1 - std::pow(0.8, 1.0 / 3)));

  // 20 forks of 3 samples, 6 wins: p = (6 + 0.8) / 24. When each fork found one new kernel at most,
  // d = 4 / 44 and a third sample adds little chance for its cost: one sample.
  fork_yields redundant, distinct;
  for (int i = 0; i < 20; ++i) {
    redundant.add_fork("idle_resources", 3, 1);
    distinct.add_fork("idle_resources", 3, 3);
  }
  for (int i = 0; i < 6; ++i) {
    redundant.add_win("idle_resources");
    distinct.add_win("idle_resources");
  }
  auto c = base;
  c.run_yields = &redundant;
  v = choose_fork(m, "idle_resources", 3, 2000, c);
  CHECK(v.distinct == Approx(4.0 / 44));
  CHECK(v.samples == 1);
  const double p = 6.8 / 24, tries3 = 1 + 2 * (4.0 / 44);
  CHECK(v.chance == Approx(1 - std::pow(1 - p, 1 / tries3)));
  CHECK(v.go);
  // When every sample found its own kernel, d = 1 and all three pay.
  c.run_yields = &distinct;
  v = choose_fork(m, "idle_resources", 3, 2000, c);
  CHECK(v.distinct == Approx(1.0));
  CHECK(v.samples == 3);
  // A fork nothing pays for is refused, whatever its size.
  fork_yields barren;
  for (int i = 0; i < 40; ++i) barren.add_fork("idle_resources", 3, 0);
  c.run_yields = &barren;
  CHECK_FALSE(choose_fork(m, "idle_resources", 3, 2000, c).go);
}

TEST_CASE("a win that ends the whole round saves every lane's remaining reasoning") {
  const fork_pricing m{.slowdown_per_sequence = 0.03, .prior_win = 0.2, .prior_forks = 4, .sample_tokens = 500,
                       .reasoning_tokens = 6000};
  // N = 21; the win stops M = 4 decoding lanes that wrote 2000 + 3 * 1000 tokens and drops W = 2 waiting ones:
  // R = 4 * 6000 - 5000 + 2 * 6000 = 31000; the other 17 sequences gain 17 * 0.03 / (1 + 0.03 * 16) each.
  trigger_context c{.sequences = 21, .main_streams = 20, .win_stops = 4, .win_stops_tokens = 5000, .win_drops = 2};
  auto v = appraise_fork(m, "fence_closed", 2, 2000, c);
  CHECK(v.remaining == Approx(31000));
  CHECK(v.benefit == Approx(0.2 * 31000 * (1 + 17 * 0.03 / 1.48)));
  CHECK(v.cost == Approx(393.75));  // what the fork costs does not depend on what a win stops
  // M = 1 and W = 0 is the one-lane formula, whatever win_stops_tokens says.
  trigger_context one{.sequences = 21, .main_streams = 20, .win_stops = 1, .win_stops_tokens = 99999};
  CHECK(appraise_fork(m, "fence_closed", 2, 2000, one).benefit == Approx(0.2 * 4000 * (1 + 0.6 / 1.57)));
  // Lanes past their expected length keep the floor: 10% of 4 * 6000.
  trigger_context late{.sequences = 21, .main_streams = 20, .win_stops = 4, .win_stops_tokens = 30000};
  CHECK(appraise_fork(m, "fence_closed", 2, 9000, late).remaining == Approx(2400));
}

TEST_CASE("copies of a trigger have independent scanning state") {
  any_trigger proto = triggers::fence_closed{};
  const std::string a = "```cuda\nx\n";
  CHECK_FALSE(proto.on_chunk({.text = a, .new_from = 0}, {}));
  any_trigger copy = proto;  // mid-fence
  any_trigger fresh = triggers::fence_closed{};
  const std::string b = a + "```\n";
  CHECK(copy.on_chunk({.text = b, .new_from = a.size()}, {}));
  CHECK(proto.on_chunk({.text = b, .new_from = a.size()}, {}));
  CHECK_FALSE(fresh.on_chunk({.text = "```\n", .new_from = 0}, {}));  // a close without an open
}

TEST_CASE("a resource tick with no new text fires no text trigger") {
  any_trigger t = triggers::design_decision{};
  const std::string text = "I'll use tiles";
  CHECK_FALSE(t.on_chunk({.text = text, .new_from = 0, .tokens = 4}, {}));
  CHECK_FALSE(t.on_chunk({.text = text, .new_from = text.size(), .tokens = 4}, {.idle_validation = 3}));
  CHECK(t.on_chunk({.text = text + ".\n", .new_from = text.size(), .tokens = 5}, {}));
}

TEST_CASE("the paper's trigger set: text triggers behind one gate, idle resources behind another") {
  const auto cfg = paper_trigger().config();
  REQUIRE(cfg.contains("any_of"));
  REQUIRE(cfg["any_of"].size() == 2);
  const auto& text = cfg["any_of"][0];
  const auto& idle = cfg["any_of"][1];
  std::vector<std::string> kinds;
  for (const auto& m : text["any_of"]) kinds.push_back(m.begin().key());
  CHECK(kinds == std::vector<std::string>{"fence_closed", "design_decision", "implementation_hint",
                                          "function_body_complete"});
  CHECK(text["gate"]["min_gap_tokens"] == 256);
  CHECK(text["gate"]["max_forks_per_round"] == 24);
  REQUIRE(idle.contains("idle_resources"));
  CHECK(idle["idle_resources"]["samples"] == 3);
  CHECK(idle["idle_resources"]["max_backoff"] == 3);  // 128 tokens apart, up to 1024 after barren forks
  CHECK(idle["gate"]["min_gap_tokens"] == 0);  // idle GPUs are refilled without waiting for design text
  CHECK(idle["gate"]["max_validation_queue"] == 16);
  // The configuration rebuilds the same trigger.
  auto rebuilt = make_trigger(cfg);
  REQUIRE(rebuilt);
  CHECK(rebuilt->config() == cfg);

  // It forks on a draft-early trace once enough reasoning has passed.
  any_trigger t = paper_trigger();
  std::string big(2000, ' ');
  big += std::string(draft_early);
  int fired = 0;
  for (std::size_t end = 1; end <= big.size(); ++end)
    if (t.on_chunk({.text = std::string_view(big).substr(0, end), .new_from = end - 1, .tokens = end / 4},
                   {.tokens_since_fork = 1000}))
      ++fired;
  CHECK(fired >= 4);
}

TEST_CASE("make_trigger builds the documented JSON config") {
  auto t = make_trigger(nlohmann::json::parse(R"({
      "any_of": [{"fence_closed": {"samples": 2}}, {"design_decision": {"samples": 2}}],
      "gate": {"min_gap_tokens": 256, "max_forks_per_round": 24}})"));
  REQUIRE(t);
  CHECK(t->config()["gate"]["min_gap_tokens"] == 256);
  CHECK(t->config()["any_of"][1]["design_decision"]["samples"] == 2);
  // The built trigger behaves: a cuda fence closes after enough tokens.
  CHECK(t->on_chunk({.text = "```cuda\nk\n```\n", .new_from = 0, .tokens = 300}, {.tokens_since_fork = 300}));
}

TEST_CASE("trigger configs round-trip through JSON") {
  const std::vector<any_trigger> all{
      default_trigger(),
      triggers::fence_closed{{.samples = 4, .languages = {"cuda"}}},
      triggers::design_decision{{.samples = 1, .phrases = {"tile"}, .prose_only = false, .max_wait_chars = 9}},
      triggers::implementation_hint{},
      triggers::function_body_complete{{.samples = 7}},
      triggers::token_interval{{.samples = 2, .every_tokens = 333}},
      triggers::idle_resources{{.samples = 2, .min_tokens = 64}},
      triggers::never{},
      triggers::gated{triggers::never{}, {.min_gap_tokens = 5}},
  };
  for (const auto& t : all) {
    auto back = make_trigger(t.config());
    REQUIRE(back);
    CHECK(back->config() == t.config());
    CHECK(back->name() == t.name());
  }
  CHECK(specgen::detail::write_fields(triggers::fence_closed::params{}) ==
        nlohmann::json::parse(R"({"samples": 2, "languages": ["cuda", "cu", "cpp", "c++"]})"));
  CHECK(make_trigger("fence_closed")->config() == config_of(triggers::fence_closed{}));
  CHECK(make_trigger("default")->config() == default_trigger().config());
  CHECK(make_trigger("paper")->config() == paper_trigger().config());
}

TEST_CASE("the default trigger is the paper's set with every fire weighed against its cost") {
  const auto cfg = default_trigger().config();
  const auto paper = paper_trigger().config();
  REQUIRE(cfg["any_of"].size() == 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(cfg["any_of"][i]["gate"] == paper["any_of"][i]["gate"]);
    CHECK(cfg["any_of"][i]["weigh"] == specgen::detail::write_fields(fork_pricing{}));
  }
  auto rebuilt = make_trigger(cfg);
  REQUIRE(rebuilt);
  CHECK(rebuilt->config() == cfg);
}

TEST_CASE("appraise_fork prices a fork by the slowdown it causes and the remaining reasoning a win saves") {
  const fork_pricing m{.slowdown_per_sequence = 0.03, .prior_win = 0.2, .prior_forks = 4, .sample_tokens = 500,
                       .reasoning_tokens = 6000};
  // N = 21 sequences; K = 2 samples of 500 tokens: C = 21 * 0.03 * 2 * 500 / (1 + 0.03 * 20) = 393.75.
  trigger_context c{.sequences = 21, .main_streams = 20};
  auto v = appraise_fork(m, "fence_closed", 2, 2000, c);
  CHECK(v.chance == Approx(0.2));
  CHECK(v.remaining == Approx(4000));
  CHECK(v.cost == Approx(393.75));
  // B = 0.2 * 4000 * (1 + 20 * 0.03 / (1 + 0.03 * 19)) = 800 * 1.38217 = 1105.7.
  CHECK(v.benefit == Approx(800 * (1 + 0.6 / 1.57)));
  CHECK_FALSE(v.saturated);
  CHECK(v.go);

  // The record of wins moves the chance: the run's towards the prior, the search's towards the run's.
  fork_yields run, search;
  for (int i = 0; i < 12; ++i) run.add_fork("fence_closed", 2, 0);
  search.add_fork("fence_closed", 2, 0);
  c.run_yields = &run;
  c.search_yields = &search;
  const double p_run = (0 + 0.2 * 4) / (12 + 4.0);
  v = appraise_fork(m, "fence_closed", 2, 2000, c);
  CHECK(v.chance == Approx((0 + p_run * 4) / (1 + 4.0)));
  CHECK_FALSE(v.go);  // 0.04 * 4000 * 1.38 = 221 < 394
  run.add_win("fence_closed");
  CHECK(run.of("fence_closed") == fork_yield{.forks = 12, .fresh = 0, .wins = 1, .samples = 24, .extra_fresh = 0});
  CHECK(run.of("design_decision") == fork_yield{});
  CHECK(run.all().wins == 1);

  // A stream past its expected length still has the floor left; a full server raises the bar.
  trigger_context late{.sequences = 21, .main_streams = 20, .lanes_waiting = true, .expected_tokens = 3000};
  v = appraise_fork(m, "design_decision", 2, 5000, late);
  CHECK(v.remaining == Approx(300));
  CHECK(v.saturated);
  trigger_context busy{.sequences = 60, .main_streams = 60};
  CHECK(appraise_fork(m, "x", 1, 0, busy).saturated);  // 60 streams decode at 1 / (1 + 0.03 * 59) < 0.5

  // A weighed trigger drops the fires that do not pay.
  triggers::weighed w{triggers::token_interval{{.samples = 2, .every_tokens = 100}}, m};
  CHECK(w.on_chunk({.text = "", .new_from = 0, .tokens = 100}, {.sequences = 21, .main_streams = 20}));
  const fork_pricing dear{.slowdown_per_sequence = 0.03, .prior_win = 0.001, .prior_forks = 4};
  triggers::weighed w2{triggers::token_interval{{.samples = 2, .every_tokens = 100}}, dear};
  CHECK_FALSE(w2.on_chunk({.text = "", .new_from = 0, .tokens = 100}, {.sequences = 21, .main_streams = 20}));
  auto back = make_trigger(any_trigger(w2).config());
  REQUIRE(back);
  CHECK(back->config()["weigh"]["prior_win"] == 0.001);
  auto bad = make_trigger(nlohmann::json::parse(R"({"never": {}, "weigh": {"prior_win": 2}})"));
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().what(), Catch::Contains("/weigh/prior_win"));
}

TEST_CASE("make_trigger rejects bad configs with messages that say what to fix") {
  auto message = [](const char* text) {
    auto t = make_trigger(nlohmann::json::parse(text));
    REQUIRE_FALSE(t);
    return t.error().what();
  };
  using Catch::Matchers::Contains;
  using Catch::Matchers::StartsWith;
  CHECK_THAT(message(R"({"fence_close": {}})"), Contains("/fence_close: unknown trigger kind 'fence_close' (did you mean 'fence_closed'?)"));
  CHECK_THAT(message(R"({"fence_closed": {"sample": 2}})"), Contains("/fence_closed/sample: unknown key 'sample' (did you mean 'samples'?)"));
  CHECK_THAT(message(R"({"fence_closed": {"samples": 0}})"), Contains("/fence_closed/samples: must be an integer in [1, 64], got 0"));
  CHECK_THAT(message(R"({"fence_closed": {"samples": "two"}})"), Contains("/fence_closed/samples: ") && Contains("integer"));
  CHECK_THAT(message(R"({"design_decision": {"phrases": []}})"), Contains("phrases must not be empty"));
  CHECK_THAT(message(R"({"any_of": {"never": {}}})"), Contains("non-empty array"));
  CHECK_THAT(message(R"({"any_of": [{"never": {}}, {"bogus": {}}]})"), StartsWith("/any_of/1/bogus: unknown trigger kind 'bogus'"));
  CHECK_THAT(message(R"({"never": {}, "gate": {"max_forks_in_flight": -1}})"),
             Contains("/gate/max_forks_in_flight: must be an integer in [0, 2147483647], got -1"));
  CHECK_THAT(message(R"({"never": {}, "fence_closed": {}})"), Contains("both"));
  CHECK_THAT(message(R"(42)"), Contains("expected a trigger kind's name or an object"));
  CHECK_THAT(message(R"({"never": {"x": 1}})"), Contains("takes no parameters"));
}

TEST_CASE("invalid params in code are a programming error") {
  CHECK_THROWS_AS(triggers::fence_closed({.samples = 0}), std::invalid_argument);
  CHECK_THROWS_AS(triggers::token_interval({.samples = 1, .every_tokens = 0}), std::invalid_argument);
}

TEST_CASE("idle_resources refills an idle pool only while few of the stream's forks are generating") {
  any_trigger t = triggers::idle_resources{{.samples = 3, .min_tokens = 100, .max_in_flight = 2}};
  const std::string text = "thinking";
  auto tick = [&](std::uint64_t tokens, int idle, std::size_t queue, int in_flight) {
    return t.on_chunk({.text = text, .new_from = text.size(), .tokens = tokens},
                      {.idle_validation = idle, .validation_queue = queue, .forks_in_flight = in_flight});
  };
  CHECK_FALSE(tick(150, 0, 0, 0));  // nothing idle
  CHECK_FALSE(tick(150, 1, 2, 0));  // idle, but work is already queued for it
  CHECK_FALSE(tick(150, 1, 0, 2));  // two forks already on their way
  auto fire = tick(150, 1, 0, 1);
  REQUIRE(fire);
  CHECK(fire->samples == 3);
  CHECK_FALSE(tick(200, 1, 0, 0));  // within min_tokens of the last fire
  CHECK(tick(260, 1, 0, 0));
  CHECK_FALSE(make_trigger(nlohmann::json::parse(R"({"idle_resources": {"max_in_flight": 0}})")));
}

TEST_CASE("idle_resources backs off after barren forks and returns to its spacing after a fruitful one") {
  triggers::idle_resources t{{.samples = 3, .min_tokens = 100, .max_backoff = 2}};
  auto at = [&](std::uint64_t tokens, int barren) {
    return t.on_chunk({.tokens = tokens}, {.idle_validation = 1, .barren_forks = barren}).has_value();
  };
  CHECK(at(100, 0));
  CHECK_FALSE(at(250, 1));  // one barren fork: 200 tokens apart
  CHECK(at(300, 1));
  CHECK_FALSE(at(650, 2));  // two: 400
  CHECK(at(700, 2));
  CHECK_FALSE(at(1050, 5));  // capped at 2 doublings: 400
  CHECK(at(1100, 5));
  CHECK(at(1200, 0));  // a fork yielded a new kernel: back to 100
  triggers::idle_resources fixed{{.min_tokens = 100}};  // max_backoff 0: barren forks change nothing
  CHECK(fixed.on_chunk({.tokens = 100}, {.idle_validation = 1, .barren_forks = 7}));
  CHECK(fixed.on_chunk({.tokens = 200}, {.idle_validation = 1, .barren_forks = 7}));
  CHECK_FALSE(make_trigger(nlohmann::json::parse(R"({"idle_resources": {"max_backoff": -1}})")));
  CHECK_FALSE(make_trigger(nlohmann::json::parse(R"({"idle_resources": {"max_backoff": 40}})")));
}

// ---- hostile and careless configs ------------------------------------------------------------

namespace {
/// `{"any_of": [{"any_of": [ ... {"never": {}} ... ]}]}`, `depth` levels of any_of.
nlohmann::json nested_any_of(int depth) {
  nlohmann::json j = "never";
  for (int i = 0; i < depth; ++i) j = nlohmann::json{{"any_of", nlohmann::json::array({std::move(j)})}};
  return j;
}
}  // namespace

TEST_CASE("a trigger config nests any_of at most 16 deep, and a deeper one is refused at once with the limit") {
  CHECK(make_trigger(nested_any_of(16)));
  for (int depth : {17, 100'000}) {
    const auto t = make_trigger(nested_any_of(depth));
    REQUIRE_FALSE(t);
    CHECK_THAT(t.error().message, Catch::Contains("nested more than 16 levels") && Catch::Contains("flatten"));
  }
}

TEST_CASE("K, token counts and waits of triggers are read within their ranges") {
  using Catch::Matchers::Contains;
  auto message = [](const char* text) {
    auto t = make_trigger(nlohmann::json::parse(text));
    REQUIRE_FALSE(t);
    return t.error().what();
  };
  CHECK(make_trigger(nlohmann::json::parse(R"({"fence_closed": {"samples": 64}})")));
  CHECK_THAT(message(R"({"fence_closed": {"samples": 1000000}})"), Contains("[1, 64]") && Contains("1000000"));
  CHECK_THAT(message(R"({"function_body_complete": {"samples": 2147483647}})"), Contains("[1, 64]"));
  CHECK_THAT(message(R"({"idle_resources": {"samples": 4294967296}})"), Contains("/idle_resources/samples: "));
  CHECK_THAT(message(R"({"token_interval": {"every_tokens": 18446744073709551615}})"), Contains("[1, 1000000]"));
  CHECK_THAT(message(R"({"design_decision": {"max_wait_chars": 2147483647}})"), Contains("[0, 100000]"));
  CHECK_THAT(message(R"({"never": {}, "gate": {"min_gap_tokens": 1e30}})"), Contains("/gate/min_gap_tokens: "));
  CHECK_THROWS_AS(triggers::fence_closed({.samples = 1'000'000}), std::invalid_argument);
}

TEST_CASE("an empty phrase or language is refused: it would match nothing, or everything") {
  using Catch::Matchers::Contains;
  for (const char* text : {R"({"design_decision": {"phrases": [""]}})", R"({"implementation_hint": {"phrases": ["Let me", "  "]}})",
                           R"({"fence_closed": {"languages": ["cuda", ""]}})"}) {
    const auto t = make_trigger(nlohmann::json::parse(text));
    REQUIRE_FALSE(t);
    CHECK_THAT(t.error().message, Contains("is empty"));
  }
  const auto long_phrase = make_trigger(nlohmann::json{{"design_decision", {{"phrases", {std::string(300, 'a')}}}}});
  REQUIRE_FALSE(long_phrase);
  CHECK_THAT(long_phrase.error().message, Contains("at most 256"));
}

