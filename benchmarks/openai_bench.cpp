// specgen-bench openai-client: what the OpenAI backend costs and how fast it
// reacts, against the local vLLM stand-in on 127.0.0.1 (the test suite's
// fake server, run in this process on a thread of its own).
//
//  - Paced: N streams at R tokens/s each for S seconds (the server paces each
//    stream; one token per chunk, as vLLM streams). Measured: client CPU per
//    chunk (the backend's I/O thread plus the loop thread, from their own CPU
//    clocks, so the server's work is not counted), how far chunks arrive
//    behind the server's schedule, and whether that lag grows.
//  - Forks: during the paced run every stream forks once (K samples, its
//    exact prefix ids). Measured: from the fork call to the server receiving
//    the request's first byte (one steady clock for both).
//  - Burst: a few streams unpaced, for the client's cost at full speed.
// Nothing here asserts a time; the targets are printed beside the numbers.
#include "support/cli.hpp"

#include <specgen/backend/openai.hpp>

#include "fake_server.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace specgen::bench {

namespace {

using sc = std::chrono::steady_clock;

double thread_cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

struct phase_result {
  std::uint64_t chunks = 0, main_chunks = 0, expected_main_chunks = 0;
  double wall_s = 0, io_cpu_s = 0, loop_cpu_s = 0;
  std::vector<double> lag_s;             ///< per chunk: arrival behind the stream's schedule
  double lag_first_s = 0, lag_last_s = 0;  ///< mean lag over each stream's first and last 10% of chunks
  std::vector<double> fork_first_byte_s;
  std::vector<double> server_lateness_s;
  std::uint64_t errors = 0;
  [[nodiscard]] double us_per_chunk() const { return chunks ? 1e6 * (io_cpu_s + loop_cpu_s) / static_cast<double>(chunks) : 0; }
};

/// Drives N main streams (and one fork each, when `forks`) to their end.
class driver final : public stream_sink {
 public:
  driver(event_loop<steady_clock>& loop, openai::openai_backend& model, double rate, int samples)
      : loop_(loop), model_(model), rate_(rate), samples_(samples) {}

  /// Starts `streams` streams; each forks first after a quarter of its
  /// `tokens` plus a spread, then every `fork_every` tokens (0: once; no
  /// forks at all without `forks`).
  void start(int streams, bool forks, int tokens, int fork_every) {
    for (int i = 0; i < streams; ++i) {
      reasoning_request r;
      r.system = "You write CUDA kernels.";
      r.prompt = fmt::format("Stream {}: write a fast softmax.", i);
      auto id = model_.start_reasoning(r, *this);
      if (!id) throw std::runtime_error(id.error().what());
      main_[*id] = stream{.fork_at = forks ? static_cast<std::uint64_t>(tokens / 4 + (i * 37) % std::max(tokens / 2, 1)) : 0,
                          .fork_every = static_cast<std::uint64_t>(fork_every)};
      ++open_;
    }
  }

  void on_chunk(const stream_chunk& c) override {
    const auto now = sc::now();
    ++chunks_;
    auto it = main_.find(c.id);
    if (it == main_.end()) return;  // a fork's chunk
    stream& s = it->second;
    ++main_chunks_;
    if (!c.reasoning) return;  // the answer follows an unstreamed </think>: off the reasoning's schedule
    s.ids.insert(s.ids.end(), c.tokens.begin(), c.tokens.end());
    const std::uint64_t n = s.ids.size();
    if (!s.first) {
      s.first = now;
      s.first_n = n;
    } else if (rate_ > 0) {
      const double on_time = static_cast<double>(n - s.first_n) / rate_;
      s.lags.push_back(std::chrono::duration<double>(now - *s.first).count() - on_time);
    }
    if (s.fork_at && s.ids.size() >= s.fork_at) {
      s.fork_at = s.fork_every ? s.fork_at + s.fork_every : 0;
      fork_request f;
      f.parent = c.id;
      f.reasoning_prefix = s.ids;
      f.samples = samples_;
      const auto t = sc::now();
      auto id = model_.fork(f, *this);
      if (!id) throw std::runtime_error(id.error().what());
      fork_trigger_[*id] = t;
      open_ += samples_;
    }
  }

  void on_end(const stream_end& e) override {
    if (e.reason == finish_reason::error) ++errors_;
    if (--open_ == 0) loop_.stop();
  }

