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

namespace {

/// Wraps a backend and checks the stream contract from the engine's side:
/// every fork's prefix is a prefix of what its parent emitted, and nothing is
/// delivered for a stream after the engine cancelled it.
template <backend B>
class checked_backend : private stream_sink {
 public:
  explicit checked_backend(B& inner) : inner_(inner) {}
  backend_limits limits() const { return inner_.limits(); }
  expected<stream_id, backend_error> start_reasoning(const reasoning_request& r, stream_sink& sink) {
    auto id = inner_.start_reasoning(r, *this);
    if (id) sinks_[*id] = &sink;
    return id;
  }
  expected<stream_id, backend_error> fork(const fork_request& f, stream_sink& sink) {
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
  std::uint64_t tokens = 0;

 private:
  void on_chunk(const stream_chunk& c) override {
    if (cancelled_.count(c.id)) ++chunks_after_cancel;
    if (c.reasoning) emitted_[c.id].insert(emitted_[c.id].end(), c.tokens.begin(), c.tokens.end());
    tokens += c.tokens.size();
    sinks_.at(c.id)->on_chunk(c);
  }
  void on_end(const stream_end& e) override { sinks_.at(e.id)->on_end(e); }

  B& inner_;
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
    if (resume_from) eng.resume(*resume_from);
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
  expected<stream_id, backend_error> start_reasoning(const reasoning_request& r, stream_sink& sink) {
    if (r.ctx.round == 1) return unexpected(backend_error{"HTTP 503 from the server", false});
    auto id = inner_.start_reasoning(r, *this);
    if (id) {
      sinks_[*id] = &sink;
      if (r.ctx.round == 2) breaking_.insert(*id);
    }
    return id;
  }
  expected<stream_id, backend_error> fork(const fork_request& f, stream_sink& sink) {
    if (broken_.count(f.parent)) return unexpected(backend_error{"parent stream is gone", false});
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
  expected<stream_id, backend_error> start_reasoning(const reasoning_request& r, stream_sink& sink) {
    auto id = inner_.start_reasoning(r, *this);
    if (id) sinks_[*id] = &sink;
    return id;
  }
  expected<stream_id, backend_error> fork(const fork_request& f, stream_sink& sink) {
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
