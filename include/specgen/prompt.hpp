#pragma once
/// Prompt building: how a task, earlier kernels and what the evaluator
/// measured about them are put in front of the model. Strategies choose
/// *which* kernels a round builds on and reports (`prompt_content`); a prompt
/// builder, a policy a host can replace, says *how* they are rendered, so every
/// strategy speaks to the model the same way.
///
/// @code
///   specgen::engine_config cfg = specgen::mode_config("specgen").value();
///   cfg.prompt = specgen::default_prompt_builder{{.log_lines = 20, .max_feedback_kernels = 12}};
///   // or a host's own type with build(const prompt_content&), system() and name()
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/expr.hpp>
#include <specgen/names.hpp>
#include <specgen/policy/fields.hpp>
#include <specgen/scalar.hpp>
#include <specgen/task.hpp>
#include <specgen/task_io.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <charconv>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// One candidate as the engine knows it: the kernel and, once known, its evaluation.
struct candidate_record {
  std::shared_ptr<const candidate> cand{};
  std::optional<evaluation> eval{};  ///< final evaluation (set once, when the last stage ends)
  bool cancelled = false;          ///< dropped before a verdict (stale, or not judged: see `not_judged`)
  bool reused = false;             ///< evaluation served from an identical earlier kernel
  /// Why the evaluator could not judge it ("" when it could): the simulated
  /// device has no measurement of a kernel outside its cost table.
  std::string not_judged{};

  [[nodiscard]] bool valid() const noexcept { return eval && eval->result.kind == verdict_kind::ok; }
  [[nodiscard]] bool profiled() const noexcept { return valid() && eval->timing.has_value(); }
  [[nodiscard]] double speedup() const noexcept { return profiled() ? eval->timing->speedup : 0.0; }
};

/// A short, stable name for a kernel in prompts: "k" and 8 hex digits of its
/// content hash (source and plan). The same kernel gets the same tag in every
/// round and every run, so a model (or a stand-in server) can tell which of
/// its kernels a verdict is about.
inline std::string kernel_tag(const candidate& c) {
  const std::uint64_t h = c.content_hash();
  return fmt::format("k{:08x}", static_cast<std::uint32_t>(h ^ (h >> 32)));
}

/// One kernel a prompt reports on: its tag and the verdict word of its heading
/// (a verdict name, or "pending" / "not_evaluated").
struct reported_kernel {
  std::string tag{};
  std::string verdict{};
  friend bool operator==(const reported_kernel&, const reported_kernel&) = default;
};

/// The heading the default prompt builder gives each kernel it reports on:
/// `### Kernel <tag> [<verdict>]`, followed on the same line by where the
/// kernel came from. `reported_kernels` reads these headings back.
inline std::string kernel_heading(std::string_view tag, std::string_view verdict_word) {
  return fmt::format("### Kernel {} [{}]", tag, verdict_word);
}