  event_loop<steady_clock>& loop_;
  openai::openai_backend& model_;
  double rate_;
  int samples_;
  struct stream {
    std::uint64_t fork_at = 0;  ///< the next fork's position (0: none)
    std::uint64_t fork_every = 0;
    std::vector<token_id> ids{};
    std::optional<sc::time_point> first{};
    std::uint64_t first_n = 0;
    std::vector<double> lags{};
  };
  std::map<stream_id, stream> main_;
  std::map<stream_id, sc::time_point> fork_trigger_;
  std::uint64_t chunks_ = 0, main_chunks_ = 0, errors_ = 0;
  int open_ = 0;
};

phase_result run_phase(int streams, double rate, int tokens, bool forks, int samples, int fork_every = 0) {
  openai::testing::server_options so{.format = openai::testing::wire::vllm, .tokens_per_s = rate};
  so.record_lateness = true;
  so.reasoning.assign(static_cast<std::size_t>(tokens), " tok");
  so.answer = {" done"};
  openai::testing::fake_server server(so);

  event_loop<steady_clock> loop;
  openai::openai_config cfg;
  cfg.base_url = server.base_url();
  cfg.model = so.model;
  cfg.max_streams = streams * 2 + 8;
  auto model = openai::openai_backend::create(loop, cfg);
  if (!model) throw std::runtime_error(model.error().what());

  driver d(loop, **model, rate, samples);
  const double io0 = (*model)->stats().io_cpu_seconds;
  const double loop0 = thread_cpu_now();
  const auto t0 = sc::now();
  loop.hold();
  d.start(streams, forks, tokens, fork_every);
  loop.run();
  loop.release();
  phase_result r;
  r.wall_s = std::chrono::duration<double>(sc::now() - t0).count();
  r.loop_cpu_s = thread_cpu_now() - loop0;
  r.io_cpu_s = (*model)->stats().io_cpu_seconds - io0;
  r.chunks = d.chunks_;
  r.main_chunks = d.main_chunks_;
  r.expected_main_chunks = static_cast<std::uint64_t>(streams) * static_cast<std::uint64_t>(tokens + 1);  // + the answer
  r.errors = d.errors_;
  double first_sum = 0, last_sum = 0;
  std::size_t first_n = 0, last_n = 0;
  for (const auto& [id, s] : d.main_) {
    r.lag_s.insert(r.lag_s.end(), s.lags.begin(), s.lags.end());
    const std::size_t tenth = std::max<std::size_t>(s.lags.size() / 10, 1);
    for (std::size_t i = 0; i < s.lags.size(); ++i) {
      if (i < tenth) {
        first_sum += s.lags[i];
        ++first_n;
      }
      if (i + tenth >= s.lags.size()) {
        last_sum += s.lags[i];
        ++last_n;
      }
    }
  }
  r.lag_first_s = first_n ? first_sum / static_cast<double>(first_n) : 0;
  r.lag_last_s = last_n ? last_sum / static_cast<double>(last_n) : 0;
  for (const auto& q : server.requests()) {
    if (q.path != "/v1/completions") continue;
    const auto dash = q.rid.rfind('-');
    const auto it = d.fork_trigger_.find(std::stoull(q.rid.substr(dash + 1)));
    if (it != d.fork_trigger_.end()) r.fork_first_byte_s.push_back(std::chrono::duration<double>(q.first_byte - it->second).count());
  }
  r.server_lateness_s = server.lateness();
  return r;
}

std::string ms(double s) { return fmt::format("{:.2f} ms", s * 1e3); }
std::string us(double s) { return fmt::format("{:.0f} us", s * 1e6); }

}  // namespace

