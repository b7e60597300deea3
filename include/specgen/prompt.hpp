#pragma once
/// Prompt building: how a task, earlier kernels and their feedback are put in
/// front of the model. Strategies choose *which* kernels; this file says *how*
/// they are rendered, so every strategy speaks to the model the same way.
#include <specgen/detail/config.hpp>
#include <specgen/names.hpp>
#include <specgen/task.hpp>
#include <specgen/task_io.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// One candidate as the engine knows it: the kernel and, once known, its evaluation.
struct candidate_record {
  std::shared_ptr<const candidate> cand{};
  std::optional<evaluation> eval{};  ///< final evaluation (set once, when the last stage ends)
  bool cancelled = false;          ///< dropped as stale before a verdict
  bool reused = false;             ///< evaluation served from an identical earlier kernel

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

/// Knobs of the rendered prompt.
struct prompt_params {
  std::size_t log_lines = 12;        ///< compile-log lines quoted in feedback
  std::size_t max_feedback_items = 6;
  friend bool operator==(const prompt_params&, const prompt_params&) = default;
};

/// The system prompt: the output contract (fenced CUDA plus a plan block).
inline std::string system_prompt() {
  return "You are an expert CUDA performance engineer. Write fast, correct CUDA kernels.\n"
         "Answer with exactly one ```cuda block holding extern \"C\" __global__ kernels (device code "
         "only, no host code) followed by one ```plan block that launches them, e.g.\n"
         "```plan\nlaunch my_kernel grid(cdiv(N,256)) block(256) smem(0) args(x, y, N)\n```\n"
         "Sizes in the plan are expressions over the task's size symbols.";
}

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

inline std::string shape_text(const tensor_spec& t) {
  std::string s;
  for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + t.shape[i];
  return s;
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

/// Judge-style feedback on one evaluated candidate: what a model can act on.
inline std::string render_feedback(const candidate_record& r, const prompt_params& p = {}) {
  if (r.cancelled) return "not evaluated (superseded by a newer candidate)";
  if (!r.eval) return "evaluation pending";
  const evaluation& e = *r.eval;
  std::string s{to_string(e.result.kind)};
  if (!e.result.summary.empty()) s += ": " + e.result.summary;
  s += "\n";
  switch (e.result.kind) {
    case verdict_kind::compile_error:
      if (!e.result.log.empty()) s += "Compiler log:\n" + detail::first_lines(e.result.log, p.log_lines);
      break;
    case verdict_kind::wrong_result:
      if (e.result.mismatch) {
        const auto& m = *e.result.mismatch;
        s += fmt::format("Output {} at shape ({}): {} of {} elements out of tolerance, max abs error {:.3g}, "
                         "max rel error {:.3g}",
                         m.output, m.shape, m.count, m.total, m.max_abs, m.max_rel);
        if (!m.first_indices.empty()) {
          s += "; first at flat index";
          for (auto i : m.first_indices) s += fmt::format(" {}", i);
        }
        s += "\n";
      }
      break;
    case verdict_kind::ok:
      if (e.timing) {
        const auto& t = *e.timing;
        s += fmt::format("Runs in {:.1f} us (baseline {:.1f} us): speedup {:.2f}x, spread {:.1f}%\n", t.median_us,
                         t.baseline_median_us, t.speedup, 100 * t.spread);
        for (const auto& [k, v] : t.metrics) s += fmt::format("- {}: {:.3g}\n", k, v);
      }
      if (e.compile.registers > 0)
        s += fmt::format("Registers/thread {}, spills {} B, static smem {} B\n", e.compile.registers,
                         e.compile.spill_bytes, e.compile.static_smem_bytes);
      break;
    default:
      if (!e.result.log.empty()) s += detail::first_lines(e.result.log, p.log_lines);
      break;
  }
  return s;
}

SPECGEN_END_NAMESPACE
