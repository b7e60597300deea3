#include <specgen/journal.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace specgen;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// A fresh path under the temp directory, removed when the test ends.
class temp_journal {
 public:
  temp_journal() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("specgen_journal_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".jsonl");
    fs::remove(path_);
  }
  ~temp_journal() { fs::remove(path_); }
  temp_journal(const temp_journal&) = delete;  // owns the file
  temp_journal& operator=(const temp_journal&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::istringstream in(read_file(p));
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void append_raw(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::app);
  out << bytes;
}

/// The identity of a test run: a made-up corpus fingerprint, `seed` and `config`.
run_identity run_of(std::uint64_t seed, json config = json::object()) {
  return run_identity{.corpus = "c0ffee0000000001", .seed = seed, .config = std::move(config)};
}

candidate make_candidate(candidate_id id, int search, int round, std::string source) {
  candidate c;
  c.id = id;
  c.task = "softmax";
  c.prov.search = search;
  c.prov.round = round;
  c.prov.from = id % 2 == 0 ? origin::fork : origin::main;
  c.prov.trigger = id % 2 == 0 ? "fence" : "";
  c.source = std::move(source);
  c.plan = "launch k grid(cdiv(N,256)) block(256) args(x, y)";
  c.created = timestamp(1000 * static_cast<std::int64_t>(id));
  return c;
}

eval_outcome outcome(stage s, verdict_kind v, double speedup = 0) {
  eval_outcome o;
  o.kind = s;
  o.result.kind = v;
  o.result.summary = std::string(to_string(v));
  o.busy = std::chrono::milliseconds(5);
  if (s == stage::compile) o.compile.registers = 32;
  if (s == stage::profile && v == verdict_kind::ok) {
    measurement m;
    m.median_us = 10;
    m.baseline_median_us = 10 * speedup;
    m.speedup = speedup;
    m.samples_us = {9.5, 10, 10.5};
    o.timing = m;
  }
  return o;
}

/// One search, two rounds: round 0 ends, round 1 is in flight when the run
/// "dies". Candidate 1 is profiled (2x), 2 fails validation, 3 passed
/// validation and waits for profiling, 4 was cancelled, 5 has no result yet.
void write_interrupted_run(journal_writer& j) {
  j.write_run_start(timestamp(0), run_of(1234, {{"mode", "specgen"}, {"k", 4}}));
  j.write_search_start(timestamp(1), 0, "softmax");
  j.write_round_start(timestamp(2), 0, 0);
  const auto c1 = make_candidate(1, 0, 0, "kernel one");
  const auto c2 = make_candidate(2, 0, 0, "kernel two");
  j.write_candidate(timestamp(3), c1);
  j.write_candidate(timestamp(4), c2);
  j.write_stage(timestamp(5), 0, c1, outcome(stage::compile, verdict_kind::ok));
  j.write_stage(timestamp(6), 0, c2, outcome(stage::compile, verdict_kind::ok));
  j.write_stage(timestamp(7), 0, c1, outcome(stage::validate, verdict_kind::ok));
  j.write_stage(timestamp(8), 0, c2, outcome(stage::validate, verdict_kind::wrong_result));
  j.write_stage(timestamp(9), 0, c1, outcome(stage::profile, verdict_kind::ok, 2.0));
  provenance failed;
  failed.search = 0;
  failed.round = 0;
  failed.from = origin::fork;
  failed.trigger = "design_decision";
  j.write_extract_failed(timestamp(10), {.prov = failed, .reason = "no_code", .message = "no fenced code block", .excerpt = "Let me think."});
  j.write_round_end(timestamp(11), 0, 0, "answer", 9000, usage{.completion_tokens = 9000});
  j.write_round_start(timestamp(12), 0, 1);
  const auto c3 = make_candidate(3, 0, 1, "kernel three");
  const auto c4 = make_candidate(4, 0, 1, "kernel four");
  const auto c5 = make_candidate(5, 0, 1, "kernel five");
  j.write_candidate(timestamp(13), c3);
  j.write_candidate(timestamp(14), c4);
  j.write_candidate(timestamp(15), c5);
  j.write_stage(timestamp(16), 0, c3, outcome(stage::compile, verdict_kind::ok));
  j.write_stage(timestamp(17), 0, c3, outcome(stage::validate, verdict_kind::ok));
  j.write_cancelled(timestamp(18), 0, 4, stage::validate, "stale: its round ended");
  j.write("fork", timestamp(19), {{"search", 0}, {"round", 1}, {"trigger", "fence"}});  // not needed to resume
}

}  // namespace

