// The stand-in model server (the fake server playing the bundled suite's
// traces) against the real OpenAI backend: what it streams, how forks are
// answered, how feedback changes what it writes, pacing under contention, and
// cancellation.
#include "fixture.hpp"
#include "standin.hpp"

#include <specgen/prompt.hpp>
#include <specgen/replay/responsive.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

using namespace fixture;
using testing::standin_options;
using testing::standin_server_options;

namespace {

std::shared_ptr<const replay::responsive_traces> suite() {
  static const auto traces = [] {
    auto t = replay::load_traces(std::filesystem::path(SPECGEN_SOURCE_DIR) / "tasks" / "suite" / "traces");
    if (!t) FAIL(t.error().what());
    return std::make_shared<const replay::responsive_traces>(std::move(*t));
  }();
  return traces;
}

/// A server playing the suite; `tokens_per_s` 0: as fast as the socket takes it.
std::unique_ptr<fake_server> standin(double tokens_per_s, double slowdown = 0, testing::wire format = testing::wire::vllm) {
  standin_options o;
  o.format = format;
  o.tokens_per_s = tokens_per_s;
  o.slowdown_per_sequence = slowdown;
  return std::make_unique<fake_server>(standin_server_options(suite(), o));
}

openai_config standin_config(const fake_server& server) {
  openai_config c = config_for(server);
  c.model = standin_options{}.model;
  return c;
}

std::string task_prompt(std::string_view task, const std::vector<std::pair<std::string, std::string>>& reports = {}) {
  std::string p = fmt::format("# Task: {}\n\nWrite a fast kernel.\n\n", task);
  for (const auto& [tag, verdict] : reports) p += kernel_heading(tag, verdict) + " (round 0, lane 0)\n\nfeedback\n\n";
  return p;
}

const testing::request_record* find(const std::vector<testing::request_record>& rs, std::string_view path, int nth = 0) {
  for (const auto& r : rs)
    if (r.path == path && nth-- == 0) return &r;
  return nullptr;
}

std::vector<std::string> fenced_tags(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& k : replay::fenced_kernels(text)) out.push_back(k.tag);
  return out;
}

}  // namespace

TEST_CASE("a chat stream for a suite task plays the task's round-0 trace, in realistic tokens") {
  auto server = standin(0);
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, standin_config(*server));
  CHECK(model->server().family.name == "qwen3");
  recorder rec;
  auto id = model->start_reasoning(ask(task_prompt("softmax")), rec);
  REQUIRE(id);
  REQUIRE(run_until(loop, [&] { return rec.ended(*id) == 1; }));

  auto want = suite()->select("softmax", task_prompt("softmax"));
  REQUIRE(want);
  CHECK(want->round == 0);
  const auto reasoning = replay::expand_reasoning(*want);
  CHECK(rec.text(*id, true) == reasoning.text());
  CHECK(rec.text(*id, false) == want->answer.text);
  CHECK(rec.end_of(*id)->reason == finish_reason::stop);
  // One id per token of the trace (and <think>), about 4 bytes each.
  const auto ids = rec.ids(*id, true);
  CHECK(ids.size() == reasoning.size() + 1);
  CHECK(static_cast<double>(reasoning.text().size()) / static_cast<double>(reasoning.size()) > 2.5);
  // Every id maps back to its text.
  std::string back;
  for (std::size_t i = 1; i < ids.size(); ++i) back += server->piece_of(ids[i]).value_or("?");
  CHECK(back == reasoning.text());
  // The answer is one of the suite's kernels.
  auto k = replay::kernel_in(rec.text(*id, false), false);
  REQUIRE(k);
  CHECK(suite()->kernels("softmax").at(k->tag).first_round == 0);
  const auto rs = server->requests();
  CHECK_THAT(find(rs, "/v1/chat/completions")->note, Catch::Contains("task softmax round 0"));
}

