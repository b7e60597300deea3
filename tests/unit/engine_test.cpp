// The engine's invariants, checked as properties over many seeds on the
// procedural corpus, the replay model and the simulated device in virtual time.
#include <specgen/engine.hpp>
#include <specgen/journal.hpp>
#include <specgen/modes.hpp>
#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/trace_gen.hpp>
#include <specgen/sim/simulated_device.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace specgen;
using namespace specgen::policy;

namespace {

/// Wraps a backend and checks the stream contract from the engine's side:
/// every fork's prefix is a prefix of what its parent emitted, and nothing is
/// delivered for a stream after the engine cancelled it.
template <backend B>
class checked_backend : private stream_sink {
 public:
  explicit checked_backend(B& inner) : inner_(inner) {}
  backend_limits limits() const { return inner_.limits(); }
  expected<stream_id, error> start_reasoning(const reasoning_request& r, stream_sink& sink) {
    auto id = inner_.start_reasoning(r, *this);
    if (id) {
      sinks_[*id] = &sink;
      mains_.insert(*id);
      main_peak = std::max(main_peak, static_cast<int>(mains_.size()));
    }
    return id;
  }
  expected<stream_id, error> fork(const fork_request& f, stream_sink& sink) {
    const auto& emitted = emitted_[f.parent];
    if (f.reasoning_prefix.size() > emitted.size() ||
        !std::equal(f.reasoning_prefix.begin(), f.reasoning_prefix.end(), emitted.begin()))
      ++bad_prefixes;
    ++forks;
    auto id = inner_.fork(f, *this);
    if (id) sinks_[*id] = &sink;
    return id;
  }
  void cancel(stream_id id) {
    cancelled_.insert(id);
    inner_.cancel(id);
  }

  int bad_prefixes = 0;
  int chunks_after_cancel = 0;
  int forks = 0;
  int main_peak = 0;  ///< the most main streams live at once
  std::uint64_t tokens = 0;

 private:
  void on_chunk(const stream_chunk& c) override {
    if (cancelled_.count(c.id)) ++chunks_after_cancel;
    if (c.reasoning) emitted_[c.id].insert(emitted_[c.id].end(), c.tokens.begin(), c.tokens.end());
    tokens += c.tokens.size();
    sinks_.at(c.id)->on_chunk(c);
  }
  void on_end(const stream_end& e) override {
    mains_.erase(e.id);
    sinks_.at(e.id)->on_end(e);
  }

  B& inner_;
  std::set<stream_id> mains_;
  std::map<stream_id, stream_sink*> sinks_;
  std::map<stream_id, std::vector<token_id>> emitted_;
  std::set<stream_id> cancelled_;
};

/// Wraps an evaluator and records which kernels it was asked to compile.
template <evaluator E>
class counting_evaluator {
 public:
  explicit counting_evaluator(E& inner) : inner_(inner) {}
  int devices() const { return inner_.devices(); }
  int compile_slots() const { return inner_.compile_slots(); }
  void submit(eval_job j, eval_callback cb) {
    if (j.kind == stage::compile) compiled.insert(j.cand->content_hash());
    inner_.submit(std::move(j), std::move(cb));
  }
  bool cancel(job_id id) { return inner_.cancel(id); }
  std::multiset<std::uint64_t> compiled;

 private:
  E& inner_;
};

struct world {
  explicit world(std::uint64_t seed, replay::corpus_params cp = {.tasks = 2, .rounds = 4, .lanes = 1})
      : corpus(replay::generate_corpus(cp, seed)),
        model(loop, corpus.traces, {}),
        device(loop, corpus.costs, {.devices = 4, .compile_slots = 2, .seed = seed}),
        checked(model),
        counted(device) {}

  template <class F = int>
  run_result run(engine_config cfg, journal_writer* j = nullptr, const journal_state* resume_from = nullptr) {
    engine eng(loop, checked, counted, std::move(cfg), j);
    for (const auto& t : corpus.tasks) eng.add_search(std::make_shared<const task>(t));
    if (resume_from) {
      auto resumed = eng.resume(*resume_from);
      INFO((resumed ? std::string() : resumed.error().message));
      REQUIRE(resumed);
    }
    auto r = eng.run();
    for (std::size_t s = 0; s < corpus.tasks.size(); ++s)
      for (const auto& rec : eng.records(static_cast<int>(s))) records.push_back(rec);
    return r;
  }

  event_loop<virtual_clock> loop;
  replay::corpus corpus;
  replay::replay_model model;
  sim::simulated_device device;
  checked_backend<replay::replay_model> checked;
  counting_evaluator<sim::simulated_device> counted;
  std::vector<candidate_record> records;
};

engine_config config(std::string_view mode, int rounds, std::uint64_t seed = 1) {
  auto c = mode_config(mode);
  REQUIRE(c);
  c->budget.max_rounds = rounds;
  c->seed = seed;
  return std::move(*c);
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::filesystem::path temp_file(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / "specgen-engine-test";
  std::filesystem::create_directories(dir);
  auto p = dir / name;
  std::filesystem::remove(p);
  return p;
}

}  // namespace

TEST_CASE("engine invariants hold over many seeds in every mode") {
  for (std::string_view mode : {"sequential", "specgen", "parallel+specgen", "evolve+specgen"}) {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      CAPTURE(mode, seed);
      world w(seed);
      auto r = w.run(config(mode, 4, seed));

      // Every search ran its whole iteration budget.
      REQUIRE(r.searches.size() == 2);
      for (const auto& s : r.searches) {
        CHECK(s.rounds == 4);
        CHECK(s.end_reason == "round budget");
      }
      // No candidate lost: each has a verdict or was explicitly cancelled as stale.
      for (const auto& rec : w.records) CHECK((rec.eval.has_value() || rec.cancelled));
      // Every fork's prefix is a prefix of its stream; no output after a cancel.
      CHECK(w.checked.bad_prefixes == 0);
      CHECK(w.checked.chunks_after_cancel == 0);
      // Utilisation is a fraction of the pool's capacity.
      CHECK(r.pool_utilization >= 0.0);
      CHECK(r.pool_utilization <= 1.0);
      CHECK(w.device.stats().unknown_kernels == 0);
      if (mode == "sequential") CHECK(w.checked.forks == 0);
      else CHECK(w.checked.forks > 0);
    }
  }
}

