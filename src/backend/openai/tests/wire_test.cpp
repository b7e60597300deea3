// Request bodies and response decoding, event by event, in vLLM's and
// SGLang's exact formats (no network).
#include "config.hpp"
#include "wire.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <variant>
#include <vector>

using namespace specgen;
using namespace specgen::openai;
using namespace specgen::openai::detail;
using json = nlohmann::json;

namespace {

struct decoded {
  std::vector<stream_chunk> chunks;
  std::vector<stream_end> ends;
  std::vector<stream_meta> metas;
};

decoded split(const delivery_batch& b) {
  decoded d;
  for (const auto& x : b) {
    if (auto* c = std::get_if<stream_chunk>(&x)) d.chunks.push_back(*c);
    if (auto* e = std::get_if<stream_end>(&x)) d.ends.push_back(*e);
    if (auto* m = std::get_if<stream_meta>(&x)) d.metas.push_back(*m);
  }
  return d;
}

std::string text_of(const decoded& d, bool reasoning, int sample = 0) {
  std::string s;
  for (const auto& c : d.chunks)
    if (c.reasoning == reasoning && c.sample == sample) s += c.text;
  return s;
}

std::vector<token_id> ids_of(const decoded& d, bool reasoning) {
  std::vector<token_id> v;
  for (const auto& c : d.chunks)
    if (c.reasoning == reasoning) v.insert(v.end(), c.tokens.begin(), c.tokens.end());
  return v;
}

/// A vLLM chat chunk as serving_chat writes it (continuous usage on).
std::string vllm_chunk(const std::string& field, const std::string& text, std::vector<int> ids, int completion) {
  json choice = {{"index", 0}, {"delta", {{field, text}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}, {"token_ids", ids}};
  return json{{"id", "chatcmpl-1"}, {"object", "chat.completion.chunk"}, {"created", 1}, {"model", "m"},
              {"choices", {choice}}, {"usage", {{"prompt_tokens", 20}, {"total_tokens", 20 + completion}, {"completion_tokens", completion}}}}
      .dump();
}

const std::string vllm_finish =
    R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":[]}]})";
const std::string vllm_usage =
    R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":20,"total_tokens":27,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":16}}})";

}  // namespace

TEST_CASE("a vLLM chat stream: prompt ids, reasoning ids with the unstreamed <think> restored, answer, usage") {
  auto d = make_main_decoder(5, {151667});
  delivery_batch b;
  d->on_event(R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":[1,2,3]})", b);
  CHECK_FALSE(d->committed());  // the role chunk and the prompt ids reach no sink
  // <think> (151667) was generated but not streamed: the first chunk reports 2 completion tokens and carries one id.
  d->on_event(vllm_chunk("reasoning_content", "\n", {1010}, 2), b);
  CHECK(d->committed());
  d->on_event(vllm_chunk("reasoning_content", "Tile", {300001}, 3), b);
  d->on_event(vllm_chunk("reasoning", " it", {300002}, 4), b);  // newer vLLM's field name
  // </think> was not streamed either; the answer follows.
  d->on_event(vllm_chunk("content", "ok", {300003}, 6), b);
  d->on_event(vllm_finish, b);
  d->on_event(vllm_usage, b);
  CHECK_FALSE(d->finished());
  d->on_done(b);
  CHECK(d->finished());
  const decoded r = split(b);
  REQUIRE(r.metas.size() == 1);
  CHECK(r.metas[0].prompt_ids == std::vector<token_id>{1, 2, 3});
  CHECK_FALSE(r.metas[0].ids_broken);
  CHECK(text_of(r, true) == "\nTile it");
  CHECK(ids_of(r, true) == std::vector<token_id>{151667, 1010, 300001, 300002});
  CHECK(text_of(r, false) == "ok");
  REQUIRE(r.ends.size() == 1);
  CHECK(r.ends[0].id == 5);
  CHECK(r.ends[0].reason == finish_reason::stop);
  CHECK(r.ends[0].used.prompt_tokens == 20);
  CHECK(r.ends[0].used.cached_prompt_tokens == 16);
  CHECK(r.ends[0].used.completion_tokens == 7);
  CHECK(r.ends[0].used.reasoning_tokens == 4);  // counted by the client: vLLM does not report it
}

