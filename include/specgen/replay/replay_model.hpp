#pragma once
/// The replay model: a backend that plays recorded reasoning traces in the
/// time of an executor (virtual or real), with a timing model of a vLLM-style
/// server (prefill, per-stream decode speed, slowdown under load, prefix cache,
/// remote KV leases). The model and its constants: docs/replay-model.md.
///
/// @code
///   specgen::event_loop<specgen::virtual_clock> loop;
///   specgen::replay::replay_model model(loop, std::move(*specgen::replay::load_traces("corpus/traces")));
///   auto id = model.start_reasoning({.ctx = {.task = "softmax", .round = 0}, .prompt = prompt}, sink);
///   loop.run();   // the sink sees reasoning chunks, then answer chunks, then on_end
/// @endcode
#include <specgen/backend.hpp>
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/expected.hpp>
#include <specgen/policy/fields.hpp>
#include <specgen/contention.hpp>
#include <specgen/replay/trace.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace replay {

/// The timing model's constants. Where a value comes from is said per field;
/// "chosen" means no source gives it and the value is a plausible default.
struct replay_params {
  /// Decode speed of one stream alone: the SpecGen paper, 60-80 tokens/s
  /// per stream for large reasoning models on an H200 (middle of the range).
  double decode_tokens_per_s = 70.0;
  /// Prompt processing speed: the SpecGen paper, recomputing a 16K-token prefix takes
  /// 1.5-2.5 s on one GPU, i.e. 6.4K-10.7K tokens/s (about the middle).
  double prefill_tokens_per_s = 8000.0;
  /// Fixed part of the time to first token (scheduling, HTTP round trip). Chosen.
  double first_token_overhead_s = 0.05;
  /// Decode slowdown under load: the per-sequence rate is divided by
  /// 1 + slowdown_per_sequence * (active sequences - 1). Fitted to published
  /// measurements of serving stacks (contention.hpp): the middle of the band
  /// they span, about 0.028 (32 sequences decode at 0.53 of a lone stream's
  /// speed); `contention_levels` names the band's ends.
  double slowdown_per_sequence = contention_middle;
  /// Tokens per streamed chunk: vLLM's 16-token KV block, a common server-side
  /// streaming interval. Chosen.
  int chunk_tokens = 16;
  /// Fraction of a fork's prefix (prompt + reasoning prefix) the server's own
  /// prefix cache holds: 1.0 = vLLM reuses the running request's blocks
  /// (the SpecGen paper); lower it to model a limited memory budget.
  double server_prefix_hit = 1.0;
  /// Tokens a fork appends after the prefix (end-of-thinking + answer cue),
  /// always prefilled. Chosen.
  std::uint64_t fork_cue_tokens = 16;
  /// What a fork answers before the trace's first fork point. Chosen.
  no_kernel_answer early_fork_answer{};
  /// Requests in flight (a K-sample fork counts once): a typical vLLM
  /// --max-num-seqs share for one client. Chosen.
  int max_concurrent_streams = 64;
  /// Token ids are drawn from [0, vocab_size): the GLM-4 tokenizer's size. Any value works.
  std::int32_t vocab_size = 151552;

  /// The fields and their ranges: what `from_json` reads and checks, and what
  /// the constructor of `replay_model` checks.
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    using specgen::detail::in;
    constexpr auto rate = in(1e-3, 1e9);  // tokens/s
    f("decode_tokens_per_s", s.decode_tokens_per_s, rate);
    f("prefill_tokens_per_s", s.prefill_tokens_per_s, rate);
    f("first_token_overhead_s", s.first_token_overhead_s, in(0.0, 3600.0));
    f("slowdown_per_sequence", s.slowdown_per_sequence, in(0.0, 100.0));
    f("chunk_tokens", s.chunk_tokens, in(1, 1 << 20));
    f("server_prefix_hit", s.server_prefix_hit, in(0.0, 1.0));
    f("fork_cue_tokens", s.fork_cue_tokens, in<std::uint64_t>(0, limits::max_tokens));
    f("early_fork_answer", s.early_fork_answer);
    f("max_concurrent_streams", s.max_concurrent_streams, in(1, 1 << 20));
    f("vocab_size", s.vocab_size, in<std::int32_t>(1, std::numeric_limits<std::int32_t>::max()));
  }
  friend bool operator==(const replay_params&, const replay_params&) = default;
  friend void to_json(nlohmann::json& j, const replay_params& p) { j = specgen::detail::write_fields(p); }
  /// For `json.get<replay_params>()`: missing keys keep their defaults; an
  /// unknown key or a value out of range throws `detail::json_read_error`,
  /// naming the value's JSON pointer.
  friend void from_json(const nlohmann::json& j, replay_params& p) {
    auto r = specgen::detail::read_fields<replay_params>(j, "");
    if (!r) throw specgen::detail::json_read_error(r.error());
    p = std::move(*r);
  }
};

