#pragma once
/// Recorded reasoning traces: the data the replay model plays back.
///
/// A trace is what a reasoning model wrote for one (task, round, lane): its
/// reasoning in order (literal text, or compressed filler prose for bulk), its
/// final answer, and what a fork would have answered at positions along the
/// reasoning. The JSON format `specgen-trace/1` is documented in
/// docs/trace-format.md.
///
/// @code
///   auto traces = specgen::replay::load_traces("corpus/traces");   // a file or a directory
///   if (!traces) { std::cerr << traces.error().what() << '\n'; return 1; }
///   auto text = specgen::replay::expand_reasoning(traces->front());  // text + token boundaries
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/detail/hash.hpp>
#include <specgen/detail/files.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/detail/limits.hpp>
#include <specgen/expected.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace replay {

/// The `"format"` value of trace files this version reads and writes.
inline constexpr std::string_view trace_format = "specgen-trace/1";

/// How the recorded model reasoned (docs/replay-model.md, "Calibration").
enum class trace_style : std::uint8_t {
  draft_early,       ///< a complete kernel early, rewritten in code fences all along
  think_then_write,  ///< long prose without fences; the kernel only in the answer
};
inline constexpr std::array<std::string_view, 2> trace_style_names{"draft_early", "think_then_write"};
constexpr std::string_view to_string(trace_style s) noexcept {
  return trace_style_names[static_cast<std::size_t>(s)];
}

/// One piece of reasoning: literal text, or `tokens` tokens of generated filler
/// prose about `topic`. Text that must trigger a fork (fences, design decisions)
/// is literal; filler is for bulk.
struct segment {
  std::string text{};         ///< literal text ("" for filler)
  std::uint64_t tokens = 0; ///< token count (literal: as loaded or estimated; filler: to generate)
  bool filler = false;
  std::string topic{};        ///< filler only
  friend bool operator==(const segment&, const segment&) = default;
};

/// Non-reasoning output (a final answer or a fork sample) and its token count.
struct answer_text {
  std::string text{};
  std::uint64_t tokens = 0;
  friend bool operator==(const answer_text&, const answer_text&) = default;
};

/// What K samples forked from a prefix of at least `at_token` reasoning tokens answer.
struct fork_point {
  std::uint64_t at_token = 0;
  std::vector<answer_text> samples{};
  friend bool operator==(const fork_point&, const fork_point&) = default;
};

/// One recorded (or generated) reasoning trace.
struct trace {
  std::string id{};                ///< unique within a corpus; defaults to "task/r<round>/l<lane|any>"
  std::string task{};
  int round = 0;
  std::optional<int> lane{};       ///< nullopt: plays for any lane
  trace_style style = trace_style::draft_early;
  std::vector<segment> segments{}; ///< the reasoning, in order
  answer_text answer{};            ///< the final answer after the reasoning
  std::vector<fork_point> forks{}; ///< sorted by at_token, strictly increasing
  friend bool operator==(const trace&, const trace&) = default;

  [[nodiscard]] std::uint64_t reasoning_tokens() const noexcept {
    std::uint64_t n = 0;
    for (const auto& s : segments) n += s.tokens;
    return n;
  }
};

/// Token count of text whose tokens are unknown: 1 token per 4 bytes (rounded
/// up), at least 1 -- the usual rule of thumb for English and code with BPE
/// tokenizers.
constexpr std::uint64_t estimate_tokens(std::string_view text) noexcept {
  return std::max<std::uint64_t>(1, (text.size() + 3) / 4);
}

/// Text with token boundaries: token i is `text[begin(i), end(i))`.
/// Concatenating all tokens gives `text` back exactly.
class token_text {
 public:
  [[nodiscard]] const std::string& text() const noexcept { return text_; }
  [[nodiscard]] std::size_t size() const noexcept { return ends_.size(); }
  [[nodiscard]] std::size_t begin(std::size_t i) const noexcept { return i == 0 ? 0 : ends_[i - 1]; }
  [[nodiscard]] std::size_t end(std::size_t i) const noexcept { return ends_[i]; }
  /// The text of tokens [first, last).
  [[nodiscard]] std::string_view slice(std::size_t first, std::size_t last) const noexcept {
    if (first >= last) return {};
    return std::string_view(text_).substr(begin(first), end(last - 1) - begin(first));
  }