TEST_CASE("speculation profiles more kernels and finishes sooner than sequential refinement") {
  world a(11), b(11);
  auto seq = a.run(config("sequential", 6));
  auto spec = b.run(config("specgen", 6));
  CHECK(spec.profiled_kernels > seq.profiled_kernels);
  CHECK(spec.e2e_seconds < seq.e2e_seconds);
}

TEST_CASE("the same seed gives a byte-identical journal") {
  const auto p1 = temp_file("same1.jsonl"), p2 = temp_file("same2.jsonl");
  for (const auto& p : {p1, p2}) {
    world w(5);
    journal_writer j(p, false);
    w.run(config("specgen", 3, 5), &j);
  }
  const auto a = slurp(p1), b = slurp(p2);
  CHECK(!a.empty());
  CHECK(a == b);
}

TEST_CASE("a killed run resumes from its journal without re-evaluating or losing a candidate") {
  const auto full = temp_file("full.jsonl"), cut = temp_file("cut.jsonl");
  {
    world w(9);
    journal_writer j(full, false);
    w.run(config("specgen", 4, 9), &j);
  }
  // Keep the first half of the records and a torn half-line, as a kill leaves them.
  {
    std::ifstream in(full);
    std::ofstream out(cut);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    REQUIRE(lines.size() > 20);
    for (std::size_t i = 0; i < lines.size() / 2; ++i) out << lines[i] << '\n';
    out << lines[lines.size() / 2].substr(0, lines[lines.size() / 2].size() / 2);
  }
  auto st = load_journal(cut);
  REQUIRE(st);
  CHECK(st->torn_line.has_value());
  const auto evaluated = st->ids_with(candidate_status::evaluated);
  REQUIRE(!evaluated.empty());

  world w(9);
  journal_writer j(cut, true);
  auto r = w.run(config("specgen", 4, 9), &j, &*st);

  // Nothing judged before the kill is compiled again.
  for (auto id : evaluated) CHECK(w.counted.compiled.count(st->candidates.at(id).cand.content_hash()) == 0);
  // Every journaled candidate is still there, with a verdict or a cancel.
  std::map<candidate_id, const candidate_record*> by_id;
  for (const auto& rec : w.records) by_id[rec.cand->id] = &rec;
  for (const auto& [id, jc] : st->candidates) {
    REQUIRE(by_id.count(id) == 1);
    CHECK((by_id[id]->eval.has_value() || by_id[id]->cancelled));
  }
  for (const auto& s : r.searches) CHECK(s.rounds == 4);
  // The resumed journal reads back whole.
  auto after = load_journal(cut);
  REQUIRE(after);
  CHECK(after->run_starts == 2);
}

namespace {

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

/// The journal a kill after `n` records leaves.
void write_first(const std::filesystem::path& p, const std::vector<std::string>& lines, std::size_t n) {
  std::ofstream out(p, std::ios::trunc);
  for (std::size_t i = 0; i < n; ++i) out << lines[i] << '\n';
}

/// Per content hash, the compile results a journal records (reused evaluations are not compiles).
std::map<std::uint64_t, int> compiles_in(const std::vector<std::string>& lines, std::size_t n) {
  std::map<candidate_id, std::uint64_t> hash_of;
  std::map<std::uint64_t, int> out;
  for (std::size_t i = 0; i < n; ++i) {
    const auto r = nlohmann::json::parse(lines[i]);
    if (r["type"] == "candidate") hash_of[r["candidate"]["id"].get<candidate_id>()] = r["candidate"].get<candidate>().content_hash();
    if (r["type"] == "evaluation" && r.value("stage", "") == "compile") ++out[hash_of.at(r["candidate"].get<candidate_id>())];
  }
  return out;
}

}  // namespace

