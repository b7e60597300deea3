#include <specgen/cost_table.hpp>
#include <specgen/sim/simulated_device.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

using namespace specgen;
using namespace specgen::sim;

namespace {

std::string kernel_source(std::string_view name) {
  return fmt::format("extern \"C\" __global__ void {}(float* x, int n) {{ x[threadIdx.x] = 0; }}", name);
}

std::shared_ptr<const candidate> make_candidate(std::string_view name) {
  candidate c;
  c.task = "softmax";
  c.source = kernel_source(name);
  return std::make_shared<const candidate>(std::move(c));
}

std::uint64_t key_of(std::string_view name) { return source_key(kernel_source(name)); }

/// One kernel per verdict, named after it, plus a noisy and a very noisy ok kernel.
cost_table test_table() {
  cost_table t{.device = "test"};
  auto add = [&](std::string_view name, cost_entry e) {
    e.task = "softmax";
    e.label = std::string(name);
    t.kernels[key_of(name)] = std::move(e);
  };
  add("ok", {.compile_s = 0.4, .validate_s = 0.15, .runtime_us = 100, .noise = 0.004, .baseline_us = 200});
  add("noisy", {.compile_s = 0.4, .validate_s = 0.15, .runtime_us = 100, .noise = 0.05, .baseline_us = 200});
  add("chaotic", {.compile_s = 0.4, .validate_s = 0.15, .runtime_us = 100, .noise = 0.3, .baseline_us = 200});
  add("exact", {.compile_s = 0.4, .validate_s = 0.15, .runtime_us = 100, .noise = 0, .baseline_us = 200});
  add("compile_error", {.verdict = verdict_kind::compile_error,
                        .summary = "identifier \"tile\" is undefined",
                        .log = "error: identifier \"tile\" is undefined",
                        .compile_s = 0.3});
  for (verdict_kind v : {verdict_kind::invalid_plan, verdict_kind::fault, verdict_kind::timeout,
                         verdict_kind::wrong_result, verdict_kind::unstable, verdict_kind::suspicious})
    add(to_string(v), {.verdict = v,
                       .summary = fmt::format("{} summary", to_string(v)),
                       .log = fmt::format("{} log", to_string(v)),
                       .compile_s = 0.4,
                       .validate_s = 0.25});
  return t;
}

/// Collects outcomes with the virtual time at which each arrived.
struct recorder {
  event_loop<virtual_clock>& loop;
  std::vector<eval_outcome> outcomes{};
  std::vector<timestamp> at{};
  eval_callback callback() {
    return [this](eval_outcome o) {
      outcomes.push_back(std::move(o));
      at.push_back(loop.now());
    };
  }
};

eval_job job(job_id id, stage kind, std::string_view kernel, int device = -1) {
  eval_job j;
  j.id = id;
  j.kind = kind;
  j.device = device;
  j.cand = make_candidate(kernel);
  return j;
}

verdict verdict_of(verdict_kind kind, std::string summary, std::string log) {
  verdict v;
  v.kind = kind;
  v.summary = std::move(summary);
  v.log = std::move(log);
  return v;
}

duration us(double x) { return seconds(x * 1e-6); }

}  // namespace

// ---- cost table ------------------------------------------------------------------

TEST_CASE("the documented cost-table example parses into the fields it names") {
  const auto j = nlohmann::json::parse(R"json({
    "format": "specgen-cost-table/1",
    "device": "procedural (not measured)",
    "kernels": [
      { "key": "0123456789abcdef", "task": "softmax", "label": "tiled-v2", "verdict": "ok",
        "summary": "", "log": "", "compile_s": 0.42, "validate_s": 0.15, "runtime_us": 812.5,
        "noise": 0.004, "baseline_us": 1020.0 } ],
    "profile": { "warmup": 10, "min_samples": 40, "max_samples": 200, "overhead_s": 0.05 } })json");
  auto t = parse_cost_table(j, "example.json");
  REQUIRE(t);
  CHECK(t->device == "procedural (not measured)");
  const cost_entry* e = t->find(0x0123456789abcdefull);
  REQUIRE(e);
  CHECK(*e == cost_entry{.task = "softmax", .label = "tiled-v2", .compile_s = 0.42, .validate_s = 0.15,
                         .runtime_us = 812.5, .noise = 0.004, .baseline_us = 1020.0});
  CHECK(t->profile == profile_params{.warmup = 10, .min_samples = 40, .max_samples = 200, .overhead_s = 0.05});
}

