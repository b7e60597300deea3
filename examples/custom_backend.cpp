// A backend adapter of your own: how to plug an inference engine specgen does
// not know into the search engine (docs/backends.md, "Writing a backend").
//
// The "engine" here is a toy: a worker thread per request that writes canned
// text token by token. A real adapter calls its engine there instead. What
// the adapter shows is the contract of `specgen::backend`:
//  - every callback reaches the sink on the loop's thread (`executor::post`);
//  - a fork continues from exactly the token ids the stream delivered;
//  - after `cancel` no chunk arrives, and each sample still gets one `on_end`.
// The toy writes kernels taken from the procedural corpus, so the simulated
// device's cost table knows them and the search finds real speedups.
#include <specgen/engine.hpp>
#include <specgen/extract.hpp>
#include <specgen/modes.hpp>
#include <specgen/replay/trace_gen.hpp>
#include <specgen/sim/simulated_device.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <thread>

using namespace specgen;
using namespace specgen::policy;

namespace {

/// The toy engine's vocabulary: its canned texts cut into pieces; a token id
/// is a piece's position (plus an offset), so a prefix of ids names its text.
struct script {
  std::vector<std::string> reasoning, answer;
  static std::vector<std::string> pieces(std::string_view text) {  // split after each space or newline
    std::vector<std::string> out;
    std::size_t from = 0;
    for (std::size_t i = 0; i < text.size(); ++i)
      if (text[i] == ' ' || text[i] == '\n') {
        out.emplace_back(text.substr(from, i + 1 - from));
        from = i + 1;
      }
    if (from < text.size()) out.emplace_back(text.substr(from));
    return out;
  }
};

constexpr token_id first_id = 1000;

class toy_backend {
 public:
  toy_backend(executor& loop, script s) : loop_(loop), script_(std::move(s)) {}
  toy_backend(const toy_backend&) = delete;  // worker threads hold `this`
  toy_backend& operator=(const toy_backend&) = delete;
  ~toy_backend() {
    for (auto& [id, r] : requests_) r->stop = true;
    for (auto& [id, r] : requests_) r->worker.join();
  }

  [[nodiscard]] backend_limits limits() const noexcept { return {.max_concurrent_streams = 8, .token_ids = true, .kv_hooks = false}; }

  expected<stream_id, error> start_reasoning(const reasoning_request&, stream_sink& sink) {
    auto& r = add(sink, 1);
    r.worker = std::thread([this, &r] {
      for (std::size_t i = 0; i < script_.reasoning.size() && !r.stop; ++i)
        emit(r, 0, script_.reasoning[i], static_cast<token_id>(i), true);
      for (std::size_t i = 0; i < script_.answer.size() && !r.stop; ++i) emit(r, 0, script_.answer[i], static_cast<token_id>(i), false);
      finish(r, 0);
    });
    return r.id;
  }

  expected<stream_id, error> fork(const fork_request& f, stream_sink& sink) {
    auto parent = requests_.find(f.parent);
    if (parent == requests_.end() || parent->second->emitted.size() < f.reasoning_prefix.size())
      return unexpected(error{fmt::format("toy: no stream {} with that many ids", f.parent)});
    // The exact prefix the engine received. A real engine would continue its
    // KV cache from here; the toy answers with the last kernel written in it.
    std::string prefix;
    for (token_id t : f.reasoning_prefix) prefix += script_.reasoning.at(static_cast<std::size_t>(t - first_id));
    auto kernel = extract_candidate(prefix);
    std::vector<std::string> answer =
        script::pieces(kernel ? prefix.substr(kernel->begin, kernel->end - kernel->begin) : std::string("No kernel yet."));
    auto& r = add(sink, f.samples);
    r.worker = std::thread([this, &r, answer = std::move(answer)] {
      for (std::size_t i = 0; i < answer.size() && !r.stop; ++i)  // the samples decode side by side
        for (int k = 0; k < static_cast<int>(r.ended.size()); ++k) emit(r, k, answer[i], static_cast<token_id>(i), false);
      for (int k = 0; k < static_cast<int>(r.ended.size()); ++k) finish(r, k);
    });
    return r.id;
  }

