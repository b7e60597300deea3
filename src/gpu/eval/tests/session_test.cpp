// device_session against specgen-fake-worker: the verdict mapping, the
// reference cache and the decoding of worker answers, end to end, without a GPU.
#include "fixture.hpp"
#include "internal.hpp"

#include <catch2/catch.hpp>

#include <specgen/stored_reference.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

using namespace fixture;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<device_session> open_session(session_config c = fake_config()) {
  auto s = device_session::open(std::move(c));
  REQUIRE(s);
  return std::move(*s);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a correct candidate is validated and profiled against the baseline") {
  auto s = open_session();
  const task t = sum_task();
  evaluation e = s->evaluate(t, make_candidate("good_add"));
  INFO(e.result.summary << "\n" << e.result.log);
  REQUIRE(e.result.kind == verdict_kind::ok);
  REQUIRE(e.timing);
  CHECK(e.timing->median_us == Approx(100));
  CHECK(e.timing->baseline_median_us == Approx(200));
  CHECK(e.timing->speedup == Approx(2));
  CHECK(e.timing->sm_clock_mhz == Approx(0.5 * (1755 + 1980)));
  CHECK(e.timing->samples_us.size() == 20);
  for (const char* m : {"noise", "samples", "event_vs_cupti", "roofline_fraction", "effective_dram_gbps"})
    CHECK(e.timing->metrics.contains(m));
  CHECK(e.timing->metrics.at("event_vs_cupti") == Approx(-0.03));
  // 2 shapes x 5 cases, then the recheck at the benchmark shape.
  auto st = s->stats();
  CHECK(st.reference_runs == 11);
  CHECK(st.validations == 1);
  CHECK(st.profiles == 1);

  // A second candidate reuses every reference output.
  CHECK(s->validate(t, make_candidate("good_other", 2)).kind == verdict_kind::ok);
  CHECK(s->stats().reference_runs == 11);
  CHECK(s->stats().reference_hits >= 10);
}

TEST_CASE("wrong outputs are wrong_result with the mismatch at the first shape") {
  auto s = open_session();
  verdict v = s->validate(sum_task(), make_candidate("wrong_add"));
  CHECK(v.kind == verdict_kind::wrong_result);
  REQUIRE(v.mismatch);
  CHECK(v.mismatch->shape == "N=1");
  CHECK(v.mismatch->output == "c");
  CHECK(v.mismatch->count == 1);
  CHECK(contains(v.summary, "output 'c' at N=1"));
  CHECK(contains(v.log, "case: seed 1"));
}

TEST_CASE("a later run disagreeing with the first is unstable") {
  auto s = open_session();
  verdict v = s->validate(sum_task(), make_candidate("racy_add"));
  CHECK(v.kind == verdict_kind::unstable);
  CHECK(contains(v.summary, "run 2 of 2 on these inputs"));
  CHECK(v.mismatch);
}

TEST_CASE("outputs never written fail as degenerate") {
  auto s = open_session();
  verdict v = s->validate(sum_task(), make_candidate("unwritten_add"));
  CHECK(v.kind == verdict_kind::wrong_result);
  CHECK(contains(v.summary, "never written"));
}

TEST_CASE("broken guards and changed inputs have verdicts of their own") {
  auto s = open_session();
  verdict oob = s->validate(sum_task(), make_candidate("oob_add"));
  CHECK(oob.kind == verdict_kind::out_of_bounds_write);
  CHECK(contains(oob.summary, "wrote outside output 'c' at N=1"));
  verdict clobber = s->validate(sum_task(), make_candidate("clobber_add"));
  CHECK(clobber.kind == verdict_kind::input_mutation);
  CHECK(contains(clobber.summary, "modified its input 'a' at N=1"));
  verdict nan = s->validate(sum_task(), make_candidate("nan_add"));
  CHECK(nan.kind == verdict_kind::nonfinite_output);
  CHECK(contains(nan.summary, "1 element is NaN or inf where the reference is finite"));
}

TEST_CASE("every input set of a shape runs in one loaded module, so a kernel that keeps its first result fails") {
  auto s = open_session();
  verdict v = s->validate(sum_task(), make_candidate("stale_add"));
  CHECK(v.kind == verdict_kind::wrong_result);
  CHECK(contains(v.summary, "call 2 in one loaded module returned what call 1 should have"));
  CHECK(contains(v.log, "case: seed 2, normal float inputs (call 2 in one loaded module)"));
  // One reference per case and shape; the candidate's runs take one worker call per shape.
  CHECK(s->validate(sum_task(), make_candidate("good_add")).kind == verdict_kind::ok);
}

