#pragma once
// What the programs share: a corpus (loaded, generated, or tasks alone from
// task files), and one function that runs an engine configuration on it with
// a backend (the replay model unless told otherwise) and an evaluator (the
// simulated device unless told otherwise), in virtual or real time.
#include <specgen/engine.hpp>
#include <specgen/journal.hpp>
#include <specgen/modes.hpp>
#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/responsive.hpp>
#include <specgen/replay/trace_gen.hpp>
#include <specgen/detail/files.hpp>
#include <specgen/sim/simulated_device.hpp>
#include <specgen/task_io.hpp>
#include <specgen/timeline.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace specgen::programs {

/**
 * The bundled suite (tasks/suite: 20 tasks, their candidates, traces and the
 * cost table measured on an H200): $SPECGEN_SUITE when set, else the
 * installed copy beside the program (<prefix>/share/specgen/suite), else the
 * source tree it was built from.
 */
inline std::filesystem::path default_suite_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("SPECGEN_SUITE"); env && *env) return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = self.parent_path().parent_path() / "share" / "specgen" / "suite";
    if (fs::exists(installed / "cost_table.json", ec)) return installed;
  }
#ifdef SPECGEN_SUITE_DIR
  return SPECGEN_SUITE_DIR;
#else
  return "tasks/suite";
#endif
}

/// How results name a corpus directory: the bundled suite by its place in the
/// source tree, wherever this machine has it; any other directory as given.
inline std::string corpus_label(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::equivalent(dir, default_suite_dir(), ec)) return "tasks/suite (the bundled suite)";
  return dir.string();
}

/// The corpus a `--corpus` value names: "procedural" for the generated one
/// (nullopt), a directory, or (no value) the bundled suite.
inline std::optional<std::filesystem::path> corpus_dir(const std::optional<std::string>& given) {
  if (!given) return default_suite_dir();
  if (*given == "procedural") return std::nullopt;
  return std::filesystem::path(*given);
}

/// Rounds recorded per task in a corpus (the most over its tasks). Replay past
/// them cycles through the recorded rounds, so a run of more is a repetition.
inline int recorded_rounds(const replay::corpus& c) {
  int most = 0;
  for (const auto& t : c.traces) most = std::max(most, t.round + 1);
  return most;
}

/// Where the tasks, traces and cost table come from.
struct corpus_choice {
  std::optional<std::filesystem::path> dir{};  ///< a corpus written by write_corpus; empty: generate
  /// Task files, or directories of them: a corpus of these tasks alone, with
  /// no traces and no cost table (for a backend that writes its own kernels
  /// and an evaluator that measures them). Takes the place of `dir`.
  std::vector<std::filesystem::path> task_files{};
  bool tasks_only = false;                     ///< of `dir`, read the tasks alone (tasks/), not its traces or cost table
  replay::corpus_params params{};              ///< for a generated corpus
  std::uint64_t seed = 1;                      ///< for a generated corpus
  int max_tasks = 0;                           ///< keep only the first N tasks (0: all)
};

/// The tasks of `paths`, in order: a file is one task; a directory, every
/// `*.json` in it, sorted by file name. Two files that define one task name
/// are an error naming both; so are a file that does not load (its name, the
/// field and what is wrong) and a directory without task files.
inline expected<std::vector<task>, error> load_task_files(const std::vector<std::filesystem::path>& paths) {
  std::vector<std::filesystem::path> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (!std::filesystem::is_directory(p, ec)) {
      files.push_back(p);  // load_task says what is wrong with anything else
      continue;
    }
    auto in_dir = detail::json_files_in(p);
    if (!in_dir) return unexpected(in_dir.error());
    if (in_dir->empty()) return unexpected(error{fmt::format("{}: no *.json task files in the directory", p.string())});
    files.insert(files.end(), in_dir->begin(), in_dir->end());
  }
  auto tasks = load_tasks(files);
  if (!tasks) return unexpected(error{tasks.error().what()});
  return std::move(*tasks);
}