TEST_CASE("a run killed at any point and resumed evaluates no kernel more often than the uninterrupted run, and loses none") {
  // Identical kernels are evaluated once: the copies that waited for the first
  // copy's verdict when the run was killed must wait again after the resume.
  int checked = 0, waiting_at_kill = 0;
  for (std::uint64_t seed : {9u, 2u}) {
    CAPTURE(seed);
    const auto full = temp_file("kill-full.jsonl"), cut = temp_file("kill-cut.jsonl");
    world uninterrupted(seed);
    {
      journal_writer j(full, false);
      uninterrupted.run(config("specgen", 4, seed), &j);
    }
    std::map<std::uint64_t, int> once;
    for (auto h : uninterrupted.counted.compiled) ++once[h];
    const auto lines = lines_of(full);
    for (std::size_t n = 2; n < lines.size(); n += lines.size() / 24) {
      CAPTURE(n);
      write_first(cut, lines, n);
      auto st = load_journal(cut);
      REQUIRE(st);
      std::map<std::uint64_t, int> pending;
      for (auto id : st->ids_with(candidate_status::pending)) ++pending[st->candidates.at(id).cand.content_hash()];
      for (const auto& [h, k] : pending) waiting_at_kill += k > 1 ? k - 1 : 0;

      world w(seed);
      journal_writer j(cut, true);
      w.run(config("specgen", 4, seed), &j, &*st);
      auto total = compiles_in(lines, n);
      for (auto h : w.counted.compiled) ++total[h];
      // Compiles before the kill plus after it, against the uninterrupted run. A round cut by the
      // kill runs again at another time, so its forks may write a kernel the first run never
      // wrote: that one may be compiled once.
      for (const auto& [h, k] : total) {
        CAPTURE(h);
        CHECK(k <= std::max(once[h], 1));
      }
      // Every candidate has its verdict or was dropped as stale, the journaled ones included.
      std::set<candidate_id> seen;
      for (const auto& rec : w.records) {
        CHECK((rec.eval.has_value() || rec.cancelled));
        seen.insert(rec.cand->id);
      }
      for (const auto& [id, jc] : st->candidates) CHECK(seen.count(id) == 1);
      // ... and so does the journal: none is left pending.
      auto after = load_journal(cut);
      REQUIRE(after);
      CHECK(after->ids_with(candidate_status::pending).empty());
      ++checked;
    }
  }
  CHECK(checked >= 40);
  CHECK(waiting_at_kill > 0);  // some kills left identical copies pending
}

TEST_CASE("resuming a finished run reports the results the run reported") {
  const auto path = temp_file("finished.jsonl");
  auto cfg = [] {
    auto c = config("specgen", 4, 3);
    c.budget.target_speedup = 1.1;
    return c;
  };
  world first(3);
  run_result r0;
  {
    journal_writer j(path, false);
    r0 = first.run(cfg(), &j);
  }
  auto st = load_journal(path);
  REQUIRE(st);
  world again(3);
  journal_writer j(path, true);
  const auto r1 = again.run(cfg(), &j, &*st);
  CHECK(again.counted.compiled.empty());
  CHECK(r1.e2e_seconds == r0.e2e_seconds);
  CHECK(r1.profiled_kernels == r0.profiled_kernels);
  CHECK(r1.generated_tokens == r0.generated_tokens);
  CHECK(r1.pool_utilization == Approx(r0.pool_utilization));
  CHECK(r1.pool_utilization_whole_run);
  REQUIRE(r1.segments.size() == 2);
  CHECK(r1.segments[0].completed);
  REQUIRE(r1.searches.size() == r0.searches.size());
  bool reached = false;
  for (std::size_t i = 0; i < r0.searches.size(); ++i) {
    CAPTURE(i);
    const auto &a = r0.searches[i], &b = r1.searches[i];
    CHECK(b.end_seconds == a.end_seconds);
    CHECK(b.end_reason == a.end_reason);
    CHECK(b.seconds_to_target == a.seconds_to_target);
    CHECK(b.rounds == a.rounds);
    CHECK(b.best_speedup == a.best_speedup);
    CHECK(b.profiled == a.profiled);
    CHECK(b.tokens == a.tokens);
    CHECK(b.generated_tokens == a.generated_tokens);
    CHECK(b.forks == a.forks);
    CHECK(b.forks_skipped == a.forks_skipped);
    CHECK(b.terminations == a.terminations);
    CHECK(b.compiled_ok == a.compiled_ok);
    CHECK(b.validated_ok == a.validated_ok);
    CHECK(b.candidates == a.candidates);
    CHECK(b.reused == a.reused);
    CHECK(b.cancelled == a.cancelled);
    CHECK(b.verdicts == a.verdicts);
    reached = reached || a.seconds_to_target.has_value();
  }
  CHECK(reached);
}