/// The kernels a prompt reports on, in order of appearance: every line that
/// starts with a `kernel_heading`. For a program on the other side of the
/// wire (a stand-in model) that reacts to feedback; a prompt builder of a
/// host's own need not use these headings.
inline std::vector<reported_kernel> reported_kernels(std::string_view prompt) {
  std::vector<reported_kernel> out;
  constexpr std::string_view lead = "### Kernel k";
  std::size_t pos = 0;
  while (pos < prompt.size()) {
    std::size_t eol = prompt.find('\n', pos);
    if (eol == std::string_view::npos) eol = prompt.size();
    const std::string_view line = prompt.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.starts_with(lead) || line.size() < lead.size() + 8 + 3) continue;
    const std::string_view tag = line.substr(lead.size() - 1, 9);
    if (!std::all_of(tag.begin() + 1, tag.end(), [](char ch) { return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'); }))
      continue;
    std::string_view rest = line.substr(lead.size() + 8);
    if (!rest.starts_with(" [")) continue;
    const std::size_t close = rest.find(']');
    if (close == std::string_view::npos) continue;
    out.push_back({std::string(tag), std::string(rest.substr(2, close - 2))});
  }
  return out;
}

/// A kernel a round builds on, with the part it plays in the prompt.
struct shown_kernel {
  const candidate_record* record = nullptr;
  std::string role{};  ///< e.g. "current best", "your last kernel", "parent", "inspiration", "your lane's best"
};

/// What a strategy chose for one lane's prompt; a prompt builder renders it.
/// The pointers point into the search's records (`search_view::records`):
/// render before the search changes.
struct prompt_content {
  const task* for_task = nullptr;
  int round = 0;                                     ///< the round the prompt starts
  std::vector<shown_kernel> kernels{};               ///< to build on, most important first
  std::vector<const candidate_record*> attempts{};   ///< earlier kernels to report on, in creation order
  std::vector<const extract_miss*> misses{};         ///< answers without a kernel, in order
  std::string instruction{};                         ///< the closing request
};

/// Knobs of the default prompt builder.
struct prompt_params {
  std::size_t log_lines = 12;              ///< compile-log diagnostics (and fault-log lines) quoted per kernel
  std::size_t max_feedback_kernels = 8;    ///< distinct kernels reported in full; the rest in one summary line
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("log_lines", s.log_lines, detail::in<std::size_t>(1, 200));
    f("max_feedback_kernels", s.max_feedback_kernels, detail::in<std::size_t>(1, 64));
  }
  friend bool operator==(const prompt_params&, const prompt_params&) = default;
};

namespace detail {
inline std::string first_lines(std::string_view text, std::size_t n) {
  std::string out;
  std::size_t lines = 0, pos = 0;
  while (pos < text.size() && lines < n) {
    auto eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    out.append(text.substr(pos, eol - pos));
    out.push_back('\n');
    pos = eol + 1;
    ++lines;
  }
  if (pos < text.size()) out += "[...]\n";
  return out;
}

inline std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    out.push_back(text.substr(pos, eol - pos));
    pos = eol + 1;
  }
  return out;
}

inline std::string shape_text(const tensor_spec& t) {
  std::string s;
  for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + t.shape[i];
  return s;
}

/// The compiler's log trimmed to what a model can act on: each diagnostic
/// ("candidate.cu(12): error: ...") as "line 12: error: ...", followed by that
/// line of the candidate's own source (the numbers match it: nothing is
/// prepended before compiling), at most `max` diagnostics. A log in another
/// form is quoted as its first `max` lines.
inline std::string trim_compile_log(std::string_view log, std::string_view source, std::size_t max) {
  const auto src = split_lines(source);
  std::string out;
  std::size_t shown = 0, total = 0;
  for (std::string_view line : split_lines(log)) {
    // "<file>(<line>): <kind>: <text>", as NVRTC writes them.
    const auto open = line.find('(');
    const auto close = line.find("): ", open == std::string_view::npos ? 0 : open);
    if (open == std::string_view::npos || close == std::string_view::npos || close <= open + 1) continue;
    const std::string_view digits = line.substr(open + 1, close - open - 1);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) || digits.size() > 9) continue;
    std::string_view rest = line.substr(close + 3);
    if (!rest.starts_with("error") && !rest.starts_with("warning") && !rest.starts_with("catastrophic")) continue;
    ++total;
    if (shown == max) continue;
    ++shown;
    const std::size_t n = static_cast<std::size_t>(std::stoul(std::string(digits)));
    out += fmt::format("line {}: {}\n", n, rest);
    if (n >= 1 && n <= src.size()) {
      std::string_view code = src[n - 1];
      while (!code.empty() && (code.front() == ' ' || code.front() == '\t')) code.remove_prefix(1);
      if (code.size() > 160) code = code.substr(0, 160);
      out += fmt::format("    {:>4} | {}\n", n, code);
    }
  }
  if (total == 0) return first_lines(log, max);
  if (total > shown) out += fmt::format("({} more diagnostics not shown)\n", total - shown);
  return out;
}

