// specgen-fake-worker: a stand-in worker for the supervisor's and the
// evaluator's tests. It speaks the protocol and then misbehaves as asked.
//
// On its first request, by --mode:
//   --mode=ok       answer like specgen-worker (echo; run and profile scripted, below)
//   --mode=hang     send hello, then never read or answer again (not even pings)
//   --mode=crash    abort() on a request
//   --mode=exit     exit(3) on a request
//   --mode=garbage  write random bytes instead of a response
//   --mode=slow     answer after --delay-ms=N milliseconds
//   --mode=silent   never send hello
//
// In modes ok and slow the "run" and "profile" ops (docs/gpu-runtime.md) are
// answered without a GPU, scripted by the first kernel the plan launches
// (for profile: the candidate's plan). The stand-in computes every f32
// output as the element-wise sum of the f32 inputs, on inputs it generates
// with make_input exactly as the real worker does. The kernel name's prefix
// up to the first '_' picks the behaviour:
//   good (or any other)  correct outputs; profile: 100 us samples, the baseline 200 us
//   slow                 correct, after sleeping 1.5 s per request
//   wrong                element 0 of every output off by 1 in every run
//   racy                 run 1 of each input set correct, its later runs off by 100 at element 0
//   rounded              element 0 off by 2^-22 of the sum of its inputs' magnitudes (fp32 rounding)
//   nan                  element 0 of every output NaN
//   stale                with "same_module": every input set gets the first set's outputs
//                        (a kernel that caches its first result in a __device__ variable)
//   unwritten            outputs left holding the poison pattern
//   oob                  the guards of the first output broken
//   clobber              the first input changed
//   fault / timeout      error_kind fault / timeout, then exit(2) right after the response
//   smemfault            like fault when "smem_poison" is given, correct without it
//                        (a kernel that faults on what it reads from unwritten shared memory)
//   launchfail, loadfail, oom   error_kind launch_failed, load_failed, out_of_memory
//   forget               forget every loaded module first (module_missing unless the cubin is sent)
//   badoffset            an output offset past the end of the binary part
//   badlength            an output 4 bytes short
//   nonsense             "result" is a string
//   refuse               the response is ok: false at the protocol level
//   hang                 never answer;  crash: abort();  garbage: random bytes
//   profile only: fast (0.5 us median), cache (the recheck outputs are those of
//   the timed inputs), foreign (a kernel on a foreign stream), renamed (the
//   right count, one kernel under another name), ghost (one kernel too many),
//   escape (CUPTI kernel time 3x the event time), nocupti (CUPTI unavailable),
//   noclock (no SM clock)
#include "gpu/worker/serve.hpp"

#include <specgen/inputs.hpp>
#include <specgen/plan.hpp>
#include <specgen/task_io.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <thread>

#include <sys/resource.h>

