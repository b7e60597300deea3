#pragma once
/// Trigger policies: when to fork K non-reasoning generations from a main
/// stream's reasoning prefix.
///
/// The engine copies the configured trigger once per main stream (triggers
/// keep per-stream scanning state and look at each character once), calls
/// `on_chunk` for every reasoning chunk, and also calls it with no new text
/// when a validation or profiling device becomes idle. A trigger answers with
/// the name of what fired and K, or nothing.
///
/// Text triggers are pure functions of the characters seen so far: the same
/// text fires at the same character offsets however it is split into chunks
/// (a fire is reported on the chunk holding the character that completes the
/// event; one chunk reports at most one fire).
///
/// @code
///   specgen::policy::any_trigger t = specgen::policy::default_trigger();       // copied per stream by the engine
///   auto cfg = specgen::policy::make_trigger(nlohmann::json::parse(R"({
///       "any_of": [{"fence_closed": {"samples": 2}}, {"design_decision": {"samples": 2}}],
///       "gate": {"min_gap_tokens": 256, "max_forks_per_round": 24}})"));
///   if (!cfg) fail(cfg.error().what());
///   const std::string reasoning = "...I'll use shared memory tiles. ";   // the stream's text so far
///   const std::size_t old_size = 3;                                      // where the newest chunk starts
///   const specgen::policy::trigger_context ctx{.idle_validation = 1};
///   if (auto fire = t.on_chunk({.text = reasoning, .new_from = old_size, .tokens = 600}, ctx))
///     use(fire->samples, fire->trigger);                                 // fork K samples
/// @endcode
#include <specgen/clock.hpp>
#include <specgen/contention.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/extract.hpp>
#include <specgen/policy/family.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

namespace policy {

/// What a trigger sees of one main stream.
struct stream_view {
  std::string_view text{};   ///< the whole reasoning text of this stream so far
  std::size_t new_from = 0;  ///< offset where the newest chunk starts (== text.size() on a resource tick)
  std::uint64_t tokens = 0;  ///< reasoning tokens so far
};

/// What forks with one trigger name (or all forks) have yielded so far.
struct fork_yield {
  std::uint64_t forks = 0;  ///< forks that ended (every sample finished)
  std::uint64_t fresh = 0;  ///< of those, forks that yielded a kernel not seen before
  std::uint64_t wins = 0;   ///< kernels from forks that the termination policy would stop a stream for
  std::uint64_t samples = 0;      ///< the samples of those forks
  /// New kernels beyond each fork's first: how often a second or later
  /// sample of a fork found a kernel its siblings and every earlier one had not.
  std::uint64_t extra_fresh = 0;
  friend bool operator==(const fork_yield&, const fork_yield&) = default;
};

/// Fork yields by trigger name: the record a cost-weighing gate estimates a
/// fork's chance from. The engine keeps one for the run and one per search.
class fork_yields {
 public:
  /// A fork of `samples` ended; `fresh_samples` of them yielded a kernel not seen before.
  void add_fork(std::string_view trigger, int samples, int fresh_samples) {
    for (fork_yield* y : {&slot(trigger), &all_}) {
      ++y->forks;
      if (fresh_samples > 0) ++y->fresh;
      y->samples += static_cast<std::uint64_t>(std::max(samples, 1));
      y->extra_fresh += static_cast<std::uint64_t>(std::max(fresh_samples - 1, 0));
    }
  }
  void add_win(std::string_view trigger) {
    ++slot(trigger).wins;
    ++all_.wins;
  }
  /// The record of forks named `trigger` (zeros if none ended yet).
  [[nodiscard]] fork_yield of(std::string_view trigger) const {
    for (const auto& [name, y] : by_)
      if (name == trigger) return y;
    return {};
  }
  [[nodiscard]] const fork_yield& all() const noexcept { return all_; }

 private:
  fork_yield& slot(std::string_view trigger) {
    for (auto& [name, y] : by_)
      if (name == trigger) return y;
    return by_.emplace_back(std::string(trigger), fork_yield{}).second;
  }
  std::vector<std::pair<std::string, fork_yield>> by_;  // few names: a vector beats a map
  fork_yield all_;
};

/// The state of the evaluation pools, of the server's load as this run sees
/// it, and of this stream's forks.
struct trigger_context {
  timestamp now{0};
  int idle_validation = 0;  ///< idle validation devices
  int idle_profiling = 0;   ///< idle profiling devices
  std::size_t validation_queue = 0;
  std::size_t profiling_queue = 0;
  int forks_in_flight = 0;              ///< this stream's forks still generating
  std::uint64_t tokens_since_fork = 0;  ///< since this stream's last fork (since its start if none)
  int forks_this_round = 0;             ///< forks of this stream's round so far
  /// This round's forks of this stream that ended, one after another most
  /// recently, without a new kernel (every sample failed extraction or
  /// repeated a kernel already seen); 0 after a fork that yielded one.
  int barren_forks = 0;

  // What a cost-weighing gate (`triggers::weighed`) prices a fork with.
  int sequences = 0;     ///< sequences this run has decoding: main streams plus fork samples
  int main_streams = 0;  ///< main reasoning streams decoding
  bool lanes_waiting = false;  ///< main lanes wait for a stream slot: the server is full
  /// Reasoning tokens a main stream of this search is expected to write in
  /// all (the mean of its earlier complete rounds, else of the run's); 0 when
  /// no stream has finished yet.
  std::uint64_t expected_tokens = 0;
  /// Main streams a win would stop: 1 (this stream) when a stop ends its
  /// lane; every decoding lane of the round when it ends the round
  /// (`termination_scope::round`).
  int win_stops = 1;
  /// Reasoning tokens those streams have written, this one's included; read
  /// only when `win_stops` > 1 (otherwise the stream's own count is used).
  std::uint64_t win_stops_tokens = 0;
  int win_drops = 0;  ///< lanes of the round still waiting for a slot that a round-scope win would drop
  double fork_sample_tokens = 0;  ///< mean tokens of a fork sample so far (0: none ended yet)
  const fork_yields* run_yields = nullptr;     ///< every search's forks
  const fork_yields* search_yields = nullptr;  ///< this search's forks
};

/// A trigger fired: fork `samples` (K) generations and label them `trigger`.
struct trigger_fire {
  std::string trigger;
  int samples = 1;
  friend bool operator==(const trigger_fire&, const trigger_fire&) = default;
};

/// A trigger: stateful per stream, so it must be copyable (one copy per stream).
/// (The member check comes first so that asking whether a wrapper such as
/// `expected<any_trigger>` is a trigger does not recurse into its copy constructor.)
template <class T>
concept trigger_policy = requires(T& t, const T& ct, const stream_view& v, const trigger_context& c) {
                           { t.on_chunk(v, c) } -> std::same_as<std::optional<trigger_fire>>;
                           { ct.name() } -> std::convertible_to<std::string>;
                         } && std::copy_constructible<T>;

}  // namespace policy

