// The backend against a local vLLM/SGLang stand-in on 127.0.0.1: streams,
// forks that carry exactly the prefix ids, cancellation that closes the
// server's request, and every fault the server can inject.
//
// GCC 12 at -O3 reports the fork requests built inside the recorders'
// callbacks as "maybe uninitialized" (a false positive once the fork's
// result, an expected<stream_id, error>, is inlined); the requests are fully
// initialised, so this test file turns that one warning off.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "fixture.hpp"

#include <cstdlib>

using namespace fixture;

namespace {

std::string joined(const std::vector<std::string>& pieces, std::size_t n = std::string::npos) {
  std::string s;
  for (std::size_t i = 0; i < pieces.size() && i < n; ++i) s += pieces[i];
  return s;
}

const testing::request_record* find(const std::vector<testing::request_record>& rs, std::string_view path, int nth = 0) {
  for (const auto& r : rs)
    if (r.path == path && nth-- == 0) return &r;
  return nullptr;
}

std::size_t count(const std::vector<testing::request_record>& rs, std::string_view path) {
  return static_cast<std::size_t>(std::count_if(rs.begin(), rs.end(), [&](const auto& r) { return r.path == path; }));
}

/// What a fork sample delivers: the default answer up to its plan block's closing fence.
std::string fork_candidate(int sample) {
  const std::string a = testing::default_fork_answer(sample);
  return a.substr(0, a.find("That is"));
}

std::vector<token_id> concat(std::vector<token_id> a, const std::vector<token_id>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("a vLLM reasoning stream delivers the reasoning, its ids, the answer and the usage") {
  fake_server server({.format = testing::wire::vllm});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  CHECK(model->server().kind == "vllm");
  CHECK(model->server().family.name == "qwen3");
  CHECK(model->server().think_open == std::vector<token_id>{151667});
  CHECK(model->server().fork_suffix ==
        fake_server::tokenize(model->server().family.think_close + model->server().family.answer_cue));
  recorder rec;
  auto id = model->start_reasoning(ask(), rec);
  REQUIRE(id);
  REQUIRE(run_until(loop, [&] { return rec.ended(*id) == 1; }));

  const server_options o;
  const auto gen = server.main_generation_ids();
  CHECK(rec.text(*id, true) == joined(o.reasoning));
  // Every reasoning id, <think> included although vLLM streamed no chunk for it.
  CHECK(rec.ids(*id, true) == std::vector<token_id>(gen.begin(), gen.begin() + 1 + static_cast<std::ptrdiff_t>(o.reasoning.size())));
  CHECK(rec.text(*id, false) == joined(o.answer));
  const stream_end& e = *rec.end_of(*id);
  CHECK(e.reason == finish_reason::stop);
  const auto rs = server.requests();
  const auto* chat = find(rs, "/v1/chat/completions");
  REQUIRE(chat);
  CHECK(e.used.prompt_tokens == chat->prompt_ids.size());
  CHECK(e.used.completion_tokens == gen.size());
  CHECK(chat->body["return_token_ids"] == true);
  CHECK(chat->body["chat_template_kwargs"]["enable_thinking"] == true);
  CHECK_FALSE(chat->rid.empty());
  CHECK(chat->headers.at("x-request-id") == chat->rid);
  CHECK(chat->finished);
  CHECK_FALSE(rec.chunk_after_end);
}

TEST_CASE("a fork carries exactly the prompt ids, the reasoning ids received and the suffix, and hits the prefix cache") {
  fake_server server({.format = testing::wire::vllm, .tokens_per_s = 400});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder main, forks;
  std::vector<token_id> prefix;
  std::optional<stream_id> fork_id;
  stream_id parent = 0;
  int reasoning_chunks = 0;
  main.on_each = [&](const stream_chunk& c) {
    if (!c.reasoning || ++reasoning_chunks != 10) return;
    prefix = main.ids(parent, true);  // as the engine does: every id received so far
    fork_request f;
    f.parent = parent;
    f.reasoning_prefix = prefix;
    f.samples = 2;
    auto r = model->fork(f, forks);
    REQUIRE(r);
    fork_id = *r;
  };
  auto id = model->start_reasoning(ask(), main);
  REQUIRE(id);
  parent = *id;
  REQUIRE(run_until(loop, [&] { return main.ended(*id) == 1 && fork_id && forks.ended(*fork_id) == 2; }));

  const auto rs = server.requests();
  const auto* chat = find(rs, "/v1/chat/completions");
  const auto* cmpl = find(rs, "/v1/completions");
  REQUIRE(chat);
  REQUIRE(cmpl);
  REQUIRE(prefix.size() == 11);  // <think> and ten streamed tokens
  CHECK(std::equal(prefix.begin(), prefix.end(), chat->generated.begin()));
  CHECK(cmpl->prompt_ids == concat(concat(chat->prompt_ids, prefix), model->server().fork_suffix));
  CHECK_FALSE(cmpl->prompt_was_text);
  CHECK(cmpl->body["n"] == 2);
  CHECK(cmpl->body["temperature"] == 0.1);
  // The server's prefix cache held every full 16-token block of prompt + prefix.
  const std::uint64_t shared = chat->prompt_ids.size() + prefix.size();
  CHECK(cmpl->cached_tokens == shared / 16 * 16);
  for (int k = 0; k < 2; ++k) {
    INFO("sample " << k);
    CHECK(forks.text(*fork_id, false, k) == fork_candidate(k));
    CHECK(forks.end_of(*fork_id, k)->reason == finish_reason::stop);
  }
  std::uint64_t reported = 0, prompt = 0;
  for (const auto& e : forks.ends) {
    reported += e.used.cached_prompt_tokens;
    prompt += e.used.prompt_tokens;
  }
  CHECK(prompt == cmpl->prompt_ids.size());
  CHECK(reported == cmpl->cached_tokens);
  const backend_stats st = model->stats();
  CHECK(st.forks == 1);
  CHECK(st.forks_token_ids == 1);
  CHECK(st.fork_cached_tokens == cmpl->cached_tokens);
  CHECK(st.fork_usage_reports == 1);
}

TEST_CASE("without token ids (SGLang) a fork sends the rendered text, and the cache hits only as far as retokenizing agrees") {
  fake_server server({.format = testing::wire::sglang, .tokens_per_s = 400});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  CHECK(model->server().kind == "sglang");
  CHECK_FALSE(model->limits().token_ids);
  CHECK_THAT(model->server().token_ids_note, Catch::Contains("SGLang streams no token ids"));
  recorder main, forks;
  std::optional<stream_id> fork_id;
  stream_id parent = 0;
  std::string reasoning_then;
  main.on_each = [&](const stream_chunk& c) {
    CHECK(c.tokens.empty());
    if (!c.reasoning || main.chunks.size() != 6 || fork_id) return;
    reasoning_then = main.text(parent, true);
    fork_request f;
    f.parent = parent;
    f.samples = 1;
    auto r = model->fork(f, forks);
    REQUIRE(r);
    fork_id = *r;
  };
  const reasoning_request q = ask();
  auto id = model->start_reasoning(q, main);
  REQUIRE(id);
  parent = *id;
  REQUIRE(run_until(loop, [&] { return main.ended(*id) == 1 && fork_id && forks.ended(*fork_id) == 1; }));

  const auto rs = server.requests();
  const auto* chat = find(rs, "/v1/chat/completions");
  const auto* cmpl = find(rs, "/v1/completions");
  REQUIRE(chat);
  REQUIRE(cmpl);
  // SGLang refuses return_token_ids on a streamed chat completion: it is not asked for there.
  CHECK_FALSE(chat->body.contains("return_token_ids"));
  CHECK(chat->status == 200);
  CHECK(main.end_of(*id)->reason == finish_reason::stop);
  CHECK(cmpl->prompt_was_text);
  const auto& family = model->server().family;
  CHECK(cmpl->body["prompt"] ==
        fake_server::chat_template(q.system, q.prompt) + "<think>" + reasoning_then + family.think_close + family.answer_cue);
  CHECK(cmpl->body["rid"] == cmpl->rid);
  // The model generated "Let" as one token; retokenized it is three, so the
  // cache stops after <think> and "\n" (2 tokens past the prompt).
  CHECK(cmpl->cached_tokens == (chat->prompt_ids.size() + 2) / 16 * 16);
  CHECK(model->stats().forks_text == 1);
  CHECK(forks.text(*fork_id, false) == fork_candidate(0));
  // SGLang's usage also says how much of the answer was reasoning.
  CHECK(main.end_of(*id)->used.reasoning_tokens == server_options{}.reasoning.size() + 1);
}

TEST_CASE("a vLLM without token ids (before 0.10.2) gets text forks; fork_prompt token_ids refuses them") {
  fake_server server({.format = testing::wire::vllm, .token_ids = false, .tokens_per_s = 400});
  event_loop<steady_clock> loop;
  for (const std::string mode : {"auto", "token_ids"}) {
    openai_config c = config_for(server);
    c.fork_prompt = mode;
    auto model = make_backend(loop, c);
    recorder main, forks;
    stream_id parent = 0;
    std::optional<expected<stream_id, error>> forked;
    main.on_each = [&](const stream_chunk& ch) {
      if (ch.reasoning && !forked) forked = model->fork({.ctx = {}, .parent = parent, .reasoning_prefix = {}, .samples = 1}, forks);
    };
    auto id = model->start_reasoning(ask(), main);
    REQUIRE(id);
    parent = *id;
    REQUIRE(run_until(loop, [&] { return main.ended(*id) == 1 && forked && (!*forked || forks.ended(**forked) == 1); }));
    if (mode == "auto") {
      CHECK(forked->has_value());
      CHECK(model->stats().forks_text == 1);
    } else {
      REQUIRE_FALSE(forked->has_value());
      CHECK_THAT(forked->error().message, Catch::Contains("no prompt token ids"));
    }
  }
}

TEST_CASE("cancelling a stream ends it at once with cancelled and closes its request on the server") {
  fake_server server({.format = testing::wire::vllm, .tokens_per_s = 200});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder rec;
  stream_id id = 0;
  std::size_t chunks_at_cancel = 0;
  rec.on_each = [&](const stream_chunk&) {
    if (rec.chunks.size() == 3) {
      model->cancel(id);
      chunks_at_cancel = rec.chunks.size();
    }
  };
  id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(rec.end_of(id)->reason == finish_reason::cancelled);
  CHECK(rec.end_of(id)->used.completion_tokens == 4);  // <think> and three streamed tokens
  REQUIRE(server.wait_until([](const auto& rs) { return find(rs, "/v1/chat/completions")->client_closed; }, 5));
  CHECK_FALSE(find(server.requests(), "/v1/chat/completions")->finished);
  // Nothing more arrives for it, however long the loop runs.
  run_until(loop, [] { return false; }, 0.1);
  CHECK(rec.chunks.size() == chunks_at_cancel);
  CHECK(rec.ended(id) == 1);
  model->cancel(id);  // a second cancel is a no-op
  run_until(loop, [] { return false; }, 0.02);
  CHECK(rec.ended(id) == 1);
  CHECK(model->stats().cancels == 1);
}

TEST_CASE("cancelling a fork ends each of its samples once and closes its request") {
  fake_server server({.format = testing::wire::vllm, .tokens_per_s = 100});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder main, forks;
  stream_id parent = 0;
  std::optional<stream_id> fork_id;
  forks.on_each = [&](const stream_chunk&) {
    if (forks.chunks.size() == 4) model->cancel(*fork_id);
  };
  main.on_each = [&](const stream_chunk& c) {
    if (c.reasoning && !fork_id) fork_id = *model->fork({.ctx = {}, .parent = parent, .reasoning_prefix = main.ids(parent, true), .samples = 3}, forks);
  };
  parent = *model->start_reasoning(ask(), main);
  REQUIRE(run_until(loop, [&] { return fork_id && forks.ended(*fork_id) == 3; }));
  for (int k = 0; k < 3; ++k) CHECK(forks.end_of(*fork_id, k)->reason == finish_reason::cancelled);
  REQUIRE(server.wait_until([](const auto& rs) {
    const auto* c = find(rs, "/v1/completions");
    return c && c->client_closed;
  }, 5));
  model->cancel(parent);
  REQUIRE(run_until(loop, [&] { return main.ended(parent) == 1; }));
}

TEST_CASE("cancelling on SGLang also posts /abort_request with the request's rid") {
  fake_server server({.format = testing::wire::sglang, .tokens_per_s = 200});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  CHECK(model->config().abort_path == "/abort_request");
  recorder rec;
  stream_id id = 0;
  rec.on_each = [&](const stream_chunk&) {
    if (rec.chunks.size() == 2) model->cancel(id);
  };
  id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  REQUIRE(server.wait_until([](const auto& rs) { return find(rs, "/abort_request") != nullptr; }, 5));
  const auto rs = server.requests();
  CHECK(find(rs, "/abort_request")->body["rid"] == find(rs, "/v1/chat/completions")->rid);
  CHECK(server.aborted_rids().size() == 1);
  CHECK(model->stats().aborts_posted == 1);
}

TEST_CASE("429 with Retry-After before the first token is retried after the wait the server asked for") {
  fake_server server({.format = testing::wire::vllm});
  server.push_fault({.path = "/v1/chat/completions", .status = 429, .retry_after_s = 0.15});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(rec.end_of(id)->reason == finish_reason::stop);
  CHECK(rec.text(id, true) == joined(server_options{}.reasoning));
  const auto rs = server.requests();
  REQUIRE(count(rs, "/v1/chat/completions") == 2);
  CHECK(find(rs, "/v1/chat/completions", 0)->status == 429);
  const double waited = std::chrono::duration<double>(find(rs, "/v1/chat/completions", 1)->first_byte -
                                                      find(rs, "/v1/chat/completions", 0)->first_byte).count();
  CHECK(waited >= 0.15);
  CHECK(model->stats().retries == 1);
}

TEST_CASE("500 on every attempt ends the stream with the server's message after max_retries") {
  fake_server server({.format = testing::wire::vllm});
  for (int i = 0; i < 3; ++i) server.push_fault({.path = "/v1/chat/completions", .status = 500});
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.max_retries = 2;
  auto model = make_backend(loop, c);
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(rec.chunks.empty());
  const stream_end& e = *rec.end_of(id);
  CHECK(e.reason == finish_reason::error);
  CHECK_THAT(e.error, Catch::Contains("HTTP 500") && Catch::Contains("Internal server error") && Catch::Contains("after 3 attempts"));
  CHECK(count(server.requests(), "/v1/chat/completions") == 3);
  CHECK(model->stats().stream_errors == 1);
}

TEST_CASE("a connection dropped before the first token is retried invisibly") {
  fake_server server({.format = testing::wire::vllm});
  server.push_fault({.path = "/v1/chat/completions", .drop_after_events = 1});  // only the role chunk
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(rec.end_of(id)->reason == finish_reason::stop);
  CHECK(rec.text(id, true) == joined(server_options{}.reasoning));
  CHECK(count(server.requests(), "/v1/chat/completions") == 2);
}

TEST_CASE("a connection dropped mid-stream ends the stream with an error and keeps everything received") {
  fake_server server({.format = testing::wire::vllm});
  server.push_fault({.path = "/v1/chat/completions", .drop_after_events = 6});  // the role chunk and five tokens
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(rec.text(id, true) == joined(server_options{}.reasoning, 5));
  const stream_end& e = *rec.end_of(id);
  CHECK(e.reason == finish_reason::error);
  CHECK_THAT(e.error, Catch::Contains("the stream from") && Catch::Contains("all delivered"));
  CHECK(count(server.requests(), "/v1/chat/completions") == 1);  // never retried after a token
}

TEST_CASE("a malformed chunk ends the stream with an error naming it, and the request is closed") {
  fake_server server({.format = testing::wire::vllm, .tokens_per_s = 200});
  server.push_fault({.path = "/v1/chat/completions", .malformed_at_event = 3});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(rec.text(id, true) == joined(server_options{}.reasoning, 2));
  CHECK_THAT(rec.end_of(id)->error, Catch::Contains("malformed event") && Catch::Contains("unterminated"));
  CHECK(server.wait_until([](const auto& rs) { return find(rs, "/v1/chat/completions")->client_closed; }, 5));
}

TEST_CASE("an error object in the stream ends it with the server's message") {
  fake_server server({.format = testing::wire::sglang});
  server.push_fault({.path = "/v1/chat/completions", .error_at_event = 4});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(rec.text(id, true) == joined(server_options{}.reasoning, 3));
  CHECK(rec.end_of(id)->reason == finish_reason::error);
  CHECK_THAT(rec.end_of(id)->error, Catch::Contains("ran out of KV cache"));
}

TEST_CASE("a slow drip with keep-alives and CRLF line ends, and events cut at odd byte boundaries, arrive intact") {
  const std::vector<std::string> reasoning{"\xE4\xB8\xAD", "\xE6\x96\x87", " \xF0\x9F\x9A\x80", " caf\xC3\xA9", "."};
  fake_server server({.format = testing::wire::vllm, .reasoning = reasoning});
  server.push_fault({.path = "/v1/chat/completions", .split_bytes = 5, .piece_interval_s = 0.001, .keepalives = true, .crlf = true});
  server.push_fault({.path = "/v1/chat/completions", .split_bytes = 11, .piece_interval_s = 0.0001});
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.idle_timeout_s = 0.5;  // far above the drip's pauses
  auto model = make_backend(loop, c);
  for (int run = 0; run < 2; ++run) {
    recorder rec;
    const auto id = *model->start_reasoning(ask(), rec);
    REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
    INFO("run " << run);
    CHECK(rec.end_of(id)->reason == finish_reason::stop);
    CHECK(rec.text(id, true) == joined(reasoning));
    CHECK(rec.text(id, false) == joined(server_options{}.answer));
    const auto gen = server.main_generation_ids();
    CHECK(rec.ids(id, true) == std::vector<token_id>(gen.begin(), gen.begin() + 1 + static_cast<std::ptrdiff_t>(reasoning.size())));
  }
}

TEST_CASE("a server that stops sending ends the stream after idle_timeout_s and its connection is closed") {
  fake_server server({.format = testing::wire::vllm});
  server.push_fault({.path = "/v1/chat/completions", .stall_after_events = 3});
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.idle_timeout_s = 0.3;
  auto model = make_backend(loop, c);
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(rec.text(id, true) == joined(server_options{}.reasoning, 2));
  CHECK_THAT(rec.end_of(id)->error, Catch::Contains("no progress from") && Catch::Contains("0.3 s"));
  CHECK(server.wait_until([](const auto& rs) { return find(rs, "/v1/chat/completions")->client_closed; }, 5));
}

TEST_CASE("create says why it cannot use a server") {
  event_loop<steady_clock> loop;
  SECTION("nothing listens") {
    openai_config c{.base_url = "http://127.0.0.1:1", .model = "m"};
    c.connect_timeout_s = 2;
    auto b = openai_backend::create(loop, c);
    REQUIRE_FALSE(b);
    CHECK_THAT(b.error().message, Catch::Contains("cannot reach http://127.0.0.1:1"));
  }
  SECTION("the model is not served") {
    fake_server server;
    openai_config c = config_for(server);
    c.model = "other";
    auto b = openai_backend::create(loop, c);
    REQUIRE_FALSE(b);
    CHECK_THAT(b.error().message, Catch::Contains("does not serve \"other\"; it serves: \"test/Qwen3-8B\""));
  }
  SECTION("an invalid configuration") {
    auto b = openai_backend::create(loop, {.base_url = "localhost:8000", .model = "m"});
    REQUIRE_FALSE(b);
    CHECK_THAT(b.error().message, Catch::Contains("must start with http://"));
  }
  SECTION("a virtual-time loop") {
    event_loop<virtual_clock> vloop;
    auto b = openai_backend::create(vloop, {.base_url = "http://127.0.0.1:8000", .model = "m"});
    REQUIRE_FALSE(b);
    CHECK_THAT(b.error().message, Catch::Contains("real-time loop"));
  }
  SECTION("a missing API key variable") {
    fake_server server;
    openai_config c = config_for(server);
    c.api_key_env = "SPECGEN_TEST_NO_SUCH_KEY";
    ::unsetenv("SPECGEN_TEST_NO_SUCH_KEY");
    auto b = openai_backend::create(loop, c);
    REQUIRE_FALSE(b);
    CHECK_THAT(b.error().message, Catch::Contains("$SPECGEN_TEST_NO_SUCH_KEY, which is not set"));
  }
}

TEST_CASE("the API key from the named variable is sent with every request") {
  fake_server server;
  ::setenv("SPECGEN_TEST_KEY", "sk-test", 1);
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.api_key_env = "SPECGEN_TEST_KEY";
  auto model = make_backend(loop, c);
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  for (const auto& r : server.requests()) CHECK(r.headers.at("authorization") == "Bearer sk-test");
}

TEST_CASE("newer vLLM's delta.reasoning field is read like reasoning_content") {
  fake_server server({.format = testing::wire::vllm, .reasoning_field = "reasoning"});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(rec.text(id, true) == joined(server_options{}.reasoning));
}

TEST_CASE("the stream limit refuses a request beyond it, retryably, until one ends") {
  fake_server server({.format = testing::wire::vllm});
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.max_streams = 1;
  auto model = make_backend(loop, c);
  CHECK(model->limits().max_concurrent_streams == 1);
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  auto refused = model->start_reasoning(ask(), rec);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().retryable);
  CHECK_THAT(refused.error().message, Catch::Contains("max_streams"));
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(model->start_reasoning(ask(), rec));
}

TEST_CASE("a fork must carry the exact ids its parent delivered") {
  fake_server server({.format = testing::wire::vllm, .tokens_per_s = 200});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder main, forks;
  stream_id parent = 0;
  std::optional<expected<stream_id, error>> wrong, unknown;
  main.on_each = [&](const stream_chunk& c) {
    if (!c.reasoning || wrong) return;
    std::vector<token_id> ids = main.ids(parent, true);
    ids.back() += 1;
    wrong = model->fork({.ctx = {}, .parent = parent, .reasoning_prefix = ids, .samples = 1}, forks);
    unknown = model->fork({.ctx = {}, .parent = parent + 100, .reasoning_prefix = {}, .samples = 1}, forks);
    model->cancel(parent);
  };
  parent = *model->start_reasoning(ask(), main);
  REQUIRE(run_until(loop, [&] { return main.ended(parent) == 1; }));
  REQUIRE(wrong);
  REQUIRE_FALSE(*wrong);
  CHECK_THAT(wrong->error().message, Catch::Contains("differs from the") && Catch::Contains("at token 1"));
  REQUIRE_FALSE(*unknown);
  CHECK_THAT(unknown->error().message, Catch::Contains("is not a running reasoning stream"));
}

TEST_CASE("without the probe create asks nothing, and a server named openai gets standard fields and text forks") {
  fake_server server({.format = testing::wire::vllm, .tokens_per_s = 400});
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.probe = false;
  c.server = "openai";
  auto model = make_backend(loop, c);
  CHECK(server.requests().empty());
  CHECK(model->server().kind == "openai");
  CHECK_THAT(model->server().token_ids_note, Catch::Contains("probe is off"));
  recorder main, forks;
  stream_id parent = 0;
  std::optional<stream_id> fork_id;
  main.on_each = [&](const stream_chunk& ch) {
    if (ch.reasoning && main.chunks.size() == 3)
      fork_id = *model->fork({.ctx = {}, .parent = parent, .reasoning_prefix = main.ids(parent, true), .samples = 1}, forks);
  };
  parent = *model->start_reasoning(ask(), main);
  REQUIRE(run_until(loop, [&] { return main.ended(parent) == 1 && fork_id && forks.ended(*fork_id) == 1; }));
  const auto rs = server.requests();
  const auto* chat = find(rs, "/v1/chat/completions");
  for (const char* k : {"return_token_ids", "chat_template_kwargs", "request_id"}) CHECK_FALSE(chat->body.contains(k));
  CHECK(main.ids(parent, true).empty());  // none asked for, none streamed
  CHECK(find(rs, "/v1/completions")->prompt_was_text);
  CHECK(forks.text(*fork_id, false) == fork_candidate(0));
}

// ---- what a hostile or broken server, or a careless configuration, can do ----------------------

namespace {

/// `server`'s address with a user name and password in it.
std::string with_credentials(const fake_server& server) {
  return "http://alice:s3cret-pw@127.0.0.1:" + std::to_string(server.port());
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("credentials in base_url never appear in create errors, stream errors or the server info") {
  const std::string basic = "YWxpY2U6czNjcmV0LXB3";  // base64 of alice:s3cret-pw, as libcurl sends it
  SECTION("a stream error quoting the URL and the echoed Authorization header") {
    fake_server server;
    server.push_fault({.path = "/v1/chat/completions", .status = 500, .echo_authorization = true});
    event_loop<steady_clock> loop;
    openai_config c = config_for(server);
    c.base_url = with_credentials(server);
    c.max_retries = 0;
    auto model = make_backend(loop, c);
    CHECK(model->server().base_url == "http://***@127.0.0.1:" + std::to_string(server.port()));
    recorder rec;
    const auto id = *model->start_reasoning(ask(), rec);
    REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
    REQUIRE(server.requests().back().headers.at("authorization") == "Basic " + basic);  // the server did see them
    const std::string& e = rec.end_of(id)->error;
    CHECK_THAT(e, Catch::Contains("HTTP 500 from http://***@127.0.0.1:") && Catch::Contains("authorization: Basic ***"));
    CHECK_THAT(e, !Catch::Contains("s3cret") && !Catch::Contains(basic));
  }
  SECTION("create's error when nothing listens") {
    event_loop<steady_clock> loop;
    openai_config c{.base_url = "http://alice:s3cret-pw@127.0.0.1:1", .model = "m"};
    auto b = openai_backend::create(loop, c);
    REQUIRE_FALSE(b);
    CHECK_THAT(b.error().message, Catch::Contains("cannot reach http://***@127.0.0.1:1") && !Catch::Contains("s3cret"));
  }
}

TEST_CASE("the API key never appears in an error, also when the server echoes it back") {
  ::setenv("SPECGEN_TEST_ECHO_KEY", "sk-live-0123456789", 1);
  event_loop<steady_clock> loop;
  SECTION("create, refused") {
    fake_server server;
    server.push_fault({.path = "/v1/models", .status = 401, .echo_authorization = true});
    openai_config c = config_for(server);
    c.api_key_env = "SPECGEN_TEST_ECHO_KEY";
    auto b = openai_backend::create(loop, c);
    REQUIRE_FALSE(b);
    CHECK_THAT(b.error().message, Catch::Contains("refused the API key (HTTP 401)") && Catch::Contains("Bearer ***"));
    CHECK_THAT(b.error().message, !Catch::Contains("sk-live-0123456789"));
  }
  SECTION("a stream, refused") {
    fake_server server;
    server.push_fault({.path = "/v1/chat/completions", .status = 400, .echo_authorization = true});
    openai_config c = config_for(server);
    c.api_key_env = "SPECGEN_TEST_ECHO_KEY";
    auto model = make_backend(loop, c);
    recorder rec;
    const auto id = *model->start_reasoning(ask(), rec);
    REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
    CHECK_THAT(rec.end_of(id)->error, Catch::Contains("HTTP 400") && Catch::Contains("Bearer ***"));
    CHECK_THAT(rec.end_of(id)->error, !Catch::Contains("sk-live-0123456789"));
  }
}

TEST_CASE("an API key with a CR or LF in it is refused at create, naming the variable and not the value") {
  fake_server server;
  ::setenv("SPECGEN_TEST_BAD_KEY", "sk-abc\r\nX-Injected: yes", 1);
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.api_key_env = "SPECGEN_TEST_BAD_KEY";
  auto b = openai_backend::create(loop, c);
  REQUIRE_FALSE(b);
  CHECK_THAT(b.error().message, Catch::Contains("$SPECGEN_TEST_BAD_KEY") && Catch::Contains("control character"));
  CHECK_THAT(b.error().message, !Catch::Contains("sk-abc") && !Catch::Contains("X-Injected"));
  CHECK(server.requests().empty());  // nothing was sent with it
}

TEST_CASE("an SSE line longer than max_event_bytes ends that stream with an error naming the limit; the others go on") {
  fake_server server;
  // 9 MiB of reasoning in one line, past the 8 MiB default, as the second event (after the role chunk).
  server.push_fault({.path = "/v1/chat/completions", .huge_at_event = 2, .huge_bytes = std::size_t{9} << 20});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder rec;
  const auto big = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(big) == 1; }));
  const auto fine = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(fine) == 1; }));
  const stream_end& e = *rec.end_of(big);
  CHECK(e.reason == finish_reason::error);
  CHECK_THAT(e.error, Catch::Contains("longer than max_event_bytes (8388608 bytes)") && Catch::Contains("raise max_event_bytes"));
  CHECK(rec.text(big, true) == "\n");  // the event before it was delivered, none of the long one
  CHECK(rec.end_of(fine)->reason == finish_reason::stop);
  CHECK(rec.text(fine, true) == joined(server_options{}.reasoning));
}