TEST_CASE("fp32 rounding within the magnitude of the terms passes; beyond abs and rel without terms it fails") {
  auto s = open_session();
  task t = sum_task();
  t.outputs[0].tol = {.abs = 0, .rel = 0, .terms = 16};
  verdict v = s->validate(t, make_candidate("rounded_add"));
  INFO(v.summary << "\n" << v.log);
  CHECK(v.kind == verdict_kind::ok);
  const auto runs = s->stats().reference_runs;
  // The reference on absolute inputs was computed for every case of the first shape it needed.
  CHECK(runs > 2 * 5);
  t.outputs[0].tol.terms = 2;  // 2^-22 > 2 * 2^-24: out of the allowance
  verdict tight = s->validate(t, make_candidate("rounded_add"));
  CHECK(tight.kind == verdict_kind::wrong_result);
  t.outputs[0].tol.terms = 0;  // the fixed pair alone; `large` no longer applies either
  verdict fixed = s->validate(t, make_candidate("rounded_add"));
  CHECK(fixed.kind == verdict_kind::wrong_result);
}

TEST_CASE("the evaluator's extra distributions apply where the task's tolerances hold for them") {
  using eval_detail::case_applies;
  task t = sum_task();
  const validation_case own{1, std::nullopt}, large{5, distribution::large}, normal{2, distribution::normal};
  CHECK(case_applies(t, own));
  CHECK(case_applies(t, large));  // every float output has a terms allowance
  t.outputs[0].tol.terms = 0;
  CHECK(case_applies(t, own));
  CHECK_FALSE(case_applies(t, large));
  t.distributions = std::vector<distribution>{distribution::normal};
  CHECK(case_applies(t, normal));
  CHECK_FALSE(case_applies(t, large));
  t.distributions = std::vector<distribution>{};
  CHECK_FALSE(case_applies(t, normal));

  // Stated distributions are kept; named random ones are replaced, floats only.
  t = sum_task();
  t.inputs[1].init = *parse_distribution("uniform(2, 3)");
  t.validation_inits = {{}, {{"a", *parse_distribution("normal(1000, 1)")}}};
  auto c0 = eval_detail::make_case(t, 0, large);
  CHECK(to_string(c0.dists[0]) == "large");
  CHECK(to_string(c0.dists[1]) == "uniform(2, 3)");
  auto c1 = eval_detail::make_case(t, 1, large);
  CHECK(to_string(c1.dists[0]) == "normal(1000, 1)");
  CHECK(eval_detail::case_text(t, c1) == "seed 5, large float inputs, a: normal(1000, 1)");
  CHECK(eval_detail::reference_key(1, {{"N", 4}}, c0) != eval_detail::reference_key(1, {{"N", 4}}, c1));

  // A session runs only the cases that apply: the reference count says how many.
  auto s = open_session();
  task own_only = sum_task();
  own_only.distributions = std::vector<distribution>{};
  CHECK(s->validate(own_only, make_candidate("good_add")).kind == verdict_kind::ok);
  CHECK(s->stats().reference_runs == 2);  // 2 shapes x 1 case
}

TEST_CASE("faults and timeouts reported by the worker; the next candidate gets a fresh worker") {
  auto s = open_session();
  const task t = sum_task();
  verdict f = s->validate(t, make_candidate("fault_add"));
  CHECK(f.kind == verdict_kind::fault);
  CHECK(contains(f.summary, "faulted"));
  CHECK(contains(f.log, "CUDA_ERROR_ILLEGAL_ADDRESS"));
  CHECK(s->validate(t, make_candidate("good_add")).kind == verdict_kind::ok);
  verdict to = s->validate(t, make_candidate("timeout_add"));
  CHECK(to.kind == verdict_kind::timeout);
  CHECK(s->validate(t, make_candidate("good_add")).kind == verdict_kind::ok);
  CHECK(s->stats().worker.respawns >= 2);
}