  /// Append `text` as `tokens` tokens, splitting it proportionally (never
  /// inside a UTF-8 sequence; a token may be empty when tokens > bytes).
  void append_split(std::string_view text, std::uint64_t tokens) {
    const std::size_t base = text_.size();
    text_ += text;
    std::size_t prev = base;
    for (std::uint64_t i = 1; i <= tokens; ++i) {
      std::size_t cut = base + static_cast<std::size_t>(i * text.size() / tokens);
      while (cut < text_.size() && (static_cast<unsigned char>(text_[cut]) & 0xC0) == 0x80) ++cut;
      prev = std::max(prev, cut);
      ends_.push_back(prev);
    }
  }
  /// Append one token.
  void append_token(std::string_view piece) {
    text_ += piece;
    ends_.push_back(text_.size());
  }

 private:
  std::string text_{};
  std::vector<std::size_t> ends_{};
};

namespace detail {

// The core's checked reading, for the trace reader below.
using specgen::detail::field_reader;
using specgen::detail::in;
using specgen::detail::json_files_in;
using specgen::detail::number_value;
using specgen::detail::range;
using specgen::detail::read_json_file;
using specgen::detail::shown;
namespace file_kinds = specgen::detail::file_kinds;

using specgen::detail::splitmix64;

/// A deterministic generator (splitmix64); unlike <random>'s distributions its
/// results are the same on every standard library.
class rng {
 public:
  explicit rng(std::uint64_t seed) noexcept : s_(seed) {}
  std::uint64_t next() noexcept { return splitmix64(s_++ * 0xd1b54a32d192ed03ull); }
  /// Uniform in [0, 1).
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }
  /// Uniform in [0, n).
  std::uint64_t below(std::uint64_t n) noexcept { return n == 0 ? 0 : next() % n; }
  bool chance(double p) noexcept { return uniform() < p; }
  template <class T, std::size_t N>
  const T& pick(const std::array<T, N>& a) noexcept { return a[below(N)]; }

 private:
  std::uint64_t s_;
};

// Filler is generic deliberation. It must never contain text a trigger reacts
// to (fences, "__global__", design-decision or implementation-hint phrases,
// revision markers), so that every fork point of a trace is in its literal text.
inline constexpr std::array<std::string_view, 24> filler_sentences{
    "Hmm, that depends on how the data is laid out in memory.",
    "The question is whether this is bound by bandwidth or by latency.",
    "For large inputs the number of bytes moved dominates everything else.",
    "Consider what happens at the boundaries when the size is not a multiple of the block.",
    "The reference computes this in a straightforward way, so correctness is easy to compare.",
    "Each load should ideally be contiguous across neighbouring threads.",
    "There is a trade-off between occupancy and the work done by a single thread.",
    "Register pressure could become a problem if too much state is kept per thread.",
    "Numerical stability matters here, especially for large magnitudes.",
    "It is worth checking the arithmetic intensity before going further.",
    "Synchronisation costs are small compared to global memory traffic in this case.",
    "The previous attempt gives a useful lower bound on what is achievable.",
    "Bank conflicts would only appear with a strided access pattern.",
    "Edge cases include sizes of one and sizes that are not powers of two.",
    "The output has to match the reference within the tolerance.",
    "Launch overhead is negligible for the benchmarked shape.",
    "So the main cost is reading the input once and writing the output once.",
    "Wait, the accumulation order changes the rounding slightly, which should still be fine.",
    "Let me double check the indexing for the last partial block.",
    "The profile from the last round suggests memory throughput is far from the peak.",
    "Fewer passes over the data would reduce traffic noticeably.",
    "Mixed precision is not allowed, so everything stays in the declared type.",
    "That seems consistent with the shapes given in the task.",
    "OK, so the overall structure is clear enough at this point.",
};