/// Where flat index `i` of output `out` lies at `shape` ("N=4,M=8"): "[1, 3]"
/// in the output's own dimensions, or "" when they cannot be computed.
inline std::string coordinates(const tensor_spec& out, std::string_view shape, std::uint64_t i) {
  size_binding b;
  for (std::size_t pos = 0; pos < shape.size();) {
    auto comma = shape.find(',', pos);
    if (comma == std::string_view::npos) comma = shape.size();
    const std::string_view kv = shape.substr(pos, comma - pos);
    pos = comma + 1;
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos) return {};
    std::int64_t v = 0;
    const auto [p, ec] = std::from_chars(kv.data() + eq + 1, kv.data() + kv.size(), v);
    if (ec != std::errc{} || p != kv.data() + kv.size()) return {};
    b[std::string(kv.substr(0, eq))] = v;
  }
  std::vector<std::int64_t> dims;
  for (const auto& d : out.shape) {
    auto e = parse_size_expr(d);
    if (!e) return {};
    auto v = e->eval(b);
    if (!v || *v < 1) return {};
    dims.push_back(*v);
  }
  if (dims.size() < 2) return {};
  std::vector<std::int64_t> at(dims.size());
  std::uint64_t rest = i;
  for (std::size_t k = dims.size(); k-- > 0;) {
    at[k] = static_cast<std::int64_t>(rest % static_cast<std::uint64_t>(dims[k]));
    rest /= static_cast<std::uint64_t>(dims[k]);
  }
  return fmt::format("[{}]", fmt::join(at, ", "));
}

/// A line diff of `from` against `to` (longest common subsequence of lines),
/// as "-"/"+" lines with one line of context around each change and "..."
/// between hunks. Empty when the texts are equal; nullopt when either has
/// more than `max_lines` lines (too large to diff cheaply).
inline std::optional<std::string> line_diff(std::string_view from, std::string_view to, std::size_t max_lines = 400) {
  const auto a = split_lines(from), b = split_lines(to);
  if (a.size() > max_lines || b.size() > max_lines) return std::nullopt;
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::uint16_t> lcs((n + 1) * (m + 1), 0);
  auto at = [&](std::size_t i, std::size_t j) -> std::uint16_t& { return lcs[i * (m + 1) + j]; };
  for (std::size_t i = n; i-- > 0;)
    for (std::size_t j = m; j-- > 0;)
      at(i, j) = a[i] == b[j] ? static_cast<std::uint16_t>(at(i + 1, j + 1) + 1) : std::max(at(i + 1, j), at(i, j + 1));
  struct op {
    char kind;
    std::string_view line;
  };
  std::vector<op> ops;
  std::size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      ops.push_back({' ', a[i]});
      ++i;
      ++j;
    } else if (i < n && (j == m || at(i + 1, j) >= at(i, j + 1))) {
      ops.push_back({'-', a[i++]});
    } else {
      ops.push_back({'+', b[j++]});
    }
  }
  std::vector<bool> keep(ops.size(), false);
  for (std::size_t k = 0; k < ops.size(); ++k)
    if (ops[k].kind != ' ')
      for (std::size_t c = (k == 0 ? 0 : k - 1); c <= std::min(ops.size() - 1, k + 1); ++c) keep[c] = true;
  std::string out;
  bool gap = false;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (!keep[k]) {
      gap = true;
      continue;
    }
    if (gap && !out.empty()) out += "...\n";
    gap = false;
    out += fmt::format("{} {}\n", ops[k].kind, ops[k].line);
  }
  return out;
}

/// The end of a model answer for feedback: its last lines, at most about
/// `max_bytes` bytes, cut at a line start (or a UTF-8 boundary).
inline std::string tail_excerpt(std::string_view text, std::size_t max_bytes) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t from = text.size() - max_bytes;
  if (auto nl = text.find('\n', from); nl != std::string_view::npos && nl + 1 < text.size()) from = nl + 1;
  while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  return "[...]\n" + std::string(text.substr(from));
}

inline std::string thousands(std::uint64_t n) {
  std::string s = std::to_string(n), out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

/// Where a kernel came from, for its heading: "final answer, round 2" or
/// "draft from a fork at 1,200 reasoning tokens (trigger code_fence), round 1".
inline std::string origin_text(const provenance& p) {
  if (p.from == origin::main) return fmt::format("final answer, round {}", p.round + 1);
  return fmt::format("draft from a fork at {} reasoning tokens{}, round {}", thousands(p.prefix_tokens),
                     p.trigger.empty() ? "" : fmt::format(" (trigger {})", p.trigger), p.round + 1);
}

/// The heading's verdict word for a record.
inline std::string verdict_word(const candidate_record& r) {
  if (r.eval) return std::string(to_string(r.eval->result.kind));
  return r.cancelled ? "not_evaluated" : "pending";
}
}  // namespace detail

