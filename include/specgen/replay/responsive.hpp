#pragma once
/// A stand-in model that answers feedback: chooses, and rewrites, a recorded
/// trace from what a prompt reports about earlier kernels.
///
/// A replayed model that always plays (task, round, lane) writes the same
/// kernels whatever it is told. `responsive_traces` instead reads the
/// `### Kernel <tag> [<verdict>]` headings of the prompt (`reported_kernels`,
/// include/specgen/prompt.hpp) and
///
///   - moves on: it plays the round after the latest round whose kernels the
///     prompt reports (round 0 when it reports none of the task's kernels);
///   - never writes a kernel again that the prompt reports as failing
///     (compile_error, invalid_plan, fault, timeout, wrong_result, unstable,
///     suspicious): such kernels are taken out of the fork samples, the final
///     answer and the fenced drafts of the reasoning.
///
/// The rules in full: docs/replay-model.md, "A stand-in model that answers feedback".
///
/// @code
///   auto traces = specgen::replay::load_traces("tasks/suite/traces");
///   specgen::replay::responsive_traces chooser(std::move(*traces));
///   auto t = chooser.select("softmax", prompt);   // a trace to play, possibly rewritten
/// @endcode
#include <specgen/backend.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/extract.hpp>
#include <specgen/prompt.hpp>
#include <specgen/replay/trace.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace replay {

/// The verdict words of a failed kernel: a prompt reporting a kernel under one
/// of these never gets that kernel written again.
inline constexpr std::array<std::string_view, 10> bad_verdict_words{
    "compile_error", "invalid_plan", "fault",          "timeout",           "wrong_result",
    "unstable",      "suspicious",   "input_mutation", "out_of_bounds_write", "nonfinite_output"};

/// True when `verdict` (a heading's verdict word) says the kernel failed.
constexpr bool is_bad_verdict(std::string_view verdict) noexcept {
  return std::find(bad_verdict_words.begin(), bad_verdict_words.end(), verdict) != bad_verdict_words.end();
}

/// A kernel found in a text, as the engine would extract it.
struct found_kernel {
  std::string tag{};     ///< kernel_tag of (source, plan)
  std::string source{};
  std::string plan{};
  std::size_t begin = 0, end = 0;  ///< byte span of its blocks in the text, whole lines
  std::size_t source_begin = 0, source_end = 0;  ///< byte span of its source block (fence lines included)
  friend bool operator==(const found_kernel&, const found_kernel&) = default;
};

namespace detail {
/// `at`, moved on to the start of the next line unless it is at one already.
inline std::size_t line_end(std::string_view text, std::size_t at) {
  if (at == 0 || at >= text.size() || text[at - 1] == '\n') return std::min(at, text.size());
  const std::size_t eol = text.find('\n', at);
  return eol == std::string_view::npos ? text.size() : eol + 1;
}
/// The start of the line holding `at - 1` (the fence line before a block's content).
inline std::size_t fence_line_start(std::string_view text, std::size_t at) {
  if (at == 0) return 0;
  const std::size_t nl = at >= 2 ? text.rfind('\n', at - 2) : std::string_view::npos;
  return nl == std::string_view::npos ? 0 : nl + 1;
}
}  // namespace detail

/// The kernel the engine extracts from `text` (`allow_inline_code` as for
/// fork answers: true; main answers: false), or nullopt when there is none.
inline std::optional<found_kernel> kernel_in(std::string_view text, bool allow_inline_code) {
  extract_options opt;
  opt.allow_inline_code = allow_inline_code;
  auto ex = extract_candidate(text, opt);
  if (!ex) return std::nullopt;
  candidate c;
  c.source = ex->source;
  c.plan = ex->plan;
  found_kernel k{kernel_tag(c), std::move(ex->source), std::move(ex->plan), ex->begin, detail::line_end(text, ex->end),
                 ex->source_span.begin, ex->source_span.end};
  if (!ex->inline_source) {
    k.source_begin = detail::fence_line_start(text, ex->source_span.begin);
    const std::size_t eol = text.find('\n', ex->source_span.end);  // the closing fence's line
    k.source_end = eol == std::string_view::npos ? text.size() : eol + 1;
  }
  return k;
}

