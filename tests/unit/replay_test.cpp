#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/trace.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

using namespace specgen;
using namespace specgen::replay;

namespace {

/// Records everything a stream delivers, with the time it arrived.
struct recorder final : stream_sink {
  explicit recorder(executor& e) : exec(e) {}
  struct got {
    stream_chunk chunk;
    timestamp at;
  };
  executor& exec;
  std::vector<got> chunks;
  std::vector<stream_end> ends;
  std::function<void(const stream_chunk&)> on_each;
  void on_chunk(const stream_chunk& c) override {
    chunks.push_back({c, exec.now()});
    if (on_each) on_each(c);
  }
  void on_end(const stream_end& e) override { ends.push_back(e); }

  [[nodiscard]] std::string text(bool reasoning, int sample = 0) const {
    std::string s;
    for (const auto& g : chunks)
      if (g.chunk.reasoning == reasoning && g.chunk.sample == sample) s += g.chunk.text;
    return s;
  }
  [[nodiscard]] std::vector<token_id> ids(bool reasoning, int sample = 0) const {
    std::vector<token_id> v;
    for (const auto& g : chunks)
      if (g.chunk.reasoning == reasoning && g.chunk.sample == sample)
        v.insert(v.end(), g.chunk.tokens.begin(), g.chunk.tokens.end());
    return v;
  }
};

answer_text kernel_answer(const std::string& tag) {
  std::string text = "```cuda\nextern \"C\" __global__ void k() { /* " + tag + " */ }\n```\n```plan\nlaunch k grid(1) block(1) args()\n```\n";
  return {text, 30};
}

trace small_trace(std::string task = "softmax", int round = 0, std::optional<int> lane = 0) {
  trace t;
  t.task = std::move(task);
  t.round = round;
  t.lane = lane;
  t.id = fmt::format("{}/r{}/l{}", t.task, round, lane ? std::to_string(*lane) : "any");
  t.style = trace_style::draft_early;
  t.segments = {{.text = "Let me think about the row reduction. ", .tokens = 10, .filler = false, .topic = ""},
                {.text = "", .tokens = 100, .filler = true, .topic = "memory coalescing"},
                {.text = "```cuda\n__global__ void draft() {}\n```\n", .tokens = 10, .filler = false, .topic = ""}};
  t.answer = {"Final answer: the kernel below.", 20};
  t.forks = {{.at_token = 50, .samples = {kernel_answer("early-a"), kernel_answer("early-b")}},
             {.at_token = 115, .samples = {kernel_answer("late")}}};
  return t;
}

/// Timing constants that make expected times easy to write down.
replay_params round_params() {
  return {.decode_tokens_per_s = 100.0, .prefill_tokens_per_s = 1000.0, .first_token_overhead_s = 0.5,
          .slowdown_per_sequence = 0.5, .chunk_tokens = 10};
}

/// A reasoning request (built field by field: the request types have members without defaults).
reasoning_request ask(std::string task, std::string prompt = "p", int max_tokens = 32768) {
  reasoning_request r;
  r.ctx.task = std::move(task);
  r.prompt = std::move(prompt);
  r.params.max_tokens = max_tokens;
  return r;
}

fork_request fork_of(stream_id parent, std::vector<token_id> prefix, int samples = 1, std::optional<kv_lease> kv = {}) {
  fork_request f;
  f.parent = parent;
  f.reasoning_prefix = std::move(prefix);
  f.samples = samples;
  f.kv = kv;
  return f;
}

std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("specgen_replay_test_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

static_assert(specgen::backend<replay_model>);

TEST_CASE("a main stream emits its reasoning then its answer, and chunk texts concatenate to the trace") {
  event_loop<virtual_clock> loop;
  const trace t = small_trace();
  replay_model model(loop, {t}, round_params());
  recorder sink(loop);
  auto id = model.start_reasoning(ask("softmax", "write softmax"), sink);
  REQUIRE(id);
  CHECK(sink.chunks.empty());  // nothing is delivered from inside start_reasoning
  loop.run();

  CHECK(sink.text(true) == expand_reasoning(t).text());
  CHECK(sink.text(false) == t.answer.text);
  CHECK(sink.ids(true).size() == 120);
  CHECK(sink.ids(false).size() == 20);
  bool answer_started = false;
  for (const auto& g : sink.chunks) {
    if (!g.chunk.reasoning) answer_started = true;
    CHECK_FALSE((answer_started && g.chunk.reasoning));
    CHECK(g.chunk.tokens.size() <= 10);
    CHECK(g.chunk.id == *id);
  }
  REQUIRE(sink.ends.size() == 1);
  CHECK(sink.ends[0].reason == finish_reason::stop);
  CHECK(sink.ends[0].used.completion_tokens == 140);
  CHECK(sink.ends[0].used.reasoning_tokens == 120);
  CHECK(sink.ends[0].used.prompt_tokens == estimate_tokens("write softmax"));
  CHECK(model.tokens_emitted() == 140);
  CHECK(model.tokens_emitted(*id) == 140);
  CHECK(model.active_streams() == 0);
}

TEST_CASE("token ids are deterministic, in the vocabulary, and the same for every replay of a trace") {
  auto run_once = [] {
    event_loop<virtual_clock> loop;
    replay_model model(loop, {small_trace()}, {.vocab_size = 1000});
    recorder sink(loop);
    REQUIRE(model.start_reasoning(ask("softmax", "p"), sink));
    loop.run();
    return sink.ids(true);
  };
  const auto a = run_once(), b = run_once();
  CHECK(a == b);
  for (token_id id : a) CHECK((id >= 0 && id < 1000));
}

TEST_CASE("a fork carrying exactly the emitted prefix is accepted and answers from the matching fork point") {
  event_loop<virtual_clock> loop;
  replay_model model(loop, {small_trace()}, round_params());
  recorder main(loop), forks(loop);
  std::vector<token_id> received;
  expected<stream_id, error> fork_id = unexpected(error{"not forked"});
  auto id = model.start_reasoning(ask("softmax", "p"), main);
  REQUIRE(id);
  main.on_each = [&](const stream_chunk& c) {
    received.insert(received.end(), c.tokens.begin(), c.tokens.end());
    if (received.size() == 60 && !fork_id)
      fork_id = model.fork(fork_of(*id, received, 3), forks);
  };
  loop.run();
  REQUIRE(fork_id);
  REQUIRE(forks.ends.size() == 3);
  // p = 60: the fork point at 50 answers, sample i gets samples[i % 2].
  CHECK(forks.text(false, 0) == kernel_answer("early-a").text);
  CHECK(forks.text(false, 1) == kernel_answer("early-b").text);
  CHECK(forks.text(false, 2) == kernel_answer("early-a").text);
  for (const auto& g : forks.chunks) CHECK_FALSE(g.chunk.reasoning);
  for (const auto& e : forks.ends) CHECK(e.reason == finish_reason::stop);
}

TEST_CASE("a fork whose prefix differs from what the stream emitted is rejected") {
  event_loop<virtual_clock> loop;
  replay_model model(loop, {small_trace()}, round_params());
  recorder main(loop), forks(loop);
  std::vector<token_id> received;
  std::vector<error> errors;
  auto id = model.start_reasoning(ask("softmax", "p"), main);
  REQUIRE(id);
  main.on_each = [&](const stream_chunk& c) {
    received.insert(received.end(), c.tokens.begin(), c.tokens.end());
    if (received.size() != 30) return;
    auto wrong = received;
    wrong[17] = (wrong[17] + 1) % 151552;
    auto r1 = model.fork(fork_of(*id, wrong), forks);
    auto longer = received;
    longer.push_back(0);
    auto r2 = model.fork(fork_of(*id, longer), forks);
    auto r3 = model.fork(fork_of(*id + 100, received), forks);
    for (auto* r : {&r1, &r2, &r3}) {
      CHECK_FALSE(*r);
      if (!*r) errors.push_back(r->error());
    }
  };
  loop.run();
  REQUIRE(errors.size() == 3);
  CHECK_THAT(errors[0].message, Catch::Contains("differs") && Catch::Contains("token 17"));
  CHECK_THAT(errors[1].message, Catch::Contains("emitted only 30"));
  CHECK_THAT(errors[2].message, Catch::Contains("not a reasoning stream"));
  CHECK(forks.chunks.empty());
  CHECK(forks.ends.empty());
}

TEST_CASE("a fork before the first fork point answers without a kernel") {
  const trace t = small_trace();
  const fork_outcome early = outcome_of_fork(t, 49, 0);
  CHECK_FALSE(early.at_token);
  CHECK(early.answer.tokens == 40);
  CHECK(early.answer.text.find("```") == std::string::npos);
  CHECK(outcome_of_fork(t, 50, 1).answer == kernel_answer("early-b"));
  CHECK(outcome_of_fork(t, 114, 0).at_token == 50u);
  CHECK(outcome_of_fork(t, 115, 7).answer == kernel_answer("late"));
}

TEST_CASE("time to first token is the overhead plus prompt prefill, then chunks arrive at the decode rate") {
  event_loop<virtual_clock> loop;
  replay_model model(loop, {small_trace()}, round_params());
  recorder sink(loop);
  const std::string prompt(400, 'x');  // 100 tokens
  REQUIRE(model.start_reasoning(ask("softmax", prompt), sink));
  loop.run();
  REQUIRE(sink.chunks.size() == 14);
  // 0.5 s overhead + 100 / 1000 s prefill + 10 tokens / 100 tok/s.
  CHECK(sink.chunks[0].at == seconds(0.5 + 0.1 + 0.1));
  for (std::size_t i = 1; i < sink.chunks.size(); ++i) CHECK(sink.chunks[i].at - sink.chunks[i - 1].at == seconds(0.1));
  CHECK(loop.now() == seconds(0.6 + 1.4));
}

TEST_CASE("concurrent sequences slow every stream's decoding down") {
  event_loop<virtual_clock> loop;
  replay_model model(loop, {small_trace()}, round_params());
  recorder a(loop), b(loop);
  REQUIRE(model.start_reasoning(ask("softmax", "pppp"), a));
  REQUIRE(model.start_reasoning(ask("softmax", "pppp"), b));
  CHECK(model.active_sequences() == 2);
  loop.run();
  // Two sequences: 100 / (1 + 0.5 * 1) tok/s, so 10 tokens take 0.15 s.
  REQUIRE(a.chunks.size() == 14);
  CHECK(a.chunks[1].at - a.chunks[0].at == seconds(0.15));
  CHECK(b.chunks[1].at - b.chunks[0].at == seconds(0.15));
}

TEST_CASE("a fork prefills its prefix less the server's prefix cache and the KV lease, and reports the cached tokens") {
  auto fork_ttft = [](double server_hit, std::optional<kv_lease> kv, usage* used) {
    event_loop<virtual_clock> loop;
    auto params = round_params();
    params.server_prefix_hit = server_hit;
    params.fork_cue_tokens = 10;
    params.slowdown_per_sequence = 0;
    replay_model model(loop, {small_trace()}, params);
    recorder main(loop), forks(loop);
    std::vector<token_id> received;
    timestamp forked_at{-1};
    auto id = model.start_reasoning(ask("softmax", std::string(400, 'x')), main);
    main.on_each = [&](const stream_chunk& c) {
      received.insert(received.end(), c.tokens.begin(), c.tokens.end());
      if (received.size() == 100) {
        forked_at = loop.now();
        REQUIRE(model.fork(fork_of(*id, received, 2, kv), forks));
      }
    };
    loop.run();
    REQUIRE(forks.ends.size() == 2);
    const bool first_is_0 = forks.ends[0].sample == 0;
    *used = forks.ends[first_is_0 ? 0 : 1].used;
    CHECK(forks.ends[first_is_0 ? 1 : 0].used.prompt_tokens == 0);  // the request's prompt is reported once
    return forks.chunks.front().at - forked_at;
  };
  usage u;
  // Prefix = 100 prompt + 100 reasoning tokens; the cue (10) is always computed.
  CHECK(fork_ttft(1.0, std::nullopt, &u) == seconds(0.5 + 10 / 1000.0 + 0.1));
  CHECK(u.prompt_tokens == 210);
  CHECK(u.cached_prompt_tokens == 200);
  CHECK(fork_ttft(0.0, std::nullopt, &u) == seconds(0.5 + 210 / 1000.0 + 0.1));
  CHECK(u.cached_prompt_tokens == 0);
  CHECK(fork_ttft(0.5, std::nullopt, &u) == seconds(0.5 + 110 / 1000.0 + 0.1));
  CHECK(u.cached_prompt_tokens == 100);
  const kv_lease lease{.cached_tokens = 80, .fetch_time = seconds(0.02), .handle = 1};
  CHECK(fork_ttft(0.5, lease, &u) == seconds(0.5 + 0.02 + 30 / 1000.0 + 0.1));
  CHECK(u.cached_prompt_tokens == 180);
  // A lease never covers more than the prefix the server lacks.
  const kv_lease big{.cached_tokens = 1000, .fetch_time = seconds(0.02), .handle = 1};
  CHECK(fork_ttft(0.5, big, &u) == seconds(0.5 + 0.02 + 10 / 1000.0 + 0.1));
  CHECK(u.cached_prompt_tokens == 200);
}

TEST_CASE("cancel stops a stream at once and ends it with the usage of the tokens emitted") {
  event_loop<virtual_clock> loop;
  replay_model model(loop, {small_trace()}, round_params());
  recorder sink(loop);
  auto id = model.start_reasoning(ask("softmax", "p"), sink);
  REQUIRE(id);
  sink.on_each = [&](const stream_chunk&) {
    if (sink.chunks.size() == 3) {
      model.cancel(*id);
      CHECK(sink.ends.empty());  // on_end comes from the loop, not from inside cancel
    }
  };
  loop.run();
  CHECK(sink.chunks.size() == 3);
  REQUIRE(sink.ends.size() == 1);
  CHECK(sink.ends[0].reason == finish_reason::cancelled);
  CHECK(sink.ends[0].used.completion_tokens == 30);
  CHECK(sink.ends[0].used.reasoning_tokens == 30);
  CHECK(model.tokens_emitted(*id) == 30);
  CHECK(model.active_sequences() == 0);
  model.cancel(*id);  // cancelling an ended stream changes nothing
  loop.run();
  CHECK(sink.ends.size() == 1);
}

TEST_CASE("cancelling a fork ends every unfinished sample, each with its own emitted tokens") {
  event_loop<virtual_clock> loop;
  trace t = small_trace();
  t.forks[0].samples[1].tokens = 5;  // sample 1 finishes in its first chunk
  replay_model model(loop, {t}, round_params());
  recorder main(loop), forks(loop);
  std::vector<token_id> received;
  stream_id fid = 0;
  auto id = model.start_reasoning(ask("softmax", "p"), main);
  main.on_each = [&](const stream_chunk& c) {
    received.insert(received.end(), c.tokens.begin(), c.tokens.end());
    if (received.size() == 60) fid = *model.fork(fork_of(*id, received, 3), forks);
  };
  forks.on_each = [&](const stream_chunk&) {
    if (forks.chunks.size() == 3) model.cancel(fid);  // one chunk of each sample
  };
  loop.run();
  REQUIRE(forks.ends.size() == 3);
  std::map<int, stream_end> by_sample;
  for (const auto& e : forks.ends) by_sample[e.sample] = e;
  CHECK(by_sample[1].reason == finish_reason::stop);
  CHECK(by_sample[1].used.completion_tokens == 5);
  CHECK(by_sample[0].reason == finish_reason::cancelled);
  CHECK(by_sample[0].used.completion_tokens == 10);
  CHECK(by_sample[2].reason == finish_reason::cancelled);
  CHECK(by_sample[2].used.completion_tokens == 10);
  CHECK(model.tokens_emitted(fid) == 25);
  CHECK(main.ends.size() == 1);  // the parent is unaffected
  CHECK(main.ends[0].reason == finish_reason::stop);
}

TEST_CASE("max_tokens truncates a stream with finish reason length") {
  event_loop<virtual_clock> loop;
  replay_model model(loop, {small_trace()}, round_params());
  recorder sink(loop);
  REQUIRE(model.start_reasoning(ask("softmax", "p", 25), sink));
  loop.run();
  CHECK(sink.ids(true).size() == 25);
  REQUIRE(sink.ends.size() == 1);
  CHECK(sink.ends[0].reason == finish_reason::length);
}

TEST_CASE("a request beyond max_concurrent_streams is refused as retryable") {
  event_loop<virtual_clock> loop;
  replay_model model(loop, {small_trace()}, {.max_concurrent_streams = 1});
  recorder a(loop), b(loop);
  CHECK(model.limits().max_concurrent_streams == 1);
  REQUIRE(model.start_reasoning(ask("softmax", "p"), a));
  auto refused = model.start_reasoning(ask("softmax", "p"), b);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().retryable);
  loop.run();
  CHECK(model.start_reasoning(ask("softmax", "p"), b));
}

TEST_CASE("the trace is chosen by task, round and lane, with documented fallbacks") {
  event_loop<virtual_clock> loop;
  replay_model model(loop, {small_trace("a", 0, 0), small_trace("a", 0, 1), small_trace("a", 1, std::nullopt),
                            small_trace("a", 3, 2), small_trace("b", 0, 0)});
  auto pick = [&](request_context c) { return (*model.select(c))->id; };
  CHECK(pick({.task = "a", .round = 0, .lane = 1}) == "a/r0/l1");
  CHECK(pick({.task = "a", .round = 1, .lane = 5}) == "a/r1/lany");
  CHECK(pick({.task = "a", .round = 0, .lane = 3}) == "a/r0/l1");   // lanes {0,1}: 3 mod 2
  CHECK(pick({.task = "a", .round = 3, .lane = 0}) == "a/r3/l2");   // the only lane of round 3
  // Unrecorded round 7 with rounds {0,1,3}: index (7 + seed mod 3) mod 3.
  CHECK(pick({.task = "a", .round = 7, .lane = 0, .seed = 0}) == "a/r1/lany");
  CHECK(pick({.task = "a", .round = 7, .lane = 0, .seed = 1}) == "a/r3/l2");
  auto missing = model.select({.task = "c"});
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message, Catch::Contains("\"c\"") && Catch::Contains("\"a\", \"b\""));
}

