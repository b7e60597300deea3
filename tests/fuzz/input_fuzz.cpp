/// Fuzz target for the files a user gives: task files, engine configs, trace
/// files and cost tables.
///
/// Built two ways:
/// - with libFuzzer (`-DSPECGEN_FUZZ_LIBFUZZER=ON`, clang): `LLVMFuzzerTestOneInput`,
///   whose first byte picks the kind of file and the rest is its text;
/// - otherwise with a standalone driver that mutates a seed corpus read from the
///   source tree (the bundled tasks, traces and cost table, and configs), for a
///   number of iterations or seconds:
///     input_fuzz [--seconds S] [--iterations N] [--seed X] [--source DIR] [KIND:FILE...]
///   KIND:FILE arguments (crash reproducers; KIND is task, config, trace or
///   cost_table) are checked once each before the loop.
///
/// Invariants checked on every input:
/// - reading never crashes, never throws and never takes more than 5 s (the
///   driver's watchdog aborts; the sanitizer build's allocator aborts on an
///   allocation over 1 GiB);
/// - a refusal is an error with a message;
/// - an accepted value is within its documented range (limits.hpp and the
///   readers' ranges);
/// - what is accepted writes back and reads back to the same value: a task
///   through `to_json`, a config through `to_json(engine_config)`, traces
///   through `traces_to_json`, a cost table through its `to_json`;
/// - every few inputs, the same text is read as a file through the file
///   loaders (load_task, load_traces, load_cost_table), which must agree with
///   the in-memory readers.
#include "fuzz_support.hpp"

#include <specgen/cost_table.hpp>
#include <specgen/detail/files.hpp>
#include <specgen/modes.hpp>
#include <specgen/replay/trace.hpp>
#include <specgen/sim/profile_model.hpp>
#include <specgen/task_io.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using namespace specgen;
using namespace specgen::policy;
namespace fs = std::filesystem;

enum class kind : std::uint8_t { task, config, trace, cost_table };
constexpr std::string_view kind_names[] = {"task", "config", "trace", "cost_table"};

std::string_view current_input;
kind current_kind = kind::task;

[[noreturn]] void fail(const char* what) {
  fuzz::fail("input_fuzz", what, current_input, std::string("kind ") + std::string(kind_names[static_cast<int>(current_kind)]));
}

template <class T, class R>
bool within(T v, const R& r) {
  return r.contains(v);
}

// ---- the invariants, per kind --------------------------------------------------------

void check_task(const nlohmann::json& j, const std::string& file) {
  const auto t = parse_task(j, file);
  if (!t) {
    FUZZ_CHECK(!t.error().message.empty());
    return;
  }
  FUZZ_CHECK(!t->name.empty() && !t->outputs.empty() && !t->validation_shapes.empty());
  for (const auto& b : t->validation_shapes)
    for (const auto& [k, v] : b) FUZZ_CHECK(v >= 1);
  for (const auto& [k, v] : t->benchmark_shape) FUZZ_CHECK(v >= 1);
  for (const auto& o : t->outputs) FUZZ_CHECK(std::isfinite(o.tol.abs) && o.tol.abs >= 0 && std::isfinite(o.tol.rel) && o.tol.rel >= 0);
  const auto again = parse_task(to_json(*t), t->file);
  FUZZ_CHECK(again && *again == *t);
}

