// The replay traces of the bundled task suite (tasks/suite/traces/<task>.json, assembled by
// scripts/suite/make_traces.py from scripts/suite/traces/<task>.md). No GPU needed.
//
// Checked: every trace file loads with the project's loader; every task of tasks/suite/tasks has
// rounds 0, 1, 2, ...; both reasoning styles occur and
// keep the calibrated statistics (docs/replay-model.md, "Calibration"); every kernel in
// a fence -- in the reasoning, in a final answer or in a fork sample -- is byte for byte the source
// of one of the task's candidates (tasks/suite/candidates/<task>/), found the way the engine finds
// it (extract_candidate); every fork point sits on a token where a text trigger fires; later rounds
// open on the previous round's final kernel; and a replay run of every trace under the default
// trigger forks and gets candidate kernels back.
#include <specgen/extract.hpp>
#include <specgen/policy/trigger.hpp>
#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/trace.hpp>
#include <specgen/replay/trace_gen.hpp>
#include <specgen/task_io.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fs = std::filesystem;
using namespace specgen;
using namespace specgen::policy;
using namespace specgen::replay;

namespace {

const fs::path suite_dir = SPECGEN_SUITE_DIR;
const fs::path traces_dir = suite_dir / "traces";

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trim_newlines(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

/// A candidate kernel of the suite: its source file's text and its plan.
struct suite_candidate {
  std::string name{};
  std::string source{};
  std::string plan{};    ///< as the entry gives it (an array of lines is joined with a newline after each)
  double quality = 0;    ///< 0 when it fails; else speed class (slower 1, similar 2, faster 3) + version / 10
};

double quality_of(const nlohmann::json& j, const std::string& name) {
  const auto& e = j.at("expect");
  if (!(e.is_string() && e.get<std::string>() == "ok")) return 0;
  static const std::map<std::string, double> speed{{"slower", 1}, {"similar", 2}, {"faster", 3}};
  const int version = name.size() > 1 && name[0] == 'v' ? name[1] - '0' : 0;
  return speed.at(j.at("speed").get<std::string>()) + version / 10.0;
}

/// Candidates by task.
const std::map<std::string, std::vector<suite_candidate>>& candidates() {
  static const auto all = [] {
    std::map<std::string, std::vector<suite_candidate>> out;
    for (const auto& d : fs::directory_iterator(suite_dir / "candidates")) {
      if (!d.is_directory()) continue;
      for (const auto& f : fs::directory_iterator(d.path())) {
        if (f.path().extension() != ".json") continue;
        const auto j = nlohmann::json::parse(read_text(f.path()), nullptr, true, /*ignore_comments=*/true);
        suite_candidate c;
        c.name = j.at("name").get<std::string>();
        c.source = read_text(d.path() / j.at("source_file").get<std::string>());
        if (j.at("plan").is_string()) {
          c.plan = j.at("plan").get<std::string>();
        } else {
          for (const auto& line : j.at("plan")) c.plan += line.get<std::string>() + "\n";
        }
        c.quality = quality_of(j, c.name);
        out[d.path().filename().string()].push_back(std::move(c));
      }
    }
    return out;
  }();
  return all;
}

const suite_candidate* candidate_with_source(const std::string& task, std::string_view source) {
  auto it = candidates().find(task);
  if (it == candidates().end()) return nullptr;
  for (const auto& c : it->second)
    if (c.source == source) return &c;
  return nullptr;
}

bool is_candidate_plan(const std::string& task, std::string_view plan) {
  auto it = candidates().find(task);
  if (it == candidates().end()) return false;
  return std::any_of(it->second.begin(), it->second.end(),
                     [&](const suite_candidate& c) { return trim_newlines(c.plan) == trim_newlines(std::string(plan)); });
}

std::vector<std::string> stems(const fs::path& dir, const std::string& ext) {
  std::vector<std::string> out;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.is_regular_file() && f.path().extension() == ext) out.push_back(f.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// The tasks of the suite: every task file.
std::vector<std::string> suite_tasks() { return stems(suite_dir / "tasks", ".json"); }

const std::vector<trace>& traces() {
  static const std::vector<trace> all = [] {
    auto t = load_traces(traces_dir);
    if (!t) throw std::runtime_error(t.error().what());
    return std::move(*t);
  }();
  return all;
}

/// The token index whose text holds byte `b`.
std::size_t token_at(const token_text& tt, std::size_t b) {
  std::size_t lo = 0, hi = tt.size();
  while (lo + 1 < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (tt.begin(mid) <= b) lo = mid;
    else hi = mid;
  }
  return lo;
}

/// Share of tokens that start inside a fenced block or on a fence line (as trace_gen_test measures it).
double fenced_share(const token_text& tt) {
  const std::string& s = tt.text();
  std::vector<bool> at_byte(s.size() + 1, false);
  std::size_t line_start = 0;
  bool inside = false;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '\n') {
      if (s.compare(line_start, 3, "```") == 0) inside = !inside;
      line_start = i + 1;
    }
    if (i < s.size()) at_byte[i] = inside || s.compare(line_start, 3, "```") == 0;
  }
  std::size_t fenced = 0;
  for (std::size_t i = 0; i < tt.size(); ++i)
    if (tt.begin(i) < s.size() && at_byte[tt.begin(i)]) ++fenced;
  return static_cast<double>(fenced) / static_cast<double>(tt.size());
}

/// Every closed fenced block of `text`.
std::vector<fenced_block> blocks_of(std::string_view text) {
  fence_scanner scan;
  auto out = scan.feed(text);
  for (auto& b : scan.finish()) out.push_back(std::move(b));
  return out;
}

bool is_source_tag(const std::string& tag) {
  return tag == "cuda" || tag == "cu" || tag == "cpp" || tag == "c++" || tag == "cuh" || tag == "c";
}

/// Checks that every source block of `text` is a candidate source and every plan block a candidate
/// plan; returns the number of kernels seen.
int check_blocks(const std::string& task, std::string_view text, const std::string& where) {
  int kernels = 0;
  for (const auto& b : blocks_of(text)) {
    const std::string_view content = b.content.of(text);
    INFO(where << ", block at byte " << b.block.begin << " tagged '" << b.tag << "'");
    if (is_source_tag(b.tag)) {
      CHECK(candidate_with_source(task, content) != nullptr);
      ++kernels;
    } else if (b.tag == "plan") {
      CHECK(is_candidate_plan(task, content));
    }
  }
  return kernels;
}

/// The candidate a non-reasoning answer gives, extracted as the engine extracts it; null if none.
const suite_candidate* answer_candidate(const std::string& task, std::string_view text, const std::string& where) {
  INFO(where);
  auto e = extract_candidate(text);
  if (!e) {
    FAIL_CHECK("no candidate: " << e.error().message);
    return nullptr;
  }
  const suite_candidate* c = candidate_with_source(task, e->source);
  CHECK(c != nullptr);
  if (c) CHECK(trim_newlines(e->plan) == trim_newlines(c->plan));
  return c;
}

/// Prefix lengths (in tokens) at which `t` fires when the reasoning arrives one token at a time.
std::set<std::uint64_t> fire_points(any_trigger t, const token_text& tt) {
  std::set<std::uint64_t> out;
  for (std::size_t i = 0; i < tt.size(); ++i) {
    const stream_view v{.text = std::string_view(tt.text()).substr(0, tt.end(i)), .new_from = tt.begin(i),
                        .tokens = i + 1};
    if (t.on_chunk(v, {})) out.insert(i + 1);
  }
  return out;
}

std::vector<std::string> kernel_names_of(const answer_text& a) {
  auto e = extract_candidate(a.text);
  return e ? e->kernels : std::vector<std::string>{};
}

const trace* find_trace(const std::string& task, int round) {
  for (const auto& t : traces())
    if (t.task == task && t.round == round) return &t;
  return nullptr;
}

}  // namespace