TEST_CASE("a reasoning token skipped mid-stream marks the ids broken and later chunks carry counts only") {
  auto d = make_main_decoder(1, {});
  delivery_batch b;
  d->on_event(vllm_chunk("reasoning_content", "a", {11}, 1), b);
  d->on_event(vllm_chunk("reasoning_content", "b", {12}, 3), b);  // one token went missing before it
  d->on_event(vllm_chunk("reasoning_content", "c", {13}, 4), b);
  const decoded r = split(b);
  REQUIRE(r.metas.size() == 1);
  CHECK(r.metas[0].ids_broken);
  CHECK(ids_of(r, true) == std::vector<token_id>{11});
  CHECK(text_of(r, true) == "abc");
  CHECK(r.chunks[2].token_count == 1);
}

TEST_CASE("an SGLang chat stream: no ids, nulls everywhere, counts from continuous usage, reasoning tokens reported") {
  auto d = make_main_decoder(2, {});
  delivery_batch b;
  d->on_event(R"({"id":"r","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null})", b);
  d->on_event(R"({"id":"r","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":"Think","tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3}})", b);
  d->on_event(R"({"id":"r","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":"Done","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":null})", b);
  d->on_event(R"({"id":"r","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":14,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":0},"reasoning_tokens":3}})", b);
  d->on_done(b);
  const decoded r = split(b);
  CHECK(r.metas.empty());
  REQUIRE(r.chunks.size() == 2);
  CHECK(r.chunks[0].reasoning);
  CHECK(r.chunks[0].tokens.empty());
  CHECK(r.chunks[0].token_count == 3);
  CHECK(text_of(r, false) == "Done");
  REQUIRE(r.ends.size() == 1);
  CHECK(r.ends[0].reason == finish_reason::stop);
  CHECK(r.ends[0].used.completion_tokens == 5);
  CHECK(r.ends[0].used.reasoning_tokens == 3);
}

TEST_CASE("a chat stream ends with a clear error on an error object, a malformed event or a missing finish") {
  SECTION("error object, after text that stays delivered") {
    auto d = make_main_decoder(1, {});
    delivery_batch b;
    d->on_event(vllm_chunk("reasoning_content", "a", {11}, 1), b);
    d->on_event(R"({"error":{"object":"error","message":"The model ran out of KV cache","type":"InternalServerError","param":null,"code":500}})", b);
    CHECK(d->finished());
    d->on_done(b);  // the [DONE] after it changes nothing
    const decoded r = split(b);
    CHECK(text_of(r, true) == "a");
    REQUIRE(r.ends.size() == 1);
    CHECK(r.ends[0].reason == finish_reason::error);
    CHECK_THAT(r.ends[0].error, Catch::Contains("ran out of KV cache") && Catch::Contains("after 1 tokens, all delivered"));
  }
  SECTION("old vLLM error shape") {
    auto d = make_main_decoder(1, {});
    delivery_batch b;
    d->on_event(R"({"object":"error","message":"bad things","type":"BadRequestError","code":400})", b);
    CHECK_THAT(split(b).ends.at(0).error, Catch::Contains("bad things"));
  }
  SECTION("malformed event") {
    auto d = make_main_decoder(1, {});
    delivery_batch b;
    d->on_event(R"({"id":"x","choices":[{"index":0,"delta":{"content":"unterminated)", b);
    const decoded r = split(b);
    REQUIRE(r.ends.size() == 1);
    CHECK(r.ends[0].reason == finish_reason::error);
    CHECK_THAT(r.ends[0].error, Catch::Contains("malformed event") && Catch::Contains("unterminated"));
  }
  SECTION("[DONE] before any finish reason") {
    auto d = make_main_decoder(1, {});
    delivery_batch b;
    d->on_event(vllm_chunk("content", "x", {1}, 1), b);
    d->on_done(b);
    CHECK_THAT(split(b).ends.at(0).error, Catch::Contains("without a finish reason"));
  }
  SECTION("a finished choice and no [DONE] is a normal end") {
    auto d = make_main_decoder(1, {});
    delivery_batch b;
    d->on_event(vllm_finish, b);
    d->on_eof(b);
    CHECK(split(b).ends.at(0).reason == finish_reason::stop);
  }
  SECTION("finish_reason length and abort") {
    auto d = make_main_decoder(1, {});
    delivery_batch b;
    d->on_event(R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})", b);
    d->on_done(b);
    CHECK(split(b).ends.at(0).reason == finish_reason::length);
    auto a = make_main_decoder(2, {});
    delivery_batch c;
    a->on_event(R"({"choices":[{"index":0,"delta":{},"finish_reason":"abort","matched_stop":null}]})", c);
    a->on_done(c);
    CHECK(split(c).ends.at(0).reason == finish_reason::error);
    CHECK_THAT(split(c).ends.at(0).error, Catch::Contains("abort"));
  }
}