void check_config(const nlohmann::json& j) {
  auto c = config_from_json(j);
  // A mode given apart from the config either agrees with it or is refused.
  auto with_mode = config_with_mode(j, "sequential");
  if (!with_mode) FUZZ_CHECK(!with_mode.error().message.empty());
  if (!c) {
    FUZZ_CHECK(!c.error().message.empty());
    return;
  }
  const search_budget& b = c->budget;
  FUZZ_CHECK(within(b.max_rounds, limits::rounds));
  FUZZ_CHECK(b.max_seconds == 0 || within(b.max_seconds, limits::seconds));
  FUZZ_CHECK(within(b.target_speedup, limits::target_speedup));
  FUZZ_CHECK(c->max_streams >= 0 && c->max_streams <= 65'536);
  for (const sampling* s : {&c->main_sampling, &c->fork_sampling})
    FUZZ_CHECK(s->temperature >= 0 && s->temperature <= 10 && s->top_p > 0 && s->top_p <= 1 && s->max_tokens >= 1 &&
               static_cast<std::uint64_t>(s->max_tokens) <= limits::max_tokens);
  FUZZ_CHECK(c->strategy.lanes() >= 1 && c->strategy.lanes() <= limits::max_lanes);
  (void)seconds(b.max_seconds);  // the engine's deadline: must convert
  (void)c->pool.rebalance_interval();
  const nlohmann::json written = to_json(*c);
  const auto again = config_from_json(written);
  FUZZ_CHECK(again);
  FUZZ_CHECK(to_json(*again) == written);
}

void check_traces(const nlohmann::json& j) {
  const auto ts = replay::parse_traces(j, "<fuzz>");
  if (!ts) {
    FUZZ_CHECK(!ts.error().message.empty());
    return;
  }
  std::uint64_t total = 0;
  for (const auto& t : *ts) {
    FUZZ_CHECK(t.round >= 0 && t.round < limits::max_rounds);
    FUZZ_CHECK(!t.lane || (*t.lane >= 0 && *t.lane < limits::max_lanes));
    FUZZ_CHECK(t.reasoning_tokens() <= limits::max_tokens);
    FUZZ_CHECK(t.answer.tokens >= 1 && t.answer.tokens <= limits::max_tokens);
    for (const auto& f : t.forks) {
      FUZZ_CHECK(f.at_token <= t.reasoning_tokens());
      FUZZ_CHECK(!f.samples.empty() && f.samples.size() <= static_cast<std::size_t>(limits::max_fork_samples));
      for (const auto& a : f.samples) FUZZ_CHECK(a.tokens >= 1 && a.tokens <= limits::max_tokens);
    }
    total += t.reasoning_tokens();
  }
  // The replay model expands a trace when it plays it: do so while it is cheap.
  if (total <= 2'000'000)
    for (const auto& t : *ts) {
      const auto text = replay::expand_reasoning(t);
      FUZZ_CHECK(text.size() == t.reasoning_tokens());
      if (!t.forks.empty()) (void)replay::outcome_of_fork(t, t.forks.back().at_token, 1);
    }
  const auto again = replay::parse_traces(replay::traces_to_json(*ts), "<fuzz>");
  FUZZ_CHECK(again && *again == *ts);
}

void check_cost_table(const nlohmann::json& j) {
  const auto t = parse_cost_table(j, "<fuzz>");
  if (!t) {
    FUZZ_CHECK(!t.error().message.empty());
    return;
  }
  int profiled = 0;
  for (const auto& [key, e] : t->kernels) {
    FUZZ_CHECK(e.compile_s >= 0 && e.compile_s <= 3600 && e.validate_s >= 0 && e.validate_s <= 3600);
    FUZZ_CHECK(e.noise >= 0 && e.noise <= 1);
    FUZZ_CHECK(e.runtime_us == 0 || (e.runtime_us >= 1e-3 && e.runtime_us <= 1e8));
    FUZZ_CHECK(e.baseline_us == 0 || (e.baseline_us >= 1e-3 && e.baseline_us <= 1e8));
    // The simulated profiler on it: a bounded number of samples and a finite speedup.
    if (e.verdict == verdict_kind::ok && profiled++ < 2) {
      const auto run = sim::simulate_profile(e, t->profile, key);
      FUZZ_CHECK(run.samples >= 1 && run.samples <= t->profile.max_samples);
      FUZZ_CHECK(std::isfinite(run.timing.speedup) && run.timing.speedup > 0 && run.timing.speedup < 1e13);
    }
  }
  FUZZ_CHECK(t->profile.max_samples <= 10'000 && t->profile.min_samples >= 2);
  nlohmann::json written;
  to_json(written, *t);
  const auto again = parse_cost_table(written, "<fuzz>");
  FUZZ_CHECK(again && *again == *t);
}

/// The same text through the file loaders, which must agree with the readers.
void check_file_loaders(kind k, std::string_view text, const fs::path& scratch) {
  const fs::path file = scratch / "input.json";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  const bool comments = k == kind::task || k == kind::config;
  const auto parsed = detail::parse_json(text, file.string(), comments);
  switch (k) {
    case kind::task: {
      const auto t = load_task(file);
      FUZZ_CHECK(t || !t.error().message.empty());
      if (t) {
        FUZZ_CHECK(parsed);
        const auto again = parse_task(*parsed, file.string());
        FUZZ_CHECK(again && *again == *t);
      }
      break;
    }
    case kind::config: {
      const auto j = detail::read_json_file(file, detail::file_kinds::config);
      FUZZ_CHECK(bool(j) == (bool(parsed) && text.size() <= detail::file_kinds::config.max_bytes));
      break;
    }
    case kind::trace: {
      const auto t = replay::load_traces(file);
      FUZZ_CHECK(t || !t.error().message.empty());
      if (t) {
        FUZZ_CHECK(parsed);
        const auto again = replay::parse_traces(*parsed, file.string());
        FUZZ_CHECK(again && *again == *t);
      }
      break;
    }
    case kind::cost_table: {
      const auto t = load_cost_table(file);
      FUZZ_CHECK(t || !t.error().message.empty());
      if (t) {
        FUZZ_CHECK(parsed);
        const auto again = parse_cost_table(*parsed, file.string());
        FUZZ_CHECK(again && *again == *t);
      }
      break;
    }
  }
}

void check_one(kind k, std::string_view text, const std::string& task_file) {
  current_input = text;
  current_kind = k;
  const bool comments = k == kind::task || k == kind::config;
  const auto j = detail::parse_json(text, "<fuzz>", comments);
  if (!j) {
    FUZZ_CHECK(!j.error().message.empty());
    return;
  }
  switch (k) {
    case kind::task: check_task(*j, task_file); break;
    case kind::config: check_config(*j); break;
    case kind::trace: check_traces(*j); break;
    case kind::cost_table: check_cost_table(*j); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto k = static_cast<kind>(data[0] % 4);
  check_one(k, std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), "<fuzz>/task.json");
  return 0;
}

#ifndef SPECGEN_LIBFUZZER

namespace {

// ---- seed corpus ---------------------------------------------------------------------------

struct sample {
  kind k;
  std::string text;
  std::string task_file;  ///< the path a task is parsed as (its source_file is relative to it)
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// The bundled tasks, traces and cost table, read from the source tree, and
/// configs: every mode as the engine writes it, the documented example and
/// edge cases around the ranges.
std::vector<sample> seed_corpus(const fs::path& source) {
  std::vector<sample> out;
  auto add_dir = [&](kind k, const fs::path& dir) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".json") files.push_back(it->path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) out.push_back({k, read_all(f), f.string()});
  };
  add_dir(kind::task, source / "tasks/examples");
  add_dir(kind::task, source / "tasks/suite/tasks");
  add_dir(kind::trace, source / "tasks/suite/traces");
  out.push_back({kind::cost_table, read_all(source / "tasks/suite/cost_table.json"), ""});
  add_dir(kind::config, source / "tests/cli");
  for (auto m : mode_names) out.push_back({kind::config, to_json(*mode_config(m)).dump(1), ""});
  const char* configs[] = {
      R"({"mode": "+priority", "seed": 7,
          "strategy": {"evolve": {"lanes": 4, "population": 8, "tournament": 3, "inspirations": 1}},
          "trigger": {"any_of": [{"fence_closed": {"samples": 2}}, {"function_body_complete": {"samples": 2}}],
                      "gate": {"min_gap_tokens": 256, "max_forks_per_round": 24}},
          "termination": {"any_of": ["beats_mean", {"reaches_target": {"target": 4}}]},
          "pool": {"elastic": {"min_validation": 1, "min_profiling": 1, "validation": "lifo", "interval_s": 2}},
          "kv": {"host_kv": {"capacity_bytes": 68719476736, "bandwidth_gbps": 55, "latency_us": 5}},
          "budget": {"max_rounds": 20, "max_seconds": 3600, "target_speedup": 2.0, "stop_at_target": false},
          "max_streams": 32, "cancel_running_at_round_end": false})",
      R"({"mode": "sequential", "budget": {"max_seconds": 1e10}, "main_sampling": {"temperature": 0.2, "max_tokens": 8}})",
      R"({"strategy": {"parallel": {"seeds": 1000000}}, "pool": {"elastic": {"interval_s": 1e-9}}})",
      R"({"trigger": {"design_decision": {"phrases": [""], "max_wait_chars": 2147483647}}, "kv": "no_kv"})",
      R"({"trigger": {"any_of": [{"any_of": [{"any_of": [{"token_interval": {"every_tokens": 1}}]}]}]}})",
      R"({"kv": {"backed_kv": {"model": {"layers": 1024, "kv_heads": 1024, "head_dim": 1024, "block_tokens": 1024},
                              "capacity_bytes": 1}}, "termination": {"beats_mean": {"min_gain": 1e308}}})",
      R"({"trigger": {"idle_resources": {"samples": 64, "min_tokens": 18446744073709551615, "max_backoff": 16}},
          "fork_sampling": {"top_p": 0, "max_tokens": -1}, "seed": -1, "max_streams": 4294967296})",
  };
  for (const char* c : configs) out.push_back({kind::config, c, ""});
  out.push_back({kind::trace, R"({"format": "specgen-trace/1", "traces": [{"task": "t", "round": 2147483647, "lane": "any",
      "style": "draft_early", "segments": [{"filler": 1000000000, "topic": "x"}, {"text": "```cuda\nk\n```\n"}],
      "answer": {"text": "a", "tokens": 1}, "forks": [{"at_token": 0, "samples": [{"text": "s"}]}]}]})", ""});
  out.push_back({kind::cost_table, R"({"format": "specgen-cost-table/1", "kernels": [{"key": "0123456789abcdef",
      "task": "t", "verdict": "ok", "runtime_us": 1e-300, "baseline_us": 1, "noise": 0.5}],
      "profile": {"min_samples": 2, "max_samples": 2000000000}})", ""});
  return out;
}