TEST_CASE("a fork after N reasoning tokens answers the kernel of that fork point") {
  const auto format = GENERATE(testing::wire::vllm, testing::wire::sglang);
  INFO((format == testing::wire::vllm ? "vllm: a fork by ids" : "sglang: a fork by text"));
  auto server = standin(4000, 0, format);
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, standin_config(*server));
  auto want = suite()->select("softmax", task_prompt("softmax"));
  REQUIRE(want);
  REQUIRE(want->forks.size() >= 2);
  const std::uint64_t n = want->forks[1].at_token + 3;  // reasoning tokens in the fork's prefix

  recorder main, forks;
  std::optional<stream_id> fork_id;
  stream_id parent = 0;
  // Count reasoning tokens by their text: SGLang streams no ids.
  const std::size_t bytes = replay::expand_reasoning(*want).slice(0, n).size();
  std::size_t received = 0;
  main.on_each = [&](const stream_chunk& c) {
    if (!c.reasoning || fork_id) return;
    received += c.text.size();
    if (received < bytes) return;
    fork_request f;
    f.parent = parent;
    f.reasoning_prefix = main.ids(parent, true);
    f.samples = 2;
    auto r = model->fork(f, forks);
    REQUIRE(r);
    fork_id = *r;
  };
  auto id = model->start_reasoning(ask(task_prompt("softmax")), main);
  REQUIRE(id);
  parent = *id;
  REQUIRE(run_until(loop, [&] { return fork_id && forks.ended(*fork_id) == 2; }));
  model->cancel(*id);

  const auto rs = server->requests();
  const auto* chat = find(rs, "/v1/chat/completions");
  const auto* cmpl = find(rs, "/v1/completions");
  REQUIRE(chat);
  REQUIRE(cmpl);
  CHECK(cmpl->prompt_was_text == (format == testing::wire::sglang));
  CHECK(cmpl->continues == chat->number);
  // The fork carried at least n reasoning tokens, and fewer than the next fork point.
  CHECK(cmpl->fork_reasoning_tokens >= n);
  REQUIRE(want->forks.size() >= 3);
  REQUIRE(cmpl->fork_reasoning_tokens < want->forks[2].at_token);
  for (int k = 0; k < 2; ++k) {
    INFO("sample " << k);
    auto got = replay::kernel_in(forks.text(*fork_id, false, k), true);
    auto expected = replay::kernel_in(want->forks[1].samples[static_cast<std::size_t>(k) % want->forks[1].samples.size()].text, true);
    REQUIRE(expected);
    REQUIRE(got);
    CHECK(got->tag == expected->tag);
  }
}

TEST_CASE("a fork that continues no chat request answers without a kernel") {
  auto server = standin(0);
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, standin_config(*server));
  // A parent whose prompt names no task: the server refuses it with the reason.
  recorder rec;
  auto id = model->start_reasoning(ask("Write a kernel."), rec);
  REQUIRE(id);
  REQUIRE(run_until(loop, [&] { return rec.ended(*id) == 1; }));
  CHECK(rec.end_of(*id)->reason == finish_reason::error);
  CHECK_THAT(rec.end_of(*id)->error, Catch::Contains("# Task: <name>"));
  // An unknown task: the corpus's tasks are listed.
  recorder rec2;
  auto id2 = model->start_reasoning(ask(task_prompt("no_such_task")), rec2);
  REQUIRE(id2);
  REQUIRE(run_until(loop, [&] { return rec2.ended(*id2) == 1; }));
  CHECK_THAT(rec2.end_of(*id2)->error, Catch::Contains("softmax"));
}

TEST_CASE("a prompt reporting a kernel as compile_error gets a stream without that kernel") {
  auto server = standin(0);
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, standin_config(*server));
  // X: the kernel softmax's round-0 answer writes.
  auto r0 = suite()->select("softmax", task_prompt("softmax"));
  REQUIRE(r0);
  const auto x = replay::kernel_in(r0->answer.text, false);
  REQUIRE(x);
  // And a kernel drafted in the reasoning of the round it leads to.
  auto r1 = suite()->select("softmax", task_prompt("softmax", {{x->tag, "ok"}}));
  REQUIRE(r1);
  CHECK(r1->round == 1);
  const auto drafts1 = fenced_tags(replay::expand_reasoning(*r1).text());

  // Report X as compile_error, and as wrong_result every kernel drafted in
  // round 1's reasoning that round 0 wrote already (so round 1 still plays).
  std::vector<std::pair<std::string, std::string>> reports{{x->tag, "compile_error"}};
  bool draft_reported = false;
  for (const auto& tag : drafts1)
    if (tag != x->tag && suite()->kernels("softmax").at(tag).first_round == 0) {
      reports.emplace_back(tag, "wrong_result");
      draft_reported = true;
    }
  CHECK(suite()->round_for("softmax", task_prompt("softmax", reports)).value() == 1);
  recorder rec;
  auto id = model->start_reasoning(ask(task_prompt("softmax", reports)), rec);
  REQUIRE(id);
  REQUIRE(run_until(loop, [&] { return rec.ended(*id) == 1; }));
  const std::string reasoning = rec.text(*id, true), answer = rec.text(*id, false);
  REQUIRE_FALSE(reasoning.empty());
  for (const auto& [tag, verdict] : reports) {
    INFO(tag << " " << verdict);
    const auto tags = fenced_tags(reasoning);
    CHECK(std::find(tags.begin(), tags.end(), tag) == tags.end());
    auto a = replay::kernel_in(answer, false);
    CHECK((!a || a->tag != tag));
  }
  if (draft_reported) CHECK_THAT(reasoning, Catch::Contains("already reported wrong_result"));
  // X is mentioned, never written.
  if (std::find(drafts1.begin(), drafts1.end(), x->tag) != drafts1.end())
    CHECK_THAT(reasoning, Catch::Contains("already reported compile_error"));
  const auto rs = server->requests();
  CHECK_THAT(find(rs, "/v1/chat/completions")->note, Catch::Contains("round 1"));
}

