// The feedback-responsive trace chooser: which round a prompt calls for, and
// how kernels the prompt reports as failing are taken out of the trace.
#include <specgen/clock.hpp>
#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/responsive.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

using namespace specgen;
using namespace specgen::replay;

namespace {

const std::filesystem::path suite_traces = std::filesystem::path(SPECGEN_SOURCE_DIR) / "tasks" / "suite" / "traces";

const std::vector<trace>& suite() {
  static const std::vector<trace> traces = [] {
    auto t = load_traces(suite_traces);
    if (!t) FAIL(t.error().what());
    return std::move(*t);
  }();
  return traces;
}

const responsive_traces& suite_chooser() {
  static const responsive_traces chooser(suite());
  return chooser;
}

std::string prompt_reporting(std::string_view task, const std::vector<std::pair<std::string, std::string>>& reports) {
  std::string p = fmt::format("# Task: {}\n\nWrite a faster kernel.\n\n## Earlier kernels\n\n", task);
  for (const auto& [tag, verdict] : reports) p += kernel_heading(tag, verdict) + " (round 0, lane 0)\n\nfeedback here\n\n";
  return p;
}

/// Every kernel tag a trace would write: answer, fork samples, fenced drafts.
struct written {
  std::optional<std::string> answer;
  std::vector<std::string> samples;
  std::vector<std::string> drafts;
  [[nodiscard]] bool contains(const std::string& tag) const {
    return answer == tag || std::find(samples.begin(), samples.end(), tag) != samples.end() ||
           std::find(drafts.begin(), drafts.end(), tag) != drafts.end();
  }
};

written kernels_of(const trace& t) {
  written w;
  if (auto k = kernel_in(t.answer.text, false)) w.answer = k->tag;
  for (const auto& f : t.forks)
    for (const auto& s : f.samples)
      if (auto k = kernel_in(s.text, true)) w.samples.push_back(k->tag);
  for (const auto& s : t.segments)
    if (!s.filler)
      for (const auto& k : fenced_kernels(s.text)) w.drafts.push_back(k.tag);
  // The reasoning as played, fences spanning segments included.
  const token_text r = expand_reasoning(t);
  for (const auto& k : fenced_kernels(r.text())) w.drafts.push_back(k.tag);
  return w;
}

void check_well_formed(const trace& t) {
  const std::uint64_t total = t.reasoning_tokens();
  for (std::size_t i = 0; i < t.forks.size(); ++i) {
    CHECK(t.forks[i].at_token <= total);
    if (i > 0) CHECK(t.forks[i].at_token > t.forks[i - 1].at_token);
    CHECK_FALSE(t.forks[i].samples.empty());
  }
  CHECK(t.answer.tokens >= 1);
  // It still loads as a trace.
  auto back = parse_traces(traces_to_json(std::vector<trace>{t}), "rewritten");
  CHECK(back.has_value());
}

trace small_trace() {
  trace t;
  t.task = "vec";
  t.round = 0;
  t.lane = 0;
  t.style = trace_style::draft_early;
  t.id = "vec/r0/l0";
  const std::string k1 = "```cuda\nextern \"C\" __global__ void add1(float* x) { x[0] = 1; }\n```\n"
                         "```plan\nlaunch add1 grid(1) block(1) args(x)\n```\n";
  const std::string k2 = "```cuda\nextern \"C\" __global__ void add2(float* x) { x[0] = 2; }\n```\n"
                         "```plan\nlaunch add2 grid(1) block(1) args(x)\n```\n";
  const std::string k3 = "```cuda\nextern \"C\" __global__ void add3(float* x) { x[0] = 3; }\n```\n"
                         "```plan\nlaunch add3 grid(1) block(1) args(x)\n```\n";
  t.segments.push_back({.text = "First a simple version:\n" + k1, .tokens = 40});
  t.segments.push_back({.text = "", .tokens = 100, .filler = true, .topic = "memory"});
  t.segments.push_back({.text = "Better:\n" + k2 + "Done thinking.\n", .tokens = 40});
  t.answer = {"Here it is.\n\n" + k3, 40};
  t.forks.push_back({30, {{k1, 30}, {k2, 30}}});
  t.forks.push_back({150, {{k2, 30}, {k3, 30}}});
  return t;
}

std::string tag_of(const std::string& text) { return kernel_in(text, true)->tag; }

}  // namespace

TEST_CASE("the catalogue holds every kernel of a task's traces with its first round") {
  const auto& chooser = suite_chooser();
  const auto tasks = chooser.tasks();
  REQUIRE(tasks.size() >= 10);
  for (const auto& task : tasks) {
    INFO(task);
    const auto& cat = chooser.kernels(task);
    REQUIRE_FALSE(cat.empty());
    std::set<int> rounds;
    for (const auto& [tag, k] : cat) {
      CHECK(tag == k.tag);
      CHECK(tag.size() == 9);
      rounds.insert(k.first_round);
    }
    CHECK(rounds.contains(0));
    // Every answer of the traces is catalogued, at a round no later than its own.
    for (const auto& t : chooser.traces())
      if (t.task == task)
        if (auto k = kernel_in(t.answer.text, false)) {
          REQUIRE(cat.contains(k->tag));
          CHECK(cat.at(k->tag).first_round <= t.round);
        }
  }
  CHECK(chooser.kernels("no_such_task").empty());
}