namespace {

using namespace specgen;
using namespace specgen::gpu;
using json = nlohmann::json;
namespace wd = specgen::gpu::detail;

[[noreturn]] void forever() {
  while (true) ::pause();
}

[[noreturn]] void write_garbage() {
  std::mt19937 rng(42);
  std::string junk(256, '\0');
  for (auto& c : junk) c = static_cast<char>(rng());
  junk[0] = 'X';  // never a valid magic by accident
  wd::write_all(STDOUT_FILENO, junk);
  forever();
}

/// The behaviour named by the first kernel of `plan`.
std::string behaviour(const std::string& plan) {
  auto p = parse_plan(plan);
  if (!p || p->launches.empty()) return "good";
  const std::string& k = p->launches.front().kernel;
  return k.substr(0, k.find('_'));
}

json failed(const std::string& kind, const std::string& message, const std::string& cuda = {}) {
  return {{"ok", false}, {"error_kind", kind}, {"message", message}, {"cuda_error", cuda}};
}

struct failure {
  json result;
};

/// Inputs generated as the request says ({"name", "seed", "distribution"?})
/// or taken from the binary part ({"name", "offset", "length"}).
std::vector<std::vector<std::byte>> make_inputs(const task& t, const shape_binding& shape, const json& given,
                                                const std::string& binary, std::optional<std::uint64_t> seed_all) {
  std::vector<std::vector<std::byte>> out;
  for (const auto& spec : t.inputs) {
    auto n = element_count(spec, shape);
    if (!n) throw failure{failed("invalid_request", n.error().message)};
    if (seed_all) {
      out.push_back(make_input(spec, *n, *seed_all));
      continue;
    }
    const json* g = nullptr;
    for (const auto& e : given)
      if (e.value("name", "") == spec.name) g = &e;
    if (!g) throw failure{failed("invalid_request", "input '" + spec.name + "' was not sent")};
    if (g->contains("seed")) {
      std::optional<distribution> d;
      if (g->contains("distribution")) d = parse_distribution(g->at("distribution").get<std::string>());
      out.push_back(make_input(spec, *n, g->at("seed").get<std::uint64_t>(), d));
      if (g->value("abs", false)) make_absolute(out.back(), spec.type);
    } else {
      const auto off = g->at("offset").get<std::size_t>(), len = g->at("length").get<std::size_t>();
      if (off > binary.size() || len > binary.size() - off) throw failure{failed("invalid_request", "input outside")};
      std::vector<std::byte> b(len);
      std::memcpy(b.data(), binary.data() + off, len);
      out.push_back(std::move(b));
    }
  }
  return out;
}

/// Every output: the element-wise f32 sum of the inputs.
std::vector<std::vector<std::byte>> sum_outputs(const task& t, const shape_binding& shape,
                                                const std::vector<std::vector<std::byte>>& inputs) {
  std::vector<std::vector<std::byte>> out;
  for (const auto& spec : t.outputs) {
    auto n = element_count(spec, shape);
    if (!n || spec.type != dtype::f32) throw failure{failed("invalid_request", "the stand-in sums f32 only")};
    std::vector<float> acc(static_cast<std::size_t>(*n), 0.0f);
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      if (t.inputs[k].type != dtype::f32 || inputs[k].size() != acc.size() * 4)
        throw failure{failed("invalid_request", "the stand-in sums equally sized f32 buffers only")};
      for (std::size_t i = 0; i < acc.size(); ++i) {
        float v;
        std::memcpy(&v, inputs[k].data() + 4 * i, 4);
        acc[i] += v;
      }
    }
    std::vector<std::byte> bytes(acc.size() * 4);
    std::memcpy(bytes.data(), acc.data(), bytes.size());
    out.push_back(std::move(bytes));
  }
  return out;
}

void bump(std::vector<std::byte>& out, float by) {
  if (out.size() < 4) return;
  float v;
  std::memcpy(&v, out.data(), 4);
  v += by;
  std::memcpy(out.data(), &v, 4);
}

/// One run's entry; its outputs are appended to `binary`.
json run_entry(const task& t, const std::string& how, int index, std::vector<std::vector<std::byte>> outs,
               std::string& binary) {
  if (how == "wrong") for (auto& o : outs) bump(o, 1.0f);
  if (how == "racy" && index > 0) for (auto& o : outs) bump(o, 100.0f);
  if (how == "unwritten")
    for (std::size_t k = 0; k < outs.size(); ++k) fill_poison(outs[k], t.outputs[k].type);
  json listed = json::array();
  for (std::size_t k = 0; k < outs.size(); ++k) {
    std::size_t offset = binary.size(), length = outs[k].size();
    if (how == "badoffset") offset += 1u << 20;
    if (how == "badlength" && length >= 4) length -= 4;
    listed.push_back({{"name", t.outputs[k].name}, {"offset", offset}, {"length", length}});
    binary.append(reinterpret_cast<const char*>(outs[k].data()), outs[k].size());
  }
  const bool oob = how == "oob", clobber = how == "clobber";
  return {{"elapsed_ms", 0.1},
          {"guards_intact", !oob},
          {"guards_broken", oob ? json::array({t.outputs.front().name}) : json::array()},
          {"inputs_intact", !clobber},
          {"inputs_changed", clobber ? json::array({t.inputs.front().name}) : json::array()},
          {"outputs", listed}};
}

