#pragma once
/// The speculative search engine.
///
/// One thread, one event loop: reasoning streams, forks, compile and device
/// jobs all post their events into the loop, and the engine reacts. The same
/// code runs a real search (`steady_clock`) and a simulation (`virtual_clock`).
///
/// A round of one search: the strategy builds one prompt per lane; each lane's
/// reasoning stream is fed chunk by chunk to its copy of the trigger policy; a
/// firing trigger forks K non-reasoning generations from the exact reasoning
/// token ids so far; every fork sample and the stream's own final answer are
/// extracted into candidates and sent through compile → validate → profile;
/// each profiled speculative kernel goes to the termination policy, which may
/// cancel its lane's reasoning. The round ends when every lane has ended and
/// every main-stream candidate has its verdict; stale forks and queued jobs
/// of the round are then cancelled.
///
/// @code
///   specgen::event_loop<specgen::virtual_clock> loop;
///   specgen::replay::replay_model model(loop, corpus.traces, {});
///   specgen::sim::simulated_device gpu(loop, corpus.costs, {.devices = 4});
///   specgen::engine eng(loop, model, gpu, specgen::mode_config("specgen").value());
///   for (const auto& t : corpus.tasks) eng.add_search(std::make_shared<const specgen::task>(t));
///   specgen::run_result r = eng.run();
/// @endcode
#include <specgen/backend.hpp>
#include <specgen/clock.hpp>
#include <specgen/engine_config.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/limits.hpp>
#include <specgen/evaluator.hpp>
#include <specgen/extract.hpp>
#include <specgen/journal.hpp>
#include <specgen/kernel_dedup.hpp>
#include <specgen/json.hpp>
#include <specgen/prompt.hpp>
#include <specgen/scheduler.hpp>
#include <specgen/task_io.hpp>
#include <specgen/timeline.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// Live state of one search, for progress displays.
struct search_progress {
  int search = 0;
  std::string task;
  int round = 0;
  double best_speedup = 0;
  int in_flight = 0;          ///< candidates queued or being evaluated
  int streams = 0;            ///< reasoning streams and forks generating
  std::uint64_t tokens = 0;
  bool done = false;
};

/// Outcome of one search.
struct search_result {
  int search = 0;
  std::string task;
  int rounds = 0;
  std::string end_reason;
  double best_speedup = 0;                ///< 0 when nothing valid was found
  candidate_id best = 0;
  double end_seconds = 0;
  std::optional<double> seconds_to_target;
  usage tokens;                           ///< all generation of the search
  std::uint64_t generated_tokens = 0;     ///< completion tokens (reasoning + answers + forks)
  int candidates = 0, from_forks = 0, forks = 0, forks_skipped = 0, extract_failures = 0;
  /// `profiled`: kernels this search profiled itself; a copy of a kernel profiled
  /// before (or being profiled) counts in `reused` instead.
  int compiled_ok = 0, validated_ok = 0, profiled = 0, cancelled = 0, reused = 0, terminations = 0;
  /// Candidates the evaluator could not judge (no verdict recorded; the
  /// journal's cancel record says why). Counted in `cancelled` too.
  int unjudged = 0;
  /// Reasoning streams that could not start or ended with an error, and forks
  /// whose request failed or a sample of which ended with one.
  int stream_failures = 0;
  std::string first_stream_error;         ///< the first failure's message
  std::map<std::string, int> verdicts;

  /// True when streams failed and no stream gave the search any output (no
  /// candidate, not even text without a kernel): the search could not run.
  [[nodiscard]] bool every_stream_failed() const noexcept {
    return stream_failures > 0 && candidates == 0 && extract_failures == 0;
  }
};

/// One process's part of a run: a run never resumed has one segment, a run
/// killed and resumed twice has three. Times are run time, which continues
/// across segments from each killed segment's last journal record.
struct run_segment {
  double start_seconds = 0;
  double end_seconds = 0;                 ///< a killed segment: its last record (later work was lost)
  bool completed = false;                 ///< false: killed
};

/// Outcome of a run (all searches). A resumed run reports the whole run, its
/// earlier segments read back from the journal (docs/journal.md).
struct run_result {
  std::vector<search_result> searches;
  double e2e_seconds = 0;                 ///< run time until the last search ended
  /// Device busy time / device time available. Over the whole run, unless an
  /// earlier segment was killed: its device time is not journaled, so the
  /// figure is then this segment's and `pool_utilization_whole_run` is false.
  double pool_utilization = 0;
  bool pool_utilization_whole_run = true;
  /// Device seconds idle while a validation or profiling job waited
  /// (scheduler_stats::idle_while_queued), over the span `pool_utilization` covers.
  double idle_while_queued_seconds = 0;
  std::uint64_t generated_tokens = 0;
  int profiled_kernels = 0;               ///< distinct profiles: identical copies count once
  int stream_failures = 0;                ///< over all searches
  double best_speedup_geomean = 0;        ///< over searches with a valid kernel (others count as 1.0)
  std::uint64_t events = 0;               ///< loop callbacks run in this segment (engine cost benchmark)
  scheduler_stats scheduler;              ///< device accounting of this segment
  std::vector<run_segment> segments;      ///< the run's segments, this one last
};

template <backend Backend, evaluator Evaluator, clock Clock>
class engine final : private stream_sink {
 public:
  using loop_type = event_loop<Clock>;

  engine(loop_type& loop, Backend& model, Evaluator& eval, engine_config cfg, journal_writer* journal = nullptr,
         timeline* tl = nullptr)
      : loop_(loop),
        model_(model),
        eval_(eval),
        cfg_(std::move(cfg)),
        journal_(journal),
        timeline_(tl),
        sched_(loop, eval.devices(), eval.compile_slots(), cfg_.pool,
               scheduler_callbacks{.submit = [this](eval_job j, eval_callback cb) { submit_job(std::move(j), std::move(cb)); },
                                   .cancel = [this](job_id id) { return eval_.cancel(id); }}) {
    const int backend_limit = static_cast<int>(model_.limits().max_concurrent_streams);
    max_streams_ = cfg_.max_streams > 0 ? std::min(cfg_.max_streams, backend_limit) : backend_limit;
    // Slots kept for forks; at least one main stream can always run.
    const int kept = static_cast<int>(std::clamp(cfg_.fork_slot_share, 0.0, 0.9) * max_streams_);
    main_streams_cap_ = std::max(max_streams_ - kept, 1);
    sched_.on_idle([this] { tick_triggers(); });
  }
  engine(const engine&) = delete;  // the scheduler and the backend hold callbacks into this object
  engine& operator=(const engine&) = delete;

  /// Add a search (one task). Returns its index.
  int add_search(std::shared_ptr<const task> t) {
    auto s = std::make_unique<search_rt>();
    s->index = static_cast<int>(searches_.size());
    s->t = std::move(t);
    s->seed = cfg_.seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(s->index) * 0xbf58476d1ce4e5b9ull;
    searches_.push_back(std::move(s));
    return searches_.back()->index;
  }

