#pragma once
/// The run journal: an append-only JSONL file with one record per line, so a
/// killed run resumes without losing an evaluated candidate.
///
/// Every record is a JSON object whose first keys are `"type"`, `"t_ns"` (the
/// event loop's time in integral nanoseconds, exact in virtual time) and `"t"`
/// (the same in seconds, for people). docs/journal.md lists the record types,
/// their fields and the resume semantics.
///
/// @code
///   specgen::journal_writer j("run.jsonl", /*append=*/true);
///   j.write_run_start(loop.now(), {.corpus = corpus_fingerprint, .seed = seed, .config = config_json});
///   j.write_candidate(loop.now(), cand);
///   j.write_stage(loop.now(), cand.prov.search, cand, outcome);   // per stage result
///
///   auto state = specgen::load_journal("run.jsonl");      // after a kill
///   if (!state) return fail(state.error().message);
///   for (auto id : state->ids_with(specgen::candidate_status::pending)) requeue(state->candidates.at(id));
/// @endcode
#include <specgen/backend.hpp>
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/files.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/evaluator.hpp>
#include <specgen/expected.hpp>
#include <specgen/json.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// The `"type"` of each record the engine writes; the writer and the reader
/// both use these, so the two cannot drift apart.
namespace journal_records {
inline constexpr std::string_view run_start = "run_start";
inline constexpr std::string_view search_start = "search_start";
inline constexpr std::string_view round_start = "round_start";
inline constexpr std::string_view round_end = "round_end";
inline constexpr std::string_view candidate = "candidate";
inline constexpr std::string_view extract_failed = "extract_failed";
inline constexpr std::string_view evaluation = "evaluation";
inline constexpr std::string_view cancelled = "cancelled";
inline constexpr std::string_view search_end = "search_end";
inline constexpr std::string_view run_end = "run_end";
// The engine's own records: not needed to re-queue work, but counted so that a
// resumed run reports the whole run.
inline constexpr std::string_view fork = "fork";
inline constexpr std::string_view fork_skipped = "fork_skipped";
inline constexpr std::string_view fork_error = "fork_error";
inline constexpr std::string_view terminated = "terminated";
inline constexpr std::string_view target_reached = "target_reached";
inline constexpr std::string_view stream_error = "stream_error";
/// The prompt a lane's reasoning stream was started with (for reading, not for resuming).
inline constexpr std::string_view prompt = "prompt";
/// Something that happened to the evaluator during the run, as the program
/// driving it reports it (`event`: "rank_lost" when an MPI worker rank was
/// taken for dead): for reading, not for resuming.
inline constexpr std::string_view evaluator_event = "evaluator_event";
}  // namespace journal_records

/// The journal format this library writes and reads. Format 1 (before run
/// identities) restarted the clock at every resume, so its times cannot be
/// folded into one run; a journal of another format is refused.
inline constexpr int journal_format = 2;

/// 16 hex digits of FNV-1a over `bytes`: the journal's fingerprints.
inline std::string fingerprint(std::string_view bytes) { return fmt::format("{:016x}", fnv1a(bytes)); }

/// Whether a stage result ends a candidate's pipeline: any failure does, and
/// so does a profile. Decides when a journaled candidate stops being pending.
constexpr bool ends_pipeline(stage s, verdict_kind v) noexcept {
  return v != verdict_kind::ok || s == stage::profile;
}