TEST_CASE("a model list larger than max_response_bytes fails create with an error naming the limit") {
  fake_server server({.models_padding_bytes = std::size_t{17} << 20});  // past the 16 MiB default
  event_loop<steady_clock> loop;
  auto b = openai_backend::create(loop, config_for(server));
  REQUIRE_FALSE(b);
  CHECK_THAT(b.error().message, Catch::Contains("larger than max_response_bytes (16777216 bytes)"));
}

TEST_CASE("a stream that delivers more than max_stream_bytes ends with an error and its request is closed") {
  server_options so{.tokens_per_s = 4000};  // paced: the request is still running when the client gives up
  so.reasoning.assign(600, " word");
  fake_server server(so);
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.max_stream_bytes = 2048;
  auto model = make_backend(loop, c);
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(rec.end_of(id)->reason == finish_reason::error);
  CHECK_THAT(rec.end_of(id)->error, Catch::Contains("max_stream_bytes (2048 bytes)"));
  CHECK(rec.text(id, true).size() + rec.ids(id, true).size() * sizeof(token_id) <= 2048);
  CHECK(server.wait_until([](const auto& rs) { return find(rs, "/v1/chat/completions")->client_closed; }, 5));
}

TEST_CASE("an answer is handed over as soon as it completes, not at the I/O loop's next wake-up") {
  // create waits for three answers (the model list, two tokenizations); each used to be able to sit a second.
  fake_server server;
  event_loop<steady_clock> loop;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto model = make_backend(loop, config_for(server));
    CHECK(seconds_since(t0) < 0.75);
  }
}