TEST_CASE("a saved cost table loads back equal") {
  const auto path = std::filesystem::temp_directory_path() / "specgen_sim_test_table.json";
  cost_table t = test_table();
  t.profile.max_samples = 77;
  REQUIRE(save_cost_table(t, path));
  auto back = load_cost_table(path);
  std::filesystem::remove(path);
  REQUIRE(back);
  CHECK(*back == t);
}

TEST_CASE("kernels are found by source whatever the whitespace") {
  const cost_table t = test_table();
  const std::string reformatted = "  extern \"C\"   __global__ void ok(float* x,\n int n) {\n  x[threadIdx.x] = 0;\t}\n";
  REQUIRE(t.find_source(reformatted) != nullptr);
  CHECK(t.find_source(reformatted)->label == "ok");
  CHECK(t.find_source("__global__ void missing() {}") == nullptr);
}

TEST_CASE("cost-table parse errors name the file, the JSON pointer and the problem") {
  auto error_of = [](std::string_view text) {
    auto t = parse_cost_table(nlohmann::json::parse(text), "t.json");
    REQUIRE_FALSE(t);
    return t.error().what();
  };
  const std::string kernel_ok = R"("key": "0123456789abcdef", "task": "t", "runtime_us": 1, "baseline_us": 2)";
  CHECK(error_of(R"({"kernels": []})") == "t.json: /format: missing (required)");
  CHECK(error_of(R"({"format": "specgen-cost-table/2", "kernels": []})") ==
        "t.json: /format: \"specgen-cost-table/2\" is not \"specgen-cost-table/1\" (a table this version cannot read)");
  CHECK(error_of(R"({"format": "specgen-cost-table/1"})").starts_with("t.json: /kernels: missing or not an array"));
  CHECK(error_of(R"([1])") == "t.json: /: expected an object, found array");
  CHECK(error_of(R"({"format": "specgen-cost-table/1", "kernels": [{)" + kernel_ok + R"(, "verdict": "okay"}]})")
            .starts_with("t.json: /kernels/0/verdict: unknown verdict \"okay\" (one of: compile_error, invalid_plan"));
  CHECK(error_of(R"({"format": "specgen-cost-table/1", "kernels": [{"key": "xyz", "task": "t", "verdict": "ok"}]})")
            .starts_with("t.json: /kernels/0/key: \"xyz\" is not 16 hex digits"));
  CHECK(error_of(R"({"format": "specgen-cost-table/1", "kernels": [{)" + kernel_ok +
                 R"(, "verdict": "ok", "noise": -0.1}]})") == "t.json: /kernels/0/noise: must be a number in [0, 1], got -0.1");
  CHECK(error_of(R"({"format": "specgen-cost-table/1", "kernels": [{)" + kernel_ok +
                 R"(, "verdict": "ok", "compile_s": "fast"}]})") ==
        "t.json: /kernels/0/compile_s: expected a number in [0, 3600], found string \"fast\"");
  CHECK(error_of(R"({"format": "specgen-cost-table/1", "kernels": [
          {"key": "0123456789abcdef", "task": "t", "verdict": "ok"}]})") ==
        "t.json: /kernels/0/runtime_us: must be > 0 for a kernel whose verdict is ok");
  CHECK(error_of(R"({"format": "specgen-cost-table/1", "kernels": [{)" + kernel_ok + R"(, "verdict": "ok"}, {)" +
                 kernel_ok + R"(, "verdict": "ok"}]})") ==
        "t.json: /kernels/1/key: kernel 0123456789abcdef is listed twice");
  CHECK(error_of(R"({"format": "specgen-cost-table/1", "kernels": [], "profile": {"min_samples": 50, "max_samples": 10}})") ==
        "t.json: /profile/max_samples: must be >= min_samples");
}