TEST_CASE("each record is one line that starts with its type and integral time") {
  temp_journal tmp;
  journal_writer j(tmp.path(), false);
  j.write_round_start(timestamp(2'500'000'000), 3, 7);
  j.write("custom", timestamp(1), {{"b", 1}, {"a", "x\ny"}});
  const auto lines = lines_of(tmp.path());
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == R"({"type":"round_start","t_ns":2500000000,"t":2.5,"round":7,"search":3})");
  CHECK(lines[1] == R"({"type":"custom","t_ns":1,"t":1e-09,"a":"x\ny","b":1})");
  CHECK(j.records() == 2);
}

TEST_CASE("every record is on disk as soon as write returns") {
  temp_journal tmp;
  journal_writer j(tmp.path(), false);
  j.write_run_start(timestamp(0), run_of(7));
  j.write_candidate(timestamp(5), make_candidate(1, 0, 0, "k"));
  // The writer is still open: nothing may sit in a user-space buffer.
  auto state = load_journal(tmp.path());
  REQUIRE(state);
  CHECK(state->records == 2);
  CHECK(state->candidates.count(1) == 1);
  CHECK_FALSE(state->torn_line);
}

TEST_CASE("a record body may not overwrite the type or the time") {
  temp_journal tmp;
  journal_writer j(tmp.path(), false);
  CHECK_THROWS_AS(j.write("x", timestamp(0), {{"t_ns", 5}}), std::invalid_argument);
  CHECK_THROWS_AS(j.write("x", timestamp(0), {{"type", "y"}}), std::invalid_argument);
  CHECK_THROWS_AS(j.write("x", timestamp(0), json::array({1, 2})), std::invalid_argument);
  CHECK(read_file(tmp.path()).empty());
}

TEST_CASE("a cancelled outcome is not journaled as a stage result") {
  temp_journal tmp;
  journal_writer j(tmp.path(), false);
  auto o = outcome(stage::validate, verdict_kind::ok);
  o.cancelled = true;
  CHECK_THROWS_AS(j.write_stage(timestamp(0), 0, make_candidate(1, 0, 0, "k"), o), std::invalid_argument);
}

TEST_CASE("opening without append empties the journal; with append keeps its records") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    j.write_run_start(timestamp(0), run_of(1));
  }
  {
    journal_writer j(tmp.path(), true);
    j.write_run_start(timestamp(10), run_of(1), 1);
  }
  CHECK(lines_of(tmp.path()).size() == 2);
  {
    journal_writer j(tmp.path(), false);
    j.write_run_start(timestamp(20), run_of(2));
  }
  auto state = load_journal(tmp.path());
  REQUIRE(state);
  CHECK(state->run_starts == 1);
  CHECK(state->identity->seed == 2);
}