TEST_CASE("a value of the wrong type ends the stream with its JSON pointer; nulls and unknown keys are fine") {
  auto error_after = [](const std::string& event) {
    auto d = make_main_decoder(1, {});
    delivery_batch b;
    d->on_event(vllm_chunk("content", "x", {1}, 1), b);
    d->on_event(event, b);
    const decoded r = split(b);
    CHECK(text_of(r, false) == "x");  // what came before stays delivered
    return r.ends.empty() ? std::string("(no end)") : r.ends.at(0).error;
  };
  CHECK(error_after(R"({"choices":[{"index":0,"delta":{"content":5}}]})") ==
        "the server sent a malformed event: /choices/0/delta/content: expected a string, found number 5 "
        "(after 1 tokens, all delivered)");
  CHECK_THAT(error_after(R"({"choices":[{"index":0,"delta":{"content":"y"},"token_ids":[1,"2"]}]})"),
             Catch::StartsWith("the server sent a malformed event: /choices/0/token_ids/1: expected an integer in ["));
  CHECK_THAT(error_after(R"({"choices":[],"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":-1}}})"),
             Catch::StartsWith("the server sent a malformed event: /usage/prompt_tokens_details/cached_tokens: "
                               "expected an integer in [0, "));
  CHECK_THAT(error_after(R"({"choices":[{"index":0,"delta":"text"}]})"),
             Catch::StartsWith("the server sent a malformed event: /choices/0/delta: expected an object, found string"));
  CHECK_THAT(error_after(R"({"choices":{"index":0}})"),
             Catch::StartsWith("the server sent a malformed event: /choices: expected an array, found object"));

  // The wire format is open: nulls are absent keys, and keys the client does not read are ignored.
  auto d = make_main_decoder(1, {});
  delivery_batch b;
  d->on_event(R"({"choices":[{"index":0,"delta":{"content":"y","role":null,"tool_calls":null,"new_field":[1]},)"
              R"("finish_reason":null,"token_ids":null,"logprobs":{"x":1}}],"usage":null,"system_fingerprint":7})", b);
  d->on_event(R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})", b);
  d->on_done(b);
  const decoded r = split(b);
  CHECK(text_of(r, false) == "y");
  REQUIRE(r.ends.size() == 1);
  CHECK(r.ends[0].reason == finish_reason::stop);
  CHECK(r.ends[0].error.empty());
}

TEST_CASE("reset lets a retried request decode from the start") {
  auto d = make_main_decoder(1, {});
  delivery_batch b;
  d->on_event(vllm_chunk("content", "x", {1}, 1), b);
  d->on_failure("boom", b);
  CHECK(d->finished());
  d->reset();
  CHECK_FALSE(d->finished());
  CHECK_FALSE(d->committed());
  d->on_event(vllm_chunk("content", "y", {2}, 1), b);
  d->on_done(b);
  CHECK(split(b).ends.back().used.completion_tokens == 1);  // counted afresh
}