  /// Names what the searches run on, for the run's identity (`run_identity::corpus`):
  /// a fingerprint of the tasks and of whatever else decides the run's inputs
  /// (replay traces, a cost table). Without it, a fingerprint of the tasks added.
  void identify_corpus(std::string fingerprint) { corpus_id_ = std::move(fingerprint); }

  /// The run's identity, as `run()` journals it in run_start.
  [[nodiscard]] run_identity identity() const;

  /// Restore a killed run: candidates and verdicts from the journal are kept,
  /// identical kernels are not evaluated again (pending copies wait for one
  /// evaluation, as in the first run), pending candidates are re-queued, each
  /// search continues after its last completed round, and the results cover
  /// the whole run. Call after `add_search` and before `run()`. A journal of
  /// another run (another identity, or other tasks) is refused with an error
  /// that says what differs; nothing is changed then.
  [[nodiscard]] expected<void, error> resume(const journal_state& st);

  /// Called with a snapshot every `interval` of loop time while the run lasts.
  void on_progress(std::function<void(const std::vector<search_progress>&)> fn, duration interval) {
    progress_fn_ = std::move(fn);
    progress_interval_ = interval;
  }

  /// Journals something that happened to the evaluator (`event`, e.g.
  /// "rank_lost", with `details`, an object) as an evaluator_event record at
  /// the run's time, so that the journal tells what the run ran on. Call on
  /// the loop's thread while the run lasts; without a journal it does nothing.
  void note_evaluator_event(std::string_view event, nlohmann::json details = nlohmann::json::object()) {
    if (!details.is_object()) throw std::invalid_argument("an evaluator event's details must be a JSON object");
    details["event"] = event;
    journal(journal_records::evaluator_event, std::move(details));
  }

  /// Run every search to its end. Returns the measured outcome.
  run_result run();

  [[nodiscard]] std::vector<search_progress> progress() const;
  [[nodiscard]] const device_scheduler& scheduler() const noexcept { return sched_; }
  /// Every candidate record of a search, in creation order.
  [[nodiscard]] std::span<const candidate_record> records(int search) const { return searches_.at(static_cast<std::size_t>(search))->records; }

 private:
  struct lane_rt {
    int lane = 0;
    stream_id id = 0;
    bool started = false, ended = false, terminated = false;
    std::string prompt;
    std::vector<candidate_id> parents;
    std::string reasoning;
    std::vector<token_id> ids;
    /// Reasoning tokens received: `ids.size()`, or more where the server
    /// sends counts without ids (forks then carry text; see backend.hpp).
    std::uint64_t reasoning_tokens = 0;
    /// Two tokens derived from the prompt that lead the KV store's key, before
    /// the reasoning ids. The backend keeps the prompt's own ids, so the
    /// prompt's hash stands in for them: equal reasoning under different
    /// prompts must never share KV blocks.
    std::array<token_id, 2> kv_salt{};
    std::string answer;
    std::optional<policy::any_trigger> trig;
    std::uint64_t last_fork_tokens = 0;
    int forks_this_round = 0;
    int forks_in_flight = 0;
    int barren_forks = 0;  ///< policy::trigger_context::barren_forks
    timestamp began{0};
  };
  struct fork_rt {
    int search = 0, round = 0, lane = 0;
    std::string trigger;
    std::uint64_t prefix_tokens = 0;
    std::vector<std::string> texts;
    std::vector<bool> ended;
    int open = 0;
    int fresh_samples = 0;  ///< samples that yielded a kernel not seen before
    std::string error{};  ///< the first sample error's message
    timestamp began{0};
  };
  struct search_rt {
    int index = 0;
    std::shared_ptr<const task> t;
    std::uint64_t seed = 0;
    int round = -1;
    int first_round = 0;
    std::vector<lane_rt> lanes;
    std::vector<candidate_record> records;
    std::vector<extract_miss> misses;    ///< answers without a kernel, for the next prompts
    std::vector<double> history;         ///< speedups of profiled kernels, arrival order
    std::set<stream_id> forks;           ///< this search's generating forks
    std::set<candidate_id> pending_main; ///< main-stream candidates of the round without a verdict
    std::vector<evaluation> staging;     ///< per record: stage results so far, until the final verdict
    int in_flight = 0;
    bool round_open = false;             ///< between start_round and end_round
    bool done = false;
    timer_id deadline = 0;
    search_result res;
    std::uint64_t generated = 0;
    policy::fork_yields yields;         ///< what this search's forks yielded, by trigger
    std::uint64_t complete_tokens = 0;  ///< reasoning tokens of its main streams that ran to their end
    std::uint64_t complete_streams = 0;
  };
  struct stream_owner {
    int search = 0;
    int lane = 0;
    bool fork = false;
  };

  // ---- loop-side plumbing ---------------------------------------------------
  static std::uint64_t group_of(int search, int round) noexcept {
    return (static_cast<std::uint64_t>(search) << 32) | static_cast<std::uint32_t>(round);
  }
  /// Run time: since the run's first start, across resumes (each killed
  /// segment counted up to its last journal record). Journal records, search
  /// end times and the run's results use it; the timeline shows loop time.
  [[nodiscard]] timestamp run_now() const { return loop_.now() - started_ + resumed_at_; }
  void journal(std::string_view type, nlohmann::json body) {
    if (journal_) journal_->write(type, run_now(), std::move(body));
  }
  /// A stream or fork of `s` failed: counted, and journaled as `record`.
  void stream_failed(search_rt& s, std::string_view record, nlohmann::json body, const std::string& message) {
    if (s.res.stream_failures++ == 0) s.res.first_stream_error = message;
    body["error"] = message;
    journal(record, std::move(body));
  }

  void submit_job(eval_job j, eval_callback cb) {
    const timestamp began = loop_.now();
    const int device = j.device;
    const stage kind = j.kind;
    const candidate_id cid = j.cand ? j.cand->id : 0;
    eval_.submit(std::move(j), [this, cb = std::move(cb), began, device, kind, cid](eval_outcome o) {
      if (timeline_ && !o.cancelled) {
        const std::string track = device < 0 ? "compile" : fmt::format("GPU {}", device);
        timeline_->span("evaluation", track, fmt::format("{} #{}", to_string(kind), cid), began, loop_.now(),
                        {{"verdict", std::string(to_string(o.result.kind))}, {"summary", o.result.summary}});
      }
      cb(std::move(o));
    });
  }

  // ---- rounds ---------------------------------------------------------------
  void start_round(search_rt& s);
  void start_lane_stream(search_rt& s, int lane);
  void pump_waiting_streams();
  void maybe_end_round(search_rt& s);
  void end_round(search_rt& s, std::string_view reason);
  void finish_search(search_rt& s, std::string reason);
  bool budget_exhausted(const search_rt& s, std::string& reason) const;