namespace detail {

constexpr char ascii_lower(char c) noexcept { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
constexpr bool is_word_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
constexpr bool is_blank(char c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

/// The text a trigger has not scanned yet; afterwards all of `v.text` counts
/// as scanned. Triggers remember how far they scanned, so a resource tick (no
/// new text) scans nothing.
inline std::string_view unscanned(const policy::stream_view& v, std::size_t& scanned) {
  // A text shorter than what was scanned means one trigger was fed two streams
  // (a caller bug: copy the prototype per stream); never index past the end.
  const std::size_t from = scanned <= v.text.size() ? scanned : std::min(v.new_from, v.text.size());
  scanned = v.text.size();
  return v.text.substr(from);
}

/// Feeds each character a trigger has not seen yet to `feed`; true if any
/// character completed an event.
template <class Feed>
bool scan_new_text(const policy::stream_view& v, std::size_t& scanned, Feed&& feed) {
  bool fired = false;
  for (char c : unscanned(v, scanned)) fired = feed(c) || fired;
  return fired;
}

/// Feeds one character to `fences`; true when it is the newline that ends an
/// opening or a closing fence line, for triggers that care per character
/// whether the text is prose.
inline bool crosses_fence(fence_scanner& fences, char c) {
  const bool was_inside = fences.inside_fence();
  fences.feed(std::string_view(&c, 1));  // a closed block is seen as the change of inside_fence()
  return fences.inside_fence() != was_inside;
}

/// Case-insensitive incremental phrase matching, robust to any chunking.
/// A phrase must start at a word boundary ("reuse shared memory" is not "use
/// shared memory"); typographic apostrophes (U+2019) read as '\''.
class phrase_matcher {
 public:
  explicit phrase_matcher(const std::vector<std::string>& phrases) {
    std::vector<std::string> lowered;
    for (const auto& p : phrases) {
      std::string q;
      for (char c : p) push(q, c);
      if (q.empty()) continue;
      max_len_ = std::max(max_len_, q.size());
      lowered.push_back(std::move(q));
    }
    // Bucket the phrases by their last byte: a character is compared only
    // with the few phrases that can end at it.
    std::stable_sort(lowered.begin(), lowered.end(), [](const auto& x, const auto& y) { return byte(x.back()) < byte(y.back()); });
    phrases_ = std::move(lowered);
    for (std::size_t b = 0, i = 0; b <= 256; ++b) {
      while (i < phrases_.size() && byte(phrases_[i].back()) < b) ++i;
      bucket_[b] = static_cast<std::uint32_t>(i);
    }
  }

  /// True when the character completes one of the phrases.
  bool feed(char c) {
    push(window_, c);
    // Keep one character more than the longest phrase, for the boundary check.
    if (window_.size() > 4 * (max_len_ + 1) + 8) window_.erase(0, window_.size() - (max_len_ + 1));
    if (window_.empty()) return false;
    const std::string_view w = window_;
    const std::size_t last = byte(w.back());
    for (std::size_t i = bucket_[last]; i < bucket_[last + 1]; ++i) {
      const std::string& p = phrases_[i];
      if (!w.ends_with(p)) continue;
      const std::size_t start = w.size() - p.size();
      if (start == 0 || !is_word_char(w[start - 1]) || !is_word_char(p.front())) return true;
    }
    return false;
  }

 private:
  static std::size_t byte(char c) noexcept { return static_cast<unsigned char>(c); }
  /// Appends a lower-cased character; the UTF-8 of U+2019 becomes '\''.
  static void push(std::string& s, char c) {
    s += ascii_lower(c);
    if (c == '\x99' && s.ends_with("\xE2\x80\x99")) s.replace(s.size() - 3, 3, "'");
  }
  std::vector<std::string> phrases_;        // sorted by last byte
  std::array<std::uint32_t, 257> bucket_{};  // phrases ending in byte b: [bucket_[b], bucket_[b + 1])
  std::size_t max_len_ = 0;
  std::string window_;
};

/// K, the samples of one fork.
inline constexpr range<int> fork_samples = in(1, limits::max_fork_samples);
/// A token count a trigger compares with the reasoning so far.
inline constexpr range<std::uint64_t> trigger_tokens = in<std::uint64_t>(0, limits::max_tokens);
/// The longest phrase or language tag: a phrase is a few words, and the
/// matcher keeps a window a few times the longest one.
inline constexpr std::size_t max_phrase_bytes = 256;

/// "" when every string of `list` (a trigger's phrases or languages) is
/// usable: at least one, none empty, none longer than max_phrase_bytes.
inline std::string check_strings(const std::vector<std::string>& list, std::string_view key) {
  if (list.empty()) return fmt::format("{} must not be empty", key);
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (list[i].find_first_not_of(" \t\r\n") == std::string::npos)
      return fmt::format("{}[{}] is empty; every entry needs at least one visible character (an empty one would match "
                         "nothing, or everything)",
                         key, i);
    if (list[i].size() > max_phrase_bytes)
      return fmt::format("{}[{}] is {} bytes long; at most {}", key, i, list[i].size(), max_phrase_bytes);
  }
  return {};
}

}  // namespace detail

namespace policy {

namespace triggers {

/// No speculation: the sequential baseline.
struct never {
  [[nodiscard]] std::optional<trigger_fire> on_chunk(const stream_view&, const trigger_context&) { return std::nullopt; }
  [[nodiscard]] std::string name() const { return "never"; }
  template <class Self, class F>
  static void fields(Self&, F&&) {}  // nothing to configure
};

}  // namespace triggers

/**
 * Any trigger, chosen at run time. Copying copies the trigger's scanning
 * state, which is how the engine gets one fresh trigger per stream from a
 * configured prototype.
 *
 * @code
 *   specgen::policy::any_trigger proto = specgen::policy::triggers::fence_closed{{.samples = 2}};
 *   specgen::policy::any_trigger per_stream = proto;   // independent state
 * @endcode
 */
/// How `any_trigger` forwards the family's one call.
struct trigger_interface {
  struct calls {
    virtual ~calls() = default;
    virtual std::optional<trigger_fire> on_chunk(const stream_view&, const trigger_context&) = 0;
  };
  template <class Base, class T>
  struct impl : detail::policy_holder<Base, T> {
    using detail::policy_holder<Base, T>::policy_holder;
    std::optional<trigger_fire> on_chunk(const stream_view& v, const trigger_context& c) override {
      return this->value.on_chunk(v, c);
    }
  };
};

class any_trigger : public basic_any<trigger_interface, ownership::cloned> {
 public:
  any_trigger() : any_trigger(triggers::never{}) {}
  template <trigger_policy T>
    requires(!std::derived_from<std::remove_cvref_t<T>, any_trigger>)
  any_trigger(T t) : basic_any(std::move(t)) {}  // NOLINT implicit by design

