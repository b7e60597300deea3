#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/trace_gen.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <vector>

using namespace specgen;
using namespace specgen::replay;

namespace {

/// Every ```cuda block of `text`: (source, byte offset just past the closing fence).
std::vector<std::pair<std::string, std::size_t>> cuda_blocks(std::string_view text) {
  std::vector<std::pair<std::string, std::size_t>> out;
  std::size_t at = 0;
  while ((at = text.find("```cuda\n", at)) != std::string_view::npos) {
    const std::size_t body = at + 8;
    const std::size_t close = text.find("```", body);
    if (close == std::string_view::npos) break;
    out.emplace_back(std::string(text.substr(body, close - body)), close + 3);
    at = close + 3;
  }
  return out;
}

std::string kernel_of(const answer_text& a) {
  auto blocks = cuda_blocks(a.text);
  return blocks.empty() ? std::string() : blocks.back().first;
}

/// Fraction of reasoning tokens that start inside a fenced block.
double fenced_share(const token_text& tt) {
  std::size_t fenced = 0, line_start = 0;
  bool inside = false;
  std::vector<bool> at_byte(tt.text().size() + 1, false);
  const std::string& s = tt.text();
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '\n') {
      if (s.compare(line_start, 3, "```") == 0) inside = !inside;
      line_start = i + 1;
    }
    if (i < s.size()) at_byte[i] = inside || s.compare(line_start, 3, "```") == 0;
  }
  for (std::size_t i = 0; i < tt.size(); ++i)
    if (tt.begin(i) < s.size() && at_byte[tt.begin(i)]) ++fenced;
  return static_cast<double>(fenced) / static_cast<double>(tt.size());
}

/// The token index whose text contains byte `b`.
std::size_t token_at(const token_text& tt, std::size_t b) {
  std::size_t lo = 0, hi = tt.size();
  while (lo + 1 < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (tt.begin(mid) <= b) lo = mid;
    else hi = mid;
  }
  return lo;
}

const corpus_params small{.tasks = 3, .rounds = 4, .lanes = 2};