TEST_CASE("a failing kernel needs no runtime, and unknown fields are ignored") {
  auto t = parse_cost_table(nlohmann::json::parse(R"({"format": "specgen-cost-table/1", "future": 1, "kernels": [
      {"key": "00000000000000AB", "task": "t", "verdict": "fault", "shape": "N=4"}]})"));
  REQUIRE(t);
  REQUIRE(t->find(0xab) != nullptr);
  CHECK(t->find(0xab)->verdict == verdict_kind::fault);
}

TEST_CASE("loading a missing or malformed file says which file and why") {
  auto missing = load_cost_table("/nonexistent/specgen/table.json");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message == "/nonexistent/specgen/table.json: cannot open the file: No such file or directory");

  const auto path = std::filesystem::temp_directory_path() / "specgen_sim_test_bad.json";
  std::ofstream(path) << "{ \"format\": ";
  auto bad = load_cost_table(path);
  std::filesystem::remove(path);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.starts_with(path.string() + ": not valid JSON: "));
}

TEST_CASE("merging tables unites their kernels and rejects conflicting entries") {
  cost_table a{.device = "H200", .profile = {.max_samples = 90}};
  cost_table b{.device = "procedural (not measured)"};
  a.kernels[1] = {.task = "t", .label = "measured", .runtime_us = 5, .baseline_us = 6};
  b.kernels[2] = {.task = "t", .label = "generated", .runtime_us = 7, .baseline_us = 8};
  b.kernels[1] = a.kernels[1];  // the same entry twice is no conflict
  std::vector<cost_table> parts{a, b};
  auto merged = merge_cost_tables(parts);
  REQUIRE(merged);
  CHECK(merged->kernels.size() == 2);
  CHECK(merged->device == "H200 + procedural (not measured)");
  CHECK(merged->profile.max_samples == 90);

  parts[1].kernels[1].label = "remeasured";
  auto conflict = merge_cost_tables(parts);
  REQUIRE_FALSE(conflict);
  CHECK(conflict.error().message.starts_with("cost tables disagree on kernel 0000000000000001 (task t)"));
}

// ---- parameters ------------------------------------------------------------------

TEST_CASE("sim_params round-trip through JSON and bad values are reported by field") {
  const sim_params p{.devices = 8, .seed = 99, .compile_cache = false,
                     .profile = profile_params{.min_samples = 5, .max_samples = 9},
                     .unknown_kernels = unknown_kernel_policy::reject};
  nlohmann::json j = p;
  CHECK(j.get<sim_params>() == p);
  CHECK(parse_sim_params(nlohmann::json::object()).value() == sim_params{});

  auto bad = parse_sim_params(nlohmann::json{{"unknown_kernels", "ignore"}}, "cfg.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().what() == "cfg.json: /unknown_kernels: \"ignore\" is not one of: unjudged, reject");
  CHECK_FALSE(parse_sim_params(nlohmann::json{{"devices", 0}}));
  CHECK_FALSE(nlohmann::json(sim_params{}).contains("profile"));  // absent: use the table's settings
  CHECK_THROWS_AS(nlohmann::json({{"profile", {{"warmup", -1}}}}).get<sim_params>(), specgen::detail::json_read_error);
  CHECK_THROWS_WITH(nlohmann::json({{"profile", {{"warmup", -1}}}}).get<sim_params>(), Catch::StartsWith("/profile/warmup: "));
}

TEST_CASE("a simulated device with impossible parameters fails to construct, naming the field") {
  event_loop<virtual_clock> loop;
  CHECK_THROWS_WITH(simulated_device(loop, test_table(), {.compile_slots = 0}),
                    "sim_params.compile_slots: must be >= 1");
  CHECK_THROWS_WITH(simulated_device(loop, test_table(), {.profile = profile_params{.min_samples = 1}}),
                    "profile_params.min_samples: must be an integer in [2, 10000], got 1");
}

// ---- compile ---------------------------------------------------------------------