/// Every fenced kernel (a source block with its plan block) in `text`, in
/// order: what extraction finds in the text up to each fence line, without
/// repeats.
inline std::vector<found_kernel> fenced_kernels(std::string_view text) {
  std::vector<found_kernel> out;
  std::set<std::pair<std::size_t, std::size_t>> seen;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    eol = eol == std::string_view::npos ? text.size() : eol + 1;
    if (text.substr(pos, eol - pos).starts_with("```")) {
      if (auto k = kernel_in(text.substr(0, eol), false); k && seen.emplace(k->begin, k->end).second)
        out.push_back(std::move(*k));
    }
    pos = eol;
  }
  return out;
}

/// A kernel of a task's traces and the first round it appears in.
struct catalogued_kernel {
  std::string tag{};
  int first_round = 0;
  std::string source{};
  std::string plan{};
  friend bool operator==(const catalogued_kernel&, const catalogued_kernel&) = default;
};

/// Chooses and rewrites traces from the feedback in a prompt (see the file's
/// comment and docs/replay-model.md). Immutable after construction: `select`
/// may be called from any thread.
class responsive_traces {
 public:
  explicit responsive_traces(std::vector<trace> traces, no_kernel_answer no_kernel = {})
      : traces_(std::move(traces)), no_kernel_(std::move(no_kernel)) {
    analyses_.reserve(traces_.size());
    for (const trace& t : traces_) analyses_.push_back(analyse(t));
    std::vector<std::size_t> order(traces_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return traces_[a].round < traces_[b].round; });
    for (std::size_t i : order) {
      const trace& t = traces_[i];
      auto& cat = catalogue_[t.task];
      rounds_[t.task].insert(t.round);
      auto add = [&](const found_kernel& k) {
        cat.try_emplace(k.tag, catalogued_kernel{k.tag, t.round, k.source, k.plan});
      };
      const analysis& a = analyses_[i];
      for (const auto& d : a.drafts) add(d.kernel);
      for (const auto& point : a.samples)
        for (const auto& k : point)
          if (k) add(*k);
      if (a.answer) add(*a.answer);
    }
  }

  [[nodiscard]] const std::vector<trace>& traces() const noexcept { return traces_; }
  [[nodiscard]] const no_kernel_answer& no_kernel() const noexcept { return no_kernel_; }

  /// The tasks with traces, sorted.
  [[nodiscard]] std::vector<std::string> tasks() const {
    std::vector<std::string> out;
    for (const auto& [task, rounds] : rounds_) out.push_back(task);
    return out;
  }

  /// Every kernel of `task`'s traces by tag (empty for an unknown task).
  [[nodiscard]] const std::map<std::string, catalogued_kernel>& kernels(std::string_view task) const {
    static const std::map<std::string, catalogued_kernel> none;
    auto it = catalogue_.find(task);
    return it == catalogue_.end() ? none : it->second;
  }

  /// The task a prompt is about: `<name>` of its first line `# Task: <name>`.
  [[nodiscard]] static std::optional<std::string> task_of(std::string_view prompt) {
    constexpr std::string_view lead = "# Task: ";
    std::string_view line = prompt.substr(0, prompt.find('\n'));
    if (!line.starts_with(lead)) return std::nullopt;
    line.remove_prefix(lead.size());
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r' || line.back() == '\t')) line.remove_suffix(1);
    if (line.empty()) return std::nullopt;
    return std::string(line);
  }

  /// The recorded round a prompt calls for: 1 + the latest first round of the
  /// task's kernels the prompt reports (any verdict), capped at the task's
  /// last recorded round; 0 when it reports none. A round without a trace
  /// gives the next recorded one.
  [[nodiscard]] expected<int, error> round_for(std::string_view task, std::string_view prompt) const {
    auto rit = rounds_.find(task);
    if (rit == rounds_.end()) return unexpected(unknown_task(task));
    const auto& cat = kernels(task);
    int want = 0;
    for (const auto& r : reported_kernels(prompt))
      if (auto k = cat.find(r.tag); k != cat.end()) want = std::max(want, k->second.first_round + 1);
    const std::set<int>& rounds = rit->second;
    auto at = rounds.lower_bound(want);
    return at == rounds.end() ? *rounds.rbegin() : *at;
  }

  /// The trace to play for `task` given `prompt`: the round `round_for`
  /// says (lane 0, else the "any" lane, else the lowest lane), with every
  /// kernel the prompt reports as failing taken out. Deterministic.
  [[nodiscard]] expected<trace, error> select(std::string_view task, std::string_view prompt) const {
    return round_for(task, prompt).transform([&](int round) { return rewrite(pick(task, round), prompt); });
  }

  /// The sentence a fenced draft of a failed kernel is replaced with.
  [[nodiscard]] static std::string not_repeated(std::string_view tag, std::string_view verdict) {
    return fmt::format("(The version I had written here is kernel {}, which was already reported {}, so I am not "
                       "repeating it.)\n",
                       tag, verdict);
  }

  /// The answer when no kernel is left to write: prose, no code.
  [[nodiscard]] static std::string nothing_left(std::string_view why) {
    return fmt::format("I could not write a new kernel this time: {}. I need to rethink the approach before writing "
                       "another version.",
                       why);
  }

 private:
  /// A kernel drafted in the reasoning and the reasoning token its blocks end in.
  struct draft {
    found_kernel kernel;
    std::uint64_t token = 0;
  };
  /// What a trace holds, kernel by kernel.
  struct analysis {
    std::vector<draft> drafts;                                     ///< fenced kernels of the reasoning, in order
    std::vector<std::vector<std::optional<found_kernel>>> samples; ///< per fork point, per sample
    std::optional<found_kernel> answer;
  };

  /// The reasoning as played, and the byte where each segment starts in it.
  struct played {
    token_text text;
    std::vector<std::size_t> starts;
  };
  static played play(const trace& t) {
    played p;
    p.text = expand_reasoning(t, &p.starts);
    return p;
  }

  /// The token of `text` that holds byte `byte - 1` (the token a span ending at `byte` ends in).
  static std::uint64_t token_at(const token_text& text, std::size_t byte) {
    std::size_t lo = 0, hi = text.size();
    while (lo < hi) {  // the first token ending at or after `byte`
      const std::size_t mid = (lo + hi) / 2;
      if (text.end(mid) < byte) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  static analysis analyse(const trace& t) {
    analysis a;
    const played p = play(t);
    for (auto& k : fenced_kernels(p.text.text())) {
      const std::uint64_t token = token_at(p.text, k.end);
      a.drafts.push_back({std::move(k), token});
    }
    for (const auto& f : t.forks) {
      auto& v = a.samples.emplace_back();
      for (const auto& smp : f.samples) v.push_back(kernel_in(smp.text, true));
    }
    a.answer = kernel_in(t.answer.text, false);
    return a;
  }

  error unknown_task(std::string_view task) const {
    std::string list;
    for (const auto& [name, rounds] : rounds_) list += fmt::format("{}\"{}\"", list.empty() ? "" : ", ", name);
    return error{fmt::format("responsive replay: no trace recorded for task \"{}\" (the corpus has {})", task,
                             list.empty() ? "no traces" : list)};
  }

  std::size_t pick(std::string_view task, int round) const {
    std::optional<std::size_t> any, lowest;
    for (std::size_t i = 0; i < traces_.size(); ++i) {
      const trace& t = traces_[i];
      if (t.task != task || t.round != round) continue;
      if (t.lane == 0) return i;
      if (!t.lane) any = any.value_or(i);
      else if (!lowest || *t.lane < *traces_[*lowest].lane) lowest = i;
    }
    return any ? *any : *lowest;
  }

  static std::string fenced(const std::string& source, const std::string& plan) {
    auto block = [](std::string_view tag, const std::string& body) {
      return fmt::format("```{}\n{}{}```\n", tag, body, body.ends_with('\n') ? "" : "\n");
    };
    return block("cuda", source) + "\n" + block("plan", plan);
  }

  static answer_text sized(std::string text) {
    const std::uint64_t n = estimate_tokens(text);
    return answer_text{std::move(text), n};
  }

  trace rewrite(std::size_t index, std::string_view prompt) const {
    const trace& original = traces_[index];
    const analysis& a = analyses_[index];
    std::map<std::string, std::string> bad;  // tag -> the first failing verdict reported
    std::vector<std::string> ok;             // tags reported ok, in prompt order
    for (const auto& r : reported_kernels(prompt)) {
      if (is_bad_verdict(r.verdict)) bad.try_emplace(r.tag, r.verdict);
      else if (r.verdict == "ok") ok.push_back(r.tag);
    }
    trace t = original;
    if (bad.empty()) return t;
    auto is_bad = [&](const std::optional<found_kernel>& k) { return k && bad.contains(k->tag); };

    // The answer: the last kernel of the round not reported failing, else the
    // last kernel reported ok, else prose.
    const answer_text answer = [&]() -> answer_text {
      if (!is_bad(a.answer)) return original.answer;
      const std::string& tag = a.answer->tag;
      const std::string& verdict = bad.at(tag);
      // Kernels of the round in reasoning order: drafts and fork samples by position.
      std::vector<std::pair<std::uint64_t, const found_kernel*>> order;
      for (const auto& d : a.drafts) order.emplace_back(d.token, &d.kernel);
      for (std::size_t f = 0; f < a.samples.size(); ++f)
        for (const auto& k : a.samples[f])
          if (k) order.emplace_back(original.forks[f].at_token, &*k);
      std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      for (auto it = order.rbegin(); it != order.rend(); ++it)
        if (!bad.contains(it->second->tag))
          return sized(fmt::format("Kernel {} was reported {}, so I am not writing it again. This is the latest version "
                                   "that was not reported failing:\n\n{}",
                                   tag, verdict, fenced(it->second->source, it->second->plan)));
      const auto& cat = kernels(original.task);
      for (auto it = ok.rbegin(); it != ok.rend(); ++it)
        if (auto k = cat.find(*it); k != cat.end())
          return sized(fmt::format("Kernel {} was reported {}, and I have nothing better yet, so this is again the "
                                   "version that was reported ok:\n\n{}",
                                   tag, verdict, fenced(k->second.source, k->second.plan)));
      return sized(nothing_left(fmt::format("every version I had was already reported failing (kernel {} as {})", tag, verdict)));
    }();

    // Fork samples: a failing kernel gives way to the next one that is not.
    for (std::size_t f = 0; f < t.forks.size(); ++f)
      for (std::size_t j = 0; j < t.forks[f].samples.size(); ++j) {
        if (!is_bad(a.samples[f][j])) continue;
        std::optional<answer_text> next;
        for (std::size_t g = f; g < t.forks.size() && !next; ++g)
          for (std::size_t k = g == f ? j + 1 : 0; k < a.samples[g].size() && !next; ++k)
            if (a.samples[g][k] && !is_bad(a.samples[g][k])) next = original.forks[g].samples[k];
        t.forks[f].samples[j] = next ? *next : answer;
      }
    t.answer = answer;

    // The reasoning: a fenced draft of a failing kernel becomes a sentence.
    // Fences pair across segments as the engine reads them (a source with
    // the plan after it, or before it), so rewrite until none is left.
    if (std::any_of(a.drafts.begin(), a.drafts.end(), [&](const draft& d) { return bad.contains(d.kernel.tag); }))
      for (int pass = 0; pass < 16 && strike_drafts(t, bad); ++pass) {
      }
    return t;
  }

  /// One byte span of a segment's literal text and what replaces it.
  struct cut {
    std::size_t begin = 0, end = 0;
    std::string with{};
  };

  /// Replace the fenced drafts of failing kernels in `t`'s reasoning by a
  /// sentence each; false when there was nothing (more) to replace.
  static bool strike_drafts(trace& t, const std::map<std::string, std::string>& bad) {
    const played p = play(t);
    const std::string& text = p.text.text();
    std::map<std::size_t, std::vector<cut>> cuts;  // by segment
    auto segment_of = [&](std::size_t byte) {
      return static_cast<std::size_t>(std::upper_bound(p.starts.begin(), p.starts.end(), byte) - p.starts.begin()) - 1;
    };
    for (const auto& k : fenced_kernels(text)) {
      auto verdict = bad.find(k.tag);
      if (verdict == bad.end()) continue;
      // The whole candidate where it lies in one literal segment, else its source block.
      std::size_t b = k.begin, e = k.end;
      if (segment_of(b) != segment_of(e - 1)) {
        b = k.source_begin;
        e = k.source_end;
      }
      const std::size_t s = segment_of(b);
      if (segment_of(e - 1) != s || t.segments[s].filler) continue;
      auto& list = cuts[s];
      const std::size_t base = p.starts[s];
      if (std::any_of(list.begin(), list.end(), [&](const cut& c) { return b - base < c.end && c.begin < e - base; }))
        continue;  // overlaps one already cut
      list.push_back({b - base, e - base, not_repeated(k.tag, verdict->second)});
    }
    if (cuts.empty()) return false;

    struct moved {
      std::uint64_t start = 0, old_tokens = 0, new_tokens = 0;
      std::size_t old_size = 0, new_size = 0;
      std::vector<cut> cuts;
    };
    std::vector<moved> changes;
    std::uint64_t start = 0;
    for (std::size_t s = 0; s < t.segments.size(); ++s) {
      segment& seg = t.segments[s];
      const std::uint64_t seg_start = start;
      start += seg.tokens;
      auto it = cuts.find(s);
      if (it == cuts.end()) continue;
      auto& list = it->second;
      std::sort(list.begin(), list.end(), [](const cut& x, const cut& y) { return x.begin < y.begin; });
      moved m{seg_start, seg.tokens, 0, seg.text.size(), 0, list};
      std::string out;
      std::size_t at = 0;
      for (const cut& c : list) {
        out.append(seg.text, at, c.begin - at);
        out += c.with;
        at = c.end;
      }
      out.append(seg.text, at);
      m.new_size = out.size();
      // The same bytes per token as before.
      m.new_tokens = std::max<std::uint64_t>(
          1, static_cast<std::uint64_t>(std::llround(static_cast<double>(seg.tokens) * static_cast<double>(out.size()) /
                                                     static_cast<double>(std::max<std::size_t>(seg.text.size(), 1)))));
      seg.text = std::move(out);
      seg.tokens = m.new_tokens;
      changes.push_back(std::move(m));
    }

    // Fork points keep their place in the text.
    auto map = [&](std::uint64_t pos) {
      std::int64_t shift = 0;
      for (const moved& m : changes) {
        if (pos >= m.start + m.old_tokens) {
          shift += static_cast<std::int64_t>(m.new_tokens) - static_cast<std::int64_t>(m.old_tokens);
          continue;
        }
        if (pos <= m.start) break;
        const double frac = static_cast<double>(pos - m.start) / static_cast<double>(m.old_tokens);
        const auto byte = static_cast<std::size_t>(frac * static_cast<double>(m.old_size));
        auto nb = static_cast<std::int64_t>(byte);
        for (const cut& c : m.cuts) {
          if (byte >= c.end) nb += static_cast<std::int64_t>(c.with.size()) - static_cast<std::int64_t>(c.end - c.begin);
          else if (byte > c.begin) nb -= static_cast<std::int64_t>(byte - c.begin) - static_cast<std::int64_t>(c.with.size());
        }
        const double nfrac = static_cast<double>(std::max<std::int64_t>(nb, 0)) /
                             static_cast<double>(std::max<std::size_t>(m.new_size, 1));
        const std::uint64_t inside = std::min<std::uint64_t>(
            m.new_tokens, static_cast<std::uint64_t>(std::llround(nfrac * static_cast<double>(m.new_tokens))));
        return static_cast<std::uint64_t>(static_cast<std::int64_t>(m.start + inside) + shift);
      }
      return static_cast<std::uint64_t>(static_cast<std::int64_t>(pos) + shift);
    };
    const std::uint64_t total = t.reasoning_tokens();
    std::vector<fork_point> forks;
    for (auto& f : t.forks) {
      std::uint64_t pos = std::min(map(f.at_token), total);
      if (!forks.empty() && pos <= forks.back().at_token) pos = forks.back().at_token + 1;
      if (pos > total) {  // no room left: the later fork point wins
        forks.back().samples = std::move(f.samples);
        continue;
      }
      f.at_token = pos;
      forks.push_back(std::move(f));
    }
    t.forks = std::move(forks);
    return true;
  }

  std::vector<trace> traces_;
  no_kernel_answer no_kernel_;
  std::vector<analysis> analyses_;
  std::map<std::string, std::map<std::string, catalogued_kernel>, std::less<>> catalogue_;
  std::map<std::string, std::set<int>, std::less<>> rounds_;
};

/// A trace chooser for `replay_model::set_trace_chooser`: a request plays
/// `traces->select(request.ctx.task, request.prompt)` (round and lane of the
/// request are ignored).
///
///   model.set_trace_chooser(responsive_chooser(std::make_shared<const responsive_traces>(traces)));
inline std::function<expected<trace, error>(const reasoning_request&)> responsive_chooser(
    std::shared_ptr<const responsive_traces> traces) {
  return [traces = std::move(traces)](const reasoning_request& r) { return traces->select(r.ctx.task, r.prompt); };
}

}  // namespace replay
SPECGEN_END_NAMESPACE