namespace detail {

struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

inline std::string library_version() { return SPECGEN_VERSION_STRING; }

/// Model text may hold invalid UTF-8 (a multi-byte character cut by a
/// stream); such bytes become U+FFFD rather than failing the run.
inline std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Bytes of `path` up to and including its last newline: the records that
/// were written completely. What follows is a torn record.
inline std::uintmax_t committed_size(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  std::streamoff end = in.tellg();
  char block[4096];
  while (end > 0) {
    const std::streamoff begin = std::max<std::streamoff>(0, end - static_cast<std::streamoff>(sizeof block));
    in.seekg(begin);
    in.read(block, end - begin);
    for (std::streamoff i = end - begin; i > 0; --i)
      if (block[i - 1] == '\n') return static_cast<std::uintmax_t>(begin + i);
    end = begin;
  }
  return 0;
}

/// A record that parses but contradicts the records before it.
struct journal_inconsistency : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An intact record this reader must not fold: another format, another run.
/// Its message says what to do, so it is not reported as damage.
struct journal_mismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Calls `fn(line_number, record)` for every complete record of a journal, in
/// order. An unterminated last line is torn (the run was killed while writing
/// it): it is skipped and its line number returned. Any other line that is not
/// a record, or that `fn` rejects, is an error naming the file and the line
/// (`error::file`, `error::line`) and, for a value of the wrong type, its JSON
/// pointer in the record (`error::where`): `fn` throws `json_read_error`
/// (json_fields.hpp) for that, `journal_inconsistency` for a record that
/// contradicts earlier ones and `journal_mismatch` for one of another run.
template <class Fn>
expected<std::optional<std::size_t>, error> for_each_record(const std::filesystem::path& path, Fn&& fn) {
  // A regular file only (a FIFO would block, a device never end), lines of at most 64 MiB.
  auto in = line_reader::open(path, file_kinds::journal);
  if (!in) return unexpected(in.error());
  std::string line;
  std::size_t number = 0;
  for (;;) {
    const auto got = in->next(line);
    if (!got) return unexpected(got.error());
    if (*got == line_reader::end) break;
    ++number;
    // Only the last line can end without a newline: the run was killed while writing it.
    if (*got == line_reader::unterminated) return std::optional<std::size_t>(number);
    error damage{.message = {}, .file = path.string(), .line = static_cast<int>(std::min<std::size_t>(number, INT_MAX))};
    try {
      nlohmann::json record;
      try {
        record = nlohmann::json::parse(line);
      } catch (const nlohmann::json::parse_error& e) {
        throw journal_inconsistency("not valid JSON: " + without_exception_tag(e.what()));
      }
      if (!record.is_object()) throw json_read_error({}, wrong_type_problem("a record (a JSON object)", record));
      (void)required_key<std::string>(record, "type");
      (void)required_key<std::int64_t>(record, "t_ns");
      fn(number, record);
      continue;
    } catch (const journal_mismatch& e) {
      damage.message = e.what();
      return unexpected(std::move(damage));
    } catch (const json_read_error& e) {
      damage = e.at(damage.file, number);
    } catch (const journal_inconsistency& e) {
      damage.message = e.what();
    } catch (const nlohmann::json::exception& e) {
      damage.message = without_exception_tag(e.what());
    }
    damage.message += fmt::format(
        ". The journal is damaged before its end, so resuming from it could lose or invent work: restore it from "
        "a copy, or keep only the records before this line (head -n {} {} > fixed.jsonl) and accept losing the "
        "ones after it",
        number - 1, path.string());
    return unexpected(std::move(damage));
  }
  return std::optional<std::size_t>{};
}

}  // namespace detail

/// What makes a run the run it is: the journal format, what it searches, its
/// configuration and its seed. Every `run_start` of a journal carries it, and a
/// resumed run must have the identity of the run that wrote the journal.
///
/// @code
///   specgen::run_identity here{.corpus = specgen::fingerprint(tasks_json), .seed = 7, .config = config_json};
///   if (auto diff = journaled.differences(here); !diff.empty()) refuse(diff);
/// @endcode
struct run_identity {
  int format = journal_format;
  /// A fingerprint of what the run searches: the tasks, and whatever else
  /// decides the run's inputs (replay traces, a cost table).
  std::string corpus{};
  std::uint64_t seed = 0;
  nlohmann::json config = nlohmann::json::object();  ///< what reproduces the engine's configuration

  /// The run's id: a fingerprint of the fields above. It is derived, not drawn
  /// at random, so that a run in virtual time writes a byte-identical journal;
  /// equal ids mean the same format, corpus, configuration and seed.
  [[nodiscard]] std::string run_id() const {
    return fingerprint(detail::dump_json({{"format", format}, {"corpus", corpus}, {"seed", seed}, {"config", config}}));
  }