TEST_CASE("every trace file of the suite loads with the project's loader") {
  REQUIRE_NOTHROW(traces());
  const auto files = stems(traces_dir, ".json");
  REQUIRE_FALSE(files.empty());
  std::size_t n = 0;
  for (const auto& f : files) {
    INFO(f);
    auto one = load_traces(traces_dir / (f + ".json"));
    REQUIRE(one);
    n += one->size();
    for (const auto& t : *one) {
      CHECK(t.task == f);  // traces/<task>.json holds that task's traces
      CHECK(candidates().count(t.task) == 1);
    }
  }
  CHECK(n == traces().size());
}

TEST_CASE("every task of the suite has at least three rounds") {
  const auto tasks = suite_tasks();
  REQUIRE(tasks.size() >= 20);
  for (const auto& task : tasks) {
    INFO(task);
    std::set<int> rounds;
    for (const auto& t : traces())
      if (t.task == task) rounds.insert(t.round);
    CHECK(rounds.size() >= 3);
    int expect = 0;
    for (int r : rounds) CHECK(r == expect++);  // 0, 1, 2, ... without gaps
  }
}

TEST_CASE("both styles occur, with the calibrated lengths and shapes") {
  std::size_t draft_early = 0, think_then_write = 0;
  for (const auto& t : traces()) {
    INFO(t.id);
    const token_text r = expand_reasoning(t);
    const auto total = static_cast<double>(r.size());
    CHECK(r.size() == t.reasoning_tokens());
    CHECK(r.size() >= 4000);
    CHECK(r.size() <= 32000);
    const auto blocks = blocks_of(r.text());
    if (t.style == trace_style::think_then_write) {
      ++think_then_write;
      CHECK(r.size() > 11000);
      CHECK(blocks.empty());
      CHECK(r.text().find("```") == std::string::npos);
      CHECK(r.text().find("~~~") == std::string::npos);
    } else {
      ++draft_early;
      std::vector<fenced_block> sources;
      for (const auto& b : blocks)
        if (is_source_tag(b.tag)) sources.push_back(b);
      REQUIRE(sources.size() >= 2);
      // The first complete kernel: the token that closes its fence.
      const double first = static_cast<double>(token_at(r, sources.front().block.end - 2) + 1) / total;
      CHECK(first >= 0.06);
      CHECK(first <= 0.32);
      const double share = fenced_share(r);
      CHECK(share >= 0.58);
      CHECK(share <= 0.79);
      // Revision markers are followed by a fence within a few dozen characters.
      for (std::string_view marker : {"Actually", "Let me fix", "finalize"})
        for (auto at = r.text().find(marker); at != std::string::npos; at = r.text().find(marker, at + 1)) {
          INFO("marker at byte " << at);
          CHECK(r.text().find("```", at) - at <= 60);
        }
    }
  }
  INFO("draft_early " << draft_early << ", think_then_write " << think_then_write);
  CHECK(draft_early >= traces().size() / 3);
  CHECK(think_then_write >= traces().size() / 3);
}