TEST_CASE("a compile job holds a compile slot for the table's compile time and reports ok") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table());
  recorder rec{loop};
  dev.submit(job(1, stage::compile, "ok"), rec.callback());
  CHECK(rec.outcomes.empty());  // never called inside submit
  loop.run();
  REQUIRE(rec.outcomes.size() == 1);
  const eval_outcome& o = rec.outcomes[0];
  CHECK(o.id == 1);
  CHECK(o.kind == stage::compile);
  CHECK(o.device == -1);
  CHECK_FALSE(o.cancelled);
  CHECK(o.result.kind == verdict_kind::ok);
  CHECK(o.compile == compile_report{.seconds = 0.4});
  CHECK(o.busy == seconds(0.4));
  CHECK(rec.at[0] == seconds(0.4));
  CHECK(dev.compile_busy_time(0) == seconds(0.4));
  CHECK(dev.stats().jobs_run(stage::compile) == 1);
}

TEST_CASE("a kernel the table marks compile_error fails compilation with the table's summary and log") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table());
  recorder rec{loop};
  dev.submit(job(1, stage::compile, "compile_error"), rec.callback());
  loop.run();
  REQUIRE(rec.outcomes.size() == 1);
  CHECK(rec.outcomes[0].result == verdict_of(verdict_kind::compile_error, "identifier \"tile\" is undefined",
                                             "error: identifier \"tile\" is undefined"));
  CHECK(rec.at[0] == seconds(0.3));
}

TEST_CASE("compile jobs beyond the free slots wait in FIFO order") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table(), {.compile_slots = 2});
  recorder rec{loop};
  dev.submit(job(1, stage::compile, "ok"), rec.callback());             // slot 0: 0.0 - 0.4
  dev.submit(job(2, stage::compile, "compile_error"), rec.callback());  // slot 1: 0.0 - 0.3
  dev.submit(job(3, stage::compile, "fault"), rec.callback());          // slot 1: 0.3 - 0.7
  dev.submit(job(4, stage::compile, "timeout"), rec.callback());        // slot 0: 0.4 - 0.8
  CHECK(dev.queued_compiles() == 2);
  loop.run();
  REQUIRE(rec.outcomes.size() == 4);
  CHECK(rec.outcomes[0].id == 2);
  CHECK(rec.outcomes[1].id == 1);
  CHECK(rec.outcomes[2].id == 3);
  CHECK(rec.outcomes[3].id == 4);
  CHECK(rec.at == std::vector<timestamp>{seconds(0.3), seconds(0.4), seconds(0.3) + seconds(0.4),
                                         seconds(0.4) + seconds(0.4)});
  CHECK(dev.compile_busy_time(0) == seconds(0.8));
  CHECK(dev.compile_busy_time(1) == seconds(0.3) + seconds(0.4));
}

TEST_CASE("a second compile of the same source is a cache hit costing cached_compile_s") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table(), {.cached_compile_s = 0.002});
  recorder rec{loop};
  dev.submit(job(1, stage::compile, "ok"), rec.callback());
  loop.run();
  dev.submit(job(2, stage::compile, "ok"), rec.callback());
  loop.run();
  REQUIRE(rec.outcomes.size() == 2);
  CHECK(rec.outcomes[1].compile == compile_report{.seconds = 0, .cache_hit = true});
  CHECK(rec.outcomes[1].busy == seconds(0.002));
  CHECK(rec.at[1] == seconds(0.4) + seconds(0.002));
  CHECK(dev.stats().cache_hits == 1);
}

TEST_CASE("with the compile cache off every compile costs the full compile time") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table(), {.compile_cache = false});
  recorder rec{loop};
  dev.submit(job(1, stage::compile, "ok"), rec.callback());
  loop.run();
  dev.submit(job(2, stage::compile, "ok"), rec.callback());
  loop.run();
  REQUIRE(rec.outcomes.size() == 2);
  CHECK_FALSE(rec.outcomes[1].compile.cache_hit);
  CHECK(rec.outcomes[1].busy == seconds(0.4));
  CHECK(dev.stats().cache_hits == 0);
}

// ---- validate --------------------------------------------------------------------