/// The cost entries of a corpus by source text.
struct cost_index {
  explicit cost_index(const cost_table& t) : t_(t) {}
  [[nodiscard]] const cost_entry* find(const std::string& source) const { return t_.find_source(source); }
  const cost_table& t_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TEST_CASE("the same seed gives the same corpus, another seed a different one") {
  const corpus_params p{.tasks = 2, .rounds = 2, .lanes = 2};
  const corpus a = generate_corpus(p, 11), b = generate_corpus(p, 11), c = generate_corpus(p, 12);
  CHECK(a.traces == b.traces);
  CHECK(a.costs == b.costs);
  REQUIRE(a.tasks.size() == b.tasks.size());
  for (std::size_t i = 0; i < a.tasks.size(); ++i) CHECK(a.tasks[i].reference == b.tasks[i].reference);
  CHECK_FALSE(a.traces == c.traces);
}

TEST_CASE("a corpus has a task per index, a trace for every round and lane, and named tasks") {
  const corpus c = generate_corpus({.tasks = 7, .rounds = 3, .lanes = 2, .max_reasoning_tokens = 14000}, 1);
  REQUIRE(c.tasks.size() == 7);
  CHECK(c.tasks[0].name == "gen_vector_add_00");
  CHECK(c.tasks[2].name == "gen_softmax_02");
  CHECK(c.tasks[6].name == "gen_vector_add_06");
  CHECK(c.traces.size() == 7 * 3 * 2);
  for (const auto& t : c.tasks) {
    CHECK_FALSE(t.description.empty());
    CHECK_FALSE(t.symbols.empty());
    CHECK_FALSE(t.inputs.empty());
    CHECK(t.outputs.size() == 1);
    CHECK(t.reference.source.find("extern \"C\" __global__ void") != std::string::npos);
    CHECK(t.reference.plan.rfind("launch ", 0) == 0);
    for (const auto& shape : t.validation_shapes) CHECK(shape.size() == t.symbols.size());
  }
  for (int round = 0; round < 3; ++round)
    for (int lane = 0; lane < 2; ++lane) {
      const auto n = std::count_if(c.traces.begin(), c.traces.end(), [&](const trace& t) {
        return t.task == "gen_matmul_04" && t.round == round && t.lane == lane;
      });
      CHECK(n == 1);
    }
}

TEST_CASE("generated traces follow the calibrated statistics of both styles") {
  std::vector<double> first_kernel, good_first, period;
  std::size_t draft_early = 0, think_then_write = 0, candidates = 0, failed = 0;
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    const corpus c = generate_corpus(small, seed);
    const cost_index costs(c.costs);
    auto entry = [&](const std::string& source) { return costs.find(source); };
    std::map<std::string, std::vector<double>> history;  // task -> valid final speedups of earlier rounds
    std::vector<const trace*> ordered;
    for (const auto& t : c.traces) ordered.push_back(&t);
    std::stable_sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->round < b->round; });
    std::map<std::pair<std::string, int>, std::vector<double>> round_finals;
    for (const trace* t : ordered) {
      const token_text r = expand_reasoning(*t);
      const double total = static_cast<double>(r.size());
      INFO(t->id);
      CHECK(r.size() >= 4000);
      CHECK(r.size() <= 32000);
      CHECK(r.size() == t->reasoning_tokens());
      const auto blocks = cuda_blocks(r.text());
      if (t->style == trace_style::think_then_write) {
        ++think_then_write;
        CHECK(r.size() > 11000);
        CHECK(r.text().find("```") == std::string::npos);
        CHECK(r.text().find("~~~") == std::string::npos);
      } else {
        ++draft_early;
        REQUIRE(blocks.size() >= 2);
        const double x = static_cast<double>(token_at(r, blocks.front().second - 1) + 1) / total;
        CHECK(x >= 0.06);
        CHECK(x <= 0.32);
        first_kernel.push_back(x);
        const double share = fenced_share(r);
        CHECK(share >= 0.58);
        CHECK(share <= 0.79);
        period.push_back(static_cast<double>(token_at(r, blocks.back().second - 1) - token_at(r, blocks.front().second - 1)) /
                         static_cast<double>(blocks.size() - 1));
        // Revision markers are followed by a fence within a few dozen characters.
        for (std::string_view marker : {"Actually", "Let me fix", "finalize"}) {
          for (std::size_t at = r.text().find(marker); at != std::string::npos; at = r.text().find(marker, at + 1))
            CHECK(r.text().find("```", at) - at <= 60);
        }
        // Every draft in the reasoning has a cost entry.
        for (const auto& [src, end] : blocks) CHECK(entry(src) != nullptr);
      }

      // Fork answers: kernels with cost entries; better-than-history first at 14-70%.
      const auto& past = history[t->task];
      const double threshold =
          past.empty() ? 1.0 : std::accumulate(past.begin(), past.end(), 0.0) / static_cast<double>(past.size());
      double best_fork = 0;
      std::optional<double> first_good;
      for (const auto& f : t->forks) {
        for (const auto& s : f.samples) {
          const std::string src = kernel_of(s);
          REQUIRE_FALSE(src.empty());
          CHECK(src.find("extern \"C\" __global__ void") != std::string::npos);
          CHECK(s.text.find("```plan\nlaunch ") != std::string::npos);
          const cost_entry* e = entry(src);
          REQUIRE(e != nullptr);
          ++candidates;
          if (e->verdict != verdict_kind::ok) {
            ++failed;
            CHECK_FALSE(e->summary.empty());
            continue;
          }
          const double speedup = e->baseline_us / e->runtime_us;
          best_fork = std::max(best_fork, speedup);
          if (speedup > threshold && !first_good) first_good = static_cast<double>(f.at_token) / total;
        }
      }
      REQUIRE(first_good);
      CHECK(*first_good >= 0.14);
      CHECK(*first_good <= 0.70);
      good_first.push_back(*first_good);

      const cost_entry* fin = entry(kernel_of(t->answer));
      REQUIRE(fin != nullptr);
      ++candidates;
      if (fin->verdict == verdict_kind::ok) {
        const double s = fin->baseline_us / fin->runtime_us;
        CHECK(s >= best_fork * 0.98);  // the final answer is the best (or near-best) of its round
        round_finals[{t->task, t->round}].push_back(s);
      } else {
        ++failed;
      }
      // Rounds are generated in order, so the history is complete when a round's first trace is read.
      if (t->lane == 1) {
        auto& rf = round_finals[{t->task, t->round}];
        history[t->task].insert(history[t->task].end(), rf.begin(), rf.end());
      }
    }
  }
  INFO("draft-early " << draft_early << ", think-then-write " << think_then_write);
  CHECK(draft_early >= 25);
  CHECK(think_then_write >= 25);
  const double fail_rate = static_cast<double>(failed) / static_cast<double>(candidates);
  INFO("fail rate " << fail_rate << ", first kernel median " << median(first_kernel) << ", rewrite period "
                    << median(period) << ", first good median " << median(good_first));
  CHECK(fail_rate >= 0.5);
  CHECK(fail_rate <= 0.7);
  CHECK(median(first_kernel) >= 0.09);
  CHECK(median(first_kernel) <= 0.16);
  CHECK(median(period) >= 120);
  CHECK(median(period) <= 320);
}