  /// What differs from `other`, one phrase per difference naming this side's
  /// value first (the configuration by JSON pointer); empty when they match.
  [[nodiscard]] std::vector<std::string> differences(const run_identity& other) const {
    std::vector<std::string> out;
    if (format != other.format) out.push_back(fmt::format("journal format {} vs {}", format, other.format));
    if (corpus != other.corpus)
      out.push_back(fmt::format("corpus {} vs {} (other tasks, traces or cost table)", corpus, other.corpus));
    if (seed != other.seed) out.push_back(fmt::format("seed {} vs {}", seed, other.seed));
    std::vector<std::string> seen;
    for (const auto& op : nlohmann::json::diff(config, other.config)) {
      nlohmann::json::json_pointer at(op.at("path").get<std::string>());
      if (!at.empty() && at.back() == "-") at = at.parent_pointer();  // elements added to an array: name the array
      if (at.to_string() == "/seed" || std::find(seen.begin(), seen.end(), at.to_string()) != seen.end()) continue;
      seen.push_back(at.to_string());
      auto side = [&](const nlohmann::json& j) {
        if (!j.contains(at)) return std::string("(none)");
        auto text = detail::dump_json(j.at(at));
        return text.size() <= 40 ? text : text.substr(0, 37) + "...";  // a policy's whole configuration says little
      };
      out.push_back(fmt::format("config {} {} vs {}", at.to_string(), side(config), side(other.config)));
    }
    return out;
  }
  friend bool operator==(const run_identity&, const run_identity&) = default;
};