TEST_CASE("a resumed run's results cover the whole run: its time, each search's end, its profiles and tokens") {
  const auto full = temp_file("whole-full.jsonl"), cut = temp_file("whole-cut.jsonl");
  world uninterrupted(9);
  run_result r0;
  {
    journal_writer j(full, false);
    r0 = uninterrupted.run(config("specgen", 4, 9), &j);
  }
  const auto lines = lines_of(full);
  int ended_before_kill = 0;
  for (std::size_t n = lines.size() / 8; n < lines.size() - 1; n += lines.size() / 8) {
    CAPTURE(n);
    write_first(cut, lines, n);
    auto st = load_journal(cut);
    REQUIRE(st);
    world w(9);
    run_result r;
    {
      journal_writer j(cut, true);
      r = w.run(config("specgen", 4, 9), &j, &*st);
    }
    const double killed_at = to_seconds(st->last_t);
    // Run time continues from the killed segment's last record.
    REQUIRE(r.segments.size() == 2);
    CHECK_FALSE(r.segments[0].completed);
    CHECK(r.segments[0].end_seconds == killed_at);
    CHECK(r.segments[1].start_seconds == killed_at);
    CHECK(r.e2e_seconds >= killed_at);
    // The killed segment's device time is not journaled: the utilisation says it covers only this segment.
    CHECK_FALSE(r.pool_utilization_whole_run);
    for (std::size_t i = 0; i < r.searches.size(); ++i) {
      CAPTURE(i);
      const auto& s = r.searches[i];
      const auto& js = st->searches.at(static_cast<int>(i));
      CHECK(s.end_seconds > 0);
      CHECK(s.end_seconds <= r.e2e_seconds);
      if (js.ended) {
        ++ended_before_kill;
        CHECK(s.end_seconds == r0.searches[i].end_seconds);  // before the kill, the two runs were one
      } else {
        CHECK(s.end_seconds >= killed_at);
      }
      CHECK(s.generated_tokens >= js.generated_tokens);
      CHECK(s.tokens.completion_tokens >= js.tokens.completion_tokens);
      CHECK(s.forks >= js.forks);
      CHECK(s.compiled_ok >= js.compiled_ok);
    }
    // Profiled kernels: every distinct profile of the whole run, once.
    auto after = load_journal(cut);
    REQUIRE(after);
    int profiled = 0;
    for (const auto& [index, js] : after->searches) profiled += static_cast<int>(js.history.size());
    CHECK(r.profiled_kernels == profiled);
    // One clock for the whole journal: times never go back.
    std::int64_t last = 0;
    for (const auto& line : lines_of(cut)) {
      const auto t = nlohmann::json::parse(line)["t_ns"].get<std::int64_t>();
      CHECK(t >= last);
      last = t;
    }
  }
  CHECK(ended_before_kill > 0);
}

TEST_CASE("a time budget counts the time a run had before it was killed") {
  auto cfg = [] {
    auto c = config("specgen", 50, 9);
    c.budget.max_seconds = 400;
    return c;
  };
  const auto full = temp_file("budget-full.jsonl"), cut = temp_file("budget-cut.jsonl");
  {
    world w(9);
    journal_writer j(full, false);
    const auto r = w.run(cfg(), &j);
    for (const auto& s : r.searches) REQUIRE(s.end_reason == "time budget");
  }
  const auto lines = lines_of(full);
  write_first(cut, lines, lines.size() / 2);
  auto st = load_journal(cut);
  REQUIRE(st);
  REQUIRE(to_seconds(st->last_t) > 100);
  world w(9);
  journal_writer j(cut, true);
  const auto r = w.run(cfg(), &j, &*st);
  for (const auto& s : r.searches) {
    CHECK(s.end_reason == "time budget");
    CHECK(s.end_seconds == Approx(400));
  }
}

namespace {

/// The error `resume` gives for `st` in a run of `cfg` on `w`'s corpus, or "" when it accepts it.
std::string resume_error(world& w, engine_config cfg, const journal_state& st) {
  engine eng(w.loop, w.checked, w.counted, std::move(cfg));
  for (const auto& t : w.corpus.tasks) eng.add_search(std::make_shared<const task>(t));
  auto r = eng.resume(st);
  return r ? std::string() : r.error().message;
}

}  // namespace

TEST_CASE("resuming the journal of another run is refused, saying what differs") {
  const auto path = temp_file("identity.jsonl");
  {
    world w(5);
    journal_writer j(path, false);
    w.run(config("specgen", 3, 5), &j);
  }
  auto st = load_journal(path);
  REQUIRE(st);
  world same(5);
  CHECK(resume_error(same, config("specgen", 3, 5), *st).empty());

  world w(5);
  const auto seed = resume_error(w, config("specgen", 3, 6), *st);
  CHECK(seed.find("the journal is of another run (run " + st->identity->run_id()) != std::string::npos);
  CHECK(seed.find("seed 5 vs 6") != std::string::npos);
  CHECK(seed.find("start a new run in a new journal") != std::string::npos);
  const auto mode = resume_error(w, config("sequential", 3, 5), *st);
  CHECK(mode.find("config /trigger") != std::string::npos);
  const auto rounds = resume_error(w, config("specgen", 4, 5), *st);
  CHECK(rounds.find("config /budget/max_rounds 3 vs 4") != std::string::npos);
  world other_corpus(5, {.tasks = 3, .rounds = 4, .lanes = 1});
  CHECK(resume_error(other_corpus, config("specgen", 3, 5), *st).find("corpus ") != std::string::npos);

  // Records without a run_start belong to no known run.
  journal_state anonymous = *st;
  anonymous.identity.reset();
  CHECK(resume_error(w, config("specgen", 3, 5), anonymous).find("no run_start record") != std::string::npos);
}

TEST_CASE("a search whose every stream fails says so, with the count and the first error, and the other searches run") {
  event_loop<virtual_clock> loop;
  auto corpus = replay::generate_corpus({.tasks = 2, .rounds = 3, .lanes = 1}, 4);
  const auto orphan = corpus.tasks[1].name;
  std::erase_if(corpus.traces, [&](const replay::trace& t) { return t.task == orphan; });
  replay::replay_model model(loop, corpus.traces, {});
  sim::simulated_device device(loop, corpus.costs, {.devices = 2, .compile_slots = 1, .seed = 4});
  engine eng(loop, model, device, config("specgen", 3, 4));
  for (const auto& t : corpus.tasks) eng.add_search(std::make_shared<const task>(t));
  const auto r = eng.run();
  REQUIRE(r.searches.size() == 2);
  CHECK_FALSE(r.searches[0].every_stream_failed());
  CHECK(r.searches[0].stream_failures == 0);
  CHECK(r.searches[0].profiled > 0);
  CHECK(r.searches[1].every_stream_failed());
  CHECK(r.searches[1].stream_failures == 3);  // one stream per round
  CHECK(r.searches[1].first_stream_error.find("no trace recorded for task \"" + orphan + "\"") != std::string::npos);
  CHECK(r.stream_failures == 3);
}