TEST_CASE("fork kernels improve with the prefix and final answers improve over rounds") {
  double early_sum = 0, late_sum = 0;
  int early_n = 0, late_n = 0;
  std::map<int, std::vector<double>> by_round;
  const corpus_params p{.tasks = 6, .rounds = 8, .lanes = 1, .max_reasoning_tokens = 14000};
  for (std::uint64_t seed = 0; seed < 2; ++seed) {
    const corpus c = generate_corpus(p, seed);
    const cost_index costs(c.costs);
    for (const auto& t : c.traces) {
      const double total = static_cast<double>(t.reasoning_tokens());
      for (const auto& f : t.forks)
        for (const auto& s : f.samples) {
          const cost_entry* e = costs.find(kernel_of(s));
          REQUIRE(e != nullptr);
          if (e->verdict != verdict_kind::ok) continue;
          const double speedup = e->baseline_us / e->runtime_us;
          if (static_cast<double>(f.at_token) / total < 0.5) early_sum += speedup, ++early_n;
          else late_sum += speedup, ++late_n;
        }
      const cost_entry* fin = costs.find(kernel_of(t.answer));
      REQUIRE(fin != nullptr);
      if (fin->verdict == verdict_kind::ok) by_round[t.round].push_back(fin->baseline_us / fin->runtime_us);
    }
  }
  REQUIRE(early_n > 0);
  REQUIRE(late_n > 0);
  CHECK(late_sum / late_n > 1.2 * (early_sum / early_n));
  auto mean = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); };
  REQUIRE_FALSE(by_round[0].empty());
  REQUIRE_FALSE(by_round[7].empty());
  CHECK(mean(by_round[7]) > 1.3 * mean(by_round[0]));
}

TEST_CASE("kernels are textually distinct and failing ones carry an actionable verdict") {
  const corpus c = generate_corpus(small, 3);
  const cost_index costs(c.costs);
  std::map<std::string, int> labels;
  std::map<std::string, int> verdicts;
  for (const auto& [key, e] : c.costs.kernels) {
    ++labels[e.label];
    ++verdicts[std::string(to_string(e.verdict))];
    CHECK(e.baseline_us > 0);
    CHECK(e.compile_s > 0);
    if (e.verdict == verdict_kind::ok) CHECK(e.runtime_us > 0);
    if (e.verdict == verdict_kind::compile_error) {
      CHECK_THAT(e.log, Catch::Contains("error: "));
      CHECK_THAT(e.summary, Catch::StartsWith("compilation failed"));
    }
    if (e.verdict == verdict_kind::wrong_result) CHECK_THAT(e.summary, Catch::Contains("max abs error"));
  }
  for (const auto& [label, n] : labels) CHECK(n == 1);  // one entry per kernel version, distinct keys
  CHECK(verdicts["ok"] > 0);
  CHECK(verdicts["compile_error"] > 0);
  CHECK(verdicts["wrong_result"] > 0);
  // A compile error is visible in the text the model wrote.
  bool found = false;
  for (const auto& t : c.traces)
    if (const cost_entry* e = costs.find(kernel_of(t.answer)); e && e->verdict == verdict_kind::compile_error) {
      CHECK((kernel_of(t.answer).find("tile_acc") != std::string::npos ||
             kernel_of(t.answer).find("warp_reduce_sum") != std::string::npos ||
             kernel_of(t.answer).find("threadIdx.x & 31\n") != std::string::npos));
      found = true;
    }
  CHECK(found);
}