/// Appends records to a journal file, one JSON object per line.
///
/// Each record is flushed to the operating system as soon as it is written:
/// the point of the journal is that a run killed at any moment (SIGKILL, OOM,
/// a lost session) leaves every record it wrote, plus at most one torn last
/// line. `fflush` is enough for that; surviving power loss would need an
/// `fsync` per record, which costs milliseconds, so it is not done.
///
/// Not thread-safe: the engine writes from its loop thread. A failed write
/// throws `std::system_error` (a full disk, say): the journal's promise is
/// broken and the run should stop, to be resumed once the cause is fixed.
///
/// Movable, not copyable: it owns the open file.
///
/// @code
///   specgen::journal_writer j(dir / "run.jsonl", /*append=*/false);
///   j.write_round_start(loop.now(), /*search=*/0, /*round=*/3);
///   j.write("trigger_fired", loop.now(), {{"search", 0}, {"trigger", "fence"}});  // a custom record
/// @endcode
class journal_writer {
 public:
  /// Opens `path`, creating it if needed. With `append`, records go after the
  /// existing ones and a torn last line left by a killed run is cut off
  /// first (it would otherwise fuse with the next record into a corrupt
  /// line); without, the file is emptied. Throws `std::system_error` when the
  /// file cannot be opened.
  explicit journal_writer(std::filesystem::path path, bool append) : path_(std::move(path)) {
    if (append) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(path_, ec);
      if (!ec && size > 0) {
        const auto keep = detail::committed_size(path_);
        if (keep < size) {
          std::filesystem::resize_file(path_, keep);
          dropped_torn_bytes_ = size - keep;
        }
      }
    }
    file_.reset(std::fopen(path_.c_str(), append ? "ab" : "wb"));
    if (!file_) throw std::system_error(errno, std::generic_category(), "cannot open journal " + path_.string());
  }

  /// Writes one record: `type`, the time `t`, then the members of `body` (an
  /// object, or null for none). `body` must not use the keys `type`, `t_ns`
  /// or `t` (std::invalid_argument: a programming error).
  void write(std::string_view type, timestamp t, const nlohmann::json& body = nullptr) {
    std::string line = fmt::format(R"({{"type":{},"t_ns":{},"t":{})", detail::dump_json(type), t.count(),
                                   detail::dump_json(to_seconds(t)));
    if (!body.is_null()) {
      if (!body.is_object()) throw std::invalid_argument("journal record body must be a JSON object");
      for (const auto& [key, value] : body.items()) {
        if (key == "type" || key == "t_ns" || key == "t")
          throw std::invalid_argument(fmt::format("journal record body may not set the reserved key \"{}\"", key));
        line += ',';
        line += detail::dump_json(key);
        line += ':';
        line += detail::dump_json(value);
      }
    }
    line += "}\n";
    // One fwrite per record, so a kill leaves at most this record torn.
    if (std::fwrite(line.data(), 1, line.size(), file_.get()) != line.size() || std::fflush(file_.get()) != 0)
      throw std::system_error(errno, std::generic_category(), "cannot write journal " + path_.string());
    ++records_;
  }

  /// A run begins, or its `segment`-th resumption (0: the first start). Every
  /// run_start of one journal has the same identity.
  void write_run_start(timestamp t, const run_identity& id, int segment = 0) {
    write(journal_records::run_start, t,
          {{"format", id.format},
           {"run_id", id.run_id()},
           {"corpus", id.corpus},
           {"seed", id.seed},
           {"config", id.config},
           {"segment", segment},
           {"version", detail::library_version()}});
  }
  void write_search_start(timestamp t, int search, std::string_view task) {
    write(journal_records::search_start, t, {{"search", search}, {"task", task}});
  }
  void write_round_start(timestamp t, int search, int round) {
    write(journal_records::round_start, t, {{"search", search}, {"round", round}});
  }
  /// `reason`: why the round ended ("answer", "terminated", ...);
  /// `generated_tokens` and `used`: the search's totals so far, so a resumed
  /// run keeps its token budget and reports the whole run's usage.
  void write_round_end(timestamp t, int search, int round, std::string_view reason,
                       std::uint64_t generated_tokens, const usage& used) {
    write(journal_records::round_end, t,
          {{"search", search},
           {"round", round},
           {"reason", reason},
           {"generated_tokens", generated_tokens},
           {"usage", used}});
  }
  /// Written when a candidate is extracted, before any of its stage results.
  void write_candidate(timestamp t, const candidate& c) {
    write(journal_records::candidate, t, {{"candidate", c}});
  }
  /// Model output from which no candidate could be extracted.
  void write_extract_failed(timestamp t, const extract_miss& m) {
    const provenance& where = m.prov;
    write(journal_records::extract_failed, t,
          {{"search", where.search},
           {"round", where.round},
           {"lane", where.lane},
           {"origin", where.from},
           {"trigger", where.trigger},
           {"prefix_tokens", where.prefix_tokens},
           {"sample", where.sample},
           {"reason", m.reason},
           {"message", m.message},
           {"excerpt", m.excerpt}});
  }
  /// One stage result (compile, validate or profile) of candidate `c`, as
  /// the evaluator reported it. A cancelled outcome is not a result: use
  /// `write_cancelled` (std::invalid_argument otherwise).
  void write_stage(timestamp t, int search, const candidate& c, const eval_outcome& o) {
    if (o.cancelled)
      throw std::invalid_argument(
          fmt::format("journal: the cancelled {} job of candidate {} is not a stage result; use write_cancelled",
                      to_string(o.kind), c.id));
    nlohmann::json body{{"search", search},
                        {"candidate", c.id},
                        {"stage", o.kind},
                        {"result", o.result},
                        {"busy_ns", o.busy.count()}};
    if (o.kind == stage::compile) body["compile"] = o.compile;
    else if (o.device >= 0) body["device"] = o.device;
    if (o.timing) body["timing"] = *o.timing;
    write(journal_records::evaluation, t, body);
  }
  /// Candidate `c` was answered with the earlier evaluation `e` of an
  /// identical kernel instead of being evaluated.
  void write_reused(timestamp t, int search, const candidate& c, const evaluation& e) {
    write(journal_records::evaluation, t,
          {{"search", search}, {"candidate", c.id}, {"reused", true}, {"evaluation", e}});
  }
  /// A queued or running job of candidate `id` was dropped at stage `s`.
  void write_cancelled(timestamp t, int search, candidate_id id, stage s, std::string_view why) {
    write(journal_records::cancelled, t, {{"search", search}, {"candidate", id}, {"stage", s}, {"why", why}});
  }
  /// `best`: the id of the fastest correct kernel (0 when none);
  /// `generated_tokens` and `used`: the search's totals.
  void write_search_end(timestamp t, int search, std::string_view reason, double best_speedup, candidate_id best,
                        int rounds, std::uint64_t generated_tokens, const usage& used) {
    write(journal_records::search_end, t,
          {{"search", search},
           {"reason", reason},
           {"best_speedup", detail::number(best_speedup)},
           {"best", best},
           {"rounds", rounds},
           {"generated_tokens", generated_tokens},
           {"usage", used}});
  }
  /// `summary` (an object) becomes the record's fields.
  void write_run_end(timestamp t, const nlohmann::json& summary = nlohmann::json::object()) {
    write(journal_records::run_end, t, summary);
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Records written by this writer.
  [[nodiscard]] std::uint64_t records() const noexcept { return records_; }
  /// Bytes of a torn last line cut off when opening in append mode.
  [[nodiscard]] std::uintmax_t dropped_torn_bytes() const noexcept { return dropped_torn_bytes_; }

 private:
  std::filesystem::path path_;
  std::unique_ptr<std::FILE, detail::file_closer> file_;
  std::uint64_t records_ = 0;
  std::uintmax_t dropped_torn_bytes_ = 0;
};