TEST_CASE("the round follows the latest round the prompt reports on") {
  const auto& chooser = suite_chooser();
  const auto& cat = chooser.kernels("softmax");
  std::map<int, std::string> first_of_round;
  for (const auto& [tag, k] : cat) first_of_round.try_emplace(k.first_round, tag);
  REQUIRE(first_of_round.size() == 3);

  CHECK(chooser.round_for("softmax", "# Task: softmax\nWrite a kernel.").value() == 0);
  CHECK(chooser.round_for("softmax", prompt_reporting("softmax", {{"k0123abcd", "ok"}})).value() == 0);  // not one of the task's
  CHECK(chooser.round_for("softmax", prompt_reporting("softmax", {{first_of_round[0], "wrong_result"}})).value() == 1);
  CHECK(chooser.round_for("softmax", prompt_reporting("softmax", {{first_of_round[0], "ok"}, {first_of_round[1], "pending"}})).value() == 2);
  CHECK(chooser.round_for("softmax", prompt_reporting("softmax", {{first_of_round[2], "ok"}})).value() == 2);  // capped

  auto t = chooser.select("softmax", prompt_reporting("softmax", {{first_of_round[0], "ok"}}));
  REQUIRE(t);
  CHECK(t->round == 1);
  CHECK(t->task == "softmax");

  auto missing = chooser.select("nope", "# Task: nope\n");
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message, Catch::Contains("\"nope\"") && Catch::Contains("\"softmax\""));

  CHECK(responsive_traces::task_of("# Task: softmax\nmore") == "softmax");
  CHECK(responsive_traces::task_of("# Task: softmax  \r\n") == "softmax");
  CHECK_FALSE(responsive_traces::task_of("Task: softmax"));
}

TEST_CASE("a kernel reported as failing is never written again, in any suite trace") {
  const auto& chooser = suite_chooser();
  for (const auto& task : chooser.tasks()) {
    for (const auto& [tag, k] : chooser.kernels(task)) {
      for (const char* verdict : {"compile_error", "wrong_result"}) {
        INFO(task << " " << tag << " " << verdict << " (first in round " << k.first_round << ")");
        // Reported alone: the round after its first.
        const auto prompt = prompt_reporting(task, {{tag, verdict}});
        auto t = chooser.select(task, prompt);
        REQUIRE(t);
        const auto w = kernels_of(*t);
        CHECK_FALSE(w.answer == tag);
        CHECK(std::find(w.samples.begin(), w.samples.end(), tag) == w.samples.end());
        CHECK(std::find(w.drafts.begin(), w.drafts.end(), tag) == w.drafts.end());
        check_well_formed(*t);
        CHECK(chooser.select(task, prompt)->forks == t->forks);  // deterministic
      }
    }
  }
}

TEST_CASE("reporting every kernel of a round as failing still gives a valid trace without them") {
  const auto& chooser = suite_chooser();
  for (const auto& task : chooser.tasks()) {
    INFO(task);
    std::vector<std::pair<std::string, std::string>> reports;
    for (const auto& [tag, k] : chooser.kernels(task)) reports.emplace_back(tag, "compile_error");
    auto t = chooser.select(task, prompt_reporting(task, reports));
    REQUIRE(t);
    const auto w = kernels_of(*t);
    CHECK_FALSE(w.answer);
    CHECK(w.samples.empty());
    CHECK(w.drafts.empty());
    CHECK_THAT(t->answer.text, Catch::Contains("could not write a new kernel"));
    CHECK(t->answer.text.find("```") == std::string::npos);
    check_well_formed(*t);
  }
}

TEST_CASE("with the round's kernels failing but one reported ok, the answer is that one") {
  const auto& chooser = suite_chooser();
  const auto& cat = chooser.kernels("softmax");
  std::vector<std::pair<std::string, std::string>> reports;
  std::string good;
  for (const auto& [tag, k] : cat) {
    if (k.first_round == 0 && good.empty()) {
      good = tag;
      reports.emplace_back(tag, "ok");
    } else {
      reports.emplace_back(tag, "timeout");
    }
  }
  auto t = chooser.select("softmax", prompt_reporting("softmax", reports));
  REQUIRE(t);
  CHECK(t->round == 2);
  auto k = kernel_in(t->answer.text, false);
  REQUIRE(k);
  CHECK(k->tag == good);
}