const std::string_view dictionary[] = {
    "{", "}", "[", "]", "\"", ":", ",", "//", "/*", "*/", "\n", "\\u0000", "\\ud800", "\xff", "0", "-1", "1e999",
    "-1e999", "1e-300", "1e10", "2147483647", "2147483648", "4294967296", "9223372036854775807",
    "18446744073709551615", "-9223372036854775808", "0.0", "nan", "Infinity", "true", "null", "\"\"",
    R"("any_of": [)", R"({"any_of": [{"any_of": [)", R"("samples": 1000000)", R"("filler": 1000000000)",
    R"("tokens": 4294967295)", R"("round": 2147483647)", R"("lane": -1)", R"("max_seconds": 1e10)",
    R"("interval_s": 1e-9)", R"("source_file": "/dev/zero")", R"("source_file": ".")", R"("source_file": "/proc/self/status")",
    R"("max_samples": 2000000000)", R"("runtime_us": 1e-300)", R"("phrases": [""])", R"("gate": {"min_gap_tokens": 1})",
    R"("seeds": 2147483647)", R"("population": 1000000)", R"("target": -2)", R"("mode": "sequential")",
    R"("benchmark_shape": {"N": 9223372036854775807})", R"("shape": ["N * N * N * N"])",
};

class mutator {
 public:
  explicit mutator(std::uint64_t seed) : m_(seed) {}