// ---- reading ---------------------------------------------------------------------

enum class candidate_status : std::uint8_t {
  pending,    ///< no stage result has ended its pipeline yet: re-queue it on resume
  evaluated,  ///< a stage result ended its pipeline (see `ends_pipeline`), or it was reused
  cancelled,  ///< dropped (stale at a round's end, ...) and not evaluated since
};

/// A candidate as the journal knows it.
struct journaled_candidate {
  candidate cand{};
  candidate_status status = candidate_status::pending;
  std::optional<stage> last_stage{};  ///< the latest stage with a result (none when reused)
  /// Everything known after `last_stage`: the compile report, the latest
  /// verdict, the timing. Final when `status` is `evaluated`.
  std::optional<evaluation> result{};
  bool reused = false;                ///< answered from an identical kernel's evaluation
  std::string cancel_reason{};        ///< `why` of the latest cancel
};

/// One profiled, correct kernel of a search, in journal order.
struct profiled_speedup {
  candidate_id id = 0;
  int round = 0;
  double speedup = 0;
  friend bool operator==(const profiled_speedup&, const profiled_speedup&) = default;
};

/// What the journal says about one search.
struct journaled_search {
  std::string task{};
  int last_round_started = -1;          ///< -1: none
  int rounds_completed = 0;             ///< 1 + the last round that ended (rounds are 0-based)
  std::uint64_t generated_tokens = 0;   ///< at the last round end, or at search_end
  usage tokens{};                       ///< the same, or at run_end (late stream ends included)
  std::vector<profiled_speedup> history{};  ///< reused evaluations excluded: a kernel counts once
  int extract_failures = 0;
  std::vector<extract_miss> misses{};   ///< the answers without a kernel, for the next prompts
  int compiled_ok = 0, validated_ok = 0;  ///< stage results that passed
  int forks = 0, forks_skipped = 0, terminations = 0;
  /// Streams that could not start or ended with an error (`stream_error`,
  /// `fork_error`), and the first one's message.
  int stream_failures = 0;
  std::string first_stream_error{};
  std::optional<timestamp> target_reached_at{};  ///< the first `target_reached`
  bool ended = false;
  std::optional<timestamp> ended_at{};  ///< search_end's time
  std::string end_reason{};

  /// The fastest profiled kernel, if any.
  [[nodiscard]] std::optional<profiled_speedup> best() const {
    std::optional<profiled_speedup> out;
    for (const auto& h : history)
      if (!out || h.speedup > out->speedup) out = h;
    return out;
  }
  /// True when a round started but did not end: the run died inside it.
  [[nodiscard]] bool round_in_flight() const noexcept { return last_round_started >= rounds_completed; }
};

/// One process's part of a run, from its `run_start` to its last record. Times
/// are run time: a resumed segment starts where the one before it stopped.
struct journal_segment {
  timestamp start{0};            ///< its run_start's time
  timestamp last{0};             ///< its latest record's time
  bool completed = false;        ///< it wrote run_end; otherwise it was killed after `last`
  nlohmann::json summary{};      ///< run_end's fields
  /// run_end's `device_busy_ns` and `device_capacity_ns`: the segment's
  /// device time, busy and available; none when run_end did not say.
  std::optional<duration> device_busy{}, device_capacity{};
};