namespace {

/// Per-stream decode rate (tokens/s) of `streams` concurrent streams, over a
/// window that starts once all of them are decoding.
std::vector<double> rates(double tokens_per_s, double slowdown, int streams, double window_s) {
  auto server = standin(tokens_per_s, slowdown);
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, standin_config(*server));
  using clk = std::chrono::steady_clock;
  std::vector<std::unique_ptr<recorder>> recs;
  std::vector<std::vector<std::pair<clk::time_point, std::size_t>>> arrivals(static_cast<std::size_t>(streams));
  std::vector<stream_id> ids;
  for (int i = 0; i < streams; ++i) {
    recs.push_back(std::make_unique<recorder>());
    auto& a = arrivals[static_cast<std::size_t>(i)];
    recs.back()->on_each = [&a](const stream_chunk& c) { a.emplace_back(clk::now(), c.reasoning ? std::max<std::size_t>(c.tokens.size(), 1) : 0); };
    auto id = model->start_reasoning(ask(task_prompt("softmax")), *recs.back());
    REQUIRE(id);
    ids.push_back(*id);
  }
  // All decoding, plus a little: then the window.
  clk::time_point start{};
  run_until(loop, [&] {
    if (start == clk::time_point{}) {
      if (std::all_of(arrivals.begin(), arrivals.end(), [](const auto& a) { return a.size() >= 3; })) start = clk::now();
      return false;
    }
    return clk::now() - start > std::chrono::duration<double>(window_s);
  }, 20);
  CHECK(server->decoding_sequences() == streams);
  std::vector<double> out;
  for (const auto& a : arrivals) {
    std::size_t tokens = 0;
    clk::time_point first{}, last{};
    for (const auto& [at, n] : a) {
      if (at < start) continue;
      if (first == clk::time_point{}) first = at;
      else tokens += n;
      last = at;
    }
    out.push_back(static_cast<double>(tokens) / std::chrono::duration<double>(last - first).count());
  }
  for (auto id : ids) model->cancel(id);
  return out;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace

TEST_CASE("decoding slows down with the number of sequences decoding at once") {
  const double alone = mean(rates(200, 0.025, 1, 1.0));
  const double eight = mean(rates(200, 0.025, 8, 1.0));
  INFO("alone " << alone << " tok/s, each of 8: " << eight << " tok/s");
  CHECK(alone == Approx(200).epsilon(0.15));
  const double want = 1.0 / (1.0 + 0.025 * 7);
  CHECK(eight / alone == Approx(want).epsilon(0.2));
  // A steep slowdown shows the shape clearly.
  const double steep = mean(rates(200, 0.25, 8, 0.8));
  INFO("each of 8 at a = 0.25: " << steep << " tok/s");
  CHECK(steep / alone == Approx(1.0 / (1.0 + 0.25 * 7)).epsilon(0.2));
}

TEST_CASE("cancelling a stream closes its request, and it no longer counts as decoding") {
  auto server = standin(300, 0.025);
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, standin_config(*server));
  recorder rec;
  int chunks = 0;
  stream_id parent = 0;
  rec.on_each = [&](const stream_chunk&) {
    if (++chunks == 20) model->cancel(parent);
  };
  auto id = model->start_reasoning(ask(task_prompt("gelu")), rec);
  REQUIRE(id);
  parent = *id;
  REQUIRE(run_until(loop, [&] { return rec.ended(*id) == 1; }));
  CHECK(rec.end_of(*id)->reason == finish_reason::cancelled);
  CHECK(server->wait_until([](const auto& rs) {
    const auto* chat = find(rs, "/v1/chat/completions");
    return chat && chat->client_closed;
  }, 5.0));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (server->decoding_sequences() != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(server->decoding_sequences() == 0);
}