TEST_CASE("every fenced kernel is byte for byte a candidate of the task") {
  for (const auto& t : traces()) {
    INFO(t.id);
    const token_text r = expand_reasoning(t);
    const int in_reasoning = check_blocks(t.task, r.text(), "reasoning");
    CHECK((t.style == trace_style::draft_early) == (in_reasoning > 0));
    check_blocks(t.task, t.answer.text, "answer");
    CHECK(answer_candidate(t.task, t.answer.text, "answer") != nullptr);
    REQUIRE_FALSE(t.forks.empty());
    for (const auto& f : t.forks) {
      CHECK(f.samples.size() >= 2);
      CHECK(f.samples.size() <= 4);
      for (std::size_t i = 0; i < f.samples.size(); ++i) {
        const std::string where = fmt::format("fork at {}, sample {}", f.at_token, i);
        check_blocks(t.task, f.samples[i].text, where);
        CHECK(answer_candidate(t.task, f.samples[i].text, where) != nullptr);
        CHECK(f.samples[i].tokens == estimate_tokens(f.samples[i].text));
      }
    }
    CHECK(t.answer.tokens == estimate_tokens(t.answer.text));
    for (const auto& s : t.segments)
      if (!s.filler) CHECK(s.tokens == estimate_tokens(s.text));
  }
}