TEST_CASE("validation returns the table's verdict after load plus validation time") {
  for (verdict_kind v : {verdict_kind::invalid_plan, verdict_kind::wrong_result, verdict_kind::unstable,
                         verdict_kind::suspicious}) {
    event_loop<virtual_clock> loop;
    simulated_device dev(loop, test_table(), {.load_s = 0.01});
    recorder rec{loop};
    dev.submit(job(1, stage::validate, to_string(v), 2), rec.callback());
    loop.run();
    REQUIRE(rec.outcomes.size() == 1);
    CHECK(rec.outcomes[0].device == 2);
    CHECK(rec.outcomes[0].result ==
          verdict_of(v, fmt::format("{} summary", to_string(v)), fmt::format("{} log", to_string(v))));
    CHECK(rec.outcomes[0].busy == seconds(0.01) + seconds(0.25));
    CHECK(dev.busy_time(2) == seconds(0.01) + seconds(0.25));
    CHECK(dev.busy_time(0) == duration{0});
    CHECK(dev.stats().respawns == 0);
  }
}

TEST_CASE("an ok kernel validates ok") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table());
  recorder rec{loop};
  dev.submit(job(1, stage::validate, "ok", 0), rec.callback());
  loop.run();
  REQUIRE(rec.outcomes.size() == 1);
  CHECK(rec.outcomes[0].result.kind == verdict_kind::ok);
  CHECK_FALSE(rec.outcomes[0].timing.has_value());
  CHECK(rec.at[0] == seconds(0.01) + seconds(0.15));
}

TEST_CASE("a fault keeps the device busy through the worker respawn") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table(), {.respawn_s = 0.8});
  recorder rec{loop};
  dev.submit(job(1, stage::validate, "fault", 0), rec.callback());
  const duration expected = seconds(0.01) + seconds(0.25) + seconds(0.8);
  loop.after(expected - seconds(0.001), [&] {
    CHECK_FALSE(dev.device_free(0));
    CHECK(dev.busy_time(0) == expected - seconds(0.001));  // the running job's share so far
    CHECK_THROWS_AS(dev.submit(job(2, stage::validate, "ok", 0), rec.callback()), std::logic_error);
  });
  loop.run();
  REQUIRE(rec.outcomes.size() == 1);
  CHECK(rec.outcomes[0].result.kind == verdict_kind::fault);
  CHECK(rec.at[0] == expected);
  CHECK(dev.busy_time(0) == expected);
  CHECK(dev.device_free(0));
  CHECK(dev.stats().respawns == 1);
}

TEST_CASE("a timeout costs the deadline instead of the validation time, plus the respawn") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table(), {.respawn_s = 0.5, .deadline_s = 2.0});
  recorder rec{loop};
  dev.submit(job(1, stage::validate, "timeout", 1), rec.callback());
  loop.run();
  REQUIRE(rec.outcomes.size() == 1);
  CHECK(rec.outcomes[0].result.kind == verdict_kind::timeout);
  CHECK(rec.outcomes[0].result.summary == "timeout summary");
  CHECK(dev.busy_time(1) == seconds(0.01) + seconds(2.0) + seconds(0.5));
}

TEST_CASE("a job for a busy or nonexistent device is a caller bug") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table(), {.devices = 2});
  recorder rec{loop};
  dev.submit(job(1, stage::validate, "ok", 1), rec.callback());
  CHECK_THROWS_AS(dev.submit(job(2, stage::profile, "ok", 1), rec.callback()), std::logic_error);
  CHECK_THROWS_AS(dev.submit(job(3, stage::validate, "ok", 2), rec.callback()), std::logic_error);
  CHECK_THROWS_AS(dev.submit(job(4, stage::validate, "ok", -1), rec.callback()), std::logic_error);
  CHECK_THROWS_AS(dev.submit(job(1, stage::compile, "ok"), rec.callback()), std::logic_error);  // id in flight
  loop.run();
  CHECK(rec.outcomes.size() == 1);
}

TEST_CASE("a callback may reuse its device at once") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table());
  recorder rec{loop};
  dev.submit(job(1, stage::validate, "ok", 0), [&](eval_outcome o) {
    rec.callback()(std::move(o));
    dev.submit(job(2, stage::validate, "wrong_result", 0), rec.callback());
  });
  loop.run();
  REQUIRE(rec.outcomes.size() == 2);
  CHECK(rec.at[1] == seconds(0.01) + seconds(0.15) + seconds(0.01) + seconds(0.25));
  CHECK(dev.stats().jobs_run(stage::validate) == 2);
}

// ---- profile ---------------------------------------------------------------------