namespace detail {

/// The id of token `index` of the token sequence salted `salt`.
inline token_id replay_token_id(std::uint64_t salt, std::uint64_t index, std::int32_t vocab) noexcept {
  return static_cast<token_id>(splitmix64(salt ^ splitmix64(index)) % static_cast<std::uint64_t>(vocab));
}

struct expanded_trace {
  token_text reasoning;
  token_text answer;
  std::uint64_t reasoning_salt = 0;
  std::uint64_t answer_salt = 0;
};

}  // namespace detail

/// A backend that replays traces. Not copyable or movable: scheduled timers hold `this`.
class replay_model {
 public:
  replay_model(executor& exec, std::vector<trace> traces, replay_params params = {})
      : exec_(exec), traces_(std::move(traces)), params_(std::move(params)) {
    specgen::detail::require_valid(params_, "replay_params");
    for (std::size_t i = 0; i < traces_.size(); ++i) {
      const trace& t = traces_[i];
      by_slot_[{t.task, t.round}].push_back(i);
    }
  }
  replay_model(const replay_model&) = delete;
  replay_model& operator=(const replay_model&) = delete;
  ~replay_model() {
    for (auto& [id, s] : streams_)
      for (auto& q : s->seqs)
        if (!q.done && q.timer) exec_.cancel(q.timer);
  }

  [[nodiscard]] backend_limits limits() const noexcept {
    return {.max_concurrent_streams = params_.max_concurrent_streams, .token_ids = true, .kv_hooks = false};
  }
  [[nodiscard]] const replay_params& params() const noexcept { return params_; }
  [[nodiscard]] const std::vector<trace>& traces() const noexcept { return traces_; }

  /// Chooses the trace a reasoning request plays, in place of `select(ctx)`;
  /// it may return a trace of its own (rewritten, or not in `traces()`). An
  /// error fails the request with that message.
  using trace_chooser = std::function<expected<trace, error>(const reasoning_request&)>;
  /// From now on, main streams play what `chooser` returns (forks of a stream
  /// answer from that stream's trace); an empty function restores
  /// (task, round, lane) selection. E.g. `responsive_chooser` (responsive.hpp)
  /// plays the round a prompt's feedback calls for.
  void set_trace_chooser(trace_chooser chooser) { chooser_ = std::move(chooser); }

  /// The trace a reasoning request plays. For (task, round, lane): a trace of
  /// that round with that lane, else one for "any" lane, else the round's
  /// traces sorted by lane, index lane mod count. A round with no trace falls
  /// back to the task's recorded rounds (sorted), index (round + seed) mod count.
  [[nodiscard]] expected<const trace*, error> select(const request_context& ctx) const {
    std::vector<int> rounds;
    for (auto it = by_slot_.lower_bound({ctx.task, std::numeric_limits<int>::min()});
         it != by_slot_.end() && it->first.first == ctx.task; ++it)
      rounds.push_back(it->first.second);
    if (rounds.empty()) {
      std::set<std::string> tasks;
      for (const auto& t : traces_) tasks.insert(t.task);
      std::string list;
      for (const auto& t : tasks) list += fmt::format("{}\"{}\"", list.empty() ? "" : ", ", t);
      return unexpected(error{fmt::format("replay: no trace recorded for task \"{}\" (the corpus has {})",
                                                  ctx.task, list.empty() ? "no traces" : list)});
    }
    int round = ctx.round;
    if (!by_slot_.contains({ctx.task, round})) {
      const std::uint64_t n = rounds.size();
      const std::uint64_t k = (static_cast<std::uint64_t>(std::max(ctx.round, 0)) + ctx.seed % n) % n;
      round = rounds[k];
    }
    const auto& candidates = by_slot_.at({ctx.task, round});
    const trace* any = nullptr;
    std::vector<const trace*> laned;
    for (std::size_t i : candidates) {
      const trace& t = traces_[i];
      if (t.lane == ctx.lane) return &t;
      if (!t.lane) any = &t;
      else laned.push_back(&t);
    }
    if (any) return any;
    std::sort(laned.begin(), laned.end(), [](const trace* a, const trace* b) { return *a->lane < *b->lane; });
    return laned[static_cast<std::size_t>(std::max(ctx.lane, 0)) % laned.size()];
  }