TEST_CASE("kernels the simulated device never measured get no verdict, and the next prompt says why") {
  event_loop<virtual_clock> loop;
  const auto corpus = replay::generate_corpus({.tasks = 1, .rounds = 2, .lanes = 1}, 6);
  replay::replay_model model(loop, corpus.traces, {});
  // A table that knows none of the corpus's kernels: any verdict would be made up.
  sim::simulated_device device(loop, cost_table{.device = "empty", .kernels = {}, .profile = {}}, {.devices = 2, .seed = 6});
  std::filesystem::path jpath = std::filesystem::temp_directory_path() / "specgen-engine-unjudged.jsonl";
  std::filesystem::remove(jpath);
  journal_writer jw(jpath, false);
  engine eng(loop, model, device, config("sequential", 2, 6), &jw);
  eng.add_search(std::make_shared<const task>(corpus.tasks[0]));
  const auto r = eng.run();
  const auto& s = r.searches.at(0);
  CHECK(s.candidates > 0);
  CHECK(s.unjudged == s.candidates);
  CHECK(s.verdicts.empty());
  CHECK(s.profiled == 0);
  const auto records = eng.records(0);
  REQUIRE(!records.empty());
  for (const auto& rec : records) {
    CHECK_FALSE(rec.eval.has_value());
    CHECK(rec.not_judged.find("is not in the cost table") != std::string::npos);
  }
  // The journal says why, and a resumed reading keeps it.
  auto st = load_journal(jpath);
  REQUIRE(st);
  for (const auto& [id, jc] : st->candidates) CHECK(jc.cancel_reason.rfind("not judged: ", 0) == 0);
  std::filesystem::remove(jpath);
}

TEST_CASE("early termination stops the main reasoning when a fork beats the history's mean") {
  world w(3, {.tasks = 2, .rounds = 6, .lanes = 1});
  auto r = w.run(config("specgen", 6, 3));
  int terminations = 0;
  for (const auto& s : r.searches) terminations += s.terminations;
  CHECK(terminations > 0);

  world never_stop(3, {.tasks = 2, .rounds = 6, .lanes = 1});
  auto cfg = config("specgen", 6, 3);
  cfg.termination = termination::never{};
  auto r2 = never_stop.run(std::move(cfg));
  for (const auto& s : r2.searches) CHECK(s.terminations == 0);
}

namespace {

/// Per (search, round): when the first lane was stopped, the lanes stopped,
/// and the lanes whose main answer became a candidate before that.
struct round_stops {
  double first_stop = -1;
  std::set<int> stopped, answered_before;
  std::set<std::int64_t> by;  ///< the winning kernels that stopped lanes
  bool own_lane_only = true;  ///< every stopped lane was stopped by a kernel of its own forks
};

std::map<std::pair<int, int>, round_stops> stops_of(const std::filesystem::path& journal, int lanes) {
  std::map<std::pair<int, int>, round_stops> out;
  std::vector<nlohmann::json> answers;
  std::map<std::int64_t, int> lane_of;  // candidate -> the lane that made it
  std::ifstream in(journal);
  for (std::string line; std::getline(in, line);) {
    auto r = nlohmann::json::parse(line);
    if (r["type"] == "terminated") {
      auto& st = out[{r["search"].get<int>(), r["round"].get<int>()}];
      if (st.first_stop < 0) st.first_stop = r["t"].get<double>();
      st.stopped.insert(r["lane"].get<int>());
      st.by.insert(r["by"].get<std::int64_t>());
      if (lane_of.at(r["by"].get<std::int64_t>()) != r["lane"].get<int>()) st.own_lane_only = false;
    } else if (r["type"] == "candidate") {
      lane_of[r["candidate"]["id"].get<std::int64_t>()] = r["candidate"]["prov"]["lane"].get<int>();
      if (r["candidate"]["prov"]["origin"] == "main") answers.push_back(r);
    }
  }
  for (const auto& a : answers) {
    const auto& prov = a["candidate"]["prov"];
    auto it = out.find({prov["search"].get<int>(), prov["round"].get<int>()});
    if (it != out.end() && a["t"].get<double>() <= it->second.first_stop) it->second.answered_before.insert(prov["lane"].get<int>());
  }
  for (auto& [k, st] : out) REQUIRE(static_cast<int>(st.stopped.size() + st.answered_before.size()) <= lanes);
  return out;
}

}  // namespace