  [[nodiscard]] std::optional<trigger_fire> on_chunk(const stream_view& v, const trigger_context& c) {
    return self().on_chunk(v, c);
  }
};

namespace triggers {

/**
 * Fires when a fenced code block whose language tag is one of `languages`
 * closes: each draft kernel of a draft-early trace. Fences are read by
 * `fence_scanner`; the language is its tag up to any `{` (```` ```cuda{.numberLines} ````).
 *
 * @code
 *   specgen::policy::triggers::fence_closed t{{.samples = 2, .languages = {"cuda", "cu"}}};
 * @endcode
 */
class fence_closed {
 public:
  struct params {
    int samples = 2;
    std::vector<std::string> languages{"cuda", "cu", "cpp", "c++"};  ///< compared lower-case
    template <class Self, class F>
    static void fields(Self& s, F&& f) {
      f("samples", s.samples, detail::fork_samples);
      f("languages", s.languages);
    }
    [[nodiscard]] std::string invalid() const { return detail::check_strings(languages, "languages"); }
    friend bool operator==(const params&, const params&) = default;
  };

  fence_closed() : fence_closed(params{}) {}
  explicit fence_closed(params p) : p_(std::move(p)) {
    detail::require_valid(p_, "fence_closed");
    for (auto& l : p_.languages) std::transform(l.begin(), l.end(), l.begin(), detail::ascii_lower);
  }

  [[nodiscard]] std::optional<trigger_fire> on_chunk(const stream_view& v, const trigger_context&) {
    bool fired = false;
    for (const auto& block : fences_.feed(detail::unscanned(v, scanned_))) fired = fired || wanted(block.tag);
    return fired ? std::optional<trigger_fire>(trigger_fire{name(), p_.samples}) : std::nullopt;
  }
  [[nodiscard]] std::string name() const { return "fence_closed"; }
  [[nodiscard]] const params& get_params() const noexcept { return p_; }

 private:
  [[nodiscard]] bool wanted(std::string_view tag) const {
    tag = tag.substr(0, tag.find('{'));
    return std::find(p_.languages.begin(), p_.languages.end(), tag) != p_.languages.end();
  }

  params p_;
  fence_scanner fences_;
  std::size_t scanned_ = 0;
};

namespace detail_tags {
struct design_decision {
  static constexpr std::string_view name = "design_decision";
  static std::vector<std::string> phrases() {
    return {"I'll use",        "I will use",          "we'll use",         "we will use",      "let's use",
            "let's go with",   "I'll go with",        "the plan is",       "the approach is",  "tile size",
            "block size of",   "each block handles",  "each block computes", "each warp handles",
            "each warp computes", "each thread computes", "each thread handles", "use shared memory",
            "warp-level",      "warp shuffle",        "vectorized loads",  "vectorized load",  "grid-stride"};
  }
};
struct implementation_hint {
  static constexpr std::string_view name = "implementation_hint";
  static std::vector<std::string> phrases() {
    return {"Let me write",      "Now let me write", "Let me code",     "Now the kernel",     "Here's the kernel",
            "Here is the kernel", "The kernel will", "the code would",  "the code will",      "Let me finalize",
            "Let me fix",        "Let me rewrite",   "Let me restructure", "final version",   "Putting it together",
            "Let me put it together", "Let me draft"};
  }
};
}  // namespace detail_tags

/**
 * Fires after a sentence that contains one of `phrases` (case-insensitive,
 * whole-word start): the fork then sees the whole decision, not just "I'll
 * use". The sentence ends at a newline, at `. ! ? : ;` followed by white
 * space, or `max_wait_chars` after the phrase. `prose_only` ignores phrases
 * inside code fences (code comments repeat them).
 *
 * `design_decision` and `implementation_hint` are this trigger with different
 * default phrase lists; the hint list targets think-then-write traces, where no
 * fence ever closes.
 */
template <class Tag>
class phrase_trigger {
 public:
  struct params {
    int samples = 2;
    std::vector<std::string> phrases = Tag::phrases();
    bool prose_only = true;
    int max_wait_chars = 200;
    template <class Self, class F>
    static void fields(Self& s, F&& f) {
      f("samples", s.samples, detail::fork_samples);
      f("phrases", s.phrases);
      f("prose_only", s.prose_only);
      f("max_wait_chars", s.max_wait_chars, detail::in(0, 100'000));
    }
    [[nodiscard]] std::string invalid() const { return detail::check_strings(phrases, "phrases"); }
    friend bool operator==(const params&, const params&) = default;
  };

  phrase_trigger() : phrase_trigger(params{}) {}
  explicit phrase_trigger(params p) : p_(std::move(p)), matcher_((detail::require_valid(p_, Tag::name), p_.phrases)) {}

  [[nodiscard]] std::optional<trigger_fire> on_chunk(const stream_view& v, const trigger_context&) {
    const bool fired = detail::scan_new_text(v, scanned_, [&](char c) { return feed(c); });
    return fired ? std::optional<trigger_fire>(trigger_fire{name(), p_.samples}) : std::nullopt;
  }
  [[nodiscard]] std::string name() const { return std::string(Tag::name); }
  [[nodiscard]] const params& get_params() const noexcept { return p_; }

 private:
  bool feed(char c) {
    const bool fence_line = detail::crosses_fence(fences_, c);
    const bool matched = matcher_.feed(c);
    bool fire = false;
    if (waited_ >= 0) {
      ++waited_;
      fire = c == '\n' || (after_punct_ && detail::is_blank(c)) || waited_ > p_.max_wait_chars;
      if (fire) waited_ = -1;
    }
    const bool prose = !p_.prose_only || (!fence_line && !fences_.inside_fence());
    if (matched && prose && waited_ < 0 && !fire) waited_ = 0;
    after_punct_ = c == '.' || c == '!' || c == '?' || c == ':' || c == ';';
    return fire;
  }

  params p_;
  detail::phrase_matcher matcher_;
  fence_scanner fences_;
  int waited_ = -1;  ///< characters since an unanswered phrase, -1 when none is pending
  bool after_punct_ = false;
  std::size_t scanned_ = 0;
};

using design_decision = phrase_trigger<detail_tags::design_decision>;
using implementation_hint = phrase_trigger<detail_tags::implementation_hint>;

/**
 * Fires when a `__global__` function's body closes (its braces balance back
 * to zero), in a fence or inline in prose: think-then-write traces that write
 * code without fences. Each function is followed by a `brace_tracker` from
 * its `__global__` on (braces in comments and literals do not count); a fence
 * line abandons the functions in progress.
 */
class function_body_complete {
 public:
  struct params {
    int samples = 2;
    template <class Self, class F>
    static void fields(Self& s, F&& f) {
      f("samples", s.samples, detail::fork_samples);
    }
    friend bool operator==(const params&, const params&) = default;
  };