/// The task as the model reads it.
inline std::string render_task(const task& t) {
  std::string s = fmt::format("# Task: {}\n{}\n\n", t.name, t.description);
  s += "Inputs:\n";
  for (const auto& in : t.inputs) s += fmt::format("- {}: {}[{}]\n", in.name, to_string(in.type), detail::shape_text(in));
  s += "Outputs:\n";
  for (const auto& out : t.outputs)
    s += fmt::format("- {}: {}[{}] (tolerance abs {:g}, rel {:g})\n", out.name, to_string(out.type),
                     detail::shape_text(out), out.tol.abs, out.tol.rel);
  if (!t.scalars.empty()) {
    s += "Scalars (pass each by its name in args, where it arrives as its declared type; a cast such as "
         "NAME:f64 converts it; other constants are typed literals such as 1e-5:f32 or 3:u32):\n";
    for (const auto& sc : t.scalars)
      s += fmt::format("- {}: {} = {} ({} '{}' parameter)\n", sc.name, to_string(sc.type),
                       scalar_value::of(sc).to_string(), detail::article(c_type_name(sc.type)), c_type_name(sc.type));
  }
  s += fmt::format("Benchmarked shape: {}\n", detail::binding_text(t.benchmark_shape));
  if (!t.validation_shapes.empty()) {
    s += "Also validated on:";
    for (const auto& b : t.validation_shapes) s += fmt::format(" ({})", detail::binding_text(b));
    s += "\n";
  }
  return s;
}

/// A kernel with its plan, in the fences the model is asked to write.
inline std::string render_kernel(const candidate& c) {
  return fmt::format("```cuda\n{}\n```\n```plan\n{}\n```\n", c.source, c.plan);
}