TEST_CASE("every fork point sits on a token where a text trigger fires") {
  for (const auto& t : traces()) {
    INFO(t.id);
    const token_text r = expand_reasoning(t);
    std::set<std::uint64_t> fires;
    for (any_trigger trig : {any_trigger(triggers::fence_closed{}), any_trigger(triggers::design_decision{}),
                             any_trigger(triggers::implementation_hint{}),
                             any_trigger(triggers::function_body_complete{})})
      fires.merge(fire_points(trig, r));
    for (const auto& f : t.forks) {
      INFO("fork at token " << f.at_token);
      CHECK(fires.count(f.at_token) == 1);
    }
  }
}

TEST_CASE("later rounds answer the feedback on the previous round and climb the candidates' ladder") {
  for (const auto& task : suite_tasks()) {
    INFO(task);
    std::vector<double> history;  // quality of the valid final answers of earlier rounds
    double last = 0;
    int rounds = 0;
    for (int round = 0;; ++round) {
      const trace* t = find_trace(task, round);
      if (!t) break;
      INFO("round " << round);
      ++rounds;
      const suite_candidate* fin = answer_candidate(task, t->answer.text, "answer");
      if (round > 0) {
        // The round opens on the previous final kernel: one of its kernels is named in the first literal text.
        const trace* prev = find_trace(task, round - 1);
        const auto names = kernel_names_of(prev->answer);
        REQUIRE_FALSE(names.empty());
        std::string opening;
        for (const auto& s : t->segments)
          if (!s.filler) opening += s.text;
        opening = opening.substr(0, 2500);
        CHECK(std::any_of(names.begin(), names.end(),
                          [&](const std::string& n) { return opening.find(n) != std::string::npos; }));
      }
      if (!history.empty()) {
        // A kernel better than the history's mean first becomes extractable at 14-70% of the trace.
        double bar = 0;
        for (double h : history) bar += h;
        bar /= static_cast<double>(history.size());
        std::optional<double> first_good;
        for (const auto& f : t->forks)
          for (const auto& s : f.samples)
            if (auto e = extract_candidate(s.text); e && !first_good)
              if (const suite_candidate* c = candidate_with_source(task, e->source); c && c->quality > bar)
                first_good = static_cast<double>(f.at_token) / static_cast<double>(t->reasoning_tokens());
        if (first_good) {
          CHECK(*first_good >= 0.14);
          CHECK(*first_good <= 0.70);
        }
      }
      if (fin && fin->quality > 0) history.push_back(fin->quality);
      if (fin) last = fin->quality;
    }
    if (rounds < 3) {
      FAIL_CHECK("only " << rounds << " rounds");
      continue;
    }
    const auto cands = candidates().find(task);
    if (cands == candidates().end()) {
      FAIL_CHECK("no candidates for the task");
      continue;
    }
    double best = 0;
    for (const auto& c : cands->second) best = std::max(best, c.quality);
    // The last round answers a correct kernel, and the task's best (by the
    // H200-calibrated labels) has been some round's answer: the last one, or
    // an earlier one when a later version measured slower (matvec).
    CHECK(last > 0);
    CHECK(std::find(history.begin(), history.end(), best) != history.end());
  }
}

namespace {

/// Collects the text of every sample of one fork.
struct fork_sink final : stream_sink {
  explicit fork_sink(int k) : samples(k) {}
  int samples;
  std::map<int, std::string> texts;
  int ended = 0;
  void on_chunk(const stream_chunk& c) override { texts[c.sample] += c.text; }
  void on_end(const stream_end&) override { ++ended; }
};

/// A main stream that feeds the default trigger like the engine and forks where it fires.
struct main_sink final : stream_sink {
  replay_model* model = nullptr;
  stream_id id = 0;
  any_trigger trigger = default_trigger();
  std::string reasoning, answer;
  std::vector<token_id> ids;
  std::uint64_t last_fork = 0;
  int forks_this_round = 0;
  bool ended = false;
  std::deque<std::unique_ptr<fork_sink>> forks;
  std::vector<std::uint64_t> fork_at;