TEST_CASE("resume state: seed, config, pending and final candidates, rounds and history") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    write_interrupted_run(j);
  }
  auto loaded = load_journal(tmp.path());
  REQUIRE(loaded);
  const auto& st = *loaded;
  CHECK(st.run_starts == 1);
  REQUIRE(st.identity);
  CHECK(*st.identity == run_of(1234, {{"mode", "specgen"}, {"k", 4}}));
  CHECK(st.version == SPECGEN_VERSION_STRING);
  CHECK_FALSE(st.run_ended);
  CHECK(st.records == 20);
  CHECK(st.last_t == timestamp(19));
  CHECK(st.next_candidate_id == 6);

  CHECK(st.ids_with(candidate_status::evaluated) == std::vector<candidate_id>{1, 2});
  CHECK(st.ids_with(candidate_status::pending) == std::vector<candidate_id>{3, 5});
  CHECK(st.ids_with(candidate_status::cancelled) == std::vector<candidate_id>{4});

  const auto& c1 = st.candidates.at(1);
  CHECK(c1.cand.source == "kernel one");
  CHECK(c1.last_stage == stage::profile);
  REQUIRE(c1.result);
  CHECK(c1.result->id == 1);
  CHECK(c1.result->result.kind == verdict_kind::ok);
  CHECK(c1.result->compile.registers == 32);  // kept from the compile stage
  REQUIRE(c1.result->timing);
  CHECK(c1.result->timing->speedup == 2.0);

  const auto& c2 = st.candidates.at(2);
  CHECK(c2.last_stage == stage::validate);
  CHECK(c2.result->result.kind == verdict_kind::wrong_result);

  // Candidate 3 passed validation: on resume it needs only its profile.
  const auto& c3 = st.candidates.at(3);
  CHECK(c3.status == candidate_status::pending);
  CHECK(c3.last_stage == stage::validate);
  CHECK(c3.result->result.kind == verdict_kind::ok);
  CHECK_FALSE(st.candidates.at(5).result);
  CHECK(st.candidates.at(4).cancel_reason == "stale: its round ended");

  REQUIRE(st.searches.count(0) == 1);
  const auto& s = st.searches.at(0);
  CHECK(s.task == "softmax");
  CHECK(s.rounds_completed == 1);
  CHECK(s.last_round_started == 1);
  CHECK(s.round_in_flight());
  CHECK(s.generated_tokens == 9000);
  CHECK(s.extract_failures == 1);
  CHECK(s.history == std::vector<profiled_speedup>{{1, 0, 2.0}});
  REQUIRE(s.best());
  CHECK(s.best()->id == 1);
  CHECK_FALSE(s.ended);
}

TEST_CASE("a kernel identical to an evaluated one is answered from the journal by content hash") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    write_interrupted_run(j);
  }
  auto st = load_journal(tmp.path());
  REQUIRE(st);
  // Same source and plan under a new id (the resumed run regenerates round 1 and more).
  const auto again = make_candidate(st->next_candidate_id, 0, 1, "kernel one");
  const evaluation* e = st->find_evaluation(again);
  REQUIRE(e);
  CHECK(e->id == 1);
  CHECK(e->timing->speedup == 2.0);
  CHECK(st->find_evaluation(make_candidate(9, 0, 1, "kernel two"))->result.kind == verdict_kind::wrong_result);
  // Not final yet, so not shared: the pending candidate 3 must still be profiled.
  CHECK_FALSE(st->find_evaluation(make_candidate(9, 0, 1, "kernel three")));
  CHECK_FALSE(st->find_evaluation(make_candidate(9, 0, 1, "a kernel never seen")));
}

TEST_CASE("a reused evaluation makes a candidate final without counting its profile twice") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), true);
    write_interrupted_run(j);
    const auto dup = make_candidate(6, 0, 1, "kernel one");
    j.write_candidate(timestamp(20), dup);
    auto st = load_journal(tmp.path());
    REQUIRE(st);
    j.write_reused(timestamp(21), 0, dup, *st->find_evaluation(dup));
  }
  auto st = load_journal(tmp.path());
  REQUIRE(st);
  const auto& c6 = st->candidates.at(6);
  CHECK(c6.status == candidate_status::evaluated);
  CHECK(c6.reused);
  CHECK(c6.result->id == 6);
  CHECK(c6.result->timing->speedup == 2.0);
  CHECK(st->searches.at(0).history.size() == 1);
}

TEST_CASE("a resumed run appends to the journal and the state follows the latest records") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    write_interrupted_run(j);
  }
  {
    journal_writer j(tmp.path(), true);
    j.write_run_start(timestamp(30), run_of(1234, {{"mode", "specgen"}, {"k", 4}}), 1);
    // The pending candidate is journaled again (same content) and finished.
    const auto c3 = make_candidate(3, 0, 1, "kernel three");
    j.write_candidate(timestamp(31), c3);
    j.write_stage(timestamp(32), 0, c3, outcome(stage::profile, verdict_kind::ok, 3.0));
    j.write_round_end(timestamp(33), 0, 1, "terminated", 15000, usage{.completion_tokens = 15000});
    j.write_search_end(timestamp(34), 0, "budget", 3.0, 3, 2, 15000, usage{.completion_tokens = 15000});
    j.write_run_end(timestamp(35), {{"e2e_seconds", 1.5}});
  }
  auto st = load_journal(tmp.path());
  REQUIRE(st);
  CHECK(st->run_starts == 2);
  CHECK(st->run_ended);
  CHECK(st->run_summary == json{{"e2e_seconds", 1.5}});
  CHECK(st->candidates.at(3).status == candidate_status::evaluated);
  CHECK(st->candidates.at(3).result->compile.registers == 32);
  CHECK(st->ids_with(candidate_status::pending) == std::vector<candidate_id>{5});
  const auto& s = st->searches.at(0);
  CHECK(s.rounds_completed == 2);
  CHECK_FALSE(s.round_in_flight());
  CHECK(s.generated_tokens == 15000);
  CHECK(s.ended);
  CHECK(s.end_reason == "budget");
  CHECK(s.best()->speedup == 3.0);
}