/// Append `tokens` tokens of filler prose about `topic`: one token per word,
/// ending in a paragraph break so the next literal starts on its own line.
inline void append_filler(token_text& out, std::string_view topic, std::uint64_t tokens, std::uint64_t seed) {
  rng r(seed);
  std::string sentence = fmt::format("Thinking about {}.", topic.empty() ? "the approach" : topic);
  std::size_t at = 0;
  for (std::uint64_t i = 0; i < tokens; ++i) {
    while (at < sentence.size() && sentence[at] == ' ') ++at;
    if (at >= sentence.size()) {
      std::string next = std::string(r.pick(filler_sentences));
      if (next == sentence) next = std::string(r.pick(filler_sentences));  // rarely twice in a row
      sentence = std::move(next);
      at = 0;
    }
    std::size_t stop = sentence.find(' ', at);
    if (stop == std::string::npos) stop = sentence.size();
    const bool last = i + 1 == tokens;
    std::string piece = sentence.substr(at, stop - at);
    piece += last ? "\n\n" : " ";
    out.append_token(piece);
    at = stop;
  }
}

/// The deterministic filler seed of segment `index` of the trace with id `id`.
inline std::uint64_t filler_seed(std::string_view id, std::size_t index) noexcept {
  return splitmix64(fnv1a(id) ^ splitmix64(index));
}

inline std::string default_trace_id(const trace& t) {
  return fmt::format("{}/r{}/l{}", t.task, t.round, t.lane ? std::to_string(*t.lane) : std::string("any"));
}

}  // namespace detail

/// The reasoning of `t` as text with token boundaries (filler expanded);
/// `segment_starts`, when given, receives the byte at which each segment starts.
inline token_text expand_reasoning(const trace& t, std::vector<std::size_t>* segment_starts = nullptr) {
  token_text out;
  if (segment_starts) segment_starts->clear();
  for (std::size_t i = 0; i < t.segments.size(); ++i) {
    if (segment_starts) segment_starts->push_back(out.text().size());
    const segment& s = t.segments[i];
    if (s.filler) detail::append_filler(out, s.topic, s.tokens, detail::filler_seed(t.id, i));
    else out.append_split(s.text, s.tokens);
  }
  return out;
}

/// `a` split into its tokens.
inline token_text expand_answer(const answer_text& a) {
  token_text out;
  out.append_split(a.text, a.tokens);
  return out;
}

/// What a fork from a prefix of `prefix_tokens` reasoning tokens answers, for sample `sample`.
struct fork_outcome {
  answer_text answer{};
  std::optional<std::uint64_t> at_token{};  ///< the fork point used; nullopt: before the first one
  std::size_t entry_sample = 0;           ///< index into that fork point's samples
};

/// Parameters of the answer a fork gives before the trace's first fork point.
struct no_kernel_answer {
  std::string text =
      "The design is not settled yet: I need to reason further about the data layout and the "
      "parallelisation before I can write a correct kernel.";
  std::uint64_t tokens = 40;  ///< about the size of the text above
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("text", s.text);
    f("tokens", s.tokens, specgen::detail::in<std::uint64_t>(0, limits::max_tokens));
  }
  friend bool operator==(const no_kernel_answer&, const no_kernel_answer&) = default;
};

/// The fork point with the largest `at_token <= prefix_tokens` gives its
/// `samples[sample % n]`; a prefix before every fork point gives `fallback`
/// (a short answer with no kernel).
inline fork_outcome outcome_of_fork(const trace& t, std::uint64_t prefix_tokens, int sample,
                                    const no_kernel_answer& fallback = {}) {
  auto it = std::upper_bound(t.forks.begin(), t.forks.end(), prefix_tokens,
                             [](std::uint64_t p, const fork_point& f) { return p < f.at_token; });
  if (it == t.forks.begin()) return {answer_text{fallback.text, fallback.tokens}, std::nullopt, 0};
  const fork_point& f = *std::prev(it);
  const std::size_t i = static_cast<std::size_t>(sample < 0 ? 0 : sample) % f.samples.size();
  return {f.samples[i], f.at_token, i};
}

// ---- JSON ---------------------------------------------------------------------

namespace detail {

inline nlohmann::json answer_to_json(const answer_text& a) { return {{"text", a.text}, {"tokens", a.tokens}}; }

/// Walks a JSON document and reports the first problem with its pointer.
/// The format is closed: an unknown key anywhere is refused (a typo in a
/// hand-written trace must not silently change what is replayed).
class trace_reader {
 public:
  explicit trace_reader(std::string file) : file_(std::move(file)) {}