TEST_CASE("a round-scope stop ends every lane of the round; a lane-scope stop only the lane that forked the winner") {
  constexpr int lanes = 4;
  auto run = [&](termination_scope scope, const std::string& name) {
    world w(11, {.tasks = 3, .rounds = 4, .lanes = lanes});
    auto cfg = config("parallel+specgen", 4, 11);
    REQUIRE(cfg.termination_scope == termination_scope::round);  // the mode's own choice
    cfg.termination_scope = scope;
    cfg.max_streams = 9;  // fewer slots than lanes: some lanes wait for one
    const auto p = temp_file(name);
    {
      journal_writer j(p, false);
      w.run(std::move(cfg), &j);
    }
    return stops_of(p, lanes);
  };
  const auto round = run(termination_scope::round, "round-scope.jsonl");
  REQUIRE_FALSE(round.empty());
  int others_stopped = 0;
  for (const auto& [k, st] : round) {
    INFO("search " << k.first << " round " << k.second);
    // One win stopped every lane that had not answered yet, waiting ones included.
    CHECK(st.stopped.size() + st.answered_before.size() == static_cast<std::size_t>(lanes));
    CHECK(st.by.size() == 1);
    others_stopped += st.own_lane_only ? 0 : 1;
  }
  CHECK(others_stopped > 0);
  const auto lane = run(termination_scope::lane, "lane-scope.jsonl");
  REQUIRE_FALSE(lane.empty());
  for (const auto& [k, st] : lane) {
    INFO("search " << k.first << " round " << k.second);
    CHECK(st.own_lane_only);
    CHECK(st.by.size() == st.stopped.size());
  }
}

TEST_CASE("slots kept for forks hold main lanes back and let forks run where lanes wait") {
  world w(12, {.tasks = 4, .rounds = 3, .lanes = 4});
  auto cfg = config("parallel+specgen", 3, 12);
  cfg.max_streams = 8;  // 16 lanes for 8 slots
  cfg.fork_slot_share = 0.25;
  auto r = w.run(cfg);
  CHECK(w.checked.main_peak == 6);  // two of the eight slots are the forks'
  CHECK(w.checked.forks > 0);
  for (const auto& s : r.searches) CHECK(s.rounds == 3);

  world none(12, {.tasks = 4, .rounds = 3, .lanes = 4});
  cfg.fork_slot_share = 0;
  none.run(cfg);
  CHECK(none.checked.main_peak == 8);
  CHECK(none.checked.forks < w.checked.forks);  // lanes that wait keep forks out of every free slot
}

TEST_CASE("a token budget ends the search and says so") {
  world w(4);
  auto cfg = config("specgen", 50, 4);
  cfg.budget.max_tokens = 20000;
  auto r = w.run(std::move(cfg));
  for (const auto& s : r.searches) {
    CHECK(s.end_reason == "token budget");
    CHECK(s.rounds < 50);
  }
}

TEST_CASE("a stream limit of one serialises main streams and skips forks") {
  world w(6);
  auto cfg = config("parallel+specgen", 2, 6);
  cfg.max_streams = 1;
  auto r = w.run(std::move(cfg));
  for (const auto& s : r.searches) CHECK(s.rounds == 2);
  CHECK(w.checked.forks == 0);
}

namespace {

/// A backend whose requests fail: round 1's stream cannot start, and round 2's
/// stream breaks after 40 chunks, as a dropped server connection does.
template <backend B>
class flaky_backend : private stream_sink {
 public:
  flaky_backend(B& inner, executor& exec) : inner_(inner), exec_(exec) {}
  backend_limits limits() const { return inner_.limits(); }
  expected<stream_id, error> start_reasoning(const reasoning_request& r, stream_sink& sink) {
    if (r.ctx.round == 1) return unexpected(error{"HTTP 503 from the server"});
    auto id = inner_.start_reasoning(r, *this);
    if (id) {
      sinks_[*id] = &sink;
      if (r.ctx.round == 2) breaking_.insert(*id);
    }
    return id;
  }
  expected<stream_id, error> fork(const fork_request& f, stream_sink& sink) {
    if (broken_.count(f.parent)) return unexpected(error{"parent stream is gone"});
    auto id = inner_.fork(f, *this);
    if (id) sinks_[*id] = &sink;
    return id;
  }
  void cancel(stream_id id) {
    if (!broken_.count(id)) inner_.cancel(id);
  }
  int broke = 0;

 private:
  void on_chunk(const stream_chunk& c) override {
    if (broken_.count(c.id)) return;
    sinks_.at(c.id)->on_chunk(c);
    if (breaking_.count(c.id) && ++chunks_[c.id] == 40) {
      broken_.insert(c.id);
      ++broke;
      inner_.cancel(c.id);
      exec_.after(duration{0}, [this, id = c.id] {
        sinks_.at(id)->on_end({.id = id, .sample = 0, .reason = finish_reason::error, .used = {}, .error = "connection reset by peer"});
      });
    }
  }
  void on_end(const stream_end& e) override {
    if (broken_.count(e.id)) return;  // the inner cancel's end: the error was reported instead
    sinks_.at(e.id)->on_end(e);
  }

  B& inner_;
  executor& exec_;
  std::map<stream_id, stream_sink*> sinks_;
  std::map<stream_id, int> chunks_;
  std::set<stream_id> breaking_, broken_;
};

}  // namespace