namespace {

/// A vLLM completions chunk for choice `i`.
std::string cmpl(int i, const std::string& text, std::optional<std::string> finish = std::nullopt) {
  json c = {{"index", i}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish ? json(*finish) : json(nullptr)},
            {"stop_reason", nullptr}, {"token_ids", json::array({7})}};
  if (finish) c["token_ids"] = json::array();
  return json{{"id", "cmpl-1"}, {"object", "text_completion"}, {"created", 1}, {"model", "m"}, {"choices", {c}}}.dump();
}

const std::string cmpl_usage =
    R"({"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":100,"total_tokens":130,"completion_tokens":30,"prompt_tokens_details":{"cached_tokens":96}}})";

const std::string kernel_answer = "```cuda\nextern \"C\" __global__ void k() {}\n```\n```plan\nlaunch k grid(1) block(1) args()\n```\n";

}  // namespace

TEST_CASE("a fork sample ends at the closing fence of its candidate; the last waits for the usage report") {
  auto d = make_fork_decoder(9, {.samples = 2, .stop_at_closing_fence = true, .tail_tokens = 32});
  delivery_batch b;
  // Sample 0 writes its candidate in odd pieces, then keeps talking in the same chunk.
  const std::string s0 = "Sure.\n" + kernel_answer + "Anything else?";
  for (std::size_t at = 0; at < s0.size(); at += 5) d->on_event(cmpl(0, s0.substr(at, 5)), b);
  decoded r = split(b);
  REQUIRE(r.ends.size() == 1);  // sample 0 ended as soon as its plan fence closed
  CHECK(r.ends[0].sample == 0);
  CHECK(r.ends[0].reason == finish_reason::stop);
  CHECK(text_of(r, false, 0) == "Sure.\n" + kernel_answer);
  // Sample 1 finishes by itself; being the last, it waits for the usage.
  d->on_event(cmpl(1, kernel_answer), b);
  d->on_event(cmpl(1, "", "stop"), b);
  CHECK(split(b).ends.size() == 1);
  CHECK_FALSE(d->finished());
  d->on_event(cmpl_usage, b);
  CHECK(d->finished());
  r = split(b);
  REQUIRE(r.ends.size() == 2);
  CHECK(r.ends[1].sample == 1);
  CHECK(r.ends[1].used.prompt_tokens == 100);
  CHECK(r.ends[1].used.cached_prompt_tokens == 96);
  CHECK(r.ends[0].used.prompt_tokens == 0);  // reported once per request
  d->on_done(b);
  CHECK(split(b).ends.size() == 2);
}

TEST_CASE("a fork whose model keeps talking past its kernel_answer is cut after the tail, without a usage report") {
  auto d = make_fork_decoder(9, {.samples = 1, .stop_at_closing_fence = true, .tail_tokens = 3});
  delivery_batch b;
  d->on_event(cmpl(0, kernel_answer), b);
  CHECK(split(b).ends.empty());
  for (int i = 0; i < 3; ++i) d->on_event(cmpl(0, " more"), b);
  CHECK_FALSE(d->finished());
  d->on_event(cmpl(0, " more"), b);
  CHECK(d->finished());
  const decoded r = split(b);
  REQUIRE(r.ends.size() == 1);
  CHECK(r.ends[0].reason == finish_reason::stop);
  CHECK(r.ends[0].used.prompt_tokens == 0);
  CHECK(text_of(r, false) == kernel_answer);
}

TEST_CASE("with no tail a fork ends at its last closing fence at once") {
  auto d = make_fork_decoder(9, {.samples = 1, .stop_at_closing_fence = true, .tail_tokens = 0});
  delivery_batch b;
  d->on_event(cmpl(0, kernel_answer + "tail"), b);
  CHECK(d->finished());
  CHECK(text_of(split(b), false) == kernel_answer);
}