  function_body_complete() : function_body_complete(params{}) {}
  explicit function_body_complete(params p) : p_(p) { detail::require_valid(p_, "function_body_complete"); }

  [[nodiscard]] std::optional<trigger_fire> on_chunk(const stream_view& v, const trigger_context&) {
    const bool fired = detail::scan_new_text(v, scanned_, [&](char c) { return feed(c); });
    return fired ? std::optional<trigger_fire>(trigger_fire{name(), p_.samples}) : std::nullopt;
  }
  [[nodiscard]] std::string name() const { return "function_body_complete"; }
  [[nodiscard]] const params& get_params() const noexcept { return p_; }

 private:
  // Like extract.hpp's inline kernel search, a tracker starts at each
  // `__global__`, never in the prose before it: prose holds `//` (URLs), `/*`
  // (globs) and apostrophes that a C lexer would read as comments and literals.
  // A `__global__` inside a body starts another tracker rather than replacing
  // the first: it is a rewrite after an abandoned draft, or words in a comment.
  // The first body to close fires and ends them all.
  bool feed(char c) {
    const bool keyword = keyword_.feed(c);
    if (detail::crosses_fence(fences_, c)) {  // a draft cut off by its fence never closes
      functions_.clear();
      return false;
    }
    bool completed = false;
    for (auto& f : functions_)
      for (const auto& e : f.feed(std::string_view(&c, 1))) completed = completed || e.kind == kernel_event_kind::completed;
    if (completed) {
      functions_.clear();
      return true;
    }
    std::erase_if(functions_, [](const brace_tracker& f) { return f.idle(); });  // a prototype, or prose
    if (keyword) {
      if (functions_.size() == max_open) functions_.erase(functions_.begin());
      functions_.emplace_back().feed("__global__");
    }
    return false;
  }

  static constexpr std::size_t max_open = 4;  // bounds the work when prose keeps naming __global__ inside a body

  params p_;
  fence_scanner fences_;
  detail::phrase_matcher keyword_{std::vector<std::string>{"__global__"}};
  std::vector<brace_tracker> functions_;  ///< one per `__global__` whose function is still open, oldest first
  std::size_t scanned_ = 0;
};

/// Fires each time the reasoning crosses a multiple of `every_tokens`.
class token_interval {
 public:
  struct params {
    int samples = 1;
    std::uint64_t every_tokens = 1024;
    template <class Self, class F>
    static void fields(Self& s, F&& f) {
      f("samples", s.samples, detail::fork_samples);
      f("every_tokens", s.every_tokens, detail::in<std::uint64_t>(1, limits::max_tokens));
    }
    friend bool operator==(const params&, const params&) = default;
  };

  token_interval() : token_interval(params{}) {}
  explicit token_interval(params p) : p_(p), next_(p.every_tokens) { detail::require_valid(p_, "token_interval"); }

  [[nodiscard]] std::optional<trigger_fire> on_chunk(const stream_view& v, const trigger_context&) {
    if (v.tokens < next_) return std::nullopt;
    next_ = (v.tokens / p_.every_tokens + 1) * p_.every_tokens;
    return trigger_fire{name(), p_.samples};
  }
  [[nodiscard]] std::string name() const { return "token_interval"; }
  [[nodiscard]] const params& get_params() const noexcept { return p_; }