inline expected<replay::corpus, error> load_or_generate(const corpus_choice& c) {
  replay::corpus out;
  if (!c.task_files.empty()) {
    auto tasks = load_task_files(c.task_files);
    if (!tasks) return unexpected(tasks.error());
    out.tasks = std::move(*tasks);
  } else if (c.dir && c.tasks_only) {
    std::error_code ec;
    if (!std::filesystem::is_directory(*c.dir / "tasks", ec))
      return unexpected(error{fmt::format("{}: not a corpus: it has no tasks/ directory", c.dir->string())});
    auto tasks = load_task_files({*c.dir / "tasks"});
    if (!tasks) return unexpected(tasks.error());
    out.tasks = std::move(*tasks);
  } else if (c.dir) {
    auto loaded = replay::load_corpus(*c.dir);
    if (!loaded) return unexpected(error{loaded.error().what()});
    out = std::move(*loaded);
  } else {
    out = replay::generate_corpus(c.params, c.seed);
  }
  if (c.max_tasks > 0 && out.tasks.size() > static_cast<std::size_t>(c.max_tasks)) out.tasks.resize(static_cast<std::size_t>(c.max_tasks));
  if (out.tasks.empty()) return unexpected(error{"the corpus has no tasks"});
  return out;
}

/// A fingerprint of everything in a corpus that decides a run: its tasks, its
/// traces and its cost table (the run identity's `corpus`). For tasks alone
/// (task files), the traces and cost table are empty: the tasks decide it.
inline std::string corpus_fingerprint(const replay::corpus& c) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const auto& t : c.tasks) tasks.push_back(to_json(t));
  nlohmann::json costs = c.costs;
  return fingerprint(detail::dump_json({{"tasks", tasks}, {"traces", replay::traces_to_json(c.traces)}, {"costs", costs}}));
}

/// Why `run_corpus_on` did not give a result.
struct run_error {
  enum class kind : std::uint8_t {
    failed,     ///< the run failed
    refused,    ///< nothing to resume, or a journal that cannot be resumed (damaged, another format)
    other_run,  ///< the journal to resume is another run's: other corpus, configuration or seed
  };
  std::string message;
  kind why = kind::failed;
  run_error(const error& e, kind k = kind::failed) : message(e.what()), why(k) {}  // NOLINT: every error converts
  [[nodiscard]] const std::string& what() const noexcept { return message; }
};

/// Journals an event of the evaluator's: what happened ("rank_lost") and its details (an object).
using evaluator_event_sink = std::function<void(std::string_view event, nlohmann::json details)>;

/// How to run one configuration on a corpus.
struct run_options {
  replay::replay_params replay{};
  sim::sim_params sim{};
  std::optional<std::filesystem::path> journal{};  ///< write (or append to, with resume) this journal
  bool resume = false;                              ///< continue the run recorded in `journal`
  std::optional<std::filesystem::path> timeline{};  ///< write a Chrome trace here
  std::function<void(const std::vector<search_progress>&, double now_s)> progress{};
  duration progress_every = seconds(60);
  /// `run_corpus` only: main streams play these traces as a model that
  /// answers feedback would (replay/responsive.hpp), instead of (task, round, lane).
  std::shared_ptr<const replay::responsive_traces> responsive{};
  /// `run_corpus_on`: called before the run with a sink that journals the
  /// evaluator's events (engine::note_evaluator_event), and again with an
  /// empty one when the run ends. Call the sink on the loop's thread.
  std::function<void(evaluator_event_sink)> evaluator_events{};
};