TEST_CASE("a plan block alone does not stop a fork sample; without the fence rule nothing does") {
  auto d = make_fork_decoder(9, {.samples = 1, .stop_at_closing_fence = true, .tail_tokens = 0});
  delivery_batch b;
  d->on_event(cmpl(0, "```plan\nlaunch k grid(1) block(1) args()\n```\n"), b);
  CHECK_FALSE(d->finished());
  auto n = make_fork_decoder(9, {.samples = 1, .stop_at_closing_fence = false, .tail_tokens = 0});
  n->on_event(cmpl(0, kernel_answer), b);
  CHECK_FALSE(n->finished());
}

TEST_CASE("a failing fork keeps the samples whose kernel_answer is complete") {
  auto d = make_fork_decoder(9, {.samples = 3, .stop_at_closing_fence = true, .tail_tokens = 32});
  delivery_batch b;
  d->on_event(cmpl(0, kernel_answer), b);  // ends at once (two others open)
  d->on_event(cmpl(1, "```cuda\nextern"), b);
  d->on_event(cmpl(2, kernel_answer), b);  // ends at once (sample 1 open)
  d->on_failure("the stream broke", b);
  const decoded r = split(b);
  REQUIRE(r.ends.size() == 3);
  CHECK(r.ends[2].sample == 1);
  CHECK(r.ends[2].reason == finish_reason::error);
  CHECK_THAT(r.ends[2].error, Catch::Contains("the stream broke"));
  CHECK(r.ends[0].reason == finish_reason::stop);
  CHECK(r.ends[1].reason == finish_reason::stop);
}

TEST_CASE("a fork refuses a choice index beyond its samples") {
  auto d = make_fork_decoder(9, {.samples = 2, .stop_at_closing_fence = true, .tail_tokens = 32});
  delivery_batch b;
  d->on_event(cmpl(5, "x"), b);
  const decoded r = split(b);
  REQUIRE(r.ends.size() == 2);
  CHECK_THAT(r.ends[0].error, Catch::Contains("choice 5 of a request for 2"));
}

TEST_CASE("a fork ends every open sample on a value of the wrong type, naming its JSON pointer") {
  auto d = make_fork_decoder(9, {.samples = 2, .stop_at_closing_fence = true, .tail_tokens = 32});
  delivery_batch b;
  d->on_event(cmpl(0, "x"), b);
  d->on_event(R"({"choices":[{"index":1,"text":["not","text"]}]})", b);
  const decoded r = split(b);
  REQUIRE(r.ends.size() == 2);
  for (const auto& e : r.ends) {
    CHECK(e.reason == finish_reason::error);
    CHECK_THAT(e.error, Catch::StartsWith("the server sent a malformed event: /choices/0/text: expected a string, found array"));
  }
  auto u = make_fork_decoder(9, {.samples = 1, .stop_at_closing_fence = true, .tail_tokens = 32});
  delivery_batch c;
  u->on_event(R"({"choices":[],"usage":{"prompt_tokens":"12"}})", c);
  CHECK_THAT(split(c).ends.at(0).error,
             Catch::StartsWith("the server sent a malformed event: /usage/prompt_tokens: expected an integer in [0, "));
}