TEST_CASE("a kernel that faults only with shared memory poisoned keeps its fault verdict and is told why") {
  auto s = open_session();
  const task t = sum_task();
  verdict v = s->validate(t, make_candidate("smemfault_add"));
  INFO(v.summary << "\n" << v.log);
  CHECK(v.kind == verdict_kind::fault);
  CHECK(contains(v.summary, "faulted"));
  CHECK(contains(v.summary, "it runs to completion when shared memory is not filled with poison words (0xffffffff"));
  CHECK(contains(v.summary, "the fault likely comes from reading shared memory before it is written"));
  CHECK(s->stats().poison_fault_reruns == 1);
  // A kernel that faults either way gets no such hint, and the log says so.
  verdict always = s->validate(t, make_candidate("fault_add"));
  CHECK(always.kind == verdict_kind::fault);
  CHECK_FALSE(contains(always.summary, "shared memory"));
  CHECK(contains(always.log, "it faults as well when shared memory is not poisoned first"));
  CHECK(s->stats().poison_fault_reruns == 2);
  // Without the poison there is nothing to tell apart: no second run.
  session_config plain = fake_config();
  plain.validation.shared_memory_poison.clear();
  auto p = open_session(plain);
  CHECK(p->validate(t, make_candidate("smemfault_add")).kind == verdict_kind::ok);
  CHECK(p->validate(t, make_candidate("fault_add")).kind == verdict_kind::fault);
  CHECK(p->stats().poison_fault_reruns == 0);
  CHECK(s->validate(t, make_candidate("good_add")).kind == verdict_kind::ok);
}

TEST_CASE("launch, load and memory failures map to their verdicts") {
  auto s = open_session();
  const task t = sum_task();
  CHECK(s->validate(t, make_candidate("launchfail_add")).kind == verdict_kind::invalid_plan);
  CHECK(s->validate(t, make_candidate("loadfail_add")).kind == verdict_kind::compile_error);
  verdict oom = s->validate(t, make_candidate("oom_add"));
  CHECK(oom.kind == verdict_kind::fault);
  CHECK(contains(oom.summary, "out of device memory"));
}

TEST_CASE("a hung, crashed or babbling worker is a timeout or a fault, never a host crash") {
  auto s = open_session();
  const task t = sum_task();
  const auto t0 = std::chrono::steady_clock::now();
  verdict hang = s->validate(t, make_candidate("hang_add"));
  CHECK(hang.kind == verdict_kind::timeout);
  CHECK(contains(hang.summary, "no answer from the worker"));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  verdict crash = s->validate(t, make_candidate("crash_add"));
  CHECK(crash.kind == verdict_kind::fault);
  CHECK(contains(crash.summary, "crashed"));
  verdict garbage = s->validate(t, make_candidate("garbage_add"));
  CHECK(garbage.kind == verdict_kind::fault);
  CHECK(contains(garbage.summary, "protocol"));
  verdict refused = s->validate(t, make_candidate("refuse_add"));
  CHECK(refused.kind == verdict_kind::fault);
  CHECK(contains(refused.summary, "refused"));
  for (const char* k : {"badoffset_add", "badlength_add", "nonsense_add"}) {
    verdict v = s->validate(t, make_candidate(k));
    INFO(k << ": " << v.summary << " / " << v.log);
    CHECK(v.kind == verdict_kind::fault);
    CHECK(contains(v.summary, "nonsense"));
  }
  CHECK(s->validate(t, make_candidate("good_add")).kind == verdict_kind::ok);
}

TEST_CASE("module_missing makes the session send the cubin again") {
  auto s = open_session();
  CHECK(s->validate(sum_task(), make_candidate("forget_add")).kind == verdict_kind::ok);
  CHECK(s->stats().module_resends >= 1);
}