/// What the evaluator measured about one candidate, in terms a model can act
/// on: the trimmed compile log with the candidate's line numbers; for a wrong
/// result the shape, output, position, error sizes and NaN count; for a
/// profiled kernel its time against the baseline, the roofline position, the
/// hardware counters when they were collected, registers, spills and shared
/// memory. `t` (optional) turns flat indices into the output's coordinates.
inline std::string render_feedback(const candidate_record& r, const prompt_params& p = {}, const task* t = nullptr) {
  if (!r.not_judged.empty()) return "not evaluated: " + r.not_judged + "\n";
  if (r.cancelled) return "not evaluated (superseded by a newer candidate before its verdict)\n";
  if (!r.eval) return "evaluation pending\n";
  const evaluation& e = *r.eval;
  // A wrong result's measured details below say all its plain one-line summary does, and more;
  // a summary that says more (a later call returned an earlier call's result, NaN where the
  // reference is finite) is kept.
  const bool mismatch_kind = e.result.kind == verdict_kind::wrong_result || e.result.kind == verdict_kind::nonfinite_output;
  const bool detailed = mismatch_kind && e.result.mismatch && e.result.summary.starts_with("output '");
  std::string s = e.result.summary.empty() || detailed ? std::string() : e.result.summary + "\n";
  switch (e.result.kind) {
    case verdict_kind::compile_error:
      if (!e.result.log.empty()) s += "Compiler:\n" + detail::trim_compile_log(e.result.log, r.cand->source, p.log_lines);
      break;
    case verdict_kind::wrong_result:
    case verdict_kind::nonfinite_output:
      if (e.result.mismatch) {
        const auto& m = *e.result.mismatch;
        const tensor_spec* out = nullptr;
        if (t)
          for (const auto& o : t->outputs)
            if (o.name == m.output) out = &o;
        auto where = [&](std::uint64_t i) {
          const std::string c = out ? detail::coordinates(*out, m.shape, i) : std::string();
          return c.empty() ? fmt::format("{}[{}]", m.output, i) : fmt::format("{}{} (flat {})", m.output, c, i);
        };
        s += fmt::format("Output {} at shape ({}): {} of {} elements outside the tolerance", m.output, m.shape, m.count, m.total);
        if (out)
          s += out->tol.terms > 0 && detail::is_float(out->type)
                   ? fmt::format(" (abs {:g} + rel {:g} x |expected| + {:g} roundoffs of the magnitude of its terms)",
                                 out->tol.abs, out->tol.rel, out->tol.terms)
                   : fmt::format(" (abs {:g} + rel {:g} x |expected|)", out->tol.abs, out->tol.rel);
        s += fmt::format("; largest errors: abs {:.3g}, rel {:.3g}", m.max_abs, m.max_rel);
        if (m.nans > 0) s += fmt::format("; {} of them NaN", m.nans);
        s += ".\n";
        if (m.count > 0 && m.worst_index < m.total)
          s += fmt::format("Worst at {}: got {:.6g}, expected {:.6g}.\n", where(m.worst_index), m.worst_got, m.worst_want);
        if (!m.first_indices.empty()) {
          std::vector<std::string> first;
          for (auto i : m.first_indices) first.push_back(where(i));
          s += fmt::format("First outside the tolerance: {}.\n", fmt::join(first, ", "));
        }
      }
      if (!e.result.log.empty()) s += detail::first_lines(e.result.log, std::min<std::size_t>(p.log_lines, 4));
      break;
    case verdict_kind::ok:
      if (e.timing) {
        const auto& m = *e.timing;
        const char* against = m.baseline_of == "reference" ? "the reference (the task has no separate baseline)" : "the baseline";
        if (m.baseline_median_us > 0)
          s += fmt::format("Correct on every validation shape. Runs in {:.1f} us against {:.1f} us for {}: {:.2f}x (spread {:.1f}%).\n",
                           m.median_us, m.baseline_median_us, against, m.speedup, 100 * m.spread);
        else
          s += fmt::format("Correct on every validation shape. Runs in {:.1f} us (spread {:.1f}%); nothing was timed beside it.\n",
                           m.median_us, 100 * m.spread);
        auto metric = [&](const char* k) -> std::optional<double> {
          auto it = m.metrics.find(k);
          return it == m.metrics.end() ? std::nullopt : std::optional<double>(it->second);
        };
        if (auto f = metric("roofline_fraction"))
          s += fmt::format("Roofline: {:.0f}% of the time bound set by moving the task's buffers once at peak DRAM bandwidth{}.\n",
                           100 * *f, metric("effective_dram_gbps") ? fmt::format(" ({:.0f} GB/s effective)", *metric("effective_dram_gbps")) : "");
        else if (auto g = metric("effective_dram_gbps"))
          s += fmt::format("Moves the task's buffers at {:.0f} GB/s effective.\n", *g);
        std::vector<std::string> hw;
        for (auto [k, label] : {std::pair{"hw_dram_pct", "DRAM"}, std::pair{"hw_l2_pct", "L2"}, std::pair{"hw_sm_pct", "SM"},
                                std::pair{"hw_occupancy_pct", "achieved occupancy"}})
          if (auto v = metric(k)) hw.push_back(fmt::format("{} {:.0f}%", label, *v));
        if (!hw.empty()) s += fmt::format("Hardware counters (of peak): {}.\n", fmt::join(hw, ", "));
      } else {
        s += "Correct on every validation shape (not profiled).\n";
      }
      if (e.compile.registers > 0)
        s += fmt::format("Registers/thread {}, spills {} B, static shared memory {} B.\n", e.compile.registers,
                         e.compile.spill_bytes, e.compile.static_smem_bytes);
      break;
    default:
      if (!e.result.log.empty()) s += detail::first_lines(e.result.log, p.log_lines);
      break;
  }
  return s;
}

/// The system prompt of the default builder: the output contract (fenced CUDA
/// plus a plan block).
inline std::string system_prompt() {
  return "You are an expert CUDA performance engineer. Write fast, correct CUDA kernels.\n"
         "Answer with exactly one ```cuda block holding extern \"C\" __global__ kernels (device code "
         "only, no host code) followed by one ```plan block that launches them, e.g.\n"
         "```plan\nlaunch my_kernel grid(cdiv(N,256)) block(256) smem(0) args(x, y, N)\n```\n"
         "Sizes in the plan are expressions over the task's size symbols, passed as int; a cast passes another "
         "type (N:i64, N:u32, N:f32). A task scalar is passed by its name, as its declared type. Other constants "
         "are typed literals: 1e-5:f32 (float), 0.5:f64 (double), 3:u32, -1:i64.";
}

/**
 * The prompt every built-in strategy uses: the task; each kernel to build on
 * under a `kernel_heading` with what was measured and its source; then the
 * earlier attempts, one heading per distinct kernel (repeated samples of one
 * kernel are one entry, with their count), each with its verdict details and
 * its source, or a short diff against a kernel shown before when that is
 * shorter; then the answers from which no kernel could be extracted, and why;
 * then the instruction.
 */