  // ---- streams --------------------------------------------------------------
  void on_chunk(const stream_chunk& c) override;
  void on_end(const stream_end& e) override;
  void consider_fork(search_rt& s, lane_rt& l, std::size_t new_from);
  void tick_triggers();
  void terminate_lane(search_rt& s, lane_rt& l, candidate_id because);
  /// The reasoning length a main stream of `s` is expected to reach: the mean
  /// of its streams that ran to their end, else of the run's; 0 when none has.
  [[nodiscard]] std::uint64_t expected_reasoning(const search_rt& s) const noexcept {
    if (s.complete_streams > 0) return s.complete_tokens / s.complete_streams;
    return complete_streams_ > 0 ? complete_tokens_ / complete_streams_ : 0;
  }
  void count_tokens(search_rt& s, std::uint64_t n);
  static std::uint64_t chunk_tokens(const stream_chunk& c) noexcept {
    return c.tokens.empty() ? std::max<std::uint64_t>(c.token_count, 1) : c.tokens.size();
  }
  void report_progress();
  /// The timeline's row group for a search.
  static std::string track_group(const search_rt& s) { return fmt::format("search {} ({})", s.index, s.t->name); }

  // ---- candidates -------------------------------------------------------------
  /// True when the text held a kernel not seen before in this run (one that goes to evaluation).
  bool add_candidate(search_rt& s, provenance prov, std::string text);
  void enqueue_stage(search_rt& s, std::size_t idx, stage st);
  void on_stage_done(int search, std::size_t idx, eval_outcome o);
  void finalize(search_rt& s, std::size_t idx, evaluation e, bool reused);
  void cancelled(search_rt& s, std::size_t idx, stage st);
  /// After a copy of a kernel gets its verdict or is dropped: when it was the
  /// evaluated copy, serves the identical copies that waited for it, or hands
  /// the evaluation to the first of them still live (kernel_dedup.hpp decides).
  void settle_duplicates(const search_rt& s, std::size_t idx);
  void account_final(search_rt& s, const candidate_record& r);

  loop_type& loop_;
  Backend& model_;
  Evaluator& eval_;
  engine_config cfg_;
  journal_writer* journal_;
  timeline* timeline_;
  device_scheduler sched_;
  std::vector<std::unique_ptr<search_rt>> searches_;
  std::unordered_map<stream_id, stream_owner> owners_;
  std::unordered_map<stream_id, fork_rt> forks_;
  std::deque<std::pair<int, int>> waiting_;  ///< (search, lane) waiting for a stream slot
  /// Copies of one kernel, by content hash; a copy is (search, record index).
  kernel_dedup<std::pair<int, std::size_t>, evaluation> dedup_;
  int max_streams_ = 64;
  int main_streams_cap_ = 64;  ///< main streams may hold this many slots; the rest are the forks'
  int active_streams_ = 0;
  // What a cost-weighing trigger sees of the server's load and of the forks so far.
  int main_streams_ = 0;      ///< main streams started and not ended
  int fork_sequences_ = 0;    ///< fork samples still generating
  policy::fork_yields run_yields_;
  std::uint64_t complete_tokens_ = 0, complete_streams_ = 0;  ///< main streams that ran to their end
  std::uint64_t fork_sample_tokens_ = 0, fork_samples_ended_ = 0;
  int searches_left_ = 0;
  candidate_id next_id_ = 1;
  timestamp started_{0};                  ///< loop time at run()
  timestamp resumed_at_{0};               ///< run time at which this segment started
  std::optional<timestamp> ended_;        ///< run time at which the last search ended
  std::vector<journal_segment> earlier_;  ///< the run's segments before this one
  /// Pending candidates of searches that had ended: their jobs were dropped at
  /// the end, but the kill came before their cancel records.
  struct dropped_job {
    int search = 0;
    std::size_t record = 0;
    stage at = stage::compile;
  };
  std::vector<dropped_job> dropped_on_resume_;
  std::string corpus_id_;
  std::function<void(const std::vector<search_progress>&)> progress_fn_;
  duration progress_interval_{0};
};

// =============================================================================
// Implementation. Kept in the header (the core is header-only) but out of the
// class body so the class reads as a summary.

template <backend B, evaluator E, clock C>
run_result engine<B, E, C>::run() {
  started_ = loop_.now();
  if (journal_) {
    journal_->write_run_start(run_now(), identity(), static_cast<int>(earlier_.size()));
    for (const auto& d : dropped_on_resume_)
      journal_->write_cancelled(run_now(), d.search, searches_[static_cast<std::size_t>(d.search)]->records[d.record].cand->id,
                                d.at, "search ended");
  }
  searches_left_ = 0;
  for (auto& s : searches_) {
    if (s->done) continue;
    ++searches_left_;
    if (journal_) journal_->write_search_start(run_now(), s->index, s->t->name);
    // The time budget is in run time: a resumed search has what its earlier segments left.
    if (cfg_.budget.max_seconds > 0)
      s->deadline = loop_.after(std::max(duration{0}, seconds(cfg_.budget.max_seconds) - resumed_at_), [this, sp = s.get()] {
        sp->deadline = 0;
        finish_search(*sp, "time budget");
      });
    s->round = s->first_round - 1;
    if (s->first_round >= cfg_.budget.max_rounds) {
      s->round = s->first_round;
      finish_search(*s, "round budget");
      continue;
    }
    start_round(*s);
  }
  if (progress_fn_ && progress_interval_.count() > 0) loop_.after(progress_interval_, [this] { report_progress(); });
  if (searches_left_ > 0) {
    if constexpr (!C::is_virtual) loop_.hold();  // outside threads (HTTP, workers) post into a real loop
    loop_.run();
    if constexpr (!C::is_virtual) loop_.release();
  }
  const timestamp end = run_now();
  run_result r;
  r.e2e_seconds = to_seconds(ended_.value_or(end));
  r.scheduler = sched_.stats();
  // Device time of this segment, journaled in run_end so that a later resume
  // can report the utilisation of the whole run.
  duration busy{0};
  for (auto b : r.scheduler.device_busy) busy += b;
  const duration capacity = (r.scheduler.until - r.scheduler.since) * static_cast<std::int64_t>(r.scheduler.device_busy.size());
  duration all_busy = busy, all_capacity = capacity;
  const duration idle_queued = r.scheduler.idle_while_queued;
  duration all_idle_queued = idle_queued;
  for (const auto& seg : earlier_) {
    r.segments.push_back({.start_seconds = to_seconds(seg.start), .end_seconds = to_seconds(seg.last), .completed = seg.completed});
    if (seg.completed && seg.device_busy && seg.device_capacity) {
      all_busy += *seg.device_busy;
      all_capacity += *seg.device_capacity;
      if (const auto it = seg.summary.find("idle_while_queued_ns"); it != seg.summary.end() && it->is_number_integer())
        all_idle_queued += duration{it->get<std::int64_t>()};
    } else {
      r.pool_utilization_whole_run = false;
    }
  }
  r.segments.push_back({.start_seconds = to_seconds(resumed_at_), .end_seconds = to_seconds(end), .completed = true});
  if (!r.pool_utilization_whole_run) {
    all_busy = busy;
    all_capacity = capacity;
    all_idle_queued = idle_queued;
  }
  r.pool_utilization = all_capacity > duration{0} ? static_cast<double>(all_busy.count()) / static_cast<double>(all_capacity.count()) : 0;
  r.idle_while_queued_seconds = to_seconds(all_idle_queued);
  double log_sum = 0;
  nlohmann::json usage_by_search = nlohmann::json::array();
  for (auto& s : searches_) {
    usage_by_search.push_back(s->res.tokens);
    r.searches.push_back(s->res);
    r.generated_tokens += s->res.generated_tokens;
    r.profiled_kernels += s->res.profiled;
    r.stream_failures += s->res.stream_failures;
    log_sum += std::log(s->res.best_speedup > 0 ? s->res.best_speedup : 1.0);
  }
  r.best_speedup_geomean = searches_.empty() ? 0 : std::exp(log_sum / static_cast<double>(searches_.size()));
  r.events = loop_.events();
  if (journal_)
    journal_->write_run_end(end, {{"e2e_seconds", r.e2e_seconds},
                                  {"pool_utilization", r.pool_utilization},
                                  {"pool_utilization_whole_run", r.pool_utilization_whole_run},
                                  {"profiled_kernels", r.profiled_kernels},
                                  {"generated_tokens", r.generated_tokens},
                                  {"stream_failures", r.stream_failures},
                                  {"device_busy_ns", busy.count()},
                                  {"device_capacity_ns", capacity.count()},
                                  {"idle_while_queued_seconds", r.idle_while_queued_seconds},
                                  {"idle_while_queued_ns", idle_queued.count()},
                                  {"usage_by_search", std::move(usage_by_search)}});
  if (progress_fn_) progress_fn_(progress());
  return r;
}