TEST_CASE("the model runs on a real-time loop too") {
  event_loop<steady_clock> loop;
  replay_model model(loop, {small_trace()}, {.decode_tokens_per_s = 1e5, .prefill_tokens_per_s = 1e6,
                                             .first_token_overhead_s = 0.001});
  recorder sink(loop);
  REQUIRE(model.start_reasoning(ask("softmax", "p"), sink));
  loop.run();
  CHECK(sink.text(true) == expand_reasoning(small_trace()).text());
  REQUIRE(sink.ends.size() == 1);
  CHECK(sink.ends[0].reason == finish_reason::stop);
}

TEST_CASE("literal text splits over its tokens without breaking UTF-8, and filler is deterministic prose") {
  token_text tt;
  tt.append_split("na\xc3\xafve \xe2\x86\x92 ok", 7);
  CHECK(tt.size() == 7);
  CHECK(tt.slice(0, 7) == "na\xc3\xafve \xe2\x86\x92 ok");
  for (std::size_t i = 0; i < tt.size(); ++i) {
    const auto piece = tt.slice(i, i + 1);
    if (!piece.empty()) CHECK((static_cast<unsigned char>(piece.front()) & 0xC0) != 0x80);
  }
  token_text few;
  few.append_split("ab", 4);  // more tokens than bytes: some tokens are empty
  CHECK(few.size() == 4);
  CHECK(few.slice(0, 4) == "ab");

  trace t = small_trace();
  t.segments = {{.text = "", .tokens = 3000, .filler = true, .topic = "tiling"}};
  const auto a = expand_reasoning(t), b = expand_reasoning(t);
  CHECK(a.text() == b.text());
  CHECK(a.size() == 3000);
  for (const char* phrase : {"```", "__global__", "I'll use", "we'll use", "tile size", "each block handles",
                             "each thread computes", "let's go with", "the plan is", "shared memory", "warp-level",
                             "vectorized", "Let me write", "The kernel will", "the code would", "Actually",
                             "Let me fix", "finalize", "Here's the kernel", "Now the kernel"})
    CHECK(a.text().find(phrase) == std::string::npos);
}