  expected<std::vector<trace>, error> read_document(const nlohmann::json& j) {
    if (!j.is_object()) return fail("", "a trace file is a JSON object with \"format\" and \"traces\"");
    field_reader r(j, file_, "");
    r.only({"format", "traces"});
    if (!r.ok()) return unexpected(*r.failure());
    if (!j.contains("format") || !j["format"].is_string())
      return fail("/format", fmt::format("missing \"format\": expected \"{}\"", trace_format));
    if (j["format"].get<std::string>() != trace_format)
      return fail("/format", fmt::format("unsupported format \"{}\": this version reads \"{}\"",
                                         j["format"].get<std::string>(), trace_format));
    if (!j.contains("traces") || !j["traces"].is_array())
      return fail("/traces", "missing \"traces\": expected an array of traces");
    std::vector<trace> out;
    for (std::size_t i = 0; i < j["traces"].size(); ++i) {
      auto t = read_trace(j["traces"][i], fmt::format("/traces/{}", i));
      if (!t) return unexpected(t.error());
      out.push_back(std::move(*t));
    }
    return out;
  }

 private:
  unexpected<error> fail(std::string pointer, std::string message) const {
    return unexpected(specgen::detail::file_error(file_, std::move(pointer), std::move(message)));
  }

  /// A token count: at least `min`, at most limits::max_tokens.
  static range<std::uint64_t> tokens(std::uint64_t min) { return in<std::uint64_t>(min, limits::max_tokens); }

  expected<answer_text, error> read_answer(const nlohmann::json& j, const std::string& at) const {
    if (!j.is_object()) return fail(at, "expected an object {\"text\": ..., \"tokens\": ...}");
    answer_text a;
    field_reader r(j, file_, at);
    r.only({"text", "tokens"}).required("text", a.text);
    a.tokens = estimate_tokens(a.text);
    r.optional("tokens", a.tokens, tokens(1));
    return r.result(std::move(a));
  }

  expected<segment, error> read_segment(const nlohmann::json& j, const std::string& at) const {
    if (!j.is_object() || (j.contains("text") == j.contains("filler")))
      return fail(at, "a segment is {\"text\": ..., \"tokens\": ...} or {\"filler\": <tokens>, \"topic\": ...}");
    if (j.contains("filler")) {
      segment s{.text = "", .tokens = 0, .filler = true, .topic = ""};
      field_reader r(j, file_, at);
      r.only({"filler", "topic"}).required("filler", s.tokens, tokens(1)).optional("topic", s.topic);
      return r.result(std::move(s));
    }
    return read_answer(j, at).and_then([&](answer_text a) -> expected<segment, error> {
      if (a.text.empty()) return fail(at + "/text", "literal text is empty (drop the segment, or use filler)");
      return segment{.text = std::move(a.text), .tokens = a.tokens, .filler = false, .topic = ""};
    });
  }