TEST_CASE("a torn last line is reported and ignored") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    write_interrupted_run(j);
  }
  append_raw(tmp.path(), R"({"type":"candidate","t_ns":40,"candidate":{"id":6,"sou)");
  auto st = load_journal(tmp.path());
  REQUIRE(st);
  CHECK(st->torn_line == std::size_t{21});
  CHECK(st->records == 20);
  CHECK(st->candidates.count(6) == 0);
}

TEST_CASE("a complete record without its newline counts as torn") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    j.write_run_start(timestamp(0), run_of(1));
  }
  append_raw(tmp.path(), R"({"type":"search_start","t_ns":1,"search":0,"task":"x"})");
  auto st = load_journal(tmp.path());
  REQUIRE(st);
  CHECK(st->torn_line == std::size_t{2});
  CHECK(st->searches.empty());
}

TEST_CASE("appending after a kill cuts the torn line off, so it cannot fuse with the next record") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    write_interrupted_run(j);
  }
  const std::string torn = R"({"type":"candidate","t_ns":40,"cand)";
  append_raw(tmp.path(), torn);
  {
    journal_writer j(tmp.path(), true);
    CHECK(j.dropped_torn_bytes() == torn.size());
    j.write_run_start(timestamp(50), run_of(1234, {{"mode", "specgen"}, {"k", 4}}), 1);
  }
  auto st = load_journal(tmp.path());
  REQUIRE(st);
  CHECK_FALSE(st->torn_line);
  CHECK(st->records == 21);
  CHECK(st->run_starts == 2);
}

TEST_CASE("corruption before the last line is an error that names the line") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    write_interrupted_run(j);
  }
  auto lines = lines_of(tmp.path());
  lines[2] = lines[2].substr(0, lines[2].size() / 2);  // a torn record in the middle
  {
    std::ofstream out(tmp.path(), std::ios::binary | std::ios::trunc);
    for (const auto& l : lines) out << l << '\n';
  }
  auto st = load_journal(tmp.path());
  REQUIRE_FALSE(st);
  CHECK(st.error().file == tmp.path().string());
  CHECK(st.error().line == 3);
  const auto msg = st.error().what();
  CHECK(msg.find(tmp.path().string() + ": line 3: not valid JSON: ") != std::string::npos);
  CHECK(msg.find("head -n 2") != std::string::npos);
}

TEST_CASE("a damaged last line that ends in a newline is corruption, not a torn write") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    j.write_run_start(timestamp(0), run_of(1));
  }
  append_raw(tmp.path(), "{\"type\":\"round_st\n");
  auto st = load_journal(tmp.path());
  REQUIRE_FALSE(st);
  CHECK(st.error().line == 2);
  CHECK(st.error().what().find(": line 2: not valid JSON") != std::string::npos);
}

TEST_CASE("records must be objects with a type and an integral time") {
  for (const char* bad : {"[1,2]", R"({"t_ns":1})", R"({"type":"x","t_ns":1.5})", R"({"type":"x"})", ""}) {
    temp_journal tmp;
    append_raw(tmp.path(), std::string(bad) + "\n" + R"({"type":"x","t_ns":2})" + "\n");
    auto st = load_journal(tmp.path());
    REQUIRE_FALSE(st);
    CHECK(st.error().line == 1);
    CHECK(st.error().what().find(tmp.path().string() + ": line 1: ") == 0);
  }
  temp_journal tmp;
  append_raw(tmp.path(), R"({"type":"x","t_ns":1.5})" "\n");
  auto st = load_journal(tmp.path());
  REQUIRE_FALSE(st);
  CHECK(st.error().where == "/t_ns");
  CHECK(st.error().message.starts_with("expected an integer in ["));
  CHECK(st.error().message.find("found number 1.5") != std::string::npos);
}