/// Everything a resumed run needs from a journal (see docs/journal.md).
struct journal_state {
  int run_starts = 0;              ///< 1 for a run never resumed
  std::optional<run_identity> identity{};  ///< of the run; none when the journal has no run_start
  std::size_t identity_line = 0;   ///< the line of the first run_start
  std::string version{};           ///< library version of the latest run_start
  std::vector<journal_segment> segments{};  ///< one per run_start, in order
  bool run_ended = false;          ///< the latest segment wrote run_end
  nlohmann::json run_summary{};    ///< run_end's fields
  std::map<candidate_id, journaled_candidate> candidates{};
  /// Final evaluations by `candidate::content_hash()`: an identical kernel is
  /// answered from here instead of being evaluated again.
  std::map<std::uint64_t, evaluation> evaluations_by_hash{};
  std::map<int, journaled_search> searches{};
  candidate_id next_candidate_id = 1;  ///< one past the largest id (ids start at 1)
  timestamp last_t{0};                 ///< latest record time
  std::uint64_t records = 0;           ///< complete records read
  std::optional<std::size_t> torn_line{};  ///< line number of an ignored torn last line

  /// Ids of the candidates with `status`, ascending.
  [[nodiscard]] std::vector<candidate_id> ids_with(candidate_status status) const {
    std::vector<candidate_id> out;
    for (const auto& [id, c] : candidates)
      if (c.status == status) out.push_back(id);
    return out;
  }
  /// The final evaluation of a kernel with the same source and plan, if any.
  /// Its `id` is that of the candidate that was evaluated.
  [[nodiscard]] const evaluation* find_evaluation(const candidate& c) const {
    auto it = evaluations_by_hash.find(c.content_hash());
    return it == evaluations_by_hash.end() ? nullptr : &it->second;
  }
};