  expected<trace, error> read_trace(const nlohmann::json& j, const std::string& at) const {
    if (!j.is_object()) return fail(at, "a trace is a JSON object");
    trace t;
    std::string style;
    field_reader r(j, file_, at);
    r.only({"id", "task", "round", "lane", "style", "segments", "answer", "forks"})
        .required("task", t.task)
        .check(t.task.size() > 0, "task", "the task name is empty")
        .required("round", t.round, in(0, limits::max_rounds - 1));
    if (r.ok() && !(j.contains("lane") && j["lane"] == "any")) {
      int lane = 0;
      const bool ok = j.contains("lane") && number_value(j["lane"], lane) && lane >= 0 && lane < limits::max_lanes;
      r.check(ok, "lane", fmt::format("must be a 0-based lane in [0, {}] or \"any\", got {}", limits::max_lanes - 1,
                                      j.contains("lane") ? shown(j["lane"]) : std::string("nothing")));
      t.lane = lane;
    }
    r.required("style", style);
    const auto sit = std::find(trace_style_names.begin(), trace_style_names.end(), style);
    r.check(sit != trace_style_names.end(), "style",
            fmt::format("unknown style \"{}\" (expected \"draft_early\" or \"think_then_write\")", style));
    r.optional("id", t.id);
    if (!r.ok()) return unexpected(*r.failure());
    t.style = static_cast<trace_style>(sit - trace_style_names.begin());
    if (t.id.empty()) t.id = default_trace_id(t);

    if (!j.contains("segments") || !j["segments"].is_array() || j["segments"].empty())
      return fail(at + "/segments", "expected a non-empty array of segments (the reasoning)");
    std::uint64_t reasoning = 0;
    for (std::size_t i = 0; i < j["segments"].size(); ++i) {
      const std::string sat = fmt::format("{}/segments/{}", at, i);
      auto s = read_segment(j["segments"][i], sat);
      if (!s) return unexpected(s.error());
      // Replaying expands the whole reasoning: bound its sum, not only each segment.
      reasoning += s->tokens;
      if (reasoning > limits::max_tokens)
        return fail(sat, fmt::format("the reasoning reaches {} tokens here, over the limit of {} per trace; split it "
                                     "into rounds or use fewer filler tokens",
                                     reasoning, limits::max_tokens));
      t.segments.push_back(std::move(*s));
    }
    if (!j.contains("answer")) return fail(at + "/answer", "missing \"answer\" (the final answer text)");
    auto answer = read_answer(j["answer"], at + "/answer");
    if (!answer) return unexpected(answer.error());
    t.answer = std::move(*answer);

    if (j.contains("forks")) {
      if (!j["forks"].is_array()) return fail(at + "/forks", "expected an array of fork points");
      const std::uint64_t total = t.reasoning_tokens();
      for (std::size_t i = 0; i < j["forks"].size(); ++i) {
        const std::string fat = fmt::format("{}/forks/{}", at, i);
        const auto& f = j["forks"][i];
        if (!f.is_object()) return fail(fat, "a fork point is {\"at_token\": ..., \"samples\": [...]}");
        std::uint64_t at_token = 0;
        field_reader fr(f, file_, fat);
        fr.only({"at_token", "samples"}).required("at_token", at_token, tokens(0));
        if (!fr.ok()) return unexpected(*fr.failure());
        if (at_token > total)
          return fail(fat + "/at_token", fmt::format("{} is past the end of the reasoning ({} tokens)", at_token, total));
        if (!t.forks.empty() && at_token <= t.forks.back().at_token)
          return fail(fat + "/at_token", fmt::format("fork points must be sorted by at_token, strictly increasing "
                                                     "({} follows {})", at_token, t.forks.back().at_token));
        if (!f.contains("samples") || !f["samples"].is_array() || f["samples"].empty())
          return fail(fat + "/samples", "expected a non-empty array of answers");
        if (f["samples"].size() > static_cast<std::size_t>(limits::max_fork_samples))
          return fail(fat + "/samples", fmt::format("{} samples; at most {} (K of a fork is at most that)",
                                                    f["samples"].size(), limits::max_fork_samples));
        fork_point fp{at_token, {}};
        for (std::size_t k = 0; k < f["samples"].size(); ++k) {
          auto a = read_answer(f["samples"][k], fmt::format("{}/samples/{}", fat, k));
          if (!a) return unexpected(a.error());
          fp.samples.push_back(std::move(*a));
        }
        t.forks.push_back(std::move(fp));
      }
    }
    return t;
  }

  std::string file_{};
};

}  // namespace detail

/// The JSON of one trace (token counts always written out).
inline nlohmann::json to_json_value(const trace& t) {
  nlohmann::json segs = nlohmann::json::array();
  for (const auto& s : t.segments) {
    if (s.filler) segs.push_back({{"filler", s.tokens}, {"topic", s.topic}});
    else segs.push_back({{"text", s.text}, {"tokens", s.tokens}});
  }
  nlohmann::json forks = nlohmann::json::array();
  for (const auto& f : t.forks) {
    nlohmann::json samples = nlohmann::json::array();
    for (const auto& a : f.samples) samples.push_back(detail::answer_to_json(a));
    forks.push_back({{"at_token", f.at_token}, {"samples", std::move(samples)}});
  }
  return {{"id", t.id},
          {"task", t.task},
          {"round", t.round},
          {"lane", t.lane ? nlohmann::json(*t.lane) : nlohmann::json("any")},
          {"style", to_string(t.style)},
          {"segments", std::move(segs)},
          {"answer", detail::answer_to_json(t.answer)},
          {"forks", std::move(forks)}};
}