  std::string mutate(std::string s, const std::vector<sample>& pool) {
    const int rounds = 1 + static_cast<int>(m_.below(4));
    for (int r = 0; r < rounds; ++r) {
      const std::size_t which = m_.below(fuzz::byte_mutator::generic_edits + 3);
      if (which < fuzz::byte_mutator::generic_edits) {
        m_.generic(s, which, dictionary, pool[m_.below(pool.size())].text);
      } else if (which < fuzz::byte_mutator::generic_edits + 2) {
        // Replace a number with an edge value: ranges are what this target checks.
        const std::size_t at = s.find_first_of("0123456789", m_.below(s.size() + 1));
        if (at == std::string::npos) continue;
        const std::size_t end = s.find_first_not_of("0123456789.eE+-", at);
        static constexpr std::string_view numbers[] = {"0", "1", "-1", "3", "64", "65", "1000000", "1e999", "1e-300",
                                                       "1e10", "2147483647", "4294967296", "18446744073709551615",
                                                       "0.05", "1e7", "9999", "10000", "255", "256"};
        s.replace(at, end == std::string::npos ? std::string::npos : end - at, numbers[m_.below(std::size(numbers))]);
      } else if (!s.empty() && s.size() < 65'536) {  // nest: wrap a region in an array (deep documents)
        const std::size_t at = m_.below(s.size());
        const std::size_t depth = m_.below(80) + 1;
        s.insert(at, std::string(depth, '['));
        s.insert(std::min(s.size(), at + depth + m_.below(32)), std::string(depth, ']'));
      }
    }
    if (s.size() > 512 * 1024) s.resize(512 * 1024);
    return s;
  }

