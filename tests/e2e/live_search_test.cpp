// The product's main path, end to end: a model server streaming over HTTP
// (the stand-in server, speaking vLLM's wire format and writing the suite's
// real kernels in answer to its prompts) -> the OpenAI backend (SSE, token-id
// forks) -> kernel extraction -> NVRTC -> validation and profiling in a
// worker -> feedback in the next round's prompt -> early termination
// cancelling the stream on the server.
//
// Without a GPU the pool runs the kernels in specgen-fake-worker (verdicts
// scripted by kernel name; compiles are real NVRTC). With a GPU the same test
// runs them in specgen-worker, and every verdict is measured.
#include "fixture.hpp"
#include "standin.hpp"

#include <specgen/backend/openai.hpp>
#include <specgen/engine.hpp>
#include <specgen/gpu/evaluation.hpp>
#include <specgen/journal.hpp>
#include <specgen/modes.hpp>
#include <specgen/replay/trace.hpp>
#include <specgen/task_io.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>

using namespace specgen;
using namespace specgen::policy;
namespace fs = std::filesystem;

namespace {

const fs::path suite = fs::path(SPECGEN_SOURCE_DIR) / "tasks" / "suite";

bool have_gpu() {
  auto n = gpu::device_count();
  return n && *n > 0;
}

gpu::pool_config pool_config_for_this_machine() {
  gpu::pool_config pc;
  pc.devices = {0};
  if (!have_gpu()) {
    pc.devices = {0, 1};  // two stand-in GPUs: validation and profiling side by side
    // The stand-in worker: real NVRTC compiles, scripted runs (no GPU needed).
    pc.session.worker_program = SPECGEN_FAKE_WORKER;
    pc.session.assumed_device = fixture::fake_device();
    pc.session.validation.run_deadline = std::chrono::milliseconds(500);
    pc.session.profile.run_deadline = std::chrono::milliseconds(500);
    pc.session.profile.max_seconds = 1;
    pc.session.profile.warmup = 1;
  }
  return pc;
}

struct prompt_record {
  int round = 0;
  std::string text;
};

}  // namespace