TEST_CASE("rewriting a small trace: drafts become sentences, samples move on to the next kernel") {
  const trace t = small_trace();
  const std::string k1 = tag_of(t.forks[0].samples[0].text), k2 = tag_of(t.forks[0].samples[1].text),
                    k3 = tag_of(t.answer.text);
  responsive_traces chooser({t});
  CHECK(chooser.kernels("vec").size() == 3);
  CHECK(chooser.select("vec", "# Task: vec\n")->forks == t.forks);

  SECTION("the first kernel fails") {
    auto r = chooser.select("vec", prompt_reporting("vec", {{k1, "compile_error"}}));
    REQUIRE(r);
    // One recorded round: the cap keeps it.
    CHECK(r->round == 0);
    CHECK_THAT(r->segments[0].text, Catch::Contains(responsive_traces::not_repeated(k1, "compile_error")));
    CHECK(r->segments[0].text.find("add1") == std::string::npos);
    CHECK(r->segments[2] == t.segments[2]);
    CHECK(tag_of(r->forks[0].samples[0].text) == k2);  // the next sample of the fork point
    CHECK(tag_of(r->forks[0].samples[1].text) == k2);
    CHECK(r->answer == t.answer);
    check_well_formed(*r);
  }
  SECTION("the answer fails: the last draft or sample that did not replaces it") {
    auto r = chooser.select("vec", prompt_reporting("vec", {{k3, "wrong_result"}}));
    REQUIRE(r);
    auto a = kernel_in(r->answer.text, false);
    REQUIRE(a);
    CHECK(a->tag == k2);
    CHECK_THAT(r->answer.text, Catch::Contains(k3) && Catch::Contains("wrong_result"));
    CHECK(r->forks[1].samples[1] == r->answer);  // nothing later than k3: the new answer
    check_well_formed(*r);
  }
  SECTION("two fail: the later fork point and the answer give way") {
    auto r = chooser.select("vec", prompt_reporting("vec", {{k2, "fault"}, {k3, "unstable"}}));
    REQUIRE(r);
    CHECK(tag_of(r->answer.text) == k1);
    CHECK(tag_of(r->forks[0].samples[0].text) == k1);
    CHECK(tag_of(r->forks[0].samples[1].text) == k1);  // nothing later is left
    CHECK_THAT(r->segments[2].text, Catch::Contains(responsive_traces::not_repeated(k2, "fault")));
    // The fork point after the rewritten segment keeps its place after it.
    CHECK(r->forks[1].at_token >= r->segments[0].tokens + r->segments[1].tokens);
    CHECK(r->forks[1].at_token <= r->reasoning_tokens());
    check_well_formed(*r);
  }
}

TEST_CASE("a replay model with the responsive chooser plays the round the prompt calls for") {
  event_loop<virtual_clock> loop;
  replay_model model(loop, suite());
  auto chooser = std::make_shared<const responsive_traces>(suite());
  model.set_trace_chooser(responsive_chooser(chooser));

  const auto& cat = chooser->kernels("softmax");
  std::string round0;
  for (const auto& [tag, k] : cat)
    if (k.first_round == 0) round0 = tag;
  REQUIRE_FALSE(round0.empty());

  struct sink final : stream_sink {
    std::string reasoning, answer;
    std::vector<token_id> ids;
    int ends = 0;
    void on_chunk(const stream_chunk& c) override {
      (c.reasoning ? reasoning : answer) += c.text;
      if (c.reasoning) ids.insert(ids.end(), c.tokens.begin(), c.tokens.end());
    }
    void on_end(const stream_end&) override { ++ends; }
  };
  sink s, f;
  reasoning_request req;
  req.ctx.task = "softmax";
  req.ctx.round = 0;  // ignored: the prompt decides
  req.prompt = prompt_reporting("softmax", {{round0, "compile_error"}});
  auto id = model.start_reasoning(req, s);
  REQUIRE(id);
  loop.run();
  REQUIRE(s.ends == 1);
  auto expected = chooser->select("softmax", req.prompt);
  REQUIRE(expected);
  CHECK(expected->round == 1);
  CHECK(s.reasoning == expand_reasoning(*expected).text());
  CHECK(s.answer == expected->answer.text);
  CHECK(s.answer.find(round0) == std::string::npos);

  // A fork of that stream answers from the same (rewritten) trace.
  REQUIRE_FALSE(expected->forks.empty());
  const auto at = expected->forks.front().at_token;
  fork_request fr;
  fr.parent = *id;
  fr.reasoning_prefix.assign(s.ids.begin(), s.ids.begin() + static_cast<std::ptrdiff_t>(at));
  fr.samples = 1;
  REQUIRE(model.fork(fr, f));
  loop.run();
  CHECK(f.answer == expected->forks.front().samples.front().text);

  // An unknown task fails the request with the chooser's message.
  reasoning_request bad;
  bad.ctx.task = "nope";
  sink n;
  auto e = model.start_reasoning(bad, n);
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error().message, Catch::Contains("nope"));

  // Without the chooser: (task, round, lane) again.
  model.set_trace_chooser({});
  sink plain;
  req.ctx.round = 0;
  REQUIRE(model.start_reasoning(req, plain));
  loop.run();
  CHECK(plain.answer == model.select(req.ctx).value()->answer.text);
}
