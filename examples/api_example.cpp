// The README's API example: a whole speculative search in twenty lines.
#include <specgen/engine.hpp>
#include <specgen/modes.hpp>
#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/trace_gen.hpp>
#include <specgen/sim/simulated_device.hpp>

#include <fmt/format.h>

int main() {
  using namespace specgen;
  // Tasks, reasoning traces and kernel costs (a procedural corpus here).
  auto corpus = replay::generate_corpus({.tasks = 2, .rounds = 5, .lanes = 1}, /*seed=*/7);
  event_loop<virtual_clock> loop;                                  // simulated time
  replay::replay_model model(loop, corpus.traces);                 // the LLM backend
  sim::simulated_device gpus(loop, corpus.costs, {.devices = 4});  // the evaluator
  engine_config cfg = mode_config("specgen").value();              // every mechanism on
  cfg.budget.max_rounds = 5;
  engine search(loop, model, gpus, std::move(cfg));
  for (const auto& t : corpus.tasks) search.add_search(std::make_shared<const task>(t));
  const run_result r = search.run();
  for (const auto& s : r.searches)
    fmt::print("{}: best {:.2f}x in {} rounds, {} kernels profiled\n", s.task, s.best_speedup, s.rounds, s.profiled);
  fmt::print("{:.0f} s simulated, pool utilisation {:.0f}%\n", r.e2e_seconds, 100 * r.pool_utilization);
  return r.searches.size() == 2 && r.profiled_kernels > 0 ? 0 : 1;
}