  [[nodiscard]] int in_flight() const {
    int n = 0;
    for (const auto& f : forks) n += f->ended < f->samples ? 1 : 0;
    return n;
  }

  void on_chunk(const stream_chunk& c) override {
    if (!c.reasoning) {
      answer += c.text;
      return;
    }
    const std::size_t from = reasoning.size();
    reasoning += c.text;
    ids.insert(ids.end(), c.tokens.begin(), c.tokens.end());
    const trigger_context ctx{.now = timestamp{0}, .idle_validation = 0, .idle_profiling = 0, .validation_queue = 0,
                              .profiling_queue = 0, .forks_in_flight = in_flight(),
                              .tokens_since_fork = ids.size() - last_fork, .forks_this_round = forks_this_round};
    auto fire = trigger.on_chunk({.text = reasoning, .new_from = from, .tokens = ids.size()}, ctx);
    if (!fire) return;
    fork_request f;
    f.parent = id;
    f.reasoning_prefix = ids;
    f.samples = fire->samples;
    auto& sink = *forks.emplace_back(std::make_unique<fork_sink>(fire->samples));
    auto started = model->fork(f, sink);
    REQUIRE(started);
    fork_at.push_back(ids.size());
    last_fork = ids.size();
    ++forks_this_round;
  }
  void on_end(const stream_end&) override { ended = true; }
};

}  // namespace

TEST_CASE("a replay run of every trace forks at triggers and gets candidate kernels back") {
  event_loop<virtual_clock> loop;
  replay_model model(loop, traces());
  std::size_t total_forks = 0, total_kernels = 0;
  for (const auto& t : traces()) {
    INFO(t.id);
    main_sink sink;
    sink.model = &model;
    reasoning_request req;
    req.ctx.task = t.task;
    req.ctx.round = t.round;
    req.ctx.lane = 0;
    req.prompt = "Write a fast CUDA kernel for task " + t.task;
    auto id = model.start_reasoning(req, sink);
    REQUIRE(id);
    sink.id = *id;
    loop.run();
    CHECK(sink.ended);
    CHECK(sink.reasoning == expand_reasoning(t).text());
    CHECK(sink.answer == t.answer.text);
    CHECK_FALSE(sink.fork_at.empty());  // the default trigger fires at least once
    int kernels = 0;
    for (std::size_t i = 0; i < sink.forks.size(); ++i) {
      for (const auto& [sample, text] : sink.forks[i]->texts) {
        INFO("fork at token " << sink.fork_at[i] << ", sample " << sample);
        auto e = extract_candidate(text);
        if (!e) continue;  // before the first fork point: the answer holds no kernel yet
        CHECK(candidate_with_source(t.task, e->source) != nullptr);
        ++kernels;
      }
    }
    CHECK(kernels > 0);  // and some fork answers with a candidate kernel
    total_forks += sink.fork_at.size();
    total_kernels += static_cast<std::size_t>(kernels);
  }
  fmt::print("replay run of {} traces under the default trigger: {} forks, {} fork samples with a candidate kernel\n",
             traces().size(), total_forks, total_kernels);
}

TEST_CASE("the suite is a replay corpus once a cost table is there") {
  const fs::path dir = fs::temp_directory_path() / "specgen_replay_suite_corpus";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(suite_dir / "tasks", dir / "tasks", fs::copy_options::recursive);
  fs::copy(traces_dir, dir / "traces", fs::copy_options::recursive);
  auto missing = load_corpus(dir);  // load_corpus reads cost_table.json too
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().what(), Catch::Contains("cost_table.json"));
  std::ofstream(dir / "cost_table.json") << R"({"format": "specgen-cost-table/1", "kernels": []})";
  auto c = load_corpus(dir);
  if (!c) FAIL(c.error().what());
  CHECK(c->traces.size() == traces().size());
  CHECK(c->tasks.size() == stems(suite_dir / "tasks", ".json").size());
  fs::remove_all(dir);
}