TEST_CASE("chat bodies carry each server's extensions and nothing else") {
  reasoning_request r;
  r.ctx.seed = 0x1234567890ull;
  r.system = "sys";
  r.prompt = "write a kernel";
  r.params = {.temperature = 0.6, .top_p = 0.95, .max_tokens = 1000};
  const model_preset qwen = *find_preset("qwen3");

  const json v = json::parse(chat_body(*dialect_of("vllm"), "m", qwen, r, "rid-1"));
  CHECK(v["messages"] == json::array({{{"role", "system"}, {"content", "sys"}}, {{"role", "user"}, {"content", "write a kernel"}}}));
  CHECK(v["stream"] == true);
  CHECK(v["stream_options"] == json{{"include_usage", true}, {"continuous_usage_stats", true}});
  CHECK(v["return_token_ids"] == true);
  CHECK(v["request_id"] == "rid-1");
  CHECK(v["chat_template_kwargs"] == json{{"enable_thinking", true}});
  CHECK(v["max_tokens"] == 1000);
  CHECK(v["seed"].get<std::uint64_t>() <= 0x7fffffffu);

  const json s = json::parse(chat_body(*dialect_of("sglang"), "m", qwen, r, "rid-1"));
  CHECK(s["rid"] == "rid-1");
  CHECK_FALSE(s.contains("request_id"));
  // SGLang answers a streamed chat completion with return_token_ids with HTTP 400.
  CHECK_FALSE(s.contains("return_token_ids"));
  CHECK(s["stream_options"] == json{{"include_usage", true}, {"continuous_usage_stats", true}});
  CHECK(s["chat_template_kwargs"] == json{{"enable_thinking", true}});

  const json o = json::parse(chat_body(*dialect_of("openai"), "m", qwen, r, "rid-1"));
  for (const char* k : {"return_token_ids", "chat_template_kwargs", "request_id", "rid"}) CHECK_FALSE(o.contains(k));
  CHECK(o["stream_options"] == json{{"include_usage", true}});
}

TEST_CASE("a completion body carries the prompt ids exactly, or the text without added special tokens") {
  fork_prompt p;
  p.ids = {0, 1, -1, 151668, 2147483647};
  const sampling sp{.temperature = 0.1, .top_p = 1.0, .max_tokens = 512};
  const json v = json::parse(completion_body(*dialect_of("vllm"), "m", p, 3, sp, 256, 42, "rid-2"));
  CHECK(v["prompt"] == json(p.ids));
  CHECK(v["n"] == 3);
  CHECK(v["max_tokens"] == 256);
  CHECK(v["temperature"] == 0.1);
  CHECK(v["request_id"] == "rid-2");
  CHECK_FALSE(v.contains("add_special_tokens"));

  fork_prompt t;
  t.is_text = true;
  t.text = "<|im_start|>user\nhi";
  const json w = json::parse(completion_body(*dialect_of("vllm"), "m", t, 1, sp, 256, 42, "rid-3"));
  CHECK(w["prompt"] == t.text);
  CHECK(w["add_special_tokens"] == false);
  const json g = json::parse(completion_body(*dialect_of("sglang"), "m", t, 1, sp, 256, 42, "r"));
  CHECK_FALSE(g.contains("add_special_tokens"));
  CHECK(g["return_token_ids"] == true);  // SGLang streams a completion's ids
  CHECK_FALSE(json::parse(completion_body(*dialect_of("openai"), "m", t, 1, sp, 256, 42, "r")).contains("return_token_ids"));
}

TEST_CASE("the text fallback renders the preset's template, the reasoning, the close marker and the cue") {
  model_preset f = *find_preset("qwen3");
  f.answer_cue = "\n\nANSWER:";
  CHECK(render_fork_text(f, "S", "P", "\nthinking") ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nP<|im_end|>\n<|im_start|>assistant\n<think>\nthinking</think>\n\nANSWER:");
  f.prompt_template = "{x}{prompt}{";  // unknown placeholders stay as written
  f.think_open = "";
  CHECK(render_fork_text(f, "S", "P", "r") == "{x}P{r</think>\n\nANSWER:");
}

TEST_CASE("error bodies become one readable line") {
  CHECK(error_message_of(R"({"error":{"message":"model not found","type":"NotFoundError","code":404}})") == "model not found");
  CHECK(error_message_of(R"({"object":"error","message":"too long","code":400})") == "too long");
  CHECK(error_message_of(R"({"detail":"Not Found"})") == "Not Found");
  CHECK(error_message_of("upstream timed out\n") == "upstream timed out");
  CHECK(error_message_of("") == "(empty body)");
}

TEST_CASE("a chat decoder counts as progress only events that move the stream forward, not keep-alives") {
  auto d = make_main_decoder(1, {});
  delivery_batch b;
  const auto progress_after = [&](const std::string& event) {
    const std::uint64_t before = d->progress();
    d->on_event(event, b);
    return d->progress() - before;
  };
  CHECK(progress_after(R"({"id":"c","choices":[]})") == 0);
  CHECK(progress_after(R"({"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})") == 0);
  CHECK(progress_after(R"({"id":"c","choices":[{"index":0,"delta":{}}],"usage":null})") == 0);
  CHECK(progress_after(vllm_chunk("reasoning_content", "a", {5}, 1)) > 0);
  // The same usage again is a keep-alive; a count that grew is progress.
  const std::string usage1 = R"({"id":"c","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":1,"total_tokens":21}})";
  CHECK(progress_after(usage1) == 0);
  CHECK(progress_after(R"({"id":"c","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2,"total_tokens":22}})") > 0);
  CHECK(progress_after(vllm_finish) > 0);
  CHECK(split(b).ends.empty());
}