TEST_CASE("a stream that cannot start or breaks mid-way ends its lane with a journaled error, and the search goes on") {
  event_loop<virtual_clock> loop;
  auto corpus = replay::generate_corpus({.tasks = 1, .rounds = 5, .lanes = 1}, 21);
  replay::replay_model model(loop, corpus.traces, {});
  sim::simulated_device device(loop, corpus.costs, {.devices = 2, .compile_slots = 1, .seed = 21});
  flaky_backend<replay::replay_model> flaky(model, loop);
  const auto path = temp_file("flaky.jsonl");
  journal_writer j(path, false);
  auto cfg = config("specgen", 5, 21);
  engine eng(loop, flaky, device, std::move(cfg), &j);
  eng.add_search(std::make_shared<const task>(corpus.tasks.front()));
  const auto r = eng.run();
  REQUIRE(r.searches.size() == 1);
  CHECK(r.searches[0].rounds == 5);
  CHECK(r.searches[0].end_reason == "round budget");
  CHECK(flaky.broke == 1);
  // Counted, but the search still ran: not a search whose every stream failed.
  CHECK(r.searches[0].stream_failures == 2);
  CHECK(r.searches[0].first_stream_error == "HTTP 503 from the server");
  CHECK_FALSE(r.searches[0].every_stream_failed());
  for (const auto& rec : eng.records(0)) CHECK((rec.eval.has_value() || rec.cancelled));
  // Both failures are in the journal with the server's words.
  const auto text = slurp(path);
  CHECK(text.find("HTTP 503 from the server") != std::string::npos);
  CHECK(text.find("connection reset by peer") != std::string::npos);
  auto st = load_journal(path);
  REQUIRE(st);
  CHECK(st->searches.at(0).rounds_completed == 5);
}

namespace {

/// A backend whose server reports how many tokens each chunk holds but not
/// which (as SGLang's chat streams do): the ids are stripped into
/// `token_count`, and a fork continues from everything the stream delivered.
template <backend B>
class counts_only_backend : private stream_sink {
 public:
  explicit counts_only_backend(B& inner) : inner_(inner) {}
  backend_limits limits() const { return inner_.limits(); }
  expected<stream_id, error> start_reasoning(const reasoning_request& r, stream_sink& sink) {
    auto id = inner_.start_reasoning(r, *this);
    if (id) sinks_[*id] = &sink;
    return id;
  }
  expected<stream_id, error> fork(const fork_request& f, stream_sink& sink) {
    non_empty_prefixes += !f.reasoning_prefix.empty();
    fork_request g = f;
    g.reasoning_prefix = delivered_[f.parent];
    auto id = inner_.fork(g, *this);
    if (id) sinks_[*id] = &sink;
    return id;
  }
  void cancel(stream_id id) { inner_.cancel(id); }
  int non_empty_prefixes = 0;

 private:
  void on_chunk(const stream_chunk& c) override {
    if (c.reasoning) delivered_[c.id].insert(delivered_[c.id].end(), c.tokens.begin(), c.tokens.end());
    stream_chunk counted = c;
    counted.token_count = static_cast<std::uint32_t>(c.tokens.size());
    counted.tokens.clear();
    sinks_.at(c.id)->on_chunk(counted);
  }
  void on_end(const stream_end& e) override { sinks_.at(e.id)->on_end(e); }

  B& inner_;
  std::map<stream_id, stream_sink*> sinks_;
  std::map<stream_id, std::vector<token_id>> delivered_;
};

}  // namespace

TEST_CASE("a backend that reports token counts without ids forks where one with ids does") {
  auto run = [](bool ids) {
    event_loop<virtual_clock> loop;
    auto corpus = replay::generate_corpus({.tasks = 2, .rounds = 3, .lanes = 1}, 5);
    replay::replay_model model(loop, corpus.traces, {});
    sim::simulated_device device(loop, corpus.costs, {.devices = 4, .compile_slots = 2, .seed = 5});
    counts_only_backend<replay::replay_model> counts(model);
    auto cfg = config("+priority", 3, 5);  // no KV store: its key is made of the ids
    std::vector<search_result> out;
    if (ids) {
      engine eng(loop, model, device, std::move(cfg));
      for (const auto& t : corpus.tasks) eng.add_search(std::make_shared<const task>(t));
      out = eng.run().searches;
    } else {
      engine eng(loop, counts, device, std::move(cfg));
      for (const auto& t : corpus.tasks) eng.add_search(std::make_shared<const task>(t));
      out = eng.run().searches;
      CHECK(counts.non_empty_prefixes == 0);
    }
    return out;
  };
  const auto with_ids = run(true);
  const auto counts_only = run(false);
  REQUIRE(with_ids.size() == counts_only.size());
  int forks = 0;
  for (std::size_t i = 0; i < with_ids.size(); ++i) {
    INFO("search " << i);
    CHECK(counts_only[i].forks == with_ids[i].forks);
    CHECK(counts_only[i].candidates == with_ids[i].candidates);
    CHECK(counts_only[i].generated_tokens == with_ids[i].generated_tokens);
    CHECK(counts_only[i].best_speedup == with_ids[i].best_speedup);
    forks += with_ids[i].forks;
  }
  CHECK(forks > 0);
}

namespace {
/// Forks one sample every 64 reasoning tokens while none of its stream's forks
/// is generating, and records `barren_forks` at each fire, per trigger
/// instance (the engine copies the trigger for every lane and round).
struct barren_probe {
  struct log {
    int instances = 0;
    std::map<int, std::vector<int>> fires;  ///< instance -> barren_forks at each fire
  };
  std::shared_ptr<log> out = std::make_shared<log>();
  int instance = -1;
  std::uint64_t last = 0;

  std::optional<trigger_fire> on_chunk(const stream_view& v, const trigger_context& c) {
    if (c.forks_in_flight > 0 || v.tokens < last + 64) return std::nullopt;
    if (instance < 0) instance = out->instances++;
    last = v.tokens;
    out->fires[instance].push_back(c.barren_forks);
    return trigger_fire{"probe", 1};
  }
  std::string name() const { return "probe"; }
};
}  // namespace