struct default_prompt_builder {
  prompt_params p{};

  [[nodiscard]] std::string name() const { return "default"; }
  [[nodiscard]] std::string system() const { return system_prompt(); }

  [[nodiscard]] std::string build(const prompt_content& c) const {
    std::string s = c.for_task ? render_task(*c.for_task) : std::string();
    std::vector<const candidate*> shown;  // kernels whose full source is in the prompt
    auto show_source = [&](const candidate& k) {
      // The whole kernel, or a diff against a kernel already shown when that is clearly shorter.
      const candidate* base = nullptr;
      std::string best_diff;
      for (const auto* prev : shown) {
        if (prev->plan != k.plan && prev->source == k.source) continue;
        auto d = detail::line_diff(prev->source, k.source);
        if (d && (!base || d->size() < best_diff.size())) {
          base = prev;
          best_diff = std::move(*d);
        }
      }
      std::string out;
      if (base && !best_diff.empty() && best_diff.size() * 2 < k.source.size()) {
        out = fmt::format("Source: kernel {} with these lines changed (- removed, + added):\n```diff\n{}```\n", kernel_tag(*base), best_diff);
        out += fmt::format("```plan\n{}\n```\n", k.plan);
      } else {
        out = render_kernel(k);
      }
      shown.push_back(&k);
      return out;
    };
    if (!c.kernels.empty()) s += "\n## Kernels to build on\n";
    for (const auto& k : c.kernels) {
      const candidate_record& r = *k.record;
      s += fmt::format("{} ({}; {}{})\n", kernel_heading(kernel_tag(*r.cand), detail::verdict_word(r)), k.role,
                       detail::origin_text(r.cand->prov), r.profiled() ? fmt::format("; {:.2f}x the baseline", r.speedup()) : "");
      s += render_feedback(r, p, c.for_task);
      s += show_source(*r.cand);
    }
    // Attempts: one entry per distinct kernel, in order of first appearance.
    struct entry {
      const candidate_record* first = nullptr;
      const candidate_record* judged = nullptr;  // the copy with a verdict, if any
      int copies = 0;
      bool from_main = false;
    };
    std::vector<entry> entries;
    for (const auto* r : c.attempts) {
      auto it = std::find_if(entries.begin(), entries.end(),
                             [&](const entry& e) { return e.first->cand->content_hash() == r->cand->content_hash(); });
      if (it == entries.end()) {
        entries.push_back({r, r->eval ? r : nullptr, 0, false});
        it = entries.end() - 1;
      }
      ++it->copies;
      it->from_main = it->from_main || r->cand->prov.from == origin::main;
      if (!it->judged && r->eval) it->judged = r;
    }
    if (!entries.empty() || !c.misses.empty()) s += "\n## What the evaluator said about your previous attempts\n";
    // Over the limit: the final answers first, then the correct kernels (fastest first), then the newest.
    std::vector<std::size_t> order(entries.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (entries.size() > p.max_feedback_kernels) {
      auto rank = [&](std::size_t i) {
        const auto& e = entries[i];
        const candidate_record& r = e.judged ? *e.judged : *e.first;
        return std::tuple(e.from_main ? 0 : 1, r.valid() ? 0 : 1, -r.speedup(), -static_cast<long long>(i));
      };
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rank(a) < rank(b); });
      order.resize(p.max_feedback_kernels);
      std::sort(order.begin(), order.end());
    }
    for (std::size_t i : order) {
      const auto& e = entries[i];
      const candidate_record& r = e.judged ? *e.judged : *e.first;
      const bool already = std::any_of(shown.begin(), shown.end(), [&](const candidate* k) { return k->content_hash() == r.cand->content_hash(); });
      s += fmt::format("{} ({}{})\n", kernel_heading(kernel_tag(*r.cand), detail::verdict_word(r)), detail::origin_text(e.first->cand->prov),
                       e.copies > 1 ? fmt::format("; written {} times", e.copies) : "");
      s += already ? "Shown above, under \"Kernels to build on\".\n" : render_feedback(r, p, c.for_task) + show_source(*r.cand);
    }
    if (order.size() < entries.size()) {
      std::map<std::string, int> rest;
      for (std::size_t i = 0; i < entries.size(); ++i)
        if (!std::binary_search(order.begin(), order.end(), i))
          ++rest[detail::verdict_word(entries[i].judged ? *entries[i].judged : *entries[i].first)];
      std::vector<std::string> parts;
      for (const auto& [v, n] : rest) parts.push_back(fmt::format("{} {}", n, v));
      s += fmt::format("({} more kernels not shown: {})\n", entries.size() - order.size(), fmt::join(parts, ", "));
    }
    // Answers without a kernel: one entry per distinct answer ending, with how often it was written.
    std::vector<std::pair<const extract_miss*, int>> misses;
    for (const auto* m : c.misses) {
      auto it = std::find_if(misses.begin(), misses.end(), [&](const auto& e) {
        return e.first->reason == m->reason && e.first->message == m->message && e.first->excerpt == m->excerpt;
      });
      if (it == misses.end()) misses.emplace_back(m, 1);
      else ++it->second;
    }
    for (const auto& [m, n] : misses) {
      s += fmt::format("### Answer without a kernel [{}] ({}{})\n{}\n", m->reason, detail::origin_text(m->prov),
                       n > 1 ? fmt::format("; written {} times", n) : "", m->message);
      if (!m->excerpt.empty()) s += fmt::format("It ended:\n```text\n{}\n```\n", m->excerpt);
    }
    s += "\n";
    s += c.instruction;
    return s;
  }
};