TEST_CASE("profiling measures the candidate against the interleaved baseline") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table(), {.seed = 1});
  recorder rec{loop};
  dev.submit(job(1, stage::profile, "ok", 3), rec.callback());
  loop.run();
  REQUIRE(rec.outcomes.size() == 1);
  REQUIRE(rec.outcomes[0].timing.has_value());
  const measurement& m = *rec.outcomes[0].timing;
  CHECK(rec.outcomes[0].result.kind == verdict_kind::ok);
  CHECK(m.samples_us.size() == 40);  // low noise: the rule stops at min_samples
  CHECK(m.median_us == Approx(100).epsilon(0.01));
  CHECK(m.baseline_median_us == Approx(200).epsilon(0.01));
  CHECK(m.speedup == Approx(m.baseline_median_us / m.median_us));
  CHECK(m.spread > 0);
  CHECK(m.spread < 0.02);  // IQR of normal noise is 1.35 sd = 0.54%
}

TEST_CASE("a profile job holds its GPU for warm-up plus samples of candidate, baseline and flush, plus overhead") {
  event_loop<virtual_clock> loop;
  const profile_params prof{.warmup = 10, .min_samples = 40, .max_samples = 200, .flush_us = 10, .overhead_s = 0.05};
  simulated_device dev(loop, test_table(), {.profile = prof});
  recorder rec{loop};
  dev.submit(job(1, stage::profile, "exact", 0), rec.callback());
  loop.run();
  REQUIRE(rec.outcomes.size() == 1);
  const duration expected = us(100 + 200 + 10) * (10 + 40) + seconds(0.05);
  CHECK(rec.outcomes[0].busy == expected);
  CHECK(rec.at[0] == expected);
  CHECK(dev.busy_time(0) == expected);
  CHECK(rec.outcomes[0].timing->median_us == 100);
  CHECK(rec.outcomes[0].timing->spread == 0);
  CHECK(rec.outcomes[0].timing->speedup == 2);
}

TEST_CASE("the stopping rule takes more samples for noisier kernels, up to max_samples") {
  event_loop<virtual_clock> loop;
  const profile_params prof{.warmup = 5, .min_samples = 40, .max_samples = 200, .noise_target = 0.005};
  simulated_device dev(loop, test_table(), {.seed = 3, .profile = prof});
  recorder rec{loop};
  dev.submit(job(1, stage::profile, "noisy", 0), rec.callback());
  dev.submit(job(2, stage::profile, "chaotic", 1), rec.callback());
  loop.run();
  REQUIRE(rec.outcomes.size() == 2);
  const auto& noisy = rec.outcomes[0].id == 1 ? rec.outcomes[0] : rec.outcomes[1];
  const auto& chaotic = rec.outcomes[0].id == 2 ? rec.outcomes[0] : rec.outcomes[1];

  // noise 5%: the median's standard error sqrt(pi/2) 0.05 / sqrt(n) reaches 0.5% near n = 157.
  const auto& s = noisy.timing->samples_us;
  CHECK(s.size() > 100);
  CHECK(s.size() < 200);
  sim::detail::running_stats all;
  for (double x : s) all.add(x);
  CHECK(all.median_rse() <= 0.005);  // the candidate side met the target when the rule stopped
  CHECK(noisy.busy == us(100 + 200 + 10) * (5 + static_cast<int>(s.size())) + seconds(0.05));

  // noise 30% never meets the target: the rule stops at max_samples.
  CHECK(chaotic.timing->samples_us.size() == 200);
  CHECK(chaotic.busy == us(100 + 200 + 10) * (5 + 200) + seconds(0.05));
}

TEST_CASE("runtime noise is deterministic in the seed, the kernel and the attempt") {
  auto profile_twice = [](std::uint64_t seed) {
    event_loop<virtual_clock> loop;
    simulated_device dev(loop, test_table(), {.seed = seed});
    recorder rec{loop};
    dev.submit(job(1, stage::profile, "noisy", 0), rec.callback());
    loop.run();
    dev.submit(job(2, stage::profile, "noisy", 0), rec.callback());
    loop.run();
    REQUIRE(rec.outcomes.size() == 2);
    return std::pair{*rec.outcomes[0].timing, *rec.outcomes[1].timing};
  };
  const auto [first, second] = profile_twice(7);
  const auto [first_again, second_again] = profile_twice(7);
  const auto [other_seed, other_seed_second] = profile_twice(8);
  CHECK(first == first_again);
  CHECK(second == second_again);
  CHECK(first.samples_us != second.samples_us);  // a re-profile is a new measurement
  CHECK(first.samples_us != other_seed.samples_us);
  CHECK(first.median_us == Approx(100).epsilon(0.02));
  CHECK(second.median_us == Approx(100).epsilon(0.02));
}