template <backend B, evaluator E, clock C>
bool engine<B, E, C>::budget_exhausted(const search_rt& s, std::string& reason) const {
  if (s.round + 1 >= cfg_.budget.max_rounds) {
    reason = "round budget";
    return true;
  }
  if (cfg_.budget.max_tokens > 0 && s.generated >= cfg_.budget.max_tokens) {
    reason = "token budget";
    return true;
  }
  return false;
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::start_round(search_rt& s) {
  ++s.round;
  s.round_open = true;
  s.res.rounds = s.round + 1;
  const policy::search_view view{.for_task = s.t.get(), .round = s.round, .records = s.records, .seed = s.seed, .misses = s.misses};
  auto plans = cfg_.strategy.plan_round(view);
  s.lanes.clear();
  s.pending_main.clear();
  if (journal_) journal_->write_round_start(run_now(), s.index, s.round);
  for (auto& p : plans) {
    lane_rt l;
    l.lane = p.lane;
    l.prompt = cfg_.prompt.build(p.content);
    l.parents = std::move(p.parents);
    l.trig.emplace(cfg_.trigger);
    s.lanes.push_back(std::move(l));
  }
  for (std::size_t i = 0; i < s.lanes.size(); ++i) {
    s.lanes[i].lane = static_cast<int>(i);  // lanes are addressed by position
    waiting_.emplace_back(s.index, static_cast<int>(i));
  }
  if (s.lanes.empty()) maybe_end_round(s);
  pump_waiting_streams();
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::pump_waiting_streams() {
  while (!waiting_.empty() && active_streams_ < max_streams_ && main_streams_ < main_streams_cap_) {
    auto [si, li] = waiting_.front();
    waiting_.pop_front();
    auto& s = *searches_[static_cast<std::size_t>(si)];
    if (s.done || static_cast<std::size_t>(li) >= s.lanes.size()) continue;
    // A lane a round-scope stop ended before it got a slot is never started.
    if (const auto& l = s.lanes[static_cast<std::size_t>(li)]; l.started || l.ended) continue;
    start_lane_stream(s, li);
  }
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::start_lane_stream(search_rt& s, int li) {
  auto& l = s.lanes[static_cast<std::size_t>(li)];
  reasoning_request req{
      .ctx = {.task = s.t->name, .search = s.index, .round = s.round, .lane = l.lane,
              .seed = s.seed ^ (static_cast<std::uint64_t>(s.round) << 20) ^ static_cast<std::uint64_t>(l.lane)},
      .system = cfg_.prompt.system(),
      .prompt = l.prompt,
      .params = cfg_.main_sampling};
  auto id = model_.start_reasoning(req, *this);
  l.started = true;
  l.began = loop_.now();
  if (!id) {
    // Nothing was generated, so nothing is lost: the lane ends with the error journaled.
    l.ended = true;
    stream_failed(s, journal_records::stream_error, {{"search", s.index}, {"round", s.round}, {"lane", l.lane}},
                  id.error().message);
    maybe_end_round(s);
    return;
  }
  l.id = *id;
  journal(journal_records::prompt, {{"search", s.index}, {"round", s.round}, {"lane", l.lane}, {"prompt", l.prompt}});
  const std::uint64_t prompt_hash = fnv1a(l.prompt, fnv1a(req.system));
  l.kv_salt = {static_cast<token_id>(prompt_hash & 0x7fffffff), static_cast<token_id>((prompt_hash >> 32) & 0x7fffffff)};
  owners_[l.id] = stream_owner{.search = s.index, .lane = li, .fork = false};
  ++active_streams_;
  ++main_streams_;
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::count_tokens(search_rt& s, std::uint64_t n) {
  const std::uint64_t before = s.generated;
  s.generated += n;
  s.res.generated_tokens = s.generated;
  const std::uint64_t limit = cfg_.budget.max_tokens;
  if (limit > 0 && before < limit && s.generated >= limit && !s.done)
    // Once, when the budget is crossed. Finishing inside a sink callback would
    // cancel the stream under our feet; defer one event.
    loop_.after(duration{0}, [this, sp = &s] {
      if (!sp->done) finish_search(*sp, "token budget");
    });
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::on_chunk(const stream_chunk& c) {
  auto it = owners_.find(c.id);
  if (it == owners_.end()) return;  // a chunk racing its own cancel: dropped by contract
  auto& s = *searches_[static_cast<std::size_t>(it->second.search)];
  if (it->second.fork) {
    auto& f = forks_.at(c.id);
    if (c.sample >= 0 && static_cast<std::size_t>(c.sample) < f.texts.size()) f.texts[static_cast<std::size_t>(c.sample)] += c.text;
    count_tokens(s, chunk_tokens(c));
    return;
  }
  auto& l = s.lanes[static_cast<std::size_t>(it->second.lane)];
  const std::uint64_t n = chunk_tokens(c);
  count_tokens(s, n);
  if (!c.reasoning) {
    l.answer += c.text;
    return;
  }
  const std::size_t new_from = l.reasoning.size();
  l.reasoning += c.text;
  l.ids.insert(l.ids.end(), c.tokens.begin(), c.tokens.end());
  l.reasoning_tokens += n;
  consider_fork(s, l, new_from);
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::consider_fork(search_rt& s, lane_rt& l, std::size_t new_from) {
  if (s.done || l.ended || l.terminated || !l.trig) return;
  // What a win would stop: this lane, or under a round-scope stop every lane
  // of the round (those still waiting for a slot would never start).
  int stopped = 1, unstarted = 0;
  std::uint64_t stopped_tokens = l.reasoning_tokens;
  if (cfg_.termination_scope == policy::termination_scope::round)
    for (const auto& o : s.lanes) {
      if (&o == &l || o.ended || o.terminated) continue;
      if (!o.started) {
        ++unstarted;
        continue;
      }
      ++stopped;
      stopped_tokens += o.reasoning_tokens;
    }
  const policy::trigger_context ctx{.now = loop_.now(),
                            .idle_validation = sched_.idle(stage::validate),
                            .idle_profiling = sched_.idle(stage::profile),
                            .validation_queue = sched_.queued(stage::validate),
                            .profiling_queue = sched_.queued(stage::profile),
                            .forks_in_flight = l.forks_in_flight,
                            .tokens_since_fork = l.reasoning_tokens - l.last_fork_tokens,
                            .forks_this_round = l.forks_this_round,
                            .barren_forks = l.barren_forks,
                            .sequences = main_streams_ + fork_sequences_,
                            .main_streams = main_streams_,
                            .lanes_waiting = !waiting_.empty(),
                            .expected_tokens = expected_reasoning(s),
                            .win_stops = stopped,
                            .win_stops_tokens = stopped_tokens,
                            .win_drops = unstarted,
                            .fork_sample_tokens = fork_samples_ended_ > 0 ? static_cast<double>(fork_sample_tokens_) /
                                                                                static_cast<double>(fork_samples_ended_)
                                                                          : 0.0,
                            .run_yields = &run_yields_,
                            .search_yields = &s.yields};
  const policy::stream_view view{.text = l.reasoning, .new_from = new_from, .tokens = l.reasoning_tokens};
  auto fire = l.trig->on_chunk(view, ctx);
  if (!fire) return;
  if (active_streams_ >= max_streams_ || (!waiting_.empty() && main_streams_ < main_streams_cap_)) {
    // A late fork is worthless and must never delay a main stream: skip it.
    // Lanes held back only by the slots kept for forks (`fork_slot_share`) do not count.
    ++s.res.forks_skipped;
    journal(journal_records::fork_skipped, {{"search", s.index}, {"round", s.round}, {"lane", l.lane}, {"trigger", fire->trigger},
                             {"prefix_tokens", l.reasoning_tokens}});
    return;
  }
  // The key is built only here, when a fork happens, not on every chunk.
  std::vector<token_id> kv_key(l.kv_salt.begin(), l.kv_salt.end());
  kv_key.insert(kv_key.end(), l.ids.begin(), l.ids.end());
  cfg_.kv.store(s.index, std::span<const token_id>(kv_key));
  fork_request fr{.ctx = {.task = s.t->name, .search = s.index, .round = s.round, .lane = l.lane,
                          .seed = s.seed ^ l.ids.size()},
                  .parent = l.id,
                  .reasoning_prefix = l.ids,
                  .samples = std::max(1, fire->samples),
                  .params = cfg_.fork_sampling,
                  .kv = cfg_.kv.lease(std::span<const token_id>(kv_key))};
  auto id = model_.fork(fr, *this);
  if (!id) {
    stream_failed(s, journal_records::fork_error, {{"search", s.index}, {"round", s.round}, {"lane", l.lane}},
                  id.error().message);
    return;
  }
  ++active_streams_;
  fork_sequences_ += fr.samples;
  ++s.res.forks;
  ++l.forks_this_round;
  ++l.forks_in_flight;
  l.last_fork_tokens = l.reasoning_tokens;
  owners_[*id] = stream_owner{.search = s.index, .lane = l.lane, .fork = true};
  fork_rt f{.search = s.index, .round = s.round, .lane = l.lane, .trigger = fire->trigger,
            .prefix_tokens = l.reasoning_tokens, .texts = std::vector<std::string>(static_cast<std::size_t>(fr.samples)),
            .ended = std::vector<bool>(static_cast<std::size_t>(fr.samples), false), .open = fr.samples,
            .began = loop_.now()};
  forks_.emplace(*id, std::move(f));
  s.forks.insert(*id);
  journal(journal_records::fork, {{"search", s.index}, {"round", s.round}, {"lane", l.lane}, {"stream", *id}, {"trigger", fire->trigger},
                   {"prefix_tokens", l.reasoning_tokens}, {"samples", fr.samples},
                   {"kv_cached_tokens", fr.kv ? fr.kv->cached_tokens : 0}});
  if (timeline_)
    timeline_->instant(track_group(s), fmt::format("lane {}", l.lane),
                       "fork: " + fire->trigger, loop_.now(), {{"prefix_tokens", l.reasoning_tokens}});
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::tick_triggers() {
  for (auto& sp : searches_) {
    if (sp->done) continue;
    for (auto& l : sp->lanes)
      if (l.started && !l.ended && !l.terminated) consider_fork(*sp, l, l.reasoning.size());
  }
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::on_end(const stream_end& e) {
  auto it = owners_.find(e.id);
  if (it == owners_.end()) return;
  const stream_owner own = it->second;
  auto& s = *searches_[static_cast<std::size_t>(own.search)];
  s.res.tokens += e.used;
  if (own.fork) {
    auto fit = forks_.find(e.id);
    auto& f = fit->second;
    const auto k = static_cast<std::size_t>(e.sample);
    if (k < f.ended.size() && !f.ended[k]) {
      f.ended[k] = true;
      --f.open;
      --fork_sequences_;
      fork_sample_tokens_ += e.used.completion_tokens;
      ++fork_samples_ended_;
      if (e.reason == finish_reason::error && f.error.empty()) f.error = e.error.empty() ? "a fork sample ended with an error" : e.error;
      if (e.reason == finish_reason::stop || e.reason == finish_reason::length) {
        provenance p{.search = s.index, .round = f.round, .lane = f.lane, .from = origin::fork, .trigger = f.trigger,
                     .prefix_tokens = f.prefix_tokens, .sample = e.sample, .parents = {}};
        if (f.round == s.round && static_cast<std::size_t>(f.lane) < s.lanes.size())
          p.parents = s.lanes[static_cast<std::size_t>(f.lane)].parents;
        if (add_candidate(s, std::move(p), std::move(f.texts[k]))) ++f.fresh_samples;
      }
    }
    if (f.open == 0) {
      if (!f.error.empty())
        stream_failed(s, journal_records::fork_error, {{"search", s.index}, {"round", f.round}, {"lane", f.lane}, {"stream", e.id}},
                      f.error);
      if (timeline_)
        timeline_->span(track_group(s), fmt::format("lane {} forks", f.lane),
                        "fork: " + f.trigger, f.began, loop_.now(), {{"prefix_tokens", f.prefix_tokens}});
      const int samples = static_cast<int>(f.ended.size());
      s.yields.add_fork(f.trigger, samples, f.fresh_samples);
      run_yields_.add_fork(f.trigger, samples, f.fresh_samples);
      if (f.round == s.round && static_cast<std::size_t>(f.lane) < s.lanes.size()) {
        auto& fl = s.lanes[static_cast<std::size_t>(f.lane)];
        --fl.forks_in_flight;
        fl.barren_forks = f.fresh_samples > 0 ? 0 : fl.barren_forks + 1;
      }
      s.forks.erase(e.id);
      forks_.erase(fit);
      owners_.erase(it);
      --active_streams_;
      pump_waiting_streams();
    }
    return;
  }
  auto& l = s.lanes[static_cast<std::size_t>(own.lane)];
  owners_.erase(it);
  --active_streams_;
  --main_streams_;
  l.ended = true;
  if (!l.terminated && e.reason == finish_reason::stop) {
    // A stream that ran to its end: how long this search's reasoning runs.
    s.complete_tokens += l.reasoning_tokens;
    ++s.complete_streams;
    complete_tokens_ += l.reasoning_tokens;
    ++complete_streams_;
  }
  if (timeline_)
    timeline_->span(track_group(s), fmt::format("lane {}", l.lane),
                    fmt::format("round {} reasoning", s.round), l.began, loop_.now(),
                    {{"tokens", l.reasoning_tokens}, {"terminated", l.terminated}});
  if (e.reason == finish_reason::error)
    stream_failed(s, journal_records::stream_error, {{"search", s.index}, {"round", s.round}, {"lane", l.lane}}, e.error);
  if (!l.terminated && (e.reason == finish_reason::stop || e.reason == finish_reason::length)) {
    provenance p{.search = s.index, .round = s.round, .lane = l.lane, .from = origin::main, .trigger = {},
                 .prefix_tokens = l.reasoning_tokens, .sample = 0, .parents = l.parents};
    // The final answer is the candidate; a model that put its kernel only in the
    // reasoning (answer truncated) still gets its last complete kernel evaluated.
    std::string text = l.answer.empty() ? l.reasoning : l.answer;
    add_candidate(s, std::move(p), std::move(text));
  }
  pump_waiting_streams();
  maybe_end_round(s);
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::terminate_lane(search_rt& s, lane_rt& l, candidate_id because) {
  if (l.ended || l.terminated) return;
  l.terminated = true;
  ++s.res.terminations;
  journal(journal_records::terminated, {{"search", s.index}, {"round", s.round}, {"lane", l.lane}, {"by", because},
                         {"reasoning_tokens", l.reasoning_tokens}});
  if (timeline_)
    timeline_->instant(track_group(s), fmt::format("lane {}", l.lane),
                       fmt::format("early stop by #{}", because), loop_.now());
  if (l.started) {
    model_.cancel(l.id);  // on_end(cancelled) follows and ends the lane
  } else {
    l.ended = true;
    maybe_end_round(s);
  }
}

// ---- candidates ---------------------------------------------------------------

template <backend B, evaluator E, clock C>
bool engine<B, E, C>::add_candidate(search_rt& s, provenance prov, std::string text) {
  extract_options opt;
  opt.allow_inline_code = cfg_.extract_inline_code && prov.from == origin::fork;
  auto ex = extract_candidate(text, opt);
  if (!ex) {
    ++s.res.extract_failures;
    extract_miss miss{.prov = std::move(prov), .reason = std::string(to_string(ex.error().reason)), .message = ex.error().message,
                      .excerpt = detail::tail_excerpt(text, 600)};
    if (journal_) journal_->write_extract_failed(run_now(), miss);
    s.misses.push_back(std::move(miss));
    return false;
  }
  auto c = std::make_shared<candidate>();
  c->id = next_id_++;
  c->task = s.t->name;
  c->prov = std::move(prov);
  c->source = std::move(ex->source);
  c->plan = std::move(ex->plan);
  c->created = run_now();
  ++s.res.candidates;
  if (c->prov.from == origin::fork) ++s.res.from_forks;
  if (c->prov.from == origin::main && c->prov.round == s.round) s.pending_main.insert(c->id);
  if (journal_) journal_->write_candidate(run_now(), *c);
  const std::size_t idx = s.records.size();
  s.records.push_back(candidate_record{.cand = c, .eval = std::nullopt, .cancelled = false, .reused = false});
  s.staging.emplace_back();

  ++s.in_flight;
  // A copy of a kernel judged before (in this run or, journaled, before a kill)
  // gets that verdict; one of a kernel in flight waits for it (kernel_dedup.hpp).
  const auto a = dedup_.admit(c->content_hash(), {s.index, idx});
  if (a.action == dedup_action::reuse) {
    evaluation e = *a.verdict;
    e.id = c->id;
    loop_.after(duration{0}, [this, sp = &s, idx, e] { finalize(*sp, idx, e, true); });
  }
  if (a.action != dedup_action::evaluate) return false;
  enqueue_stage(s, idx, stage::compile);
  return a.new_kernel;
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::settle_duplicates(const search_rt& s, std::size_t idx) {
  const auto& r = s.records[idx];
  const auto h = r.cand->content_hash();
  const bool judged = r.eval.has_value();
  for (const auto& [si, ri] : dedup_.settle(h, {s.index, idx}, r.eval)) {
    auto& ws = *searches_[static_cast<std::size_t>(si)];
    if (judged) {
      evaluation e = *r.eval;
      e.id = ws.records[ri].cand->id;
      loop_.after(duration{0}, [this, sp = &ws, ri, e] { finalize(*sp, ri, e, true); });
      continue;
    }
    // The evaluated copy was dropped as stale. A copy still live is admitted again
    // (the first is evaluated, the others wait for it); one whose round is over goes too.
    const auto& w = ws.records[ri];
    const bool live = !ws.done && ((ws.round_open && w.cand->prov.round == ws.round) || ws.pending_main.contains(w.cand->id));
    if (!live)
      loop_.after(duration{0}, [this, sp = &ws, ri] { cancelled(*sp, ri, stage::compile); });
    else if (dedup_.admit(h, {si, ri}).action == dedup_action::evaluate)
      enqueue_stage(ws, ri, stage::compile);
  }
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::enqueue_stage(search_rt& s, std::size_t idx, stage st) {
  const auto& r = s.records[idx];
  sched_.enqueue(st, r.cand, s.t, group_of(s.index, r.cand->prov.round),
                 [this, si = s.index, idx](eval_outcome o) { on_stage_done(si, idx, std::move(o)); });
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::on_stage_done(int si, std::size_t idx, eval_outcome o) {
  auto& s = *searches_[static_cast<std::size_t>(si)];
  auto& r = s.records[idx];
  if (o.cancelled) {
    cancelled(s, idx, o.kind);
    return;
  }
  if (o.unjudged) {
    // No verdict the evaluator did not obtain: the candidate is dropped, with the reason.
    r.not_judged = o.result.summary.empty() ? "the evaluator could not judge it" : o.result.summary;
    ++s.res.unjudged;
    cancelled(s, idx, o.kind);
    return;
  }
  if (journal_) journal_->write_stage(run_now(), s.index, *r.cand, o);
  if (o.kind == stage::compile) {
    if (o.result.kind != verdict_kind::ok) {
      finalize(s, idx, evaluation{.id = r.cand->id, .result = o.result, .compile = o.compile, .timing = std::nullopt}, false);
      return;
    }
    ++s.res.compiled_ok;
    s.staging[idx] = evaluation{.id = r.cand->id, .result = o.result, .compile = o.compile, .timing = std::nullopt};
    enqueue_stage(s, idx, stage::validate);
    return;
  }
  evaluation e = s.staging[idx];
  e.id = r.cand->id;
  e.result = o.result;
  if (o.kind == stage::validate) {
    if (o.result.kind != verdict_kind::ok) {
      finalize(s, idx, std::move(e), false);
      return;
    }
    ++s.res.validated_ok;
    s.staging[idx] = std::move(e);
    enqueue_stage(s, idx, stage::profile);
    return;
  }
  e.timing = o.timing;
  finalize(s, idx, std::move(e), false);
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::cancelled(search_rt& s, std::size_t idx, stage st) {
  auto& r = s.records[idx];
  r.cancelled = true;
  ++s.res.cancelled;
  --s.in_flight;
  settle_duplicates(s, idx);
  if (journal_)
    journal_->write_cancelled(run_now(), s.index, r.cand->id, st,
                              !r.not_judged.empty() ? "not judged: " + r.not_judged
                              : s.done              ? "search ended"
                                                    : "stale: its round ended");
  if (s.pending_main.erase(r.cand->id) > 0) maybe_end_round(s);
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::finalize(search_rt& s, std::size_t idx, evaluation e, bool reused) {
  auto& r = s.records[idx];
  r.eval = std::move(e);
  r.reused = reused;
  --s.in_flight;
  if (!reused) settle_duplicates(s, idx);
  if (reused) {
    ++s.res.reused;
    if (journal_) journal_->write_reused(run_now(), s.index, *r.cand, *r.eval);
  }
  account_final(s, r);

  if (r.profiled() && !reused) {
    const double sp = r.speedup();
    // The termination policy sees the history *before* this kernel.
    if (r.cand->prov.from == origin::fork) {
      const bool wins = cfg_.termination.should_stop(policy::history_view{.speedups = s.history}, sp);
      if (wins) {
        s.yields.add_win(r.cand->prov.trigger);
        run_yields_.add_win(r.cand->prov.trigger);
      }
      if (wins && r.cand->prov.round == s.round && !s.done) {
        if (cfg_.termination_scope == policy::termination_scope::round) {
          for (auto& l : s.lanes) terminate_lane(s, l, r.cand->id);
        } else {
          terminate_lane(s, s.lanes[static_cast<std::size_t>(r.cand->prov.lane)], r.cand->id);
        }
      }
    }
    s.history.push_back(sp);
    if (sp > s.res.best_speedup) {
      s.res.best_speedup = sp;
      s.res.best = r.cand->id;
    }
    if (cfg_.budget.target_speedup > 0 && sp >= cfg_.budget.target_speedup && !s.res.seconds_to_target) {
      s.res.seconds_to_target = to_seconds(run_now());
      journal(journal_records::target_reached, {{"search", s.index}, {"candidate", r.cand->id}, {"speedup", sp}});
      if (cfg_.budget.stop_at_target) {
        finish_search(s, "target reached");
        return;
      }
    }
  }
  if (s.pending_main.erase(r.cand->id) > 0) maybe_end_round(s);
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::account_final(search_rt& s, const candidate_record& r) {
  ++s.res.verdicts[std::string(to_string(r.eval->result.kind))];
  if (r.profiled() && !r.reused) ++s.res.profiled;
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::maybe_end_round(search_rt& s) {
  if (s.done) return;
  for (const auto& l : s.lanes)
    if (!l.ended) return;
  if (!s.pending_main.empty()) return;
  bool terminated = std::any_of(s.lanes.begin(), s.lanes.end(), [](const lane_rt& l) { return l.terminated; });
  // End the round from a fresh event, never from inside a sink or scheduler callback.
  const int round = s.round;
  loop_.after(duration{0}, [this, sp = &s, round, terminated] {
    if (!sp->done && sp->round == round) end_round(*sp, terminated ? "terminated" : "answer");
  });
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::end_round(search_rt& s, std::string_view reason) {
  // Stale speculative work of this round: forks still generating, queued jobs.
  s.round_open = false;
  for (auto id : std::vector<stream_id>(s.forks.begin(), s.forks.end())) model_.cancel(id);
  sched_.cancel_group(group_of(s.index, s.round), cfg_.cancel_running_at_round_end);
  cfg_.kv.drop(s.index);
  if (journal_) journal_->write_round_end(run_now(), s.index, s.round, reason, s.generated, s.res.tokens);
  std::string why;
  if (budget_exhausted(s, why)) {
    finish_search(s, why);
    return;
  }
  start_round(s);
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::finish_search(search_rt& s, std::string reason) {
  if (s.done) return;
  s.done = true;
  s.round_open = false;
  for (auto& l : s.lanes)
    if (l.started && !l.ended) {
      l.terminated = true;
      model_.cancel(l.id);
    }
  for (auto id : std::vector<stream_id>(s.forks.begin(), s.forks.end())) model_.cancel(id);
  // From round 0: a resumed run re-queues candidates of rounds that ended before the kill.
  for (int r = 0; r <= s.round; ++r) sched_.cancel_group(group_of(s.index, r), true);
  // Copies waiting for another search's evaluation of the same kernel go too.
  for (const auto& copy : dedup_.forget([&](const auto& c) { return c.first == s.index; }))
    cancelled(s, copy.second, stage::compile);
  cfg_.kv.drop(s.index);
  if (s.deadline) loop_.cancel(s.deadline);
  s.res.search = s.index;
  s.res.task = s.t->name;
  s.res.end_reason = reason;
  s.res.end_seconds = to_seconds(run_now());
  if (journal_)
    journal_->write_search_end(run_now(), s.index, reason, s.res.best_speedup, s.res.best, s.res.rounds, s.generated, s.res.tokens);
  ended_ = std::max(ended_.value_or(timestamp{0}), run_now());
  if (--searches_left_ == 0) {
    // Let the cancellations above deliver their ends, then stop.
    loop_.after(duration{0}, [this] { loop_.stop(); });
  }
}

template <backend B, evaluator E, clock C>
std::vector<search_progress> engine<B, E, C>::progress() const {
  std::vector<search_progress> out;
  for (const auto& s : searches_) {
    int streams = static_cast<int>(s->forks.size());
    for (const auto& l : s->lanes) streams += (l.started && !l.ended) ? 1 : 0;
    out.push_back({.search = s->index, .task = s->t->name, .round = std::max(0, s->round), .best_speedup = s->res.best_speedup,
                   .in_flight = s->in_flight, .streams = streams, .tokens = s->generated, .done = s->done});
  }
  return out;
}

template <backend B, evaluator E, clock C>
void engine<B, E, C>::report_progress() {
  progress_fn_(progress());
  if (searches_left_ > 0) loop_.after(progress_interval_, [this] { report_progress(); });
}

template <backend B, evaluator E, clock C>
run_identity engine<B, E, C>::identity() const {
  std::string corpus = corpus_id_;
  if (corpus.empty()) {
    nlohmann::json tasks = nlohmann::json::array();
    for (const auto& s : searches_) tasks.push_back(to_json(*s->t));
    corpus = fingerprint(detail::dump_json(tasks));
  }
  return run_identity{.corpus = std::move(corpus), .seed = cfg_.seed, .config = to_json(cfg_)};
}

template <backend B, evaluator E, clock C>
expected<void, error> engine<B, E, C>::resume(const journal_state& st) {
  // Everything is checked before anything changes.
  if (!st.identity && st.records > 0)
    return unexpected(error{"the journal has no run_start record, so the run it belongs to is unknown; start a new run in a new journal"});
  if (st.identity) {
    if (auto diff = st.identity->differences(identity()); !diff.empty()) {
      std::string what;
      for (std::size_t i = 0; i < std::min<std::size_t>(diff.size(), 6); ++i) what += (i ? "; " : "") + diff[i];
      if (diff.size() > 6) what += fmt::format("; and {} more", diff.size() - 6);
      return unexpected(error{fmt::format(
          "the journal is of another run (run {}; this run would be {}), which differs in (the journal's value first): {}. "
          "Resume with the corpus, configuration and seed the run started with, or start a new run in a new journal",
          st.identity->run_id(), identity().run_id(), what)});
    }
  }
  for (const auto& [index, js] : st.searches)
    if (index < 0 || static_cast<std::size_t>(index) >= searches_.size() || searches_[static_cast<std::size_t>(index)]->t->name != js.task)
      return unexpected(error{fmt::format(
          "the journal's search {} is task '{}', which this run does not have at that index", index, js.task)});
  for (const auto& [id, jc] : st.candidates)
    if (jc.cand.prov.search < 0 || static_cast<std::size_t>(jc.cand.prov.search) >= searches_.size())
      return unexpected(error{fmt::format("candidate {} belongs to search {}, which this run does not have", id, jc.cand.prov.search)});

  // The run continues where the journal stops: its run time, its segments.
  resumed_at_ = st.last_t;
  earlier_ = st.segments;
  next_id_ = std::max(next_id_, st.next_candidate_id);
  for (const auto& [h, e] : st.evaluations_by_hash) dedup_.remember(h, e);
  for (const auto& [index, js] : st.searches) {
    auto& s = *searches_[static_cast<std::size_t>(index)];
    s.first_round = js.rounds_completed;  // a round the run died in starts again
    s.generated = js.generated_tokens;
    s.res.generated_tokens = s.generated;
    s.res.tokens = js.tokens;
    s.res.rounds = js.rounds_completed;
    s.res.extract_failures = js.extract_failures;
    s.misses = js.misses;
    s.res.compiled_ok = js.compiled_ok;
    s.res.validated_ok = js.validated_ok;
    s.res.forks = js.forks;
    s.res.forks_skipped = js.forks_skipped;
    s.res.terminations = js.terminations;
    s.res.stream_failures = js.stream_failures;
    s.res.first_stream_error = js.first_stream_error;
    if (js.target_reached_at) s.res.seconds_to_target = to_seconds(*js.target_reached_at);
    if (js.ended) {
      s.done = true;
      s.res.search = index;
      s.res.task = js.task;
      s.res.end_reason = js.end_reason;
      if (js.ended_at) {
        s.res.end_seconds = to_seconds(*js.ended_at);
        ended_ = std::max(ended_.value_or(timestamp{0}), *js.ended_at);
      }
    }
  }
  // Candidates in id order = creation order: records keep their original order,
  // and the first pending copy of a kernel is the one evaluated, as in the first run.
  for (const auto& [id, jc] : st.candidates) {
    const int si = jc.cand.prov.search;
    auto& s = *searches_[static_cast<std::size_t>(si)];
    const std::size_t idx = s.records.size();
    s.records.push_back(candidate_record{.cand = std::make_shared<const candidate>(jc.cand), .eval = std::nullopt,
                                         .cancelled = jc.status == candidate_status::cancelled, .reused = jc.reused});
    s.staging.emplace_back();
    ++s.res.candidates;
    if (jc.cand.prov.from == origin::fork) ++s.res.from_forks;
    auto& r = s.records.back();
    const auto h = r.cand->content_hash();
    if (jc.status == candidate_status::evaluated && jc.result) {
      dedup_.restore(h, {si, idx}, *jc.result);
      r.eval = *jc.result;
      if (r.reused) ++s.res.reused;
      account_final(s, r);
      if (r.profiled() && !r.reused) {
        s.history.push_back(r.speedup());
        if (r.speedup() > s.res.best_speedup) {
          s.res.best_speedup = r.speedup();
          s.res.best = id;
        }
      }
      continue;
    }
    // The stage a pending candidate continues at: the one after the last that finished.
    const stage next = !jc.last_stage ? stage::compile : jc.last_stage == stage::compile ? stage::validate : stage::profile;
    if (jc.status == candidate_status::pending && s.done) {
      // Its job was dropped when the search ended; the kill came before the cancel record.
      r.cancelled = true;
      dropped_on_resume_.push_back({.search = si, .record = idx, .at = next});
    }
    if (r.cancelled) {
      ++s.res.cancelled;
      if (constexpr std::string_view why = "not judged: "; jc.cancel_reason.starts_with(why)) {
        r.not_judged = jc.cancel_reason.substr(why.size());
        ++s.res.unjudged;
      }
      dedup_.restore(h, {si, idx}, std::nullopt);
      continue;
    }
    ++s.in_flight;
    // A copy that waited for an identical kernel's verdict gets it from the journal;
    // one whose first copy is re-queued waits for it again, as before the kill.
    const auto a = dedup_.admit(h, {si, idx});
    if (a.action == dedup_action::reuse) {
      evaluation e = *a.verdict;
      e.id = id;
      loop_.after(duration{0}, [this, sp = &s, idx, e] { finalize(*sp, idx, e, true); });
    }
    if (a.action != dedup_action::evaluate) continue;
    // Pending when the run died: continue where it stopped.
    if (jc.result) s.staging[idx] = *jc.result;
    enqueue_stage(s, idx, next);
  }
  return {};
}

SPECGEN_END_NAMESPACE