TEST_CASE("a wrong-typed nested field is an error naming the file, the line and its JSON pointer") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    j.write_run_start(timestamp(0), run_of(1));
    j.write_candidate(timestamp(1), make_candidate(1, 0, 0, "k"));
  }
  // A stage result whose verdict's mismatch has a count that is not a number.
  append_raw(tmp.path(), R"({"type":"evaluation","t_ns":2,"search":0,"candidate":1,"stage":"validate",)"
                         R"("result":{"kind":"wrong_result","mismatch":{"output":"y","count":"many"}}})" "\n");
  auto st = load_journal(tmp.path());
  REQUIRE_FALSE(st);
  const error& e = st.error();
  CHECK(e.file == tmp.path().string());
  CHECK(e.line == 3);
  CHECK(e.where == "/result/mismatch/count");
  CHECK(e.message.starts_with("expected an integer in [0, 18446744073709551615], found string \"many\". The journal is damaged"));
  CHECK(e.what().starts_with(tmp.path().string() + ": line 3: /result/mismatch/count: expected an integer"));
  CHECK(e.what().find("head -n 2 ") != std::string::npos);

  // An element of an array, and a missing required key.
  temp_journal other;
  append_raw(other.path(), R"({"type":"candidate","t_ns":1,"candidate":{"id":1,"prov":{"parents":[1,"two"]}}})" "\n"
                           R"({"type":"round_start","t_ns":2,"search":0})" "\n");
  auto bad = load_journal(other.path());
  REQUIRE_FALSE(bad);
  CHECK(bad.error().line == 1);
  CHECK(bad.error().where == "/candidate/prov/parents/1");
  std::ofstream(other.path(), std::ios::trunc) << R"({"type":"round_start","t_ns":2,"search":0})" "\n";
  auto missing = load_journal(other.path());
  REQUIRE_FALSE(missing);
  CHECK(missing.error().where == "/round");
  CHECK(missing.error().message.starts_with("missing (required). The journal is damaged"));
}

TEST_CASE("the journal is open: unknown keys are ignored and null or missing optional keys take defaults") {
  temp_journal tmp;
  append_raw(tmp.path(), R"({"type":"run_start","t_ns":0,"format":2,"seed":1,"config":{},"future":[1,2]})" "\n"
                         R"({"type":"search_start","t_ns":1,"search":0,"task":"x","priority":"high"})" "\n"
                         R"({"type":"round_end","t_ns":2,"search":0,"round":0,"usage":null})" "\n"
                         R"({"type":"brand_new_record","t_ns":3,"search":"not read"})" "\n");
  auto st = load_journal(tmp.path());
  REQUIRE(st);
  CHECK(st->searches.at(0).task == "x");
  CHECK(st->searches.at(0).rounds_completed == 1);
  CHECK(st->searches.at(0).tokens == usage{});
  CHECK(st->records == 4);
}

TEST_CASE("a stage result for a candidate never recorded is an inconsistency") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    j.write_run_start(timestamp(0), run_of(1));
    j.write_stage(timestamp(1), 0, make_candidate(8, 0, 0, "k"), outcome(stage::compile, verdict_kind::ok));
  }
  auto st = load_journal(tmp.path());
  REQUIRE_FALSE(st);
  CHECK(st.error().line == 2);
  CHECK(st.error().message.starts_with("evaluation record for candidate 8"));
}

TEST_CASE("one id with two different kernels is an inconsistency; the same kernel twice is not") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    j.write_candidate(timestamp(0), make_candidate(1, 0, 0, "k"));
    j.write_candidate(timestamp(1), make_candidate(1, 0, 0, "k"));
  }
  REQUIRE(load_journal(tmp.path()));
  {
    journal_writer j(tmp.path(), true);
    j.write_candidate(timestamp(2), make_candidate(1, 0, 0, "other"));
  }
  auto st = load_journal(tmp.path());
  REQUIRE_FALSE(st);
  CHECK(st.error().what().find(": line 3: candidate 1 recorded twice") != std::string::npos);
}

TEST_CASE("a missing journal is an error that names the file") {
  auto st = load_journal("/nonexistent/specgen/run.jsonl");
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("/nonexistent/specgen/run.jsonl") != std::string::npos);
}