/// A whole trace file: `{"format": "specgen-trace/1", "traces": [...]}`.
inline nlohmann::json traces_to_json(std::span<const trace> traces) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& t : traces) arr.push_back(to_json_value(t));
  return {{"format", trace_format}, {"traces", std::move(arr)}};
}

/// Parse and validate a trace document; `file` names it in errors.
inline expected<std::vector<trace>, error> parse_traces(const nlohmann::json& j, std::string_view file) {
  return detail::trace_reader(std::string(file)).read_document(j);
}

namespace detail {

/// A file's error from an `error` that names its file (a cost table's), or
/// whose message reads "<file>: <problem>" (the file helpers').
inline error whole_file_error(const std::string& file, const error& e) {
  if (!e.file.empty()) return e;  // already names its file and JSON pointer
  std::string m = e.message;
  if (m.starts_with(file + ": ")) m.erase(0, file.size() + 2);
  if (const auto colon = m.find(": "); m.starts_with("/") && colon != std::string::npos)
    return specgen::detail::file_error(file, m.substr(0, colon), m.substr(colon + 2));
  return specgen::detail::file_error(file, "", std::move(m));
}

inline expected<std::vector<trace>, error> load_trace_file(const std::filesystem::path& path) {
  return read_json_file(path, file_kinds::trace, /*comments=*/false)
      .transform_error([&](const error& e) { return whole_file_error(path.string(), e); })
      .and_then([&](const nlohmann::json& j) { return parse_traces(j, path.string()); });
}

inline expected<std::vector<trace>, error> load_traces_from(const std::filesystem::path& path) {
  std::vector<std::filesystem::path> files{};
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    auto listed = json_files_in(path);
    if (!listed) return unexpected(whole_file_error(path.string(), listed.error()));
    files = std::move(*listed);
    if (files.empty()) return unexpected(specgen::detail::file_error(path.string(), "", "the directory holds no *.json trace files"));
  } else {
    files.push_back(path);
  }
  std::vector<trace> all{};
  std::map<std::string, std::string> seen_id;
  std::map<std::tuple<std::string, int, int>, std::string> seen_slot;  // lane -1: any
  for (const auto& f : files) {
    auto part = detail::load_trace_file(f);
    if (!part) return unexpected(part.error());
    for (std::size_t i = 0; i < part->size(); ++i) {
      trace& t = (*part)[i];
      const std::string where = fmt::format("{}: /traces/{}", f.string(), i);
      if (auto [it, fresh] = seen_id.emplace(t.id, where); !fresh)
        return unexpected(specgen::detail::file_error(f.string(), fmt::format("/traces/{}/id", i),
                                      fmt::format("duplicate trace id \"{}\" (also at {})", t.id, it->second)));
      if (auto [it, fresh] = seen_slot.emplace(std::tuple{t.task, t.round, t.lane.value_or(-1)}, where); !fresh)
        return unexpected(specgen::detail::file_error(f.string(), fmt::format("/traces/{}", i),
                                      fmt::format("a second trace for task \"{}\" round {} lane {} (also at {})",
                                                  t.task, t.round, t.lane ? std::to_string(*t.lane) : "any",
                                                  it->second)));
      all.push_back(std::move(t));
    }
  }
  return all;
}

}  // namespace detail

/// Load traces from a file, or from every `*.json` file of a directory (in
/// name order). Rejects two traces with the same id, or for the same (task,
/// round, lane), naming both places. Every failure (a file that is not a
/// regular file, one over 64 MiB, a value out of range) is an `error`;
/// this never throws.
inline expected<std::vector<trace>, error> load_traces(const std::filesystem::path& path) noexcept {
  try {
    return detail::load_traces_from(path);
  } catch (const std::exception& e) {  // bad_alloc, or a bug: still an error value for the caller
    return unexpected(specgen::detail::file_error(path.string(), "", fmt::format("cannot load the traces: {}", e.what())));
  }
}

/// Write `traces` as one trace file.
inline expected<void, error> write_traces(const std::filesystem::path& file, std::span<const trace> traces) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) return unexpected(specgen::detail::file_error(file.string(), "", "cannot create the file"));
  out << traces_to_json(traces).dump(1) << '\n';
  if (!out) return unexpected(specgen::detail::file_error(file.string(), "", "write failed"));
  return {};
}

}  // namespace replay
SPECGEN_END_NAMESPACE