namespace detail {

// The records are read as an open format (json_fields.hpp): a key this
// version does not read is ignored and an optional key that is missing takes
// its default, so a journal written by a newer version stays readable. A key
// of the wrong type throws json_read_error, which for_each_record reports with
// the line and the key's JSON pointer.

inline journaled_candidate& known_candidate(journal_state& s, const nlohmann::json& r) {
  const auto id = required_key<candidate_id>(r, "candidate");
  auto it = s.candidates.find(id);
  if (it == s.candidates.end())
    throw journal_inconsistency(fmt::format("{} record for candidate {}, which no earlier candidate record introduces",
                                            required_key<std::string>(r, "type"), id));
  return it->second;
}

/// Folds a stage result into what is known of its candidate.
inline void apply_stage_result(journal_state& s, journaled_candidate& jc, const nlohmann::json& r) {
  const auto st = required_key<stage>(r, "stage");
  evaluation ev = jc.result.value_or(evaluation{});
  ev.id = jc.cand.id;
  ev.result = required_key<verdict>(r, "result");
  if (st == stage::compile) ev.compile = key_or(r, "compile", compile_report{});
  read_key(r, "timing", ev.timing);
  const bool final_result = ends_pipeline(st, ev.result.kind);
  if (ev.result.kind == verdict_kind::ok && st != stage::profile) {
    auto& js = s.searches[required_key<int>(r, "search")];
    ++(st == stage::compile ? js.compiled_ok : js.validated_ok);
  }
  jc.status = final_result ? candidate_status::evaluated : candidate_status::pending;
  jc.last_stage = st;
  if (final_result) s.evaluations_by_hash[jc.cand.content_hash()] = ev;
  if (st == stage::profile && ev.result.kind == verdict_kind::ok && ev.timing)
    s.searches[required_key<int>(r, "search")].history.push_back({jc.cand.id, jc.cand.prov.round, ev.timing->speedup});
  jc.result = std::move(ev);
}

/// The identity a run_start record carries. Records written before run
/// identities have no `format`: they are format 1.
inline run_identity identity_of(const nlohmann::json& r) {
  return run_identity{.format = key_or(r, "format", 1),
                      .corpus = key_or(r, "corpus", std::string{}),
                      .seed = required_key<std::uint64_t>(r, "seed"),
                      .config = key_or(r, "config", nlohmann::json::object())};
}

/// Folds a run_start: another format, or another run than the journal's
/// first, is refused.
inline void apply_run_start(journal_state& s, const nlohmann::json& r, std::size_t line, timestamp t) {
  auto id = identity_of(r);
  const auto version = key_or(r, "version", std::string("unknown"));
  if (id.format != journal_format)
    throw journal_mismatch(fmt::format(
        "the journal is in format {} (written by specgen {}), and this specgen reads format {}: finish that run "
        "with the specgen that started it, or start a new run in a new output directory",
        id.format, version, journal_format));
  if (s.identity && *s.identity != id) {
    std::string diff;
    for (const auto& d : s.identity->differences(id)) diff += (diff.empty() ? "" : "; ") + d;
    throw journal_mismatch(fmt::format(
        "run_start of run {}, but line {} started run {} ({}): a journal holds one run, and two wrote to this one. "
        "Keep the first run's records (the first {} lines) or start a new run in a new output directory",
        id.run_id(), s.identity_line, s.identity->run_id(), diff, line - 1));
  }
  if (!s.identity) {
    s.identity = std::move(id);
    s.identity_line = line;
  }
  ++s.run_starts;
  s.version = version;
  s.run_ended = false;
  s.segments.push_back(journal_segment{.start = t, .last = t});
}

/// Folds one record into the state. Unknown record types are skipped, so the
/// engine may journal more than resuming needs. The format is deliberately
/// open in its keys too: a record's keys this version does not read are
/// ignored, so a journal written by a newer version stays readable.
inline void apply_record(journal_state& s, const nlohmann::json& r, std::size_t line) {
  namespace rec = journal_records;
  const auto type = required_key<std::string>(r, "type");
  const auto t = required_key<timestamp>(r, "t_ns");
  s.last_t = std::max(s.last_t, t);
  ++s.records;
  if (!s.segments.empty()) s.segments.back().last = std::max(s.segments.back().last, t);
  auto search_of = [&]() -> journaled_search& { return s.searches[required_key<int>(r, "search")]; };
  if (type == rec::run_start) {
    apply_run_start(s, r, line, t);
  } else if (type == rec::search_start) {
    auto& search = search_of();
    search.task = required_key<std::string>(r, "task");
  } else if (type == rec::round_start) {
    auto& search = search_of();
    search.last_round_started = std::max(search.last_round_started, required_key<int>(r, "round"));
  } else if (type == rec::round_end) {
    auto& search = search_of();
    search.rounds_completed = std::max(search.rounds_completed, required_key<int>(r, "round") + 1);
    read_key(r, "generated_tokens", search.generated_tokens);
    read_key(r, "usage", search.tokens);
  } else if (type == rec::candidate) {
    auto c = required_key<candidate>(r, "candidate");
    auto [it, fresh] = s.candidates.try_emplace(c.id, journaled_candidate{.cand = c});
    // A resumed run may journal a pending candidate again; only a different
    // kernel under the same id is a contradiction.
    if (!fresh && it->second.cand.content_hash() != c.content_hash())
      throw journal_inconsistency(fmt::format("candidate {} recorded twice with different source or plan", c.id));
    s.next_candidate_id = std::max(s.next_candidate_id, c.id + 1);
  } else if (type == rec::extract_failed) {
    auto& search = search_of();
    ++search.extract_failures;
    extract_miss m;
    read_json(r, m.prov);  // the record's search, round, lane, origin, trigger, prefix_tokens and sample
    read_key(r, "reason", m.reason);
    read_key(r, "message", m.message);
    read_key(r, "excerpt", m.excerpt);
    search.misses.push_back(std::move(m));
  } else if (type == rec::evaluation) {
    auto& jc = known_candidate(s, r);
    if (key_or(r, "reused", false)) {
      auto ev = required_key<evaluation>(r, "evaluation");
      ev.id = jc.cand.id;
      s.evaluations_by_hash.try_emplace(jc.cand.content_hash(), ev);
      jc.status = candidate_status::evaluated;
      jc.reused = true;
      jc.result = std::move(ev);
    } else {
      apply_stage_result(s, jc, r);
    }
  } else if (type == rec::cancelled) {
    auto& jc = known_candidate(s, r);
    jc.status = candidate_status::cancelled;
    jc.cancel_reason = key_or(r, "why", std::string{});
  } else if (type == rec::search_end) {
    auto& search = search_of();
    search.ended = true;
    search.ended_at = t;
    search.end_reason = key_or(r, "reason", std::string{});
    search.rounds_completed = std::max(search.rounds_completed, key_or(r, "rounds", 0));
    read_key(r, "generated_tokens", search.generated_tokens);
    read_key(r, "usage", search.tokens);
  } else if (type == rec::run_end) {
    std::optional<std::vector<usage>> by_search;
    read_key(r, "usage_by_search", by_search);
    std::optional<duration> busy, capacity;
    read_key(r, "device_busy_ns", busy);
    read_key(r, "device_capacity_ns", capacity);
    s.run_ended = true;
    s.run_summary = r;
    for (const char* key : {"type", "t_ns", "t"}) s.run_summary.erase(key);
    // Streams cancelled at a search's end report their usage after its search_end.
    if (by_search)
      for (std::size_t i = 0; i < by_search->size(); ++i) s.searches[static_cast<int>(i)].tokens = (*by_search)[i];
    if (!s.segments.empty()) {
      s.segments.back().completed = true;
      s.segments.back().summary = s.run_summary;
      s.segments.back().device_busy = busy;
      s.segments.back().device_capacity = capacity;
    }
  } else if (type == rec::fork) {
    ++search_of().forks;
  } else if (type == rec::fork_skipped) {
    ++search_of().forks_skipped;
  } else if (type == rec::terminated) {
    ++search_of().terminations;
  } else if (type == rec::target_reached) {
    auto& js = search_of();
    if (!js.target_reached_at) js.target_reached_at = t;
  } else if (type == rec::stream_error || type == rec::fork_error) {
    auto& js = search_of();
    if (js.stream_failures++ == 0) js.first_stream_error = key_or(r, "error", std::string{});
  }
}

}  // namespace detail

