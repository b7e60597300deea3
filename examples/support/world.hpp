#pragma once
// What the programs share: a corpus (loaded or generated), and one function
// that runs an engine configuration on it with a backend (the replay model
// unless told otherwise) and the simulated device, in virtual or real time.
#include <specgen/engine.hpp>
#include <specgen/journal.hpp>
#include <specgen/modes.hpp>
#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/trace_gen.hpp>
#include <specgen/sim/simulated_device.hpp>
#include <specgen/timeline.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace specgen::programs {

/// Where the tasks, traces and cost table come from.
struct corpus_choice {
  std::optional<std::filesystem::path> dir{};  ///< a corpus written by write_corpus; empty: generate
  replay::corpus_params params{};              ///< for a generated corpus
  std::uint64_t seed = 1;                      ///< for a generated corpus
  int max_tasks = 0;                           ///< keep only the first N tasks (0: all)
};

inline expected<replay::corpus, error> load_or_generate(const corpus_choice& c) {
  replay::corpus out;
  if (c.dir) {
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

/// How to run one configuration on a corpus.
struct run_options {
  replay::replay_params replay{};
  sim::sim_params sim{};
  std::optional<std::filesystem::path> journal{};  ///< write (or append to, with resume) this journal
  bool resume = false;                              ///< continue the run recorded in `journal`
  std::optional<std::filesystem::path> timeline{};  ///< write a Chrome trace here
  std::function<void(const std::vector<search_progress>&, double now_s)> progress{};
  duration progress_every = seconds(60);
};

/// Run `cfg` over every task of `c` with `model`, a backend on `loop`. Errors
/// (a journal that cannot be read or written, a resume that does not match)
/// come back as values.
template <clock Clock, backend Backend>
expected<run_result, error> run_corpus_with(event_loop<Clock>& loop, Backend& model, const replay::corpus& c, engine_config cfg,
                                            const run_options& o) {
  sim::simulated_device device(loop, c.costs, o.sim);
  std::optional<journal_state> previous;
  if (o.resume) {
    if (!o.journal) return unexpected(error{"resume needs a journal"});
    auto st = load_journal(*o.journal);
    if (!st) return unexpected(st.error());
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
  if (previous) {
    try {
      eng.resume(*previous);
    } catch (const std::exception& e) {
      return unexpected(error{e.what()});
    }
  }
  if (o.progress)
    eng.on_progress([&](const std::vector<search_progress>& p) { o.progress(p, to_seconds(loop.now())); }, o.progress_every);
  run_result r = eng.run();
  if (o.timeline && !tl.write(*o.timeline)) return unexpected(error{fmt::format("cannot write {}", o.timeline->string())});
  return r;
}

/// Run `cfg` over every task of `c` with the replay model playing its traces.
template <clock Clock>
expected<run_result, error> run_corpus(const replay::corpus& c, engine_config cfg, const run_options& o) {
  event_loop<Clock> loop;
  replay::replay_model model(loop, c.traces, o.replay);
  return run_corpus_with(loop, model, c, std::move(cfg), o);
}

}  // namespace specgen::programs