TEST_CASE("a corpus written to a directory loads back equal") {
  const corpus c = generate_corpus({.tasks = 2, .rounds = 2, .lanes = 1}, 5);
  const auto dir = std::filesystem::temp_directory_path() / "specgen_trace_gen_test_corpus";
  std::filesystem::remove_all(dir);
  REQUIRE(write_corpus(c, dir));
  CHECK(std::filesystem::exists(dir / "cost_table.json"));
  auto back = load_corpus(dir);
  REQUIRE(back);
  // Files load in name order.
  auto by_id = [](std::vector<trace> v) {
    std::sort(v.begin(), v.end(), [](const trace& a, const trace& b) { return a.id < b.id; });
    return v;
  };
  CHECK(by_id(back->traces) == by_id(c.traces));
  CHECK(back->costs == c.costs);
  REQUIRE(back->tasks.size() == c.tasks.size());
  std::sort(back->tasks.begin(), back->tasks.end(), [&](const task& a, const task& b) {
    auto rank = [&](const task& t) {
      return std::find_if(c.tasks.begin(), c.tasks.end(), [&](const task& x) { return x.name == t.name; }) - c.tasks.begin();
    };
    return rank(a) < rank(b);
  });
  for (std::size_t i = 0; i < c.tasks.size(); ++i) {
    CHECK(back->tasks[i].name == c.tasks[i].name);
    CHECK(back->tasks[i].inputs == c.tasks[i].inputs);
    CHECK(back->tasks[i].outputs == c.tasks[i].outputs);
    CHECK(back->tasks[i].reference == c.tasks[i].reference);
    CHECK(back->tasks[i].validation_shapes == c.tasks[i].validation_shapes);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("the cost table JSON follows the shared format") {
  const corpus c = generate_corpus({.tasks = 1, .rounds = 1, .lanes = 1}, 2);
  const nlohmann::json j = c.costs;
  CHECK(j["format"] == "specgen-cost-table/1");
  CHECK(j["profile"]["warmup"] == 10);
  CHECK(j["profile"]["min_samples"] == 40);
  const auto& k = j["kernels"][0];
  CHECK(k["key"].get<std::string>().size() == 16);
  for (const char* field : {"task", "label", "verdict", "summary", "log", "compile_s", "validate_s", "runtime_us",
                            "noise", "baseline_us"})
    CHECK(k.contains(field));
  auto bad = j;
  bad["kernels"][0]["verdict"] = "great";
  auto r = parse_cost_table(bad, "costs.json");
  REQUIRE_FALSE(r);
  CHECK(r.error().what().find("/kernels/0/verdict") != std::string::npos);
}

TEST_CASE("the replay model plays a generated corpus, and a late fork yields a costed kernel") {
  const corpus c = generate_corpus({.tasks = 1, .rounds = 1, .lanes = 1}, 9);
  event_loop<virtual_clock> loop;
  replay_model model(loop, c.traces, {.decode_tokens_per_s = 5000});
  struct sink_t final : stream_sink {
    std::vector<token_id> ids;
    std::string answer;
    int ends = 0;
    std::function<void()> after;
    void on_chunk(const stream_chunk& ch) override {
      if (ch.reasoning) ids.insert(ids.end(), ch.tokens.begin(), ch.tokens.end());
      else answer += ch.text;
      if (after) after();
    }
    void on_end(const stream_end&) override { ++ends; }
  } main, fork;
  reasoning_request req;
  req.ctx.task = c.tasks[0].name;
  req.prompt = c.tasks[0].description;
  auto id = model.start_reasoning(req, main);
  REQUIRE(id);
  const std::uint64_t late = c.traces[0].forks.back().at_token;
  bool forked = false;
  main.after = [&] {
    if (!forked && main.ids.size() >= late) {
      forked = true;
      fork_request f;
      f.parent = *id;
      f.reasoning_prefix = main.ids;
      REQUIRE(model.fork(f, fork));
    }
  };
  loop.run();
  REQUIRE(forked);
  CHECK(fork.ends == 1);
  const cost_index costs(c.costs);
  CHECK(costs.find(kernel_of({fork.answer, 1})) != nullptr);
  CHECK(costs.find(kernel_of({main.answer, 1})) != nullptr);
}

TEST_CASE("corpus_params round-trip through JSON") {
  const corpus_params p{.tasks = 3, .families = {"softmax"}, .fail_early = 0.8};
  CHECK(nlohmann::json(p).get<corpus_params>() == p);
  CHECK_THROWS_AS(generate_corpus({.families = {"fft"}}, 0), std::invalid_argument);
}

// ---- hostile and careless corpora ---------------------------------------------------------

TEST_CASE("a corpus with two task files of the same task name is refused, naming both files") {
  const corpus c = generate_corpus({.tasks = 1, .rounds = 1, .lanes = 1}, 5);
  const auto dir = std::filesystem::temp_directory_path() / "specgen_trace_gen_test_dup";
  std::filesystem::remove_all(dir);
  REQUIRE(write_corpus(c, dir));
  const auto original = dir / "tasks" / (c.tasks[0].name + ".json");
  const auto copy = dir / "tasks" / "zz_copy.json";
  std::filesystem::copy_file(original, copy);
  auto back = load_corpus(dir);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(back);
  CHECK(back.error().file == copy.string());
  CHECK(back.error().where == "/name");
  CHECK_THAT(back.error().message,
             Catch::Contains("task '" + c.tasks[0].name + "' is also defined in " + original.string()));
}

TEST_CASE("a corpus whose cost table is a FIFO is an error value at once") {
  const corpus c = generate_corpus({.tasks = 1, .rounds = 1, .lanes = 1}, 5);
  const auto dir = std::filesystem::temp_directory_path() / "specgen_trace_gen_test_fifo";
  std::filesystem::remove_all(dir);
  REQUIRE(write_corpus(c, dir));
  std::filesystem::remove(dir / "cost_table.json");
  REQUIRE(::mkfifo((dir / "cost_table.json").c_str(), 0600) == 0);
  auto back = load_corpus(dir);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(back);
  CHECK_THAT(back.error().message, Catch::Contains("FIFO"));
}

TEST_CASE("corpus sizes are within ranges, so a generated corpus cannot exhaust memory") {
  CHECK_THROWS_WITH(generate_corpus({.tasks = 1'000'000}, 0), Catch::Contains("corpus_params: tasks must be an integer in [1, 10000]"));
  CHECK_THROWS_WITH(generate_corpus({.samples_per_fork = 2'000'000'000}, 0), Catch::Contains("samples_per_fork"));
  CHECK_THROWS_WITH(generate_corpus({.tasks = 100, .rounds = 1000, .lanes = 2}, 0), Catch::Contains("200000 traces; at most 100000"));
  CHECK_THROWS_WITH(generate_corpus({.max_reasoning_tokens = 4'000'000'000}, 0), Catch::Contains("max_reasoning_tokens"));
  CHECK_THROWS_WITH(nlohmann::json::parse(R"({"lanes": 1000000})").get<corpus_params>(),
                    "/lanes: must be an integer in [1, 256], got 1000000");
  CHECK_THROWS_WITH(nlohmann::json::parse(R"({"lanse": 2})").get<corpus_params>(),
                    Catch::StartsWith("/lanse: unknown key") && Catch::Contains("lanes"));
}