 private:
  params p_;
  std::uint64_t next_;
};

/**
 * Fires when validation capacity would otherwise sit idle: a validation
 * device is idle, the validation queue is empty and none of this stream's
 * forks is still generating. At most once per `min_tokens` reasoning tokens
 * (and not before the first `min_tokens`), so idle ticks cannot fork the same
 * prefix twice.
 *
 * With `max_backoff` > 0 the spacing doubles after each barren fork (one
 * that yielded no new kernel), up to `min_tokens` x 2^max_backoff, and falls
 * back to `min_tokens` after a fork that yields one. Idle capacity is cheap;
 * the server's is not: every fork's samples slow every stream's decoding, and
 * a fork from a prefix that has not moved past the last kernel only repeats it.
 */
class idle_resources {
 public:
  struct params {
    int samples = 1;
    std::uint64_t min_tokens = 512;
    /// Fire only while fewer than this many forks of the stream are generating:
    /// an idle pool is refilled by the forks already on their way first.
    int max_in_flight = 1;
    /// Doublings of the spacing after barren forks (0: a fixed spacing).
    int max_backoff = 0;
    template <class Self, class F>
    static void fields(Self& s, F&& f) {
      f("samples", s.samples, detail::fork_samples);
      f("min_tokens", s.min_tokens, detail::trigger_tokens);
      f("max_in_flight", s.max_in_flight, detail::in(1, 1024));
      f("max_backoff", s.max_backoff, detail::in(0, 16));
    }
    friend bool operator==(const params&, const params&) = default;
  };

  idle_resources() : idle_resources(params{}) {}
  explicit idle_resources(params p) : p_(p) { detail::require_valid(p_, "idle_resources"); }

  [[nodiscard]] std::optional<trigger_fire> on_chunk(const stream_view& v, const trigger_context& c) {
    const bool idle = c.idle_validation > 0 && c.validation_queue == 0 && c.forks_in_flight < p_.max_in_flight;
    const int doublings = std::clamp(c.barren_forks, 0, p_.max_backoff);
    if (!idle || v.tokens < last_ + (p_.min_tokens << doublings)) return std::nullopt;
    last_ = v.tokens;
    return trigger_fire{name(), p_.samples};
  }
  [[nodiscard]] std::string name() const { return "idle_resources"; }
  [[nodiscard]] const params& get_params() const noexcept { return p_; }

 private:
  params p_;
  std::uint64_t last_ = 0;
};

/**
 * The first member that fires wins; every member sees every chunk, so the
 * text triggers' scanning state stays current.
 *
 * @code
 *   specgen::policy::triggers::any_of t{specgen::policy::triggers::fence_closed{}, specgen::policy::triggers::design_decision{}};
 * @endcode
 */
class any_of {
 public:
  explicit any_of(std::vector<any_trigger> members) : members_(std::move(members)) {}
  template <class... Ts>
    requires(sizeof...(Ts) >= 2 && (trigger_policy<std::remove_cvref_t<Ts>> && ...))
  explicit any_of(Ts&&... ts) {
    (members_.emplace_back(std::forward<Ts>(ts)), ...);
  }

  [[nodiscard]] std::optional<trigger_fire> on_chunk(const stream_view& v, const trigger_context& c) {
    std::optional<trigger_fire> first;
    for (auto& m : members_)
      if (auto f = m.on_chunk(v, c); f && !first) first = std::move(f);
    return first;
  }
  [[nodiscard]] std::string name() const { return "any_of"; }
  [[nodiscard]] const std::vector<any_trigger>& members() const noexcept { return members_; }
  [[nodiscard]] nlohmann::json config() const {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& m : members_) list.push_back(m.config());
    return {{name(), std::move(list)}};
  }

 private:
  std::vector<any_trigger> members_;
};

/**
 * Limits on forking, applied around any trigger by `gated`. A fire of the
 * inner trigger while the gate is shut is dropped, not deferred: forks then
 * always happen at a meaningful point of the text (a closed fence, a finished
 * sentence), never in the middle of the next draft.
 */
struct gate {
  std::uint64_t min_gap_tokens = 0;     ///< reasoning tokens since this stream's last fork
  std::uint64_t min_prefix_tokens = 0;  ///< reasoning tokens before the first fork
  int max_forks_per_round = std::numeric_limits<int>::max();
  int max_forks_in_flight = std::numeric_limits<int>::max();  ///< of this stream, still generating
  /// Backpressure: no fork while this many candidates wait for validation.
  /// A candidate queued behind a long line brings its feedback too late to
  /// stop the reasoning, and only adds stale work that the round's end cancels.
  std::uint64_t max_validation_queue = std::numeric_limits<std::uint64_t>::max();
  /// The same for profiling: profiling is FIFO, so a long line delays the
  /// round's own final answer, which the round waits for.
  std::uint64_t max_profiling_queue = std::numeric_limits<std::uint64_t>::max();
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    // The limits are comparisons, never sizes: their defaults, the largest
    // values of their types, mean "no limit".
    f("min_gap_tokens", s.min_gap_tokens, detail::trigger_tokens);
    f("min_prefix_tokens", s.min_prefix_tokens, detail::trigger_tokens);
    f("max_forks_per_round", s.max_forks_per_round, detail::in(0, std::numeric_limits<int>::max()));
    f("max_forks_in_flight", s.max_forks_in_flight, detail::in(0, std::numeric_limits<int>::max()));
    f("max_validation_queue", s.max_validation_queue, detail::any_value<std::uint64_t>());
    f("max_profiling_queue", s.max_profiling_queue, detail::any_value<std::uint64_t>());
  }
  /// True when a fork may happen now.
  [[nodiscard]] bool open(const stream_view& v, const trigger_context& c) const noexcept {
    return v.tokens >= min_prefix_tokens && c.tokens_since_fork >= min_gap_tokens &&
           c.forks_this_round < max_forks_per_round && c.forks_in_flight < max_forks_in_flight &&
           c.validation_queue < max_validation_queue && c.profiling_queue < max_profiling_queue;
  }
  friend bool operator==(const gate&, const gate&) = default;
};

/**
 * A trigger behind a `gate`. The inner trigger sees every chunk (its state
 * stays current); only its fires are filtered.
 *
 * @code
 *   specgen::policy::triggers::gated t{specgen::policy::triggers::fence_closed{}, {.min_gap_tokens = 256}};
 * @endcode
 */
template <trigger_policy T>
class gated {
 public:
  gated(T inner, gate g) : inner_(std::move(inner)), gate_(g) { detail::require_valid(gate_, "gate"); }