TEST_CASE("profiling a kernel that is not ok fails as its validation would, without a timing") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table());
  recorder rec{loop};
  dev.submit(job(1, stage::profile, "wrong_result", 0), rec.callback());
  loop.run();
  REQUIRE(rec.outcomes.size() == 1);
  CHECK(rec.outcomes[0].result.kind == verdict_kind::wrong_result);
  CHECK_FALSE(rec.outcomes[0].timing.has_value());
  CHECK(rec.outcomes[0].busy == seconds(0.01) + seconds(0.25));
}

// ---- cancel ----------------------------------------------------------------------

TEST_CASE("cancelling a queued compile drops it without holding a slot") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table(), {.compile_slots = 1});
  recorder rec{loop};
  dev.submit(job(1, stage::compile, "ok"), rec.callback());
  dev.submit(job(2, stage::compile, "fault"), rec.callback());
  dev.submit(job(3, stage::compile, "timeout"), rec.callback());
  CHECK(dev.cancel(2));
  CHECK(rec.outcomes.empty());  // reported from a timer, not inside cancel
  CHECK_FALSE(dev.cancel(2));
  loop.run();
  REQUIRE(rec.outcomes.size() == 3);
  CHECK(rec.outcomes[0].id == 2);
  CHECK(rec.outcomes[0].cancelled);
  CHECK(rec.outcomes[0].busy == duration{0});
  CHECK(rec.at[0] == duration{0});
  CHECK(rec.outcomes[2].id == 3);
  CHECK(rec.at[2] == seconds(0.4) + seconds(0.4));  // job 3 ran straight after job 1
  CHECK(dev.compile_busy_time(0) == seconds(0.4) + seconds(0.4));
  CHECK(dev.stats().cancelled == 1);
  CHECK(dev.stats().jobs_run(stage::compile) == 2);
}

TEST_CASE("cancelling a running job frees its device at once and counts only the time held") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table());
  recorder rec{loop};
  dev.submit(job(1, stage::profile, "ok", 0), rec.callback());
  loop.after(seconds(0.05), [&] {
    CHECK(dev.cancel(1));
    CHECK(dev.device_free(0));
    dev.submit(job(2, stage::validate, "ok", 0), rec.callback());
  });
  loop.run();
  REQUIRE(rec.outcomes.size() == 2);
  CHECK(rec.outcomes[0].id == 1);
  CHECK(rec.outcomes[0].cancelled);
  CHECK_FALSE(rec.outcomes[0].timing.has_value());
  CHECK(rec.outcomes[0].busy == seconds(0.05));
  CHECK(rec.at[1] == seconds(0.05) + seconds(0.01) + seconds(0.15));
  CHECK(dev.busy_time(0) == seconds(0.05) + seconds(0.01) + seconds(0.15));
  CHECK(dev.stats().jobs_run(stage::profile) == 0);
  CHECK_FALSE(dev.cancel(1));
  CHECK_FALSE(dev.cancel(2));  // finished jobs cannot be cancelled
}

TEST_CASE("cancelling a running compile hands its slot to the next queued compile") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table(), {.compile_slots = 1});
  recorder rec{loop};
  dev.submit(job(1, stage::compile, "ok"), rec.callback());
  dev.submit(job(2, stage::compile, "compile_error"), rec.callback());
  loop.after(seconds(0.1), [&] { dev.cancel(1); });
  loop.run();
  REQUIRE(rec.outcomes.size() == 2);
  CHECK(rec.outcomes[0].cancelled);
  CHECK(rec.outcomes[0].busy == seconds(0.1));
  CHECK(rec.at[1] == seconds(0.1) + seconds(0.3));
  CHECK(dev.compile_busy_time(0) == seconds(0.1) + seconds(0.3));
  CHECK(dev.stats().cache_hits == 0);
}