/// Run `cfg` over every task of `c` with `model`, a backend on `loop`, and
/// `device`, an evaluator on `loop` (the simulated device or a GPU pool). Errors
/// (a journal that cannot be read or written, a resume that does not match)
/// come back as values.
template <clock Clock, backend Backend, evaluator Evaluator>
expected<run_result, run_error> run_corpus_on(event_loop<Clock>& loop, Backend& model, Evaluator& device,
                                              const replay::corpus& c, engine_config cfg, const run_options& o) {
  std::optional<journal_state> previous;
  if (o.resume) {
    if (!o.journal) return unexpected(run_error(error{"resume needs a journal"}, run_error::kind::refused));
    std::error_code ec;
    if (!std::filesystem::exists(*o.journal, ec))
      return unexpected(run_error(
          error{fmt::format("nothing to resume: there is no journal {}; start the run without resuming", o.journal->string())},
          run_error::kind::refused));
    auto st = load_journal(*o.journal);
    if (!st) return unexpected(run_error(st.error(), run_error::kind::refused));
    previous = std::move(*st);
  }
  std::unique_ptr<journal_writer> journal;
  try {
    if (o.journal) journal = std::make_unique<journal_writer>(*o.journal, o.resume);
  } catch (const std::exception& e) {
    return unexpected(error{fmt::format("cannot open the journal: {}", e.what())});
  }
  timeline tl;
  engine eng(loop, model, device, std::move(cfg), journal.get(), o.timeline ? &tl : nullptr);
  for (const auto& t : c.tasks) eng.add_search(std::make_shared<const task>(t));
  if (journal) eng.identify_corpus(corpus_fingerprint(c));
  if (previous)
    if (auto resumed = eng.resume(*previous); !resumed)
      return unexpected(run_error(error{fmt::format("cannot resume from {}: {}", o.journal->string(), resumed.error().what())},
                                  run_error::kind::other_run));
  if (o.progress)
    eng.on_progress([&](const std::vector<search_progress>& p) { o.progress(p, to_seconds(loop.now())); }, o.progress_every);
  if (o.evaluator_events)
    o.evaluator_events([&eng](std::string_view event, nlohmann::json details) {
      eng.note_evaluator_event(event, std::move(details));
    });
  run_result r = eng.run();
  if (o.evaluator_events) o.evaluator_events(nullptr);
  if (o.timeline && !tl.write(*o.timeline)) return unexpected(error{fmt::format("cannot write {}", o.timeline->string())});
  return r;
}

/// `run_corpus_on` with the simulated device answering from the corpus's cost table.
template <clock Clock, backend Backend>
expected<run_result, run_error> run_corpus_with(event_loop<Clock>& loop, Backend& model, const replay::corpus& c,
                                                engine_config cfg, const run_options& o) {
  sim::simulated_device device(loop, c.costs, o.sim);
  return run_corpus_on(loop, model, device, c, std::move(cfg), o);
}

/// Run `cfg` over every task of `c` with the replay model playing its traces.
template <clock Clock>
expected<run_result, run_error> run_corpus(const replay::corpus& c, engine_config cfg, const run_options& o) {
  event_loop<Clock> loop;
  replay::replay_model model(loop, c.traces, o.replay);
  if (o.responsive) model.set_trace_chooser(replay::responsive_chooser(o.responsive));
  return run_corpus_with(loop, model, c, std::move(cfg), o);
}

/// Geometric mean (0 for none): the paper's mean over tasks.
inline double geomean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

/// Per task: the geometric mean over searches of `base`'s search time over
/// `other`'s, matched by index (the same tasks, seeds and order on both
/// sides); searches without a time are left out.
inline double search_time_ratio(const std::vector<double>& base, const std::vector<double>& other) {
  std::vector<double> r;
  for (std::size_t i = 0; i < std::min(base.size(), other.size()); ++i)
    if (base[i] > 0 && other[i] > 0) r.push_back(base[i] / other[i]);
  return geomean(r);
}

/// Each search's own time, from the run's start to its end, in search order.
inline std::vector<double> search_seconds(const run_result& r) {
  std::vector<double> s;
  for (const auto& x : r.searches) s.push_back(x.end_seconds);
  return s;
}

}  // namespace specgen::programs