TEST_CASE("a fork decoder counts tokens as progress even past a sample's candidate, and not empty events") {
  auto d = make_fork_decoder(9, {.samples = 1, .stop_at_closing_fence = true, .tail_tokens = 32});
  delivery_batch b;
  std::uint64_t last = d->progress();
  d->on_event(R"({"id":"cmpl-1","choices":[]})", b);
  CHECK(d->progress() == last);
  d->on_event(cmpl(0, kernel_answer), b);
  CHECK(d->progress() > last);
  last = d->progress();
  d->on_event(cmpl(0, "more"), b);  // not delivered: the candidate is complete; still generated
  CHECK(d->progress() > last);
}

TEST_CASE("a request that delivers more than its byte limit ends with an error naming the limit") {
  SECTION("a chat stream") {
    auto d = make_main_decoder(1, {}, 1024);
    delivery_batch b;
    const std::string piece(100, 'r');
    for (int i = 0; i < 20 && !d->finished(); ++i) d->on_event(vllm_chunk("reasoning_content", piece, {i}, i + 1), b);
    REQUIRE(d->finished());
    const decoded r = split(b);
    REQUIRE(r.ends.size() == 1);
    CHECK(r.ends[0].reason == finish_reason::error);
    CHECK_THAT(r.ends[0].error, Catch::Contains("max_stream_bytes (1024 bytes)") && Catch::Contains("raise max_stream_bytes"));
    std::uint64_t held = 0;
    for (const auto& c : r.chunks) held += c.text.size() + c.tokens.size() * sizeof(token_id);
    CHECK(held <= 1024);  // the chunk that would pass the limit is not delivered
  }
  SECTION("a fork, all samples together") {
    auto d = make_fork_decoder(9, {.samples = 2, .stop_at_closing_fence = true, .tail_tokens = 32, .max_bytes = 1024});
    delivery_batch b;
    const std::string piece(100, 'f');
    for (int i = 0; i < 20 && !d->finished(); ++i) d->on_event(cmpl(i % 2, piece), b);
    REQUIRE(d->finished());
    const decoded r = split(b);
    REQUIRE(r.ends.size() == 2);
    for (const auto& e : r.ends) CHECK_THAT(e.error, Catch::Contains("max_stream_bytes (1024 bytes)"));
  }
}

TEST_CASE("what a server writes into an error or a finish reason reaches the stream error cut to a readable length") {
  const std::string long_text(100000, 'e');
  auto d = make_main_decoder(1, {});
  delivery_batch b;
  d->on_event(json{{"error", {{"message", long_text}}}}.dump(), b);
  auto f = make_fork_decoder(9, {.samples = 1, .stop_at_closing_fence = true, .tail_tokens = 0});
  f->on_event(cmpl(0, "x", long_text), b);
  const decoded r = split(b);
  REQUIRE(r.ends.size() == 2);
  for (const auto& e : r.ends) {
    CHECK(e.reason == finish_reason::error);
    CHECK(e.error.size() < 400);
    CHECK_THAT(e.error, Catch::Contains("(100000 bytes)"));
  }
}