  /// Start the main stream: reasoning chunks (reasoning = true), then answer
  /// chunks. The sink must outlive the stream (until its on_end).
  expected<stream_id, error> start_reasoning(const reasoning_request& r, stream_sink& sink) {
    if (auto full = check_capacity(); !full) return unexpected(full.error());
    auto s = std::make_unique<stream>();
    if (chooser_) {
      auto chosen = chooser_(r);
      if (!chosen) return unexpected(chosen.error());
      s->owned = std::make_shared<const trace>(std::move(*chosen));
      s->source = s->owned.get();
      s->text = expand_all(*s->owned);  // not cached: the trace is the stream's own
    } else {
      auto chosen = select(r.ctx);
      if (!chosen) return unexpected(chosen.error());
      s->source = *chosen;
      s->text = expanded(**chosen);
    }
    s->id = ++next_id_;
    s->sink = &sink;
    s->prompt_tokens = (r.system.empty() ? 0 : estimate_tokens(r.system)) + estimate_tokens(r.prompt);
    sequence q;
    q.parts = {part{&s->text->reasoning, true, s->text->reasoning_salt},
               part{&s->text->answer, false, s->text->answer_salt}};
    q.limit = static_cast<std::uint64_t>(std::max(r.params.max_tokens, 0));
    q.base.prompt_tokens = s->prompt_tokens;
    s->seqs.push_back(std::move(q));
    const duration ttft = seconds(params_.first_token_overhead_s +
                                  static_cast<double>(s->prompt_tokens) / params_.prefill_tokens_per_s);
    return launch(std::move(s), ttft);
  }

  /// Fork K non-reasoning samples from `f.reasoning_prefix`, which must equal
  /// the first tokens the parent stream has emitted. Sample i answers
  /// `outcome_of_fork(trace, prefix length, i)`.
  expected<stream_id, error> fork(const fork_request& f, stream_sink& sink) {
    if (auto full = check_capacity(); !full) return unexpected(full.error());
    if (f.samples < 1) return unexpected(error{fmt::format("replay: a fork needs samples >= 1, got {}", f.samples)});
    auto pit = streams_.find(f.parent);
    if (pit == streams_.end() || !pit->second->is_main())
      return unexpected(error{fmt::format("replay: fork parent {} is not a reasoning stream of this model", f.parent)});
    stream& parent = *pit->second;
    const sequence& pq = parent.seqs.front();
    const std::uint64_t p = f.reasoning_prefix.size();
    if (p > pq.emitted_reasoning)
      return unexpected(error{fmt::format("replay: fork prefix has {} tokens but stream {} has emitted only {} reasoning tokens",
                                                  p, f.parent, pq.emitted_reasoning)});
    for (std::uint64_t i = 0; i < p; ++i) {
      const token_id want = detail::replay_token_id(parent.text->reasoning_salt, i, params_.vocab_size);
      if (f.reasoning_prefix[i] != want)
        return unexpected(error{fmt::format("replay: fork prefix differs from stream {}'s reasoning at token {} "
                                                    "(got id {}, the stream emitted {}); a fork must carry the exact ids received",
                                                    f.parent, i, f.reasoning_prefix[i], want)});
    }

    auto s = std::make_unique<stream>();
    s->id = ++next_id_;
    s->sink = &sink;
    s->owned = parent.owned;
    s->source = parent.source;
    s->text = parent.text;
    const std::uint64_t prefix = parent.prompt_tokens + p;
    s->prompt_tokens = prefix + params_.fork_cue_tokens;
    const auto server = static_cast<std::uint64_t>(std::clamp(params_.server_prefix_hit, 0.0, 1.0) * static_cast<double>(prefix));
    const std::uint64_t leased = f.kv ? std::min(f.kv->cached_tokens, prefix - server) : 0;
    const std::uint64_t computed = s->prompt_tokens - server - leased;
    s->answers.reserve(static_cast<std::size_t>(f.samples));
    const auto point = outcome_of_fork(*s->source, p, 0, params_.early_fork_answer).at_token;
    int& drawn = parent.drawn[point ? *point + 1 : 0];
    const int first = drawn;
    drawn += f.samples;
    for (int i = 0; i < f.samples; ++i) {
      const fork_outcome o = outcome_of_fork(*s->source, p, first + i, params_.early_fork_answer);
      s->answers.push_back(expand_answer(o.answer));
      const std::uint64_t salt = fnv1a(s->source->id + "#fork") ^
                                 detail::splitmix64(o.at_token ? *o.at_token + 1 : 0) ^ detail::splitmix64(~o.entry_sample);
      sequence q;
      q.sample = i;
      q.parts = {part{nullptr, false, salt}};
      q.limit = static_cast<std::uint64_t>(std::max(f.params.max_tokens, 0));
      if (i == 0) q.base = usage{.prompt_tokens = s->prompt_tokens, .cached_prompt_tokens = server + leased,
                                 .completion_tokens = 0, .reasoning_tokens = 0};
      s->seqs.push_back(std::move(q));
    }
    for (std::size_t i = 0; i < s->seqs.size(); ++i) s->seqs[i].parts[0].text = &s->answers[i];
    duration ttft = seconds(params_.first_token_overhead_s + static_cast<double>(computed) / params_.prefill_tokens_per_s);
    if (leased > 0) ttft += f.kv->fetch_time;
    return launch(std::move(s), ttft);
  }