  void cancel(stream_id id) {
    auto it = requests_.find(id);
    if (it == requests_.end() || it->second->cancelled) return;
    request& r = *it->second;
    r.cancelled = true;  // the loop drops what the worker posts from now on
    r.stop = true;       // and the worker stops generating
    loop_.post([&r] {    // one on_end per sample, from the loop, not from inside cancel()
      for (std::size_t k = 0; k < r.ended.size(); ++k)
        if (!r.ended[k]) {
          r.ended[k] = true;
          r.sink->on_end({.id = r.id, .sample = static_cast<int>(k), .reason = finish_reason::cancelled, .used = {}, .error = {}});
        }
    });
  }

 private:
  struct request {
    stream_id id = 0;
    stream_sink* sink = nullptr;
    std::vector<bool> ended;          // loop thread only
    std::vector<token_id> emitted;    // loop thread only: reasoning ids delivered
    bool cancelled = false;           // loop thread only
    std::atomic<bool> stop = false;   // read by the worker
    std::thread worker;
  };

  request& add(stream_sink& sink, int samples) {
    auto r = std::make_unique<request>();
    r->id = ++next_;
    r->sink = &sink;
    r->ended.assign(static_cast<std::size_t>(samples), false);
    return *requests_.emplace(r->id, std::move(r)).first->second;
  }

  // ---- on the worker thread: generate, and post every result to the loop ----
  void emit(request& r, int sample, const std::string& piece, token_id index, bool reasoning) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));  // "decoding"
    stream_chunk c{.id = r.id, .sample = sample, .reasoning = reasoning, .text = piece, .tokens = {first_id + index}};
    loop_.post([&r, c = std::move(c)] {
      if (r.cancelled) return;
      if (c.reasoning) r.emitted.insert(r.emitted.end(), c.tokens.begin(), c.tokens.end());
      r.sink->on_chunk(c);
    });
  }

  void finish(request& r, int sample) {
    loop_.post([&r, sample] {
      const auto k = static_cast<std::size_t>(sample);
      if (r.cancelled || r.ended[k]) return;
      r.ended[k] = true;
      r.sink->on_end({.id = r.id, .sample = sample, .reason = finish_reason::stop, .used = {}, .error = {}});
    });
  }

  executor& loop_;
  script script_;
  std::map<stream_id, std::unique_ptr<request>> requests_;  // kept until destruction: posted work refers to them
  stream_id next_ = 0;
};

static_assert(specgen::backend<toy_backend>);

}  // namespace

int main() {
  // One task of the procedural corpus; the toy writes its recorded kernels:
  // a first draft inside the reasoning (a fork finds it), a better one as the answer.
  auto corpus = replay::generate_corpus({.tasks = 1, .rounds = 1, .lanes = 1}, 11);
  const replay::trace& t = corpus.traces.front();
  std::string draft;
  for (const auto& fp : t.forks)
    for (const auto& s : fp.samples)
      if (draft.empty() && extract_candidate(s.text)) draft = s.text;
  script s;
  std::string more;
  for (int i = 0; i < 40; ++i) more += "Now unroll and vectorise the loads, then check the tail again.\n";
  s.reasoning = script::pieces("First, a simple version.\n" + draft + "\n" + more);
  s.answer = script::pieces(t.answer.text);

  // The toy decodes a thousand times faster than a real model: evaluate as fast.
  for (auto& [key, e] : corpus.costs.kernels) {
    e.compile_s /= 1000;
    e.validate_s /= 1000;
    e.profile_s /= 1000;
  }
  const sim::sim_params quick{.devices = 2, .load_s = 0.0001,
                              .profile = profile_params{.warmup = 1, .min_samples = 3, .max_samples = 5, .overhead_s = 0.0001}};

  event_loop<steady_clock> loop;  // a backend with threads of its own posts into a real-time loop
  toy_backend model(loop, s);
  sim::simulated_device gpus(loop, corpus.costs, quick);
  engine_config cfg = mode_config("specgen").value();
  cfg.trigger = any_trigger(triggers::fence_closed{{.samples = 2, .languages = {"plan"}}});  // fork once the draft has its plan
  cfg.budget.max_rounds = 1;
  engine search(loop, model, gpus, std::move(cfg));
  search.add_search(std::make_shared<const task>(corpus.tasks.front()));
  const run_result r = search.run();
  const search_result& res = r.searches.front();
  fmt::print("{}: {} forks, {} candidates ({} from forks), best {:.2f}x\n", res.task, res.forks, res.candidates, res.from_forks,
             res.best_speedup);
  return res.forks >= 1 && res.from_forks >= 1 ? 0 : 1;
}