TEST_CASE("compile errors and bad plans are caught before the worker") {
  auto s = open_session();
  const task t = sum_task();
  candidate broken = make_candidate("good_add");
  broken.source = "extern \"C\" __global__ void good_add(float* c) { c[0] = undefined_name; }";
  compile_outcome co = s->compile(t, broken);
  CHECK(co.result.kind == verdict_kind::compile_error);
  CHECK(contains(co.result.log, "undefined_name"));
  CHECK(!co.binary);

  candidate unknown = make_candidate("good_add");
  unknown.plan = add_plan("not_defined");
  auto u = s->compile(t, unknown);
  CHECK(u.result.kind == verdict_kind::invalid_plan);
  CHECK(contains(u.result.summary, "'not_defined'"));

  candidate syntax = make_candidate("good_add");
  syntax.plan = "launch good_add grid(N block(256)";
  CHECK(s->compile(t, syntax).result.kind == verdict_kind::invalid_plan);

  candidate big = make_candidate("good_add");
  big.plan = "launch good_add grid(cdiv(N, 2048)) block(2048) args(a, b, c, N)";
  auto b = s->compile(t, big);
  CHECK(b.result.kind == verdict_kind::invalid_plan);
  CHECK(contains(b.result.summary, "at N=1"));

  auto ok = s->compile(t, make_candidate("good_add"));
  CHECK(ok.result.kind == verdict_kind::ok);
  REQUIRE(ok.binary);
  CHECK(!ok.binary->cubin.empty());
  CHECK(ok.report.registers > 0);
  CHECK(s->validate(t, broken).kind == verdict_kind::compile_error);
}

TEST_CASE("a failing reference is the task's fault, told apart from the candidate's") {
  auto s = open_session();
  task t = sum_task();
  t.reference = {.source = add_source("fault_ref"), .plan = add_plan("fault_ref"), .host = {}};
  verdict v = s->validate(t, make_candidate("good_add"));
  CHECK(v.kind == verdict_kind::fault);
  CHECK(contains(v.summary, "the task's reference failed at N=1"));
  CHECK(v.log.starts_with("reference:"));
}

TEST_CASE("a host reference computes the expected outputs; a host baseline means candidate only") {
  session_config c = fake_config();
  int calls = 0;
  c.host_references["host_sum"] = [&](const task& t, const shape_binding& shape,
                                      const std::vector<std::span<const std::byte>>& in) {
    ++calls;
    const auto n = static_cast<std::size_t>(*element_count(t.outputs[0], shape));
    std::vector<std::byte> out(n * 4);
    for (std::size_t i = 0; i < n; ++i) {
      float a, b;
      std::memcpy(&a, in[0].data() + 4 * i, 4);
      std::memcpy(&b, in[1].data() + 4 * i, 4);
      const float sum = a + b;
      std::memcpy(out.data() + 4 * i, &sum, 4);
    }
    return std::vector<std::vector<std::byte>>{out};
  };
  auto s = open_session(c);
  task t = sum_task();
  t.reference = {.source = {}, .plan = {}, .host = "host_sum"};
  t.baseline = t.reference;
  CHECK(s->validate(t, make_candidate("good_add")).kind == verdict_kind::ok);
  CHECK(calls == 10);
  CHECK(s->validate(t, make_candidate("wrong_add")).kind == verdict_kind::wrong_result);
  evaluation e = s->profile(t, make_candidate("good_add"));
  REQUIRE(e.result.kind == verdict_kind::ok);
  CHECK(e.timing->speedup == 0);
  CHECK(contains(e.result.log, "host callback 'host_sum'"));

  t.reference.host = "not_registered";
  verdict v = s->validate(t, make_candidate("good_add"));
  CHECK(v.kind == verdict_kind::fault);
  CHECK(contains(v.summary, "the task's reference failed"));
}