  /// Stop a stream at once: no chunk after this call; every unfinished sample
  /// gets on_end(cancelled), from the loop, with usage of the tokens emitted.
  void cancel(stream_id id) {
    auto it = streams_.find(id);
    if (it == streams_.end()) return;
    stream& s = *it->second;
    std::vector<stream_end> ends;
    for (auto& q : s.seqs) {
      if (q.done) continue;
      if (q.timer) exec_.cancel(q.timer);
      ends.push_back(finish(s, q, finish_reason::cancelled));
    }
    if (ends.empty()) return;
    stream_sink* sink = s.sink;
    exec_.at(exec_.now(), [sink, ends = std::move(ends)] {
      for (const auto& e : ends) sink->on_end(e);
    });
  }

  /// Tokens delivered in chunks so far, over all streams.
  [[nodiscard]] std::uint64_t tokens_emitted() const noexcept { return emitted_total_; }
  /// Tokens delivered by one stream (all its samples); 0 for an unknown id.
  [[nodiscard]] std::uint64_t tokens_emitted(stream_id id) const noexcept {
    auto it = streams_.find(id);
    if (it == streams_.end()) return 0;
    std::uint64_t n = 0;
    for (const auto& q : it->second->seqs) n += q.emitted;
    return n;
  }
  /// Sequences decoding or waiting for their first token (a K-sample fork counts K).
  [[nodiscard]] int active_sequences() const noexcept { return active_sequences_; }
  /// Requests not yet ended (a K-sample fork counts once).
  [[nodiscard]] int active_streams() const noexcept { return active_streams_; }

 private:
  struct part {
    const token_text* text = nullptr;
    bool reasoning = false;
    std::uint64_t salt = 0;
  };
  struct sequence {
    int sample = 0;
    std::vector<part> parts;
    std::size_t part_index = 0;
    std::size_t pos = 0;  ///< next token within parts[part_index]
    std::uint64_t emitted = 0;
    std::uint64_t emitted_reasoning = 0;
    std::uint64_t limit = 0;  ///< max_tokens
    usage base;               ///< prompt-side usage reported at the end
    timer_id timer = 0;
    bool done = false;
  };
  struct stream {
    stream_id id = 0;
    stream_sink* sink = nullptr;
    const trace* source = nullptr;
    std::shared_ptr<const trace> owned;  ///< the chooser's trace, when `source` is not in traces_
    std::shared_ptr<const detail::expanded_trace> text;
    std::vector<token_text> answers;  ///< fork samples' texts
    std::uint64_t prompt_tokens = 0;
    std::vector<sequence> seqs;
    /// Samples already drawn per fork point by forks of this (main) stream:
    /// a new fork from the same fork point draws the next recorded samples, as
    /// sampling again at temperature > 0 would, instead of repeating the first.
    std::map<std::uint64_t, int> drawn;
    [[nodiscard]] bool is_main() const noexcept { return answers.empty(); }
  };

  expected<void, error> check_capacity() const {
    if (active_streams_ >= params_.max_concurrent_streams)
      return unexpected(error{.message = fmt::format("replay: {} requests already in flight (max_concurrent_streams); retry when one ends",
                                                  active_streams_), .retryable = true});
    return {};
  }

  static std::shared_ptr<const detail::expanded_trace> expand_all(const trace& t) {
    auto e = std::make_shared<detail::expanded_trace>();
    e->reasoning = expand_reasoning(t);
    e->answer = expand_answer(t.answer);
    e->reasoning_salt = fnv1a(t.id + "#reasoning");
    e->answer_salt = fnv1a(t.id + "#answer");
    return e;
  }

  std::shared_ptr<const detail::expanded_trace> expanded(const trace& t) {
    auto& slot = cache_[&t];
    if (!slot) slot = expand_all(t);
    return slot;
  }