TEST_CASE("create gives up on a server that accepts the connection and never answers, within connect + response timeout") {
  fake_server server;
  server.push_fault({.path = "/v1/models", .silent = true});
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.connect_timeout_s = 0.2;
  c.response_timeout_s = 0.3;
  const auto t0 = std::chrono::steady_clock::now();
  auto b = openai_backend::create(loop, c);
  REQUIRE_FALSE(b);
  CHECK(seconds_since(t0) < 2);
  CHECK_THAT(b.error().message, Catch::Contains("cannot reach") && Catch::Contains("no answer within 0.5 s"));
}

TEST_CASE("a stream without response headers ends, unretried, once GET /v1/models gets no answer either") {
  fake_server server;
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.connect_timeout_s = 0.5;  // with the response timeout, what create's own requests get
  c.response_timeout_s = 0.2;
  auto model = make_backend(loop, c);
  server.push_fault({.path = "/v1/chat/completions", .silent = true});
  server.push_fault({.path = "/v1/models", .silent = true});  // the server has hung since create asked it
  recorder rec;
  const auto t0 = std::chrono::steady_clock::now();
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }, 5));
  CHECK(seconds_since(t0) < 2.5);  // 0.2 s for the headers, 0.7 s for the check: not the idle timeout
  CHECK(rec.end_of(id)->reason == finish_reason::error);
  CHECK_THAT(rec.end_of(id)->error, Catch::Contains("no response from") && Catch::Contains("(response_timeout_s)") &&
                                        Catch::Contains("/v1/models got none either"));
  CHECK(count(server.requests(), "/v1/chat/completions") == 1);
  CHECK(model->stats().retries == 0);
}