TEST_CASE("the same writes give byte-identical journals") {
  temp_journal a, b;
  {
    journal_writer ja(a.path(), false), jb(b.path(), false);
    write_interrupted_run(ja);
    write_interrupted_run(jb);
  }
  CHECK(read_file(a.path()) == read_file(b.path()));
  CHECK(journals_equal_ignoring_time(a.path(), b.path()).value());
}

TEST_CASE("journals equal ignoring time differ only in their times") {
  temp_journal a, b, c;
  {
    journal_writer ja(a.path(), false), jb(b.path(), false), jc(c.path(), false);
    ja.write_round_start(timestamp(1), 0, 0);
    jb.write_round_start(timestamp(999), 0, 0);
    jc.write_round_start(timestamp(1), 0, 1);
  }
  CHECK(journals_equal_ignoring_time(a.path(), b.path()).value());
  CHECK_FALSE(journals_equal_ignoring_time(a.path(), c.path()).value());
  CHECK_FALSE(journals_equal_ignoring_time(a.path(), "/nonexistent/x.jsonl"));
}

TEST_CASE("model text with invalid UTF-8 is journaled with replacement characters, not an exception") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    j.write_candidate(timestamp(0), make_candidate(1, 0, 0, "// cut: \xe2\x82"));
  }
  auto st = load_journal(tmp.path());
  REQUIRE(st);
  CHECK(st->candidates.at(1).cand.source == "// cut: \xef\xbf\xbd");
}

TEST_CASE("run_start carries the run's identity: format, run id, corpus, seed, configuration and segment") {
  temp_journal tmp;
  const auto id = run_of(42, {{"mode", "specgen"}});
  {
    journal_writer j(tmp.path(), false);
    j.write_run_start(timestamp(0), id, 3);
  }
  const auto r = json::parse(lines_of(tmp.path()).at(0));
  CHECK(r["format"] == journal_format);
  CHECK(r["run_id"] == id.run_id());
  CHECK(r["corpus"] == "c0ffee0000000001");
  CHECK(r["seed"] == 42);
  CHECK(r["config"] == json{{"mode", "specgen"}});
  CHECK(r["segment"] == 3);
  // The id is derived from the identity, so the same run writes the same bytes.
  CHECK(id.run_id().size() == 16);
  CHECK(id.run_id() == run_of(42, {{"mode", "specgen"}}).run_id());
  CHECK(id.run_id() != run_of(43, {{"mode", "specgen"}}).run_id());
}

TEST_CASE("the differences between two run identities name each field with both values") {
  const auto journaled = run_of(1, {{"seed", 1}, {"budget", {{"max_rounds", 3}}}, {"mode", "specgen"}});
  auto here = run_of(2, {{"seed", 2}, {"budget", {{"max_rounds", 5}}}, {"mode", "specgen"}});
  here.corpus = "c0ffee0000000002";
  const auto diff = journaled.differences(here);
  REQUIRE(diff.size() == 3);  // the seed is named once, not again inside the configuration
  CHECK(diff[0] == "corpus c0ffee0000000001 vs c0ffee0000000002 (other tasks, traces or cost table)");
  CHECK(diff[1] == "seed 1 vs 2");
  CHECK(diff[2] == "config /budget/max_rounds 3 vs 5");
  CHECK(journaled.differences(journaled).empty());
}

TEST_CASE("a journal holding the run_starts of two different runs is refused, naming both and the line") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    write_interrupted_run(j);  // run_start of seed 1234 on line 1
    j.write_run_start(timestamp(30), run_of(99, {{"mode", "specgen"}, {"k", 4}}), 1);
  }
  auto st = load_journal(tmp.path());
  REQUIRE_FALSE(st);
  const auto msg = st.error().what();
  CHECK(msg.find(tmp.path().string() + ": line 21: run_start of run " + run_of(99, {{"mode", "specgen"}, {"k", 4}}).run_id()) !=
        std::string::npos);
  CHECK(msg.find("line 1 started run " + run_of(1234, {{"mode", "specgen"}, {"k", 4}}).run_id()) != std::string::npos);
  CHECK(msg.find("seed 1234 vs 99") != std::string::npos);
  CHECK(msg.find("the first 20 lines") != std::string::npos);
  CHECK(msg.find("damaged") == std::string::npos);  // intact records, refused for what they say
}