  [[nodiscard]] std::optional<trigger_fire> on_chunk(const stream_view& v, const trigger_context& c) {
    auto f = inner_.on_chunk(v, c);
    if (!f || !gate_.open(v, c)) return std::nullopt;
    return f;
  }
  /// The inner trigger's name: the gate only filters.
  [[nodiscard]] std::string name() const { return std::string(inner_.name()); }
  [[nodiscard]] const T& inner() const noexcept { return inner_; }
  [[nodiscard]] const gate& limits() const noexcept { return gate_; }
  [[nodiscard]] nlohmann::json config() const {
    nlohmann::json j = config_of(inner_);
    if (j.is_object()) j["gate"] = detail::write_fields(gate_);
    return j;
  }

 private:
  T inner_;
  gate gate_;
};

}  // namespace triggers

/**
 * What a fork costs the server and what it may buy: the model `weighed`
 * decides with (docs/policies.md, "Cost-weighed forks").
 *
 * N sequences decode now (`trigger_context::sequences`, this stream
 * included), each at s(N) = s1 / (1 + a (N - 1)) with a =
 * `slowdown_per_sequence` (contention.hpp). A fork of K samples of L tokens
 * decodes for L / s(N + K), and meanwhile each of the N streams loses
 * a K L / (1 + a (N - 1)) tokens of progress. The fork's cost is their sum:
 *
 *     C = N a K L / (1 + a (N - 1))                      stream-tokens
 *
 * If a kernel of the fork wins (the termination policy stops this stream for
 * it), the stream ends R tokens early, R = its expected length less what it
 * wrote, and each other stream decodes R a / (1 + a (N - 2)) tokens more while
 * it is gone. With p the chance of a win:
 *
 *     B = p R (1 + (N - 1) a / (1 + a (N - 2)))          stream-tokens
 *
 * When a stop ends the whole round (`termination_scope::round`), a win stops
 * the M decoding lanes of the round (`trigger_context::win_stops`) and drops
 * the W lanes still waiting for a slot (`win_drops`). R is then the remaining
 * reasoning of all of them, (M + W) times the expected length less what the
 * M lanes wrote, and the other N - M streams gain in proportion:
 *
 *     B = p R (1 + (N - M) a / (1 + a (N - 1 - M)))      stream-tokens
 *
 * which is the formula above at M = 1, W = 0.
 *
 * p is the trigger's record of wins per ended fork in this search, shrunk
 * towards the run's record for that trigger, which is shrunk towards
 * `prior_win`; each shrinkage weighs `prior_forks` forks.
 *
 * Samples of one fork share their prefix and a low temperature, so they often
 * write the same kernel. d, the share of samples beyond a fork's first that
 * found a new kernel, is learned the same way (towards `prior_distinct`). A
 * fork of K samples then counts as e(K) = 1 + (K - 1) d independent tries, and
 * if the record's forks had K0 samples on average, K samples win with chance
 * 1 - (1 - p)^(e(K) / e(K0)). The trigger asks for up to K samples;
 * `choose_fork` takes the K from 1 to that with the largest B - w C. A fork
 * goes ahead when B >= w C, w = `cost_weight`. When the server is saturated (main lanes wait for
 * a stream slot, or the main streams alone decode below `saturated_speed` of a
 * lone stream), the weight is `saturated_cost_weight`: only forks with a high
 * expected gain go ahead.
 */
struct fork_pricing {
  /// The server's decode slowdown per extra sequence. The default is the
  /// middle of the band published serving stacks span; fit your own server's
  /// with `fit_contention`.
  double slowdown_per_sequence = contention_middle;
  double prior_win = 0.1;     ///< chance of a win before any fork ended
  double prior_forks = 8;     ///< how many forks the prior weighs
  double prior_distinct = 1.0;  ///< d before any fork of two or more samples ended
  double sample_tokens = 512; ///< L before any fork sample ended
  std::uint64_t reasoning_tokens = 8192;  ///< a stream's expected length before any stream finished
  double min_remaining = 0.1;  ///< R is at least this fraction of the expected length
  double cost_weight = 1.0;
  double saturated_cost_weight = 2.0;
  double saturated_speed = 0.5;
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("slowdown_per_sequence", s.slowdown_per_sequence, detail::in(0.0, 100.0));
    f("prior_win", s.prior_win, detail::in(0.0, 1.0));
    f("prior_forks", s.prior_forks, detail::in(0.0, 1e6));
    f("prior_distinct", s.prior_distinct, detail::in(0.0, 1.0));
    f("sample_tokens", s.sample_tokens, detail::in(1.0, 1e6));
    f("reasoning_tokens", s.reasoning_tokens, detail::in<std::uint64_t>(1, limits::max_tokens));
    f("min_remaining", s.min_remaining, detail::in(0.0, 1.0));
    f("cost_weight", s.cost_weight, detail::in(0.0, 1e6));
    f("saturated_cost_weight", s.saturated_cost_weight, detail::in(0.0, 1e6));
    f("saturated_speed", s.saturated_speed, detail::in(0.0, 1.0));
  }
  friend bool operator==(const fork_pricing&, const fork_pricing&) = default;
};

/// One fork weighed: the terms of `fork_pricing`'s model.
struct fork_appraisal {
  int samples = 1;       ///< K
  double chance = 0;     ///< the chance that one of the K samples wins
  double distinct = 1;   ///< d
  double remaining = 0;  ///< R, tokens (of every stream a win stops)
  double benefit = 0;    ///< B, stream-tokens
  double cost = 0;       ///< C, stream-tokens
  bool saturated = false;
  bool go = false;       ///< B >= the weight in force times C
};

/// Weighs a fork of `samples` from a stream that has written `tokens`.
/// `asked`: the samples the trigger asked for (0: `samples`), the fork size
/// `prior_win` is the chance of until the run has its own record.
inline fork_appraisal appraise_fork(const fork_pricing& m, std::string_view trigger, int samples, std::uint64_t tokens,
                                    const trigger_context& c, int asked = 0) {
  const double a = m.slowdown_per_sequence;
  // A record's rate, shrunk towards `prior` by `prior_forks` forks' weight.
  auto shrunk = [&](const fork_yields* y, double prior, auto hits, auto trials) {
    if (!y) return prior;
    const fork_yield r = y->of(trigger);
    return (static_cast<double>(hits(r)) + prior * m.prior_forks) / (static_cast<double>(trials(r)) + m.prior_forks);
  };
  const auto wins = [](const fork_yield& r) { return r.wins; };
  const auto forks = [](const fork_yield& r) { return r.forks; };
  const auto extra_fresh = [](const fork_yield& r) { return r.extra_fresh; };
  const auto extra = [](const fork_yield& r) { return r.samples - r.forks; };
  fork_appraisal v;
  v.samples = std::max(samples, 1);
  const double p = std::clamp(shrunk(c.search_yields, shrunk(c.run_yields, m.prior_win, wins, forks), wins, forks), 0.0, 1.0);
  v.distinct = std::clamp(
      shrunk(c.search_yields, shrunk(c.run_yields, m.prior_distinct, extra_fresh, extra), extra_fresh, extra), 0.0, 1.0);
  // p was measured on forks of K0 samples; K samples are e(K) / e(K0) times as many tries.
  const fork_yield run = c.run_yields ? c.run_yields->of(trigger) : fork_yield{};
  const double k0 = run.forks > 0 ? static_cast<double>(run.samples) / static_cast<double>(run.forks)
                                   : static_cast<double>(asked > 0 ? asked : v.samples);
  const auto tries = [&](double k) { return 1 + (k - 1) * v.distinct; };
  v.chance = 1 - std::pow(1 - p, tries(v.samples) / tries(k0));
  const double expected = static_cast<double>(c.expected_tokens > 0 ? c.expected_tokens : m.reasoning_tokens);
  const double n = std::max(c.sequences, 1);
  // The decoding streams a win stops (at least this one, at most every sequence).
  const double stops = std::clamp(static_cast<double>(c.win_stops), 1.0, n);
  const double written = static_cast<double>(c.win_stops > 1 ? c.win_stops_tokens : tokens);
  v.remaining = std::max(stops * expected - written, m.min_remaining * stops * expected) +
                static_cast<double>(std::max(c.win_drops, 0)) * expected;
  const double others_gain = (n - stops) * a / (1 + a * std::max(n - 1 - stops, 0.0));
  v.benefit = v.chance * v.remaining * (1 + others_gain);
  const double sample = c.fork_sample_tokens > 0 ? c.fork_sample_tokens : m.sample_tokens;
  v.cost = n * a * static_cast<double>(samples) * sample / (1 + a * (n - 1));
  const double main_speed = 1 / (1 + a * std::max(c.main_streams - 1, 0));
  v.saturated = c.lanes_waiting || main_speed < m.saturated_speed;
  v.go = v.benefit >= (v.saturated ? m.saturated_cost_weight : m.cost_weight) * v.cost;
  return v;
}

/// The fork of 1 to `max_samples` samples worth the most (B - w C), as
/// `appraise_fork` weighs each; `go` is false when none pays.
inline fork_appraisal choose_fork(const fork_pricing& m, std::string_view trigger, int max_samples, std::uint64_t tokens,
                                  const trigger_context& c) {
  std::optional<fork_appraisal> best;
  double best_net = 0;
  for (int k = 1; k <= std::max(max_samples, 1); ++k) {
    const fork_appraisal v = appraise_fork(m, trigger, k, tokens, c, max_samples);
    const double net = v.benefit - (v.saturated ? m.saturated_cost_weight : m.cost_weight) * v.cost;
    if (!best || (v.go && (!best->go || net > best_net))) {
      best = v;
      best_net = net;
    }
  }
  return *best;
}

namespace triggers {

/**
 * A trigger whose fires go ahead only where the fork is worth its cost on
 * the server (`fork_pricing`), with as many of the samples the inner trigger
 * asks for as pay (`choose_fork`). The inner trigger sees every chunk; a fire
 * that does not pay is dropped, like a shut gate's.
 *
 * @code
 *   specgen::policy::triggers::weighed t{specgen::policy::triggers::fence_closed{}, {.slowdown_per_sequence = 0.04}};
 * @endcode
 */
template <trigger_policy T>
class weighed {
 public:
  weighed(T inner, fork_pricing m) : inner_(std::move(inner)), m_(m) { detail::require_valid(m_, "weigh"); }