TEST_CASE("barren_forks counts a stream's forks that yielded no new kernel and resets after one that did") {
  world w(7, {.tasks = 2, .rounds = 3, .lanes = 1});
  auto cfg = config("specgen", 3, 7);
  barren_probe probe;
  const auto log = probe.out;
  cfg.trigger = probe;
  cfg.termination = termination::never{};  // whole rounds: many forks per stream
  w.run(std::move(cfg));
  // One fork at a time per stream, and a fire only once it ended: between two
  // fires exactly one fork ended, so the count grows by one or falls to zero.
  int grew = 0, reset = 0, fires = 0;
  for (const auto& [instance, seen] : log->fires) {
    INFO("trigger instance " << instance);
    REQUIRE_FALSE(seen.empty());
    CHECK(seen.front() == 0);  // a new round starts with none
    fires += static_cast<int>(seen.size());
    for (std::size_t i = 1; i < seen.size(); ++i) {
      if (seen[i] == seen[i - 1] + 1) ++grew;
      else if (seen[i] == 0) ++reset;
      else FAIL("barren_forks went from " << seen[i - 1] << " to " << seen[i]);
    }
  }
  CHECK(fires > 20);
  CHECK(grew > 0);   // forks that repeated a kernel or yielded none
  CHECK(reset > 0);  // forks that yielded a new kernel
}

TEST_CASE("identical kernels are evaluated once: a copy that arrives while the first is in flight waits for its verdict") {
  int reused = 0;  // copies served another copy's verdict, waiting or not
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    CAPTURE(seed);
    world w(seed, {.tasks = 2, .rounds = 4, .lanes = 1});
    auto r = w.run(config("specgen", 4, seed));
    std::map<std::uint64_t, int> judged, dropped, copies;
    for (const auto& rec : w.records) {
      const auto h = rec.cand->content_hash();
      ++copies[h];
      if (rec.cancelled) ++dropped[h];
      else if (rec.eval && !rec.reused) ++judged[h];
    }
    for (const auto& [h, n] : copies) {
      CAPTURE(h, n);
      // A kernel goes to the evaluator again only after its earlier copy was dropped as stale.
      CHECK(static_cast<int>(w.counted.compiled.count(h)) <= 1 + dropped[h]);
      CHECK(judged[h] <= 1 + dropped[h]);
    }
    // Profiled kernels count distinct profiles, never a copy's.
    int profiled = 0;
    for (const auto& rec : w.records) profiled += (rec.profiled() && !rec.reused) ? 1 : 0;
    CHECK(r.profiled_kernels == profiled);
    for (const auto& s : r.searches) reused += s.reused;
  }
  CHECK(reused > 0);
}

TEST_CASE("when the evaluated copy of a kernel is dropped as stale, a waiting copy whose round is still open is evaluated instead") {
  // Two searches of one task replay the same trace, so their forks yield the same
  // kernels at about the same time: one copy is evaluated, the other waits. One slow
  // GPU keeps copies queued, and a round's end drops its queued and running jobs, so
  // the evaluated copy is often dropped while the other search's copy still waits.
  int promoted = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    event_loop<virtual_clock> loop;
    auto corpus = replay::generate_corpus({.tasks = 1, .rounds = 3, .lanes = 1}, seed);
    replay::replay_model model(loop, corpus.traces, {});
    sim::simulated_device device(loop, corpus.costs, {.devices = 1, .compile_slots = 1, .seed = seed});
    counting_evaluator<sim::simulated_device> counted(device);
    const auto path = temp_file("stale-copies.jsonl");
    journal_writer j(path, false);
    auto cfg = config("specgen", 3, seed);
    cfg.cancel_running_at_round_end = true;
    engine eng(loop, model, counted, std::move(cfg), &j);
    const auto t = std::make_shared<const task>(corpus.tasks.front());
    eng.add_search(t);
    eng.add_search(t);
    const auto r = eng.run();
    REQUIRE(r.searches.size() == 2);

    std::map<std::uint64_t, int> dropped;
    for (int s = 0; s < 2; ++s)
      for (const auto& rec : eng.records(s)) {
        CHECK((rec.eval.has_value() || rec.cancelled));  // nothing lost
        if (rec.cancelled) ++dropped[rec.cand->content_hash()];
      }
    for (const auto& [h, n] : dropped) CHECK(static_cast<int>(counted.compiled.count(h)) <= 1 + n);

    // From the journal: a copy created before an earlier copy of its kernel was
    // dropped, and compiled afterwards, waited and then took over.
    std::map<candidate_id, std::pair<std::string, double>> made;  // id -> (hash, created)
    std::map<candidate_id, double> cancelled_at;
    std::set<candidate_id> compiled;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const auto e = nlohmann::json::parse(line);
      const auto type = e.at("type").get<std::string>();
      if (type == "candidate") made[e["candidate"]["id"].get<candidate_id>()] = {e["candidate"]["hash"], e["t"].get<double>()};
      if (type == "cancelled") cancelled_at[e["candidate"].get<candidate_id>()] = e["t"].get<double>();
      if (type == "evaluation" && e.value("stage", "") == "compile") compiled.insert(e["candidate"].get<candidate_id>());
    }
    for (const auto& [first, when] : cancelled_at)
      for (auto c : compiled)
        if (c > first && made[c].first == made[first].first && made[c].second <= when) ++promoted;
  }
  CHECK(promoted > 0);
}