// ---- unknown kernels -------------------------------------------------------------

TEST_CASE("a kernel missing from the table gets no verdict and is counted") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table(), {.unknown_compile_s = 0.5});
  recorder rec{loop};
  dev.submit(job(1, stage::compile, "missing"), rec.callback());
  dev.submit(job(2, stage::validate, "missing", 0), rec.callback());
  loop.run();
  REQUIRE(rec.outcomes.size() == 2);
  for (const auto& o : rec.outcomes) {
    // No verdict: the device measured nothing for the kernel.
    CHECK(o.unjudged);
    CHECK(o.result.summary ==
          fmt::format("simulated device: kernel {} is not in the cost table", format_key(key_of("missing"))));
  }
  CHECK(rec.outcomes[0].id == 2);
  CHECK(rec.outcomes[0].busy == seconds(0.01));  // the module load that found nothing to run
  CHECK(rec.outcomes[1].busy == seconds(0.5));
  CHECK(dev.stats().unknown_kernels == 2);
}

TEST_CASE("with unknown kernels rejected, submitting one throws") {
  event_loop<virtual_clock> loop;
  simulated_device dev(loop, test_table(), {.unknown_kernels = unknown_kernel_policy::reject});
  CHECK_THROWS_AS(dev.submit(job(1, stage::compile, "missing"), [](eval_outcome) {}), std::out_of_range);
  CHECK(dev.queued_compiles() == 0);
}

// ---- hostile and careless tables -----------------------------------------------------------

TEST_CASE("cost-table times and sample counts are read within physical ranges") {
  auto error_of = [](const std::string& kernel, const std::string& profile = "{}") {
    auto t = parse_cost_table(nlohmann::json::parse(R"({"format": "specgen-cost-table/1", "kernels": [{"key": "0123456789abcdef",
        "task": "t", "verdict": "ok", )" + kernel + "}], \"profile\": " + profile + "}"), "t.json");
    REQUIRE_FALSE(t);
    return t.error().what();
  };
  // 1e-300 us would report a speedup of 1e302.
  CHECK(error_of(R"("runtime_us": 1e-300, "baseline_us": 1)") ==
        "t.json: /kernels/0/runtime_us: must be a number in [0.001, 100000000], or 0 for not measured, got 1e-300");
  CHECK_THAT(error_of(R"("runtime_us": 1, "baseline_us": 1e300)"), Catch::Contains("/kernels/0/baseline_us"));
  CHECK_THAT(error_of(R"("runtime_us": 1, "baseline_us": 1, "compile_s": 1e30)"), Catch::Contains("/kernels/0/compile_s"));
  CHECK_THAT(error_of(R"("runtime_us": 1, "baseline_us": 1, "noise": 1e300)"), Catch::Contains("/kernels/0/noise"));
  // 2e9 samples would hang the simulated profiler, or exhaust its memory.
  CHECK(error_of(R"("runtime_us": 1, "baseline_us": 1)", R"({"max_samples": 2000000000})") ==
        "t.json: /profile/max_samples: must be an integer in [2, 10000], got 2000000000");
  CHECK_THAT(error_of(R"("runtime_us": 1, "baseline_us": 1)", R"({"warmup": 2147483647})"), Catch::Contains("/profile/warmup"));
  event_loop<virtual_clock> loop;
  CHECK_THROWS_AS(simulated_device(loop, cost_table{}, {.profile = profile_params{.max_samples = 2'000'000'000}}),
                  std::invalid_argument);
}

TEST_CASE("a cost table that is a FIFO or a directory is an error value at once") {
  const auto dir = std::filesystem::temp_directory_path() / ("specgen_sim_test_fifo_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  REQUIRE(::mkfifo((dir / "t.json").c_str(), 0600) == 0);
  auto fifo = load_cost_table(dir / "t.json");
  auto directory = load_cost_table(dir);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(fifo);
  CHECK_THAT(fifo.error().message, Catch::Contains("FIFO") && Catch::Contains("not a regular file"));
  REQUIRE_FALSE(directory);
  CHECK_THAT(directory.error().message, Catch::Contains("a directory"));
}