  [[nodiscard]] std::optional<trigger_fire> on_chunk(const stream_view& v, const trigger_context& c) {
    auto f = inner_.on_chunk(v, c);
    if (!f) return std::nullopt;
    const fork_appraisal best = choose_fork(m_, f->trigger, f->samples, v.tokens, c);
    if (!best.go) return std::nullopt;
    f->samples = best.samples;
    return f;
  }
  [[nodiscard]] std::string name() const { return std::string(inner_.name()); }
  [[nodiscard]] const T& inner() const noexcept { return inner_; }
  [[nodiscard]] const fork_pricing& pricing() const noexcept { return m_; }
  [[nodiscard]] nlohmann::json config() const {
    nlohmann::json j = config_of(inner_);
    if (j.is_object()) j["weigh"] = detail::write_fields(m_);
    return j;
  }

 private:
  T inner_;
  fork_pricing m_;
};

}  // namespace triggers

static_assert(trigger_policy<triggers::never>);
static_assert(trigger_policy<triggers::fence_closed>);
static_assert(trigger_policy<triggers::design_decision>);
static_assert(trigger_policy<triggers::implementation_hint>);
static_assert(trigger_policy<triggers::function_body_complete>);
static_assert(trigger_policy<triggers::token_interval>);
static_assert(trigger_policy<triggers::idle_resources>);
static_assert(trigger_policy<triggers::any_of>);
static_assert(trigger_policy<triggers::gated<any_trigger>>);
static_assert(trigger_policy<triggers::weighed<any_trigger>>);
static_assert(trigger_policy<any_trigger>);


/**
 * The paper's trigger set: fence closed, design decision, implementation
 * hint, function body complete and idle resources, behind a gate.
 *
 * The paper gives neither K nor any spacing; these values are this project's
 * choices. Text triggers: K = 2 (two samples at temperature 0.1 differ enough
 * to be worth a second validation slot), at least 256 reasoning tokens before
 * the first fork and between forks (a draft-early trace rewrites its kernel
 * about every 180 tokens, so a fork catches at most one draft per revision),
 * at most 24 forks per round and 4 in flight per stream (bounds the extra
 * tokens of a 32K-token trace). The idle-resources trigger sits outside that
 * spacing, so an idle validation GPU is refilled without waiting for the next
 * design text: K = 3, at most every 128 tokens, while no other fork of the
 * stream is generating, and up to 1024 tokens apart after barren forks
 * (`max_backoff` 3). Both stop while 16 candidates wait for validation or
 * 8 for profiling (backpressure). With 8 searches on 4 simulated GPUs this
 * raised pool utilisation from 0.44 to 0.76; the backoff cut the suite's
 * fork tokens by 30% (docs/policies.md).
 */
inline any_trigger paper_trigger() {
  return triggers::any_of(
      triggers::gated<any_trigger>(
          triggers::any_of(triggers::fence_closed{}, triggers::design_decision{}, triggers::implementation_hint{},
                           triggers::function_body_complete{}),
          triggers::gate{.min_gap_tokens = 256, .min_prefix_tokens = 256, .max_forks_per_round = 24,
                         .max_forks_in_flight = 4, .max_validation_queue = 16, .max_profiling_queue = 8}),
      triggers::gated<any_trigger>(triggers::idle_resources{{.samples = 3, .min_tokens = 128, .max_in_flight = 1, .max_backoff = 3}},
                                   triggers::gate{.min_prefix_tokens = 256, .max_forks_in_flight = 8,
                                                  .max_validation_queue = 16, .max_profiling_queue = 8}));
}

/**
 * The default: the paper's trigger set with every fire weighed against its
 * cost on the server (`triggers::weighed`, `fork_pricing`'s defaults), so
 * forks that are unlikely to pay for the slowdown they cause every stream are
 * dropped. docs/policies.md ("Cost-weighed forks") has the model and what it
 * changes on both corpora at each contention level.
 */
inline any_trigger default_trigger(const fork_pricing& pricing = {}) {
  return triggers::any_of(
      triggers::gated<any_trigger>(
          triggers::weighed<any_trigger>(triggers::any_of(triggers::fence_closed{}, triggers::design_decision{},
                                                          triggers::implementation_hint{}, triggers::function_body_complete{}),
                                         pricing),
          triggers::gate{.min_gap_tokens = 256, .min_prefix_tokens = 256, .max_forks_per_round = 24,
                         .max_forks_in_flight = 4, .max_validation_queue = 16, .max_profiling_queue = 8}),
      triggers::gated<any_trigger>(
          triggers::weighed<any_trigger>(triggers::idle_resources{{.samples = 3, .min_tokens = 128, .max_in_flight = 1, .max_backoff = 3}},
                                         pricing),
          triggers::gate{.min_prefix_tokens = 256, .max_forks_in_flight = 8, .max_validation_queue = 16, .max_profiling_queue = 8}));
}

/// The trigger family: its name in configs, its kinds, and the optional
/// `"weigh"` and `"gate"` beside any kind.
struct trigger_family {
  using any = any_trigger;
  static constexpr std::string_view name = "trigger";
  static constexpr std::array<std::string_view, 2> extra_keys{"weigh", "gate"};
  static any_trigger default_one() { return default_trigger(); }
  static any_trigger paper_one() { return paper_trigger(); }
  static constexpr std::array<builder<any_trigger>, 10> kinds{{
      from_params<any_trigger, triggers::fence_closed>("fence_closed"),
      from_params<any_trigger, triggers::design_decision>("design_decision"),
      from_params<any_trigger, triggers::implementation_hint>("implementation_hint"),
      from_params<any_trigger, triggers::function_body_complete>("function_body_complete"),
      from_params<any_trigger, triggers::token_interval>("token_interval"),
      from_params<any_trigger, triggers::idle_resources>("idle_resources"),
      from_params<any_trigger, triggers::never>("never"),
      any_of_builder<trigger_family, triggers::any_of>(),
      without_params<any_trigger, &default_one>("default"),
      without_params<any_trigger, &paper_one>("paper")}};
  /// A `"weigh"` beside the kind weighs the built trigger's fires; a `"gate"`
  /// puts the result behind a gate.
  static expected<any_trigger, error> finish(const nlohmann::json& j, any_trigger built, std::string_view pointer) {
    if (!j.is_object()) return built;
    if (j.contains("weigh")) {
      auto m = detail::read_fields<fork_pricing>(j["weigh"], fmt::format("{}/weigh", pointer));
      if (!m) return unexpected(m.error());
      built = any_trigger(triggers::weighed<any_trigger>(std::move(built), *m));
    }
    if (!j.contains("gate")) return built;
    return detail::read_fields<triggers::gate>(j["gate"], fmt::format("{}/gate", pointer)).transform([&](const triggers::gate& g) {
      return any_trigger(triggers::gated<any_trigger>(std::move(built), g));
    });
  }
};

/**
 * Builds a trigger from JSON. A config is a name (`"never"`, `"default"`,
 * `"fence_closed"` with default params), or an object with one kind key and
 * an optional sibling `"gate"`:
 *
 * @code
 *   auto t = specgen::policy::make_trigger(nlohmann::json::parse(R"({
 *     "any_of": [{"fence_closed": {"samples": 2}}, {"design_decision": {"samples": 2}}],
 *     "gate": {"min_gap_tokens": 256, "max_forks_per_round": 24}})"));
 *   if (!t) std::cerr << t.error().what();   // e.g. "/fence_closed/sample: unknown key 'sample' (did you mean 'samples'?) ..."
 * @endcode
 *
 * `make_trigger(t.config())` rebuilds `t` with fresh state.
 */
inline expected<any_trigger, error> make_trigger(const nlohmann::json& j) { return make<trigger_family>(j); }

}  // namespace policy

SPECGEN_END_NAMESPACE