/// A prompt builder: renders a strategy's choice into the prompt text, and
/// gives the system prompt (the output contract the extraction relies on).
template <class B>
concept prompt_builder = std::copy_constructible<B> && requires(const B& b, const prompt_content& c) {
  { b.build(c) } -> std::same_as<std::string>;
  { b.system() } -> std::same_as<std::string>;
  { b.name() } -> std::convertible_to<std::string>;
};

/// Type-erased prompt builder, so a config picks one at run time.
class any_prompt_builder {
 public:
  template <prompt_builder B>
    requires(!std::same_as<std::remove_cvref_t<B>, any_prompt_builder>)
  any_prompt_builder(B b) : self_(std::make_shared<model<B>>(std::move(b))) {}  // NOLINT implicit by design
  any_prompt_builder() : any_prompt_builder(default_prompt_builder{}) {}

  [[nodiscard]] std::string build(const prompt_content& c) const { return self_->build(c); }
  [[nodiscard]] std::string system() const { return self_->system(); }
  [[nodiscard]] std::string name() const { return self_->name(); }
  /// `{"default": {...}}` for the default builder, `{"custom": name}` for a host's own.
  [[nodiscard]] nlohmann::json config() const { return self_->config(); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string build(const prompt_content&) const = 0;
    virtual std::string system() const = 0;
    virtual std::string name() const = 0;
    virtual nlohmann::json config() const = 0;
  };
  template <class B>
  struct model final : concept_t {
    explicit model(B b) : b_(std::move(b)) {
      if constexpr (requires { detail::write_fields(b_.p); }) detail::require_valid(b_.p, "prompt " + b_.name());
    }
    std::string build(const prompt_content& c) const override { return b_.build(c); }
    std::string system() const override { return b_.system(); }
    std::string name() const override { return b_.name(); }
    nlohmann::json config() const override {
      if constexpr (std::same_as<B, default_prompt_builder>) return {{"default", detail::write_fields(b_.p)}};
      else return {{"custom", std::string(b_.name())}};
    }
    B b_;
  };
  std::shared_ptr<const concept_t> self_;
};

static_assert(prompt_builder<default_prompt_builder>);
static_assert(prompt_builder<any_prompt_builder>);

/// A prompt builder from JSON: `"default"` or `{"default": {"log_lines": 20, "max_feedback_kernels": 12}}`.
inline expected<any_prompt_builder, error> make_prompt_builder(const nlohmann::json& j) {
  return detail::split_config(j, "prompt", "default")
      .and_then([](const detail::policy_config& cfg) -> expected<prompt_params, error> {
        if (cfg.kind != "default")
          return unexpected(error{fmt::format("prompt: unknown kind '{}' (known: default; a host's own builder is set in code)", cfg.kind)});
        return detail::read_fields<prompt_params>(*cfg.body, "prompt default");
      })
      .transform([](const prompt_params& p) { return any_prompt_builder(default_prompt_builder{p}); });
}

SPECGEN_END_NAMESPACE