TEST_CASE("trace files round-trip, and a literal without tokens gets the 4-bytes-per-token estimate") {
  const auto dir = temp_dir("roundtrip");
  std::vector<trace> ts{small_trace("a", 0, 0), small_trace("a", 1, std::nullopt)};
  REQUIRE(write_traces(dir / "a.json", ts));
  auto back = load_traces(dir);
  REQUIRE(back);
  CHECK(*back == ts);

  nlohmann::json j = traces_to_json(ts);
  j["traces"][0]["segments"][0].erase("tokens");
  j["traces"][0].erase("id");
  auto parsed = parse_traces(j, "mem.json");
  REQUIRE(parsed);
  CHECK((*parsed)[0].segments[0].tokens == estimate_tokens("Let me think about the row reduction. "));
  CHECK((*parsed)[0].id == "a/r0/l0");
  std::filesystem::remove_all(dir);
}

TEST_CASE("loading reports the file, the JSON pointer and the problem") {
  const nlohmann::json good = traces_to_json(std::vector<trace>{small_trace()});
  auto error_of = [](const nlohmann::json& j) {
    auto r = parse_traces(j, "corpus/x.json");
    REQUIRE_FALSE(r);
    return r.error();
  };
  {
    auto j = good;
    j["format"] = "specgen-trace/9";
    auto e = error_of(j);
    CHECK(e.where == "/format");
    CHECK_THAT(e.what(), Catch::StartsWith("corpus/x.json: /format: unsupported format"));
  }
  {
    auto j = good;
    j["traces"][0]["segments"][1]["topik"] = "x";
    auto e = error_of(j);
    CHECK(e.where == "/traces/0/segments/1/topik");
    CHECK_THAT(e.message, Catch::Contains("unknown key"));
  }
  {
    auto j = good;
    std::swap(j["traces"][0]["forks"][0], j["traces"][0]["forks"][1]);
    auto e = error_of(j);
    CHECK(e.where == "/traces/0/forks/1/at_token");
    CHECK_THAT(e.message, Catch::Contains("sorted"));
  }
  {
    auto j = good;
    j["traces"][0]["forks"][1]["at_token"] = 121;
    CHECK_THAT(error_of(j).message, Catch::Contains("past the end of the reasoning (120 tokens)"));
  }
  {
    auto j = good;
    j["traces"][0].erase("answer");
    CHECK(error_of(j).where == "/traces/0/answer");
  }
  {
    auto j = good;
    j["traces"][0]["style"] = "ramble";
    CHECK(error_of(j).where == "/traces/0/style");
  }
  {
    auto j = good;
    j["traces"][0]["lane"] = -1;
    CHECK(error_of(j).where == "/traces/0/lane");
  }
  {
    auto j = good;
    j["traces"][0]["segments"][0]["tokens"] = 0;
    CHECK_THAT(error_of(j).message, Catch::Contains("must be an integer in [1, 1000000], got 0"));
  }
  const auto dir = temp_dir("errors");
  std::ofstream(dir / "bad.json") << "{ not json";
  auto bad = load_traces(dir / "bad.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().file == (dir / "bad.json").string());
  std::filesystem::remove(dir / "bad.json");
  REQUIRE(write_traces(dir / "1.json", std::vector<trace>{small_trace("a", 0, 0)}));
  auto twin = small_trace("a", 0, 0);
  twin.id = "other";
  REQUIRE(write_traces(dir / "2.json", std::vector<trace>{twin}));
  auto dup = load_traces(dir);
  REQUIRE_FALSE(dup);
  CHECK_THAT(dup.error().message, Catch::Contains("second trace for task \"a\" round 0 lane 0"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("replay_params round-trip through JSON and missing keys keep their defaults") {
  const replay_params p{.decode_tokens_per_s = 65, .server_prefix_hit = 0.25, .max_concurrent_streams = 8};
  CHECK(nlohmann::json(p).get<replay_params>() == p);
  CHECK(nlohmann::json::parse(R"({"chunk_tokens": 4})").get<replay_params>() == replay_params{.chunk_tokens = 4});
  CHECK(nlohmann::json::parse(R"({"early_fork_answer": {"tokens": 12}})").get<replay_params>().early_fork_answer ==
        no_kernel_answer{.tokens = 12});
}

TEST_CASE("replay_params read from JSON name the faulty value's pointer") {
  const auto error_of = [](std::string_view text) -> std::string {
    try {
      (void)nlohmann::json::parse(text).get<replay_params>();
    } catch (const nlohmann::json::exception& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(error_of(R"({"chunk_tokens": 0})") == "/chunk_tokens: must be an integer in [1, 1048576], got 0");
  CHECK_THAT(error_of(R"({"slowdown_per_sequence": "high"})"), Catch::StartsWith("/slowdown_per_sequence: must be"));
  CHECK_THAT(error_of(R"({"early_fork_answer": {"tokens": -1}})"), Catch::StartsWith("/early_fork_answer/tokens: must be"));
  CHECK_THAT(error_of(R"({"decode_tokens": 60})"), Catch::StartsWith("/decode_tokens: unknown key") &&
                                                      Catch::Contains("decode_tokens_per_s"));
}

TEST_CASE("the replay model refuses a negative or non-finite decode slowdown") {
  event_loop<virtual_clock> loop;
  for (double bad : {-0.01, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(replay_model(loop, {}, replay_params{.slowdown_per_sequence = bad}), std::invalid_argument);
  }
  CHECK_NOTHROW(replay_model(loop, {}, replay_params{.slowdown_per_sequence = 0}));
}

// ---- hostile and careless trace files ------------------------------------------------------

TEST_CASE("token counts, rounds and lanes of a trace are read within their ranges") {
  const nlohmann::json good = traces_to_json(std::vector<trace>{small_trace()});
  auto error_of = [](const nlohmann::json& j) {
    auto r = parse_traces(j, "x.json");
    REQUIRE_FALSE(r);
    return r.error();
  };
  {  // 10^9 filler tokens: expanding them would need gigabytes
    auto j = good;
    j["traces"][0]["segments"][1] = {{"filler", 1'000'000'000}, {"topic", "x"}};
    const auto e = error_of(j);
    CHECK(e.where == "/traces/0/segments/1/filler");
    CHECK(e.message == "must be an integer in [1, 1000000], got 1000000000");
  }
  {  // each segment in range, the sum not
    auto j = good;
    for (int i = 0; i < 3; ++i) j["traces"][0]["segments"].push_back({{"filler", 400'000}});
    const auto e = error_of(j);
    CHECK_THAT(e.message, Catch::Contains("over the limit of 1000000 per trace"));
  }
  {
    auto j = good;
    j["traces"][0]["answer"]["tokens"] = 4'294'967'296;
    CHECK(error_of(j).where == "/traces/0/answer/tokens");
  }
  {  // round + 1 must fit: 2^31 - 1 would overflow it
    auto j = good;
    j["traces"][0]["round"] = 2'147'483'647;
    const auto e = error_of(j);
    CHECK(e.where == "/traces/0/round");
    CHECK(e.message == "must be an integer in [0, 9999], got 2147483647");
  }
  {
    auto j = good;
    j["traces"][0]["lane"] = 1'000'000;
    CHECK_THAT(error_of(j).message, Catch::Contains("[0, 255]"));
  }
  {
    auto j = good;
    j["traces"][0]["forks"][0]["samples"] = nlohmann::json::array();
    for (int i = 0; i < 65; ++i) j["traces"][0]["forks"][0]["samples"].push_back({{"text", "s"}});
    CHECK_THAT(error_of(j).message, Catch::Contains("at most 64"));
  }
  auto ok = good;
  ok["traces"][0]["round"] = 9'999;
  CHECK(parse_traces(ok, "x.json"));
}

TEST_CASE("a trace file that is a FIFO is refused at once, and a number too large is an error value") {
  const auto dir = temp_dir("hostile");
  REQUIRE(::mkfifo((dir / "fifo.json").c_str(), 0600) == 0);
  auto fifo = load_traces(dir / "fifo.json");
  REQUIRE_FALSE(fifo);
  CHECK_THAT(fifo.error().message, Catch::Contains("FIFO") && Catch::Contains("not a regular file"));
  auto in_dir = load_traces(dir);  // a directory listing it says so too
  REQUIRE_FALSE(in_dir);
  CHECK_THAT(in_dir.error().message, Catch::Contains("FIFO"));
  std::filesystem::remove(dir / "fifo.json");
  std::ofstream(dir / "big.json") << R"({"format": "specgen-trace/1", "traces": [{"round": 1e999}]})";
  auto big = load_traces(dir / "big.json");
  REQUIRE_FALSE(big);
  CHECK_THAT(big.error().message, Catch::Contains("not valid JSON"));
  std::filesystem::remove_all(dir);
}


TEST_CASE("the contention presets are the band the published measurements' fits span") {
  // A line through exact points is found again: TPOT = 10 (1 + 0.02 (B - 1)).
  const std::array<decode_point, 3> exact{{{1, 10.0}, {11, 12.0}, {51, 20.0}}};
  const auto f = fit_contention(exact);
  CHECK(f.slowdown_per_sequence == Approx(0.02));
  CHECK(f.tpot1_ms == Approx(10.0));
  CHECK(fit_error(exact, f).max == Approx(0.0).margin(1e-12));
  CHECK(f.relative_speed(51) == Approx(0.5));

  std::vector<double> fitted;
  for (const auto& s : published_contention) {
    const auto g = fit_contention(s.points);
    fitted.push_back(g.slowdown_per_sequence);
    CHECK(fit_error(s.points, g).rms < 0.08);  // a line in B describes every stack to within a few percent
  }
  CHECK(contention_levels[0].slowdown_per_sequence == *std::min_element(fitted.begin(), fitted.end()));
  CHECK(contention_levels[2].slowdown_per_sequence == *std::max_element(fitted.begin(), fitted.end()));
  CHECK(contention_middle == Approx((contention_low + contention_high) / 2));
  // The band the sources quote: per-stream speed at 32 streams between about 0.45 and 0.65.
  CHECK(1 / (1 + contention_high * 31) == Approx(0.45).margin(0.02));
  CHECK(1 / (1 + contention_low * 31) == Approx(0.66).margin(0.02));
  CHECK(replay_params{}.slowdown_per_sequence == contention_middle);
  CHECK(parse_contention("high") == contention_high);
  CHECK(parse_contention("0.5") == 0.5);
  CHECK_FALSE(parse_contention("steep"));
  CHECK_FALSE(parse_contention("-1"));
}