namespace {

/// `sum_task` with its reference stored in `file`: two cases at the benchmark
/// shape (N = 4096, seeds 1 and 2), three at N = 1000 and one at N = 1, each
/// output the sum of the inputs, with terms (|a| + |b|) when `terms`; the
/// baseline a recorded 0.3 ms on "NVIDIA H200".
task stored_sum_task(const std::filesystem::path& file, bool terms, int benchmark_cases = 2) {
  task t = sum_task();
  t.benchmark_shape = {{"N", 4096}};
  std::vector<stored_case_data> cases;
  auto add = [&](std::int64_t n, std::uint64_t seed) {
    stored_case_data c{.shape = {{"N", n}}, .seed = seed, .what = fmt::format("stored seed {} at N={}", seed, n),
                       .inputs = {}, .outputs = {}, .terms = {}};
    const auto a = make_input(t.inputs[0], n, seed), b = make_input(t.inputs[1], n, seed + 100);
    std::vector<std::byte> sum(a.size()), mag(a.size());
    for (std::int64_t i = 0; i < n; ++i) {
      float x, y;
      std::memcpy(&x, a.data() + 4 * i, 4);
      std::memcpy(&y, b.data() + 4 * i, 4);
      const float s = x + y, m = std::fabs(x) + std::fabs(y);
      std::memcpy(sum.data() + 4 * i, &s, 4);
      std::memcpy(mag.data() + 4 * i, &m, 4);
    }
    c.inputs = {{"a", a}, {"b", b}};
    c.outputs = {{"c", sum}};
    if (terms) c.terms = {{"c", mag}};
    cases.push_back(std::move(c));
  };
  for (int seed = 1; seed <= benchmark_cases; ++seed) add(4096, static_cast<std::uint64_t>(seed));
  for (std::uint64_t seed : {1, 2, 3}) add(1000, seed);
  add(1, 1);
  REQUIRE(stored_reference::write(file, t.name, cases));
  t.reference = {.source = {}, .plan = {}, .host = {}, .stored = file.string(), .recorded = {}};
  t.baseline = {.source = {}, .plan = {}, .host = {}, .stored = {},
                .recorded = recorded_time{.ms = 0.3, .device = "NVIDIA H200", .what = "PyTorch eager", .details = {}}};
  t.distributions = std::vector<distribution>{};
  REQUIRE(validate_task(t));
  return t;
}

std::filesystem::path stored_file(const char* name) {
  return std::filesystem::temp_directory_path() / fmt::format("specgen_session_{}_{}.specref", name, ::getpid());
}

}  // namespace

TEST_CASE("a stored reference: its cases are the validation, its inputs are sent, its outputs are the reference") {
  const auto file = stored_file("good");
  auto s = open_session();
  const task t = stored_sum_task(file, true);
  evaluation e = s->evaluate(t, make_candidate("good_add"));
  INFO(e.result.summary << "\n" << e.result.log);
  REQUIRE(e.result.kind == verdict_kind::ok);
  REQUIRE(e.timing);
  // The recorded baseline: 300 us over the stand-in's 100 us, with a note that the GPUs differ.
  CHECK(e.timing->baseline_median_us == Approx(300));
  CHECK(e.timing->speedup == Approx(3));
  CHECK(e.timing->baseline_of == "recorded: PyTorch eager on NVIDIA H200");
  CHECK(contains(e.result.log, "recorded on NVIDIA H200, and this GPU is fake H200"));

  // Every part is read once: the validation's outputs (4 cases), the profile's inputs (2) and the recheck's outputs.
  const auto reads = s->stats().reference_runs;
  CHECK(reads >= 6);
  CHECK(s->validate(t, make_candidate("good_other", 2)).kind == verdict_kind::ok);
  CHECK(s->stats().reference_runs == reads);

  verdict wrong = s->validate(t, make_candidate("wrong_add", 3));
  CHECK(wrong.kind == verdict_kind::wrong_result);
  CHECK(contains(wrong.log, "stored seed 1 at N=1"));
  verdict stale = s->validate(t, make_candidate("stale_add", 4));
  CHECK(stale.kind == verdict_kind::wrong_result);
  CHECK(s->validate(t, make_candidate("clobber_add", 5)).kind == verdict_kind::input_mutation);
  // A kernel returning the timed inputs' outputs at the recheck fails it: the stored recheck case differs.
  evaluation cached = s->profile(t, make_candidate("cache_add", 6));
  CHECK(cached.result.kind == verdict_kind::wrong_result);
  CHECK(contains(cached.result.summary, "the last timed run, on fresh inputs"));
  std::filesystem::remove(file);
}

TEST_CASE("a stored reference with one case at the benchmark shape rechecks on the timed inputs, and says so") {
  const auto file = stored_file("one");
  auto s = open_session();
  const task t = stored_sum_task(file, false, 1);
  evaluation e = s->profile(t, make_candidate("good_add"));
  INFO(e.result.summary << "\n" << e.result.log);
  REQUIRE(e.result.kind == verdict_kind::ok);
  CHECK(e.timing->speedup == Approx(3));
  CHECK(contains(e.result.log, "one case at the benchmark shape: the recheck ran on the timed inputs"));
  std::filesystem::remove(file);
}