/// Reads a journal into the state a resumed run starts from.
///
/// A torn last line (no newline: the run was killed while writing it) is
/// ignored and reported in `torn_line`. Anything else that is not a record,
/// or a record that contradicts earlier ones (an evaluation of a candidate
/// never recorded, say), is an error naming the file and line; so is a
/// journal of another format, or one holding the run_starts of two runs.
///
/// @code
///   auto state = specgen::load_journal("run.jsonl");
///   if (!state) { std::cerr << state.error().message << '\n'; return 1; }
///   if (state->torn_line) log("ignored a torn record at line {}", *state->torn_line);
/// @endcode
inline expected<journal_state, error> load_journal(const std::filesystem::path& path) {
  journal_state state;
  return detail::for_each_record(path, [&](std::size_t line, const nlohmann::json& r) { detail::apply_record(state, r, line); })
      .transform([&](std::optional<std::size_t> torn) {
        state.torn_line = torn;
        return std::move(state);
      });
}

/// True when two journals hold the same records once the times (`t_ns`, `t`)
/// are set aside; torn last lines are ignored. For determinism checks of runs
/// on a real clock; in virtual time the same seed gives byte-identical
/// journals, so comparing the files is enough.
inline expected<bool, error> journals_equal_ignoring_time(const std::filesystem::path& a,
                                                          const std::filesystem::path& b) {
  auto records_of = [](const std::filesystem::path& p) -> expected<std::vector<nlohmann::json>, error> {
    std::vector<nlohmann::json> out;
    return detail::for_each_record(p, [&](std::size_t, nlohmann::json r) {
             r.erase("t_ns");
             r.erase("t");
             out.push_back(std::move(r));
           })
        .transform([&](const auto&) { return std::move(out); });
  };
  return records_of(a).and_then([&](const std::vector<nlohmann::json>& ra) {
    return records_of(b).transform([&](const std::vector<nlohmann::json>& rb) { return ra == rb; });
  });
}

SPECGEN_END_NAMESPACE