TEST_CASE("a served model writes kernels, the pool judges them, the next prompt says what was measured, and termination cancels on the server") {
  INFO((have_gpu() ? "evaluating on the GPU with specgen-worker" : "no GPU: evaluating with specgen-fake-worker"));
  auto traces = replay::load_traces(suite / "traces");
  REQUIRE(traces);
  auto chooser = std::make_shared<const replay::responsive_traces>(std::move(*traces));
  // Fast decoding so the test takes seconds; contention as in the middle of the published band.
  openai::testing::standin_options so;
  so.tokens_per_s = 1500;
  so.slowdown_per_sequence = contention_middle;
  openai::testing::fake_server server(openai::testing::standin_server_options(chooser, so));

  auto softmax = load_task(suite / "tasks" / "softmax.json");
  REQUIRE(softmax);
  // The stand-in worker computes outputs on the CPU: a smaller timed shape keeps the test quick on a small machine.
  if (!have_gpu()) softmax->benchmark_shape = {{"N", 64}, {"M", 4096}};

  event_loop<steady_clock> loop;
  openai::openai_config oc;
  oc.base_url = server.base_url();
  oc.model = so.model;
  auto model = openai::openai_backend::create(loop, oc);
  REQUIRE(model);
  auto pool = gpu::gpu_pool::create(loop, pool_config_for_this_machine());
  REQUIRE(pool);

  const fs::path jpath = fs::temp_directory_path() / fmt::format("specgen-live-{}.jsonl", ::getpid());
  fs::remove(jpath);
  journal_writer journal(jpath, false);
  auto cfg = mode_config("specgen");
  REQUIRE(cfg);
  cfg->budget.max_rounds = 4;
  // The stand-in worker times every kernel alike (2x), so no kernel beats the history's mean: stop at the
  // first correct fork kernel instead, which on a GPU the default policy does at the first faster one.
  if (!have_gpu()) cfg->termination = termination::first_valid{};
  engine eng(loop, **model, **pool, std::move(*cfg), &journal);
  eng.add_search(std::make_shared<const task>(*softmax));
  const run_result r = eng.run();

  REQUIRE(r.searches.size() == 1);
  const search_result& s = r.searches[0];
  INFO("verdicts " << nlohmann::json(s.verdicts).dump() << ", candidates " << s.candidates << ", forks " << s.forks
                   << ", terminations " << s.terminations << ", stream failures " << s.stream_failures << " ("
                   << s.first_stream_error << ")");
  CHECK(s.rounds == 4);
  CHECK(s.stream_failures == 0);
  CHECK(s.forks > 0);
  CHECK(s.from_forks > 0);
  CHECK(s.profiled > 0);
  CHECK(s.unjudged == 0);
  // Every kernel written was judged by the pool: compiled by NVRTC, then run.
  const auto records = eng.records(0);
  std::set<std::uint64_t> distinct;
  for (const auto& rec : records)
    if (rec.eval && !rec.reused) distinct.insert(rec.cand->content_hash());
  CHECK((*pool)->stats().compiles >= distinct.size());
  // The suite's softmax traces hold a kernel that does not compile (pre-Volta shuffles): NVRTC says so.
  CHECK(s.verdicts.contains("compile_error"));

  // What each round's prompt said, from the journal.
  auto st = load_journal(jpath);
  REQUIRE(st);
  std::vector<prompt_record> prompts;
  {
    std::ifstream in(jpath);
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.value("type", "") == "prompt") prompts.push_back({j.value("round", 0), j.value("prompt", "")});
    }
  }
  REQUIRE(prompts.size() == 4);
  // Round 2's prompt reports round 1's kernels by tag, with their verdicts and what was measured.
  std::map<std::string, const candidate_record*> by_tag;
  for (const auto& rec : records) by_tag.emplace(kernel_tag(*rec.cand), &rec);
  bool saw_compile_log = false, saw_timing = false;
  for (const auto& p : prompts) {
    if (p.round == 0) {
      CHECK(reported_kernels(p.text).empty());
      continue;
    }
    const auto reported = reported_kernels(p.text);
    CHECK(!reported.empty());
    std::set<std::string> bad;
    for (const auto& k : reported) {
      INFO("round " << p.round << " reports " << k.tag << " [" << k.verdict << "]");
      REQUIRE(by_tag.count(k.tag) == 1);
      const candidate_record& rec = *by_tag.at(k.tag);
      CHECK(rec.cand->prov.round < p.round);
      // A draft still being evaluated when its round ended is reported as pending.
      if (rec.eval && k.verdict != "pending") CHECK(k.verdict == std::string(to_string(rec.eval->result.kind)));
      if (replay::is_bad_verdict(k.verdict)) bad.insert(k.tag);
    }
    // What was measured is there: a compile error with its diagnostics, a profiled kernel with its time.
    for (const auto& k : reported)
      if (k.verdict == "compile_error") {
        CHECK(p.text.find("\nline ") != std::string::npos);
        saw_compile_log = true;
      }
    saw_timing = saw_timing || p.text.find(" us against ") != std::string::npos;
    // The model was told; it does not write a failed kernel again.
    for (const auto& rec : records)
      if (rec.cand->prov.round == p.round) CHECK(bad.count(kernel_tag(*rec.cand)) == 0);
  }
  INFO("a compile error was " << (saw_compile_log ? "" : "not ") << "reported in a later prompt");
  CHECK(saw_timing);

  // A fork's kernel beat the history, the engine stopped that round's reasoning, and the server saw the stream closed.
  CHECK(s.terminations > 0);
  // The server notices a closed connection on its next poll: give it a moment.
  server.wait_until(
      [&](const std::vector<openai::testing::request_record>& rs) {
        int closed = 0;
        for (const auto& q : rs) closed += q.path == "/v1/chat/completions" && (q.client_closed || q.aborted);
        return closed >= s.terminations;
      },
      5.0);
  const auto requests = server.requests();
  int chat = 0, closed = 0, completions = 0;
  for (const auto& q : requests) {
    if (q.path == "/v1/chat/completions") {
      ++chat;
      if (q.client_closed || q.aborted) ++closed;
    }
    if (q.path == "/v1/completions") ++completions;
  }
  CHECK(chat == 4);
  CHECK(closed >= s.terminations);
  CHECK(completions == s.forks);
  fs::remove(jpath);

}