TEST_CASE("a stored reference's terms give the allowance; without them abs and rel decide") {
  const auto with = stored_file("terms"), without = stored_file("noterms");
  auto s = open_session();
  task t = stored_sum_task(with, true);
  t.outputs[0].tol = {.abs = 0, .rel = 0, .terms = 16};
  verdict v = s->validate(t, make_candidate("rounded_add"));
  INFO(v.summary << "\n" << v.log);
  CHECK(v.kind == verdict_kind::ok);
  task bare = stored_sum_task(without, false);
  bare.outputs[0].tol = t.outputs[0].tol;
  verdict no_terms = s->validate(bare, make_candidate("rounded_add", 2));
  CHECK(no_terms.kind == verdict_kind::wrong_result);
  CHECK(contains(no_terms.log, "no terms allowance: the stored reference holds no terms"));
  std::filesystem::remove(with);
  std::filesystem::remove(without);
}

TEST_CASE("a damaged or missing stored reference is the task's fault; no baseline means no speedup") {
  const auto file = stored_file("damaged");
  task t = stored_sum_task(file, false);
  {
    auto s = open_session();
    auto ref = stored_reference::open(file);
    REQUIRE(ref);
    const auto at = ref->cases()[2].outputs.at("c").offset + 8;  // the first case at N=1000
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put('\x7f');
    f.close();
    verdict v = s->validate(t, make_candidate("good_add"));
    CHECK(v.kind == verdict_kind::fault);
    CHECK(contains(v.summary, "the task's stored reference is damaged"));
    CHECK(contains(v.summary, "checksum"));
  }
  {
    auto s = open_session();
    std::filesystem::remove(file);
    verdict v = s->validate(t, make_candidate("good_add"));
    CHECK(v.kind == verdict_kind::fault);
    CHECK(contains(v.summary, "the task's stored reference cannot be read"));
  }
  {
    auto s = open_session();
    t = stored_sum_task(file, false);
    t.baseline = {};
    evaluation e = s->evaluate(t, make_candidate("good_add"));
    REQUIRE(e.result.kind == verdict_kind::ok);
    CHECK(e.timing->speedup == 0);
    CHECK(contains(e.result.log, "the task has no baseline (its reference is stored outputs"));
  }
  std::filesystem::remove(file);
}

TEST_CASE("the profiler's decisions") {
  auto s = open_session();
  const task t = sum_task();
  auto profile = [&](const char* k) { return s->profile(t, make_candidate(k)); };

  evaluation fast = profile("fast_add");
  CHECK(fast.result.kind == verdict_kind::suspicious);
  CHECK(contains(fast.result.summary, "peak DRAM bandwidth"));
  CHECK(!fast.timing);

  evaluation cached = profile("cache_add");
  CHECK(cached.result.kind == verdict_kind::wrong_result);
  CHECK(contains(cached.result.summary, "the last timed run, on fresh inputs, disagrees with the reference"));

  for (const char* k : {"foreign_add", "ghost_add", "escape_add"}) {
    evaluation e = profile(k);
    INFO(k << ": " << e.result.summary);
    CHECK(e.result.kind == verdict_kind::suspicious);
    CHECK(contains(e.result.log, "CUPTI:"));
  }

  // The right number of kernels, one of them under a name outside the plan:
  // CUPTI may keep the name of an unloaded module's function; noted, not judged.
  evaluation renamed = profile("renamed_add");
  REQUIRE(renamed.result.kind == verdict_kind::ok);
  CHECK(contains(renamed.result.log, "CUPTI named 1 of the"));
  CHECK(contains(renamed.result.log, "stale_name"));

  evaluation nocupti = profile("nocupti_add");
  REQUIRE(nocupti.result.kind == verdict_kind::ok);
  CHECK(contains(nocupti.result.log, "CUPTI unavailable"));
  CHECK(!nocupti.timing->metrics.contains("event_vs_cupti"));

  evaluation noclock = profile("noclock_add");
  REQUIRE(noclock.result.kind == verdict_kind::ok);
  CHECK(noclock.timing->sm_clock_mhz == 0);

  CHECK(profile("oob_add").result.kind == verdict_kind::out_of_bounds_write);
  CHECK(profile("fault_add").result.kind == verdict_kind::fault);
  CHECK(profile("nonsense_add").result.kind == verdict_kind::fault);
  CHECK(profile("good_add").result.kind == verdict_kind::ok);
}