TEST_CASE("a stream whose headers come late, as SGLang's do for a queued request, waits while the server answers") {
  fake_server server({.format = testing::wire::sglang});
  server.push_fault({.path = "/v1/chat/completions", .headers_delay_s = 0.7});
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.response_timeout_s = 0.15;
  auto model = make_backend(loop, c);
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }, 5));
  CHECK(rec.end_of(id)->reason == finish_reason::stop);
  CHECK(rec.text(id, true) == joined(server_options{}.reasoning));
  // The probe, then checks that the server is alive while the stream waited.
  CHECK(count(server.requests(), "/v1/models") >= 2);
}

TEST_CASE("keep-alive comments and empty events do not hold a stalled stream open past idle_timeout_s") {
  fake_server server;
  server.push_fault({.path = "/v1/chat/completions", .stall_after_events = 3, .ping_interval_s = 0.02});
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.idle_timeout_s = 0.3;
  auto model = make_backend(loop, c);
  recorder rec;
  const auto t0 = std::chrono::steady_clock::now();
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }, 3));
  CHECK(seconds_since(t0) < 2);
  CHECK(rec.text(id, true) == joined(server_options{}.reasoning, 2));
  CHECK_THAT(rec.end_of(id)->error, Catch::Contains("no progress from") && Catch::Contains("0.3 s"));
  CHECK(server.wait_until([](const auto& rs) { return find(rs, "/v1/chat/completions")->client_closed; }, 5));
}