TEST_CASE("a journal of another format is refused, saying which format this specgen reads") {
  temp_journal tmp;
  // A run_start as specgen wrote it before run identities: no format, no run id.
  append_raw(tmp.path(), R"({"type":"run_start","t_ns":0,"t":0,"config":{},"seed":1,"version":"0.1.0"})"
                         "\n");
  auto st = load_journal(tmp.path());
  REQUIRE_FALSE(st);
  const auto msg = st.error().what();
  CHECK(msg.find(": line 1: the journal is in format 1 (written by specgen 0.1.0), and this specgen reads format " +
                 std::to_string(journal_format)) != std::string::npos);
  CHECK(msg.find("new output directory") != std::string::npos);
}

TEST_CASE("the state counts what each search did and when it ended, across segments") {
  temp_journal tmp;
  {
    journal_writer j(tmp.path(), false);
    write_interrupted_run(j);  // search 0: one fork record, candidates 1 and 3 compiled and validated, 2 compiled
    j.write("fork_skipped", timestamp(20), {{"search", 0}, {"round", 1}});
    j.write("stream_error", timestamp(21), {{"search", 0}, {"round", 1}, {"lane", 0}, {"error", "HTTP 503"}});
  }
  {
    journal_writer j(tmp.path(), true);  // resumed where the first segment stopped
    j.write_run_start(timestamp(21), run_of(1234, {{"mode", "specgen"}, {"k", 4}}), 1);
    j.write("fork_error", timestamp(22), {{"search", 0}, {"round", 1}, {"lane", 0}, {"error", "connection reset"}});
    j.write("terminated", timestamp(23), {{"search", 0}, {"round", 1}, {"lane", 0}});
    j.write("target_reached", timestamp(24), {{"search", 0}, {"candidate", 3}});
    j.write("target_reached", timestamp(25), {{"search", 0}, {"candidate", 5}});
    j.write_round_end(timestamp(26), 0, 1, "terminated", 15000, usage{.prompt_tokens = 10, .completion_tokens = 15000});
    j.write_search_end(timestamp(27), 0, "round budget", 2.0, 1, 2, 15000, usage{.prompt_tokens = 10, .completion_tokens = 15000});
    j.write_run_end(timestamp(28), {{"device_busy_ns", 5}, {"usage_by_search", json::array({usage{.prompt_tokens = 10, .completion_tokens = 15100}})}});
  }
  auto st = load_journal(tmp.path());
  REQUIRE(st);
  const auto& s = st->searches.at(0);
  CHECK(s.forks == 1);
  CHECK(s.forks_skipped == 1);
  CHECK(s.terminations == 1);
  CHECK(s.stream_failures == 2);
  CHECK(s.first_stream_error == "HTTP 503");
  CHECK(s.compiled_ok == 3);
  CHECK(s.validated_ok == 2);
  CHECK(s.target_reached_at == timestamp(24));
  CHECK(s.ended_at == timestamp(27));
  CHECK(s.generated_tokens == 15000);
  CHECK(s.tokens.completion_tokens == 15100);  // run_end has the usage of streams that ended after the search
  REQUIRE(st->segments.size() == 2);
  CHECK(st->segments[0].start == timestamp(0));
  CHECK(st->segments[0].last == timestamp(21));
  CHECK_FALSE(st->segments[0].completed);
  CHECK(st->segments[1].start == timestamp(21));
  CHECK(st->segments[1].last == timestamp(28));
  CHECK(st->segments[1].completed);
  CHECK(st->segments[1].summary.at("device_busy_ns") == 5);
}

TEST_CASE("a validate or profile result names the GPU that ran it; a compile result names none") {
  temp_journal tmp;
  journal_writer j(tmp.path(), false);
  const auto c = make_candidate(1, 0, 0, "kernel");
  auto validated = outcome(stage::validate, verdict_kind::ok);
  validated.device = 3;
  auto compiled = outcome(stage::compile, verdict_kind::ok);
  compiled.device = -1;
  j.write_stage(timestamp(1), 0, c, validated);
  j.write_stage(timestamp(2), 0, c, compiled);
  const auto lines = lines_of(tmp.path());
  REQUIRE(lines.size() == 2);
  CHECK(nlohmann::json::parse(lines[0]).at("device") == 3);
  CHECK_FALSE(nlohmann::json::parse(lines[1]).contains("device"));
}