TEST_CASE("without a peak bandwidth the roofline check is skipped and says so") {
  auto s = open_session(fake_config(fake_device(0)));
  evaluation e = s->profile(sum_task(), make_candidate("fast_add"));
  REQUIRE(e.result.kind == verdict_kind::ok);
  CHECK(contains(e.result.log, "roofline check skipped"));
  CHECK(!e.timing->metrics.contains("roofline_fraction"));
}

TEST_CASE("cancel aborts the call in progress") {
  auto s = open_session();
  CHECK_FALSE(s->cancel());
  const task t = sum_task();
  auto fut = std::async(std::launch::async, [&] { return s->validate(t, make_candidate("slow_add")); });
  std::this_thread::sleep_for(400ms);  // compiled, and inside a worker call by now
  CHECK(s->cancel());
  verdict v = fut.get();
  CHECK(contains(v.summary, "cancelled"));
  CHECK(s->validate(t, make_candidate("good_add")).kind == verdict_kind::ok);
}

TEST_CASE("without a GPU, open says no GPU") {
  session_config c = fake_config();
  c.assumed_device.reset();
  if (specgen::gpu::device_count().value_or(0) > 0) {
    WARN("a GPU is present: the no-GPU answer is not tested here");
    return;
  }
  auto s = device_session::open(c);
  REQUIRE_FALSE(s);
  CHECK(s.error().message.starts_with("no GPU: "));
}

TEST_CASE("the worker program is found from the configuration, the environment, or the build") {
  CHECK(find_worker_program("/x/worker") == "/x/worker");
  CHECK_FALSE(find_worker_program("").empty());
}

TEST_CASE("decode_run checks every offset and length against the binary") {
  using eval_detail::decode_run;
  using json = nlohmann::json;
  const task t = sum_task();
  std::vector<std::byte> bin(16);
  const std::vector<std::size_t> sizes{16};
  auto entry = [](json offset, json length) { return json{{"name", "c"}, {"offset", offset}, {"length", length}}; };
  auto run = [&](std::vector<json> outputs) {
    json list = json::array();
    for (auto& o : outputs) list.push_back(std::move(o));
    return json{{"guards_intact", true}, {"inputs_intact", true}, {"outputs", list}};
  };
  const std::uint64_t huge = 18446744073709551615ull;
  CHECK(decode_run(run({entry(0, 16)}), bin, t, sizes));
  CHECK_FALSE(decode_run(run({entry(8, 16)}), bin, t, sizes));
  CHECK_FALSE(decode_run(run({entry(huge, 16)}), bin, t, sizes));
  CHECK_FALSE(decode_run(run({entry(0, huge)}), bin, t, sizes));
  CHECK_FALSE(decode_run(run({entry(8, huge)}), bin, t, sizes));
  CHECK_FALSE(decode_run(run({entry(-1, 16)}), bin, t, sizes));
  CHECK_FALSE(decode_run(run({entry(0, 12)}), bin, t, sizes));
  CHECK_FALSE(decode_run(run({entry("0", 16)}), bin, t, sizes));
  CHECK_FALSE(decode_run(run({}), bin, t, sizes));
  CHECK_FALSE(decode_run(run({entry(0, 16), entry(0, 16)}), bin, t, sizes));
  CHECK_FALSE(decode_run(json("x"), bin, t, sizes));
  CHECK_FALSE(decode_run(json{{"outputs", json::array()}}, bin, t, sizes));
  auto broken = run({entry(0, 16)});
  broken["guards_intact"] = false;
  auto d = decode_run(broken, bin, t, sizes);
  REQUIRE(d);
  CHECK_FALSE(d->guards_intact);
  CHECK(d->guards_broken == std::vector<std::string>{"?"});
  CHECK(d->outputs.front().data() == bin.data());
}

TEST_CASE("the reference cache drops its oldest entries beyond its budget") {
  reference_cache cache(100);
  auto set = [](std::size_t n) { return std::make_shared<const output_set>(output_set{std::vector<std::byte>(n)}); };
  cache.insert("a", set(60));
  cache.insert("b", set(30));
  CHECK(cache.find("a"));
  cache.insert("c", set(30));
  CHECK_FALSE(cache.find("a"));
  CHECK(cache.find("b"));
  CHECK(cache.find("c"));
  CHECK(cache.bytes() == 60);
}