TEST_CASE("SGLang refuses return_token_ids on a streamed chat completion; the stream ends with its message, unretried") {
  // Told the server is vLLM, the client asks for the ids; SGLang answers 400.
  fake_server server({.format = testing::wire::sglang});
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.server = "vllm";
  auto model = make_backend(loop, c);
  recorder rec;
  const auto id = *model->start_reasoning(ask(), rec);
  REQUIRE(run_until(loop, [&] { return rec.ended(id) == 1; }));
  CHECK(rec.end_of(id)->reason == finish_reason::error);
  CHECK_THAT(rec.end_of(id)->error, Catch::Contains("HTTP 400") && Catch::Contains("return_token_ids is not supported with streaming"));
  CHECK(count(server.requests(), "/v1/chat/completions") == 1);
}

TEST_CASE("on SGLang fork_prompt token_ids is refused at create, saying why") {
  fake_server server({.format = testing::wire::sglang});
  event_loop<steady_clock> loop;
  openai_config c = config_for(server);
  c.fork_prompt = "token_ids";
  auto b = openai_backend::create(loop, c);
  REQUIRE_FALSE(b);
  CHECK_THAT(b.error().message, Catch::Contains("SGLang streams no token ids"));
}

TEST_CASE("SGLang fork requests ask for token ids, which SGLang streams for completions") {
  fake_server server({.format = testing::wire::sglang, .tokens_per_s = 400});
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for(server));
  recorder main, forks;
  stream_id parent = 0;
  std::optional<stream_id> fork_id;
  main.on_each = [&](const stream_chunk& ch) {
    if (ch.reasoning && !fork_id) fork_id = *model->fork({.ctx = {}, .parent = parent, .reasoning_prefix = {}, .samples = 2}, forks);
  };
  parent = *model->start_reasoning(ask(), main);
  REQUIRE(run_until(loop, [&] { return main.ended(parent) == 1 && fork_id && forks.ended(*fork_id) == 2; }));
  const auto rs = server.requests();
  const auto* cmpl = find(rs, "/v1/completions");
  REQUIRE(cmpl);
  CHECK(cmpl->body["return_token_ids"] == true);
  for (int k = 0; k < 2; ++k) CHECK(forks.text(*fork_id, false, k) == fork_candidate(k));
  CHECK_FALSE(forks.ids(*fork_id, false).empty());
}