 private:
  fuzz::byte_mutator m_;
};

/// Aborts when one input takes longer than `limit`: a hang is a bug too.
class watchdog {
 public:
  explicit watchdog(double limit_s) : limit_(limit_s), thread_([this] { watch(); }) {}
  ~watchdog() {
    done_ = true;
    thread_.join();
  }
  void start_input() { started_.store(now(), std::memory_order_relaxed); }
  void end_input() { started_.store(-1, std::memory_order_relaxed); }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  void watch() {
    while (!done_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const double t = started_.load(std::memory_order_relaxed);
      if (t >= 0 && now() - t > limit_) fail("one input took longer than the per-input limit (a hang)");
    }
  }
  double limit_;
  std::atomic<double> started_{-1};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  fs::path source;
#ifdef SPECGEN_SOURCE_DIR
  source = SPECGEN_SOURCE_DIR;
#endif
  if (const char* env = std::getenv("SPECGEN_SOURCE_DIR"); env && *env) source = env;
  static constexpr std::string_view extra[] = {"source"};
  const auto options = fuzz::parse_driver_options(argc, argv, extra, "KIND:FILE");
  if (!options) return 2;
  const auto& [seconds_total, given_iterations, seed, named, files] = *options;
  if (auto it = named.find("source"); it != named.end()) source = it->second;
  const std::uint64_t iterations = seconds_total <= 0 && given_iterations == 0 ? 2'000 : given_iterations;

  watchdog dog(5.0);
  for (const auto& f : files) {
    const auto colon = f.find(':');
    kind k = kind::task;
    bool known = false;
    for (int i = 0; i < 4; ++i)
      if (colon != std::string::npos && f.substr(0, colon) == kind_names[i]) k = static_cast<kind>(i), known = true;
    if (!known) {
      std::fprintf(stderr, "input_fuzz: %s: give KIND:FILE with KIND task, config, trace or cost_table\n", f.c_str());
      return 2;
    }
    const std::string data = read_all(f.substr(colon + 1));
    dog.start_input();
    check_one(k, data, f.substr(colon + 1));
    dog.end_input();
  }

  const auto pool_seeds = seed_corpus(source);
  if (pool_seeds.size() < 20) {
    std::fprintf(stderr, "input_fuzz: found only %zu seed files under '%s' (tasks/, tests/cli/); pass --source DIR\n",
                 pool_seeds.size(), source.string().c_str());
    return 2;
  }
  auto pool = pool_seeds;
  for (const auto& s : pool) {
    dog.start_input();
    check_one(s.k, s.text, s.task_file);
    dog.end_input();
  }

  std::error_code ec;
  const fs::path scratch = fs::temp_directory_path(ec) / fmt::format("specgen-input-fuzz-{}", ::getpid());
  fs::create_directories(scratch, ec);

  mutator m(seed);
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::uint64_t n = 0;
  std::uint64_t inputs[4] = {};
  const std::size_t corpus_size = pool.size();
  while ((iterations == 0 || n < iterations) && (seconds_total <= 0 || elapsed() < seconds_total)) {
    const sample& from = pool[n % pool.size()];
    sample input{from.k, m.mutate(from.text, pool), from.task_file};
    dog.start_input();
    check_one(input.k, input.text, input.task_file);
    if (n % 16 == 0) check_file_loaders(input.k, input.text, scratch);
    dog.end_input();
    ++inputs[static_cast<int>(input.k)];
    // Keep a few recent mutants so mutations compound; the seeds always stay.
    if (pool.size() < corpus_size + 64) pool.push_back(std::move(input));
    else pool[corpus_size + n % 64] = std::move(input);
    ++n;
  }
  fs::remove_all(scratch, ec);
  std::printf("input_fuzz: %llu inputs in %.2f s (seed %llu, %zu seeds): %llu tasks, %llu configs, %llu trace files, "
              "%llu cost tables; all invariants held\n",
              static_cast<unsigned long long>(n), elapsed(), static_cast<unsigned long long>(seed), corpus_size,
              static_cast<unsigned long long>(inputs[0]), static_cast<unsigned long long>(inputs[1]),
              static_cast<unsigned long long>(inputs[2]), static_cast<unsigned long long>(inputs[3]));
  return 0;
}

#endif  // SPECGEN_LIBFUZZER