int run_openai_bench(const programs::options& a) {
  const int streams = a.number<int>("streams", 64);
  const double rate = a.number<double>("rate", 100);
  const double seconds_ = a.number<double>("seconds", 10);
  const int samples = a.number<int>("samples", 2);
  const int burst_streams = a.number<int>("burst-streams", 8);
  const int burst_tokens = a.number<int>("burst-tokens", 4000);
  if (streams < 1 || rate <= 0 || seconds_ <= 0 || samples < 1 || burst_streams < 1 || burst_tokens < 1)
    throw std::invalid_argument("openai-client: --streams, --rate, --seconds, --samples and the burst sizes must be positive");
  const int tokens = static_cast<int>(rate * seconds_);

  fmt::print("openai-client: {} streams x {:.0f} tokens/s for {:.0f} s, one {}-sample fork per stream "
             "(vLLM wire format, local stand-in on 127.0.0.1, same machine)\n", streams, rate, seconds_, samples);
  const phase_result p = run_phase(streams, rate, tokens, true, samples);
  const double per_chunk = p.us_per_chunk();
  fmt::print("  chunks: {} of {} main-stream chunks expected, {} in all with forks; {} stream errors; wall {:.1f} s\n",
             p.main_chunks, p.expected_main_chunks, p.chunks, p.errors, p.wall_s);
  fmt::print("  client CPU: {:.3f} s (I/O thread {:.3f} s, loop thread {:.3f} s) = {:.1f} us per chunk   target <= 50 us: {}\n",
             p.io_cpu_s + p.loop_cpu_s, p.io_cpu_s, p.loop_cpu_s, per_chunk, per_chunk <= 50 ? "met" : "MISSED");
  const bool kept_up = p.main_chunks == p.expected_main_chunks && p.lag_last_s - p.lag_first_s < 0.01;
  fmt::print("  behind the server's schedule: p50 {}, p99 {}, max {}; mean over each stream's first 10% {}, last 10% {}   "
             "target: all delivered, no growth: {}\n",
             ms(percentile(p.lag_s, 0.5)), ms(percentile(p.lag_s, 0.99)), ms(percentile(p.lag_s, 1.0)), ms(p.lag_first_s),
             ms(p.lag_last_s), kept_up ? "met" : "MISSED");
  fmt::print("  (the server's own lateness: p50 {}, p99 {}, max {})\n", ms(percentile(p.server_lateness_s, 0.5)),
             ms(percentile(p.server_lateness_s, 0.99)), ms(percentile(p.server_lateness_s, 1.0)));
  const double fork_p99 = percentile(p.fork_first_byte_s, 0.99);
  fmt::print("  fork call to the server's first request byte ({} forks): p50 {}, p99 {}, max {}   target <= 1 ms: {}\n",
             p.fork_first_byte_s.size(), us(percentile(p.fork_first_byte_s, 0.5)), us(fork_p99),
             us(percentile(p.fork_first_byte_s, 1.0)), fork_p99 <= 1e-3 ? "met (p99)" : "MISSED (p99)");

  // The same fork path on an otherwise quiet machine: one stream (of at most
  // 800 tokens) forking every 20 tokens; finished forks leave their connections for later ones.
  const phase_result q = run_phase(1, rate, std::min(800, tokens), true, 1, 20);
  fmt::print("quiet: 1 stream x {:.0f} tokens/s forking every 20 tokens ({} forks): fork call to first request byte p50 {}, "
             "p99 {}, max {}\n", rate, q.fork_first_byte_s.size(), us(percentile(q.fork_first_byte_s, 0.5)),
             us(percentile(q.fork_first_byte_s, 0.99)), us(percentile(q.fork_first_byte_s, 1.0)));

  fmt::print("burst: {} streams x {} tokens, unpaced\n", burst_streams, burst_tokens);
  const phase_result b = run_phase(burst_streams, 0, burst_tokens, false, 1);
  fmt::print("  {} chunks in {:.2f} s ({:.0f} chunks/s); client CPU {:.3f} s = {:.1f} us per chunk\n", b.chunks, b.wall_s,
             static_cast<double>(b.chunks) / b.wall_s, b.io_cpu_s + b.loop_cpu_s, b.us_per_chunk());

  if (a.has("json")) {
    const nlohmann::json j = {
        {"benchmark", "openai-client"},
        {"paced", {{"streams", streams}, {"tokens_per_s", rate}, {"seconds", seconds_}, {"fork_samples", samples},
                   {"chunks", p.chunks}, {"main_chunks", p.main_chunks}, {"expected_main_chunks", p.expected_main_chunks},
                   {"errors", p.errors}, {"wall_s", p.wall_s}, {"io_cpu_s", p.io_cpu_s}, {"loop_cpu_s", p.loop_cpu_s},
                   {"us_per_chunk", per_chunk}, {"lag_p50_s", percentile(p.lag_s, 0.5)}, {"lag_p99_s", percentile(p.lag_s, 0.99)},
                   {"lag_max_s", percentile(p.lag_s, 1.0)}, {"lag_first_tenth_s", p.lag_first_s}, {"lag_last_tenth_s", p.lag_last_s},
                   {"server_lateness_p99_s", percentile(p.server_lateness_s, 0.99)}, {"forks", p.fork_first_byte_s.size()},
                   {"fork_first_byte_p50_s", percentile(p.fork_first_byte_s, 0.5)}, {"fork_first_byte_p99_s", fork_p99},
                   {"fork_first_byte_max_s", percentile(p.fork_first_byte_s, 1.0)}}},
        {"quiet", {{"forks", q.fork_first_byte_s.size()}, {"fork_first_byte_p50_s", percentile(q.fork_first_byte_s, 0.5)},
                   {"fork_first_byte_p99_s", percentile(q.fork_first_byte_s, 0.99)},
                   {"fork_first_byte_max_s", percentile(q.fork_first_byte_s, 1.0)}}},
        {"burst", {{"streams", burst_streams}, {"tokens", burst_tokens}, {"chunks", b.chunks}, {"wall_s", b.wall_s},
                   {"io_cpu_s", b.io_cpu_s}, {"loop_cpu_s", b.loop_cpu_s}, {"us_per_chunk", b.us_per_chunk()}}}};
    std::ofstream f(a.get("json"));
    f << j.dump(2) << '\n';
    if (!f) throw std::runtime_error(fmt::format("cannot write {}", a.get("json")));
  }
  return 0;
}

}  // namespace specgen::bench