  expected<stream_id, error> launch(std::unique_ptr<stream> s, duration ttft) {
    const stream_id id = s->id;
    stream& ref = *s;
    streams_.emplace(id, std::move(s));
    ++active_streams_;
    active_sequences_ += static_cast<int>(ref.seqs.size());
    for (auto& q : ref.seqs) schedule(ref, q, ttft);
    return id;
  }

  /// Tokens of the next chunk: up to chunk_tokens, within one part, within max_tokens.
  std::size_t next_chunk_size(const sequence& q) const {
    const std::size_t left_in_part = q.parts[q.part_index].text->size() - q.pos;
    const std::uint64_t left_in_limit = q.limit - q.emitted;
    return static_cast<std::size_t>(std::min<std::uint64_t>({static_cast<std::uint64_t>(params_.chunk_tokens),
                                                             left_in_part, left_in_limit}));
  }

  /// Skip empty parts; true when the sequence has nothing left to emit.
  bool exhausted(sequence& q) const {
    while (q.part_index < q.parts.size() && q.pos >= q.parts[q.part_index].text->size()) {
      ++q.part_index;
      q.pos = 0;
    }
    return q.part_index >= q.parts.size() || q.emitted >= q.limit;
  }

  /// Schedule the next chunk `delay` + its decode time from now. The decode
  /// rate is fixed per chunk from the load when the chunk starts.
  void schedule(stream& s, sequence& q, duration delay) {
    if (exhausted(q)) {
      stream_end e = finish(s, q, q.part_index >= q.parts.size() ? finish_reason::stop : finish_reason::length);
      // Deliver from the loop, never from inside start_reasoning / fork.
      q.timer = exec_.at(exec_.now() + delay, [sink = s.sink, e] { sink->on_end(e); });
      return;
    }
    const double rate = params_.decode_tokens_per_s /
                        (1.0 + params_.slowdown_per_sequence * static_cast<double>(std::max(active_sequences_ - 1, 0)));
    const duration decode = seconds(static_cast<double>(next_chunk_size(q)) / rate);
    q.timer = exec_.at(exec_.now() + delay + decode, [this, id = s.id, sample = q.sample] { emit(id, sample); });
  }

  void emit(stream_id id, int sample) {
    stream& s = *streams_.at(id);
    sequence& q = s.seqs[static_cast<std::size_t>(sample)];
    q.timer = 0;
    const part& p = q.parts[q.part_index];
    const std::size_t n = next_chunk_size(q);
    stream_chunk c{.id = id, .sample = sample, .reasoning = p.reasoning,
                   .text = std::string(p.text->slice(q.pos, q.pos + n)), .tokens = {}};
    c.tokens.reserve(n);
    for (std::size_t i = q.pos; i < q.pos + n; ++i) c.tokens.push_back(detail::replay_token_id(p.salt, i, params_.vocab_size));
    q.pos += n;
    q.emitted += n;
    if (p.reasoning) q.emitted_reasoning += n;
    emitted_total_ += n;
    s.sink->on_chunk(c);
    // The sink may have cancelled this stream (or started others) in on_chunk.
    stream& again = *streams_.at(id);
    sequence& q2 = again.seqs[static_cast<std::size_t>(sample)];
    if (q2.done) return;
    if (exhausted(q2)) {
      stream_end e = finish(again, q2, q2.part_index >= q2.parts.size() ? finish_reason::stop : finish_reason::length);
      again.sink->on_end(e);
      return;
    }
    schedule(again, q2, duration{0});
  }

  /// Mark a sequence ended and build its on_end record.
  stream_end finish(stream& s, sequence& q, finish_reason why) {
    q.done = true;
    --active_sequences_;
    if (std::all_of(s.seqs.begin(), s.seqs.end(), [](const sequence& x) { return x.done; })) --active_streams_;
    usage u = q.base;
    u.completion_tokens = q.emitted;
    u.reasoning_tokens = q.emitted_reasoning;
    return stream_end{.id = s.id, .sample = q.sample, .reason = why, .used = u, .error = {}};
  }

  executor& exec_;
  std::vector<trace> traces_{};
  replay_params params_;
  trace_chooser chooser_{};
  std::map<std::pair<std::string, int>, std::vector<std::size_t>> by_slot_;
  std::map<const trace*, std::shared_ptr<const detail::expanded_trace>> cache_;
  std::map<stream_id, std::unique_ptr<stream>> streams_;
  stream_id next_id_ = 0;
  int active_streams_ = 0;
  int active_sequences_ = 0;
  std::uint64_t emitted_total_ = 0;
};

static_assert(specgen::backend<replay_model>);

}  // namespace replay
SPECGEN_END_NAMESPACE