/// The scripted failures shared by run and profile; nullopt: carry on.
std::optional<wd::handled> misbehave(const std::string& how) {
  if (how == "hang") forever();
  if (how == "crash") {
    std::fprintf(stderr, "fake worker: aborting as scripted\n");
    std::abort();
  }
  if (how == "garbage") write_garbage();
  if (how == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto fail = [](json r, bool exit_after = false) {
    return wd::handled{{.ok = true, .result = std::move(r), .error = {}, .binary = {}}, exit_after};
  };
  if (how == "fault") return fail(failed("fault", "an illegal memory access was encountered", "CUDA_ERROR_ILLEGAL_ADDRESS"), true);
  if (how == "timeout") return fail(failed("timeout", "the kernels did not finish within the deadline"), true);
  if (how == "launchfail") return fail(failed("launch_failed", "too many resources requested for launch", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"));
  if (how == "loadfail") return fail(failed("load_failed", "device kernel image is invalid", "CUDA_ERROR_INVALID_IMAGE"));
  if (how == "oom") return fail(failed("out_of_memory", "out of memory", "CUDA_ERROR_OUT_OF_MEMORY"));
  if (how == "nonsense") return fail(json("this is not a result"));
  if (how == "refuse") return wd::handled{{.ok = false, .result = {}, .error = "refused as scripted", .binary = {}}};
  return std::nullopt;
}

std::set<std::string> loaded_modules;

wd::handled run_op(const request& r) {
  const json& a = r.args;
  const std::string how = behaviour(a.value("plan", ""));
  if (auto m = misbehave(how == "smemfault" && a.contains("smem_poison") ? std::string("fault") : how)) return *m;
  auto reply = [](json result, std::string binary = {}) {
    return wd::handled{{.ok = true, .result = std::move(result), .error = {}, .binary = std::move(binary)}};
  };
  try {
    if (how == "forget") loaded_modules.clear();
    const std::string key = a.value("module_key", "");
    if (a.contains("cubin")) {
      loaded_modules.insert(key);
    } else if (!loaded_modules.contains(key)) {
      return reply(failed("module_missing", "module " + key + " is not loaded"));
    }
    auto t = parse_task(a.at("task"), "<run request>");
    if (!t) return reply(failed("invalid_request", t.error().what()));
    const auto shape = a.at("shape").get<shape_binding>();
    const int repeats = a.value("repeats", 1);
    const json sets = a.contains("sets") ? a["sets"] : json::array({a.value("inputs", json::array())});
    std::string binary;
    json runs = json::array();
    std::vector<std::vector<std::byte>> first_outs;
    for (const auto& given : sets) {
      auto inputs = make_inputs(*t, shape, given, r.binary, std::nullopt);
      auto outs = sum_outputs(*t, shape, inputs);
      if (how == "rounded")  // element 0 off by 2^-22 of the magnitude of its terms: fp32 rounding, not a bug
        for (auto& o : outs) {
          float mag = 0, v = 0;
          for (const auto& in : inputs) {
            float x;
            std::memcpy(&x, in.data(), 4);
            mag += std::fabs(x);
          }
          std::memcpy(&v, o.data(), 4);
          v += std::ldexp(mag, -22);
          std::memcpy(o.data(), &v, 4);
        }
      if (how == "nan")
        for (auto& o : outs) {
          const float nan = std::numeric_limits<float>::quiet_NaN();
          std::memcpy(o.data(), &nan, 4);
        }
      // "stale": a kernel that caches its first call's result in the loaded module.
      if (how == "stale" && a.value("same_module", false)) {
        if (first_outs.empty()) first_outs = outs;
        else outs = first_outs;
      }
      for (int i = 0; i < repeats; ++i) runs.push_back(run_entry(*t, how, i, outs, binary));
    }
    json result = runs.front();
    result["ok"] = true;
    result["runs"] = runs;
    result["device"] = {{"index", wd::requested_device()}, {"name", "fake"}, {"arch", "sm_90a"}};
    return reply(std::move(result), std::move(binary));
  } catch (const failure& f) {
    return reply(f.result);
  } catch (const std::exception& e) {
    return reply(failed("invalid_request", e.what()));
  }
}

json side(double median_us, int n) {
  json samples = json::array();
  for (int i = 0; i < n; ++i) samples.push_back(median_us * (1.0 + 0.001 * ((i % 5) - 2)));
  return {{"samples_us", samples}, {"median_us", median_us}, {"noise", 0.001}, {"spread", 0.002}};
}

wd::handled profile_op(const request& r) {
  const json& a = r.args;
  const json cand = a.value("candidate", json::object());
  const std::string plan = cand.value("plan", "");
  const std::string how = behaviour(plan);
  if (auto m = misbehave(how)) return *m;
  auto reply = [](json result, std::string binary = {}) {
    return wd::handled{{.ok = true, .result = std::move(result), .error = {}, .binary = std::move(binary)}};
  };
  try {
    auto t = parse_task(a.at("task"), "<profile request>");
    if (!t) return reply(failed("invalid_request", t.error().what()));
    const auto shape = a.at("shape").get<shape_binding>();
    const auto seed = a.at("seed").get<std::uint64_t>(), recheck_seed = a.at("recheck_seed").get<std::uint64_t>();
    const bool has_baseline = a.contains("baseline") && !a["baseline"].is_null();
    const int n = std::max(a.value("min_samples", 20), 1), cupti_runs = a.value("cupti_runs", 5);
    const double median_us = how == "fast" ? 0.5 : 100.0;
    // The recheck's inputs: sent ones (a stored reference's, "inputs" and
    // "recheck_inputs"), else generated from the seeds.
    const char* sent = how == "cache" ? "inputs" : "recheck_inputs";
    auto inputs = a.contains(sent) ? make_inputs(*t, shape, a[sent], r.binary, std::nullopt)
                                   : make_inputs(*t, shape, json::array(), r.binary, how == "cache" ? seed : recheck_seed);
    std::string binary;
    json recheck = run_entry(*t, how, 0, sum_outputs(*t, shape, inputs), binary);
    recheck["seed"] = recheck_seed;
    auto parsed = parse_plan(plan);
    const int per_run = parsed ? static_cast<int>(parsed->launches.size()) : 1;
    json kernel_us = json::array(), event_us = json::array();
    for (int i = 0; i < cupti_runs; ++i) {
      event_us.push_back(median_us);
      kernel_us.push_back(how == "escape" ? 3 * median_us : 0.97 * median_us);
    }
    json cupti = how == "nocupti"
                     ? json{{"available", false}, {"reason", "libcupti.so could not be loaded"}}
                     : json{{"available", true},
                            {"reason", ""},
                            {"runs", cupti_runs},
                            {"expected_kernels_per_run", per_run},
                            {"kernels", cupti_runs * per_run + (how == "ghost" ? 1 : 0)},
                            {"kernel_names", how == "renamed" ? json::array({"stale_name"}) : json::array()},
                            {"foreign_kernels", how == "renamed" ? 1 : 0},
                            {"foreign_streams", how == "foreign" ? 1 : 0},
                            {"kernel_us", kernel_us},
                            {"event_us", event_us}};
    json result{{"ok", true},
                {"candidate", side(median_us, n)},
                {"baseline", has_baseline ? side(200.0, n) : json(nullptr)},
                {"sm_clock_mhz", how == "noclock" ? json(nullptr) : json{{"min", 1755}, {"max", 1980}, {"samples", 3}}},
                {"l2_flush_bytes", 104857600},
                {"persisting_l2_reset", true},
                {"cupti", cupti},
                {"recheck", recheck},
                {"device", {{"index", wd::requested_device()}, {"name", "fake"}, {"arch", "sm_90a"}}}};
    return reply(std::move(result), std::move(binary));
  } catch (const failure& f) {
    return reply(f.result);
  } catch (const std::exception& e) {
    return reply(failed("invalid_request", e.what()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  namespace wd = specgen::gpu::detail;
  using specgen::gpu::request;
  std::string mode = "ok";
  int delay_ms = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.starts_with("--mode=")) mode = a.substr(7);
    if (a.starts_with("--delay-ms=")) delay_ms = std::atoi(argv[i] + 11);
  }
  // A core dump of a deliberate abort would only slow the test down.
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);

  if (mode == "silent") forever();
  if (!wd::send_hello({{"index", wd::requested_device()}, {"name", "fake"}})) return 0;
  if (mode == "hang") forever();

  return wd::serve(wd::exiting_request_handler([&](const request& r) -> wd::handled {
    if (mode == "crash") {
      std::fprintf(stderr, "fake worker: aborting on request %s\n", r.op.c_str());
      std::abort();
    }
    if (mode == "exit") {
      std::fprintf(stderr, "fake worker: exiting with status 3\n");
      std::exit(3);
    }
    if (mode == "garbage") write_garbage();
    if (mode == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    if (r.op == "run") return run_op(r);
    if (r.op == "profile") return profile_op(r);
    return {{.ok = true, .result = r.args, .error = {}, .binary = r.binary}};
  }));
}
