#pragma once
/// Output comparison: the validator's judgement of one output buffer against
/// the reference, and of two runs of one candidate against each other.
///
/// An element passes when |got - want| <= tol.abs + tol.rel * |want|
/// (floats, compared in double; f16/bf16 decoded exactly). NaN equals NaN,
/// ±inf equals the same inf, and anything else non-finite is a mismatch.
/// Integers compare exactly, whatever the tolerance says: integer results
/// have no rounding, so any difference is a bug. On top of the element-wise
/// test, degenerate outputs fail even when every element is within tolerance,
/// because loose tolerances let a constant or all-zero output through.
/// The rules and their reasons are in docs/validation-math.md.
///
/// @code
///   auto c = specgen::compare_outputs(spec, got_bytes, want_bytes, "N=4096");
///   if (!c.pass) record(specgen::make_wrong_result_verdict(c));
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/detail/parallel.hpp>
#include <specgen/inputs.hpp>
#include <specgen/task.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// The result of comparing one output buffer.
struct comparison {
  bool pass = false;     ///< no element out of tolerance and not degenerate
  mismatch_stats stats{};
  std::string degenerate{};  ///< why the output is degenerate; empty when it is not
  /// Offending elements that are NaN or inf where the reference is finite and
  /// that are not the validator's poison (a kernel computed them).
  std::uint64_t nonfinite = 0;
  /// Offending elements that still hold the validator's poison (never written).
  std::uint64_t unwritten = 0;
  friend bool operator==(const comparison&, const comparison&) = default;
};

/// The unit roundoff of the arithmetic behind an output of type `d`: 2^-53
/// for f64, 2^-24 otherwise (f16 and bf16 results are computed in f32).
constexpr double unit_roundoff(dtype d) noexcept { return d == dtype::f64 ? 0x1p-53 : 0x1p-24; }

namespace detail {

template <class T>
T load(const std::byte* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Element `i` as a double (floats exactly, integers exactly up to 2^53).
inline double load_double(dtype d, std::span<const std::byte> b, std::size_t i) noexcept {
  const std::byte* p = b.data() + i * size_of(d);
  switch (d) {
    case dtype::f16: return half_to_float(load<std::uint16_t>(p));
    case dtype::bf16: return bf16_to_float(load<std::uint16_t>(p));
    case dtype::f32: return load<float>(p);
    case dtype::f64: return load<double>(p);
    case dtype::i8: return load<std::int8_t>(p);
    case dtype::u8: return load<std::uint8_t>(p);
    case dtype::i32: return load<std::int32_t>(p);
    case dtype::i64: return static_cast<double>(load<std::int64_t>(p));
  }
  return 0;
}

inline std::int64_t load_int(dtype d, std::span<const std::byte> b, std::size_t i) noexcept {
  const std::byte* p = b.data() + i * size_of(d);
  switch (d) {
    case dtype::i8: return load<std::int8_t>(p);
    case dtype::u8: return load<std::uint8_t>(p);
    case dtype::i32: return load<std::int32_t>(p);
    default: return load<std::int64_t>(p);
  }
}

/// The element-wise part, shared by validation and the repeated-runs check.
/// `terms` (empty, or the size of `want`): the reference on absolute inputs.
inline comparison compare_elements(const tensor_spec& out, std::span<const std::byte> got,
                                   std::span<const std::byte> want, std::string shape_text, int max_indices,
                                   std::span<const std::byte> terms = {}) {
  const std::size_t width = size_of(out.type);
  if (got.size() != want.size() || got.size() % width != 0)
    throw std::invalid_argument(fmt::format(
        "compare_outputs: output '{}' buffers of {} and {} bytes are not the same whole number of {} elements",
        out.name, got.size(), want.size(), to_string(out.type)));
  if (!terms.empty() && terms.size() != want.size())
    throw std::invalid_argument(fmt::format("compare_outputs: output '{}': the terms buffer has {} bytes, not {}",
                                            out.name, terms.size(), want.size()));
  const double terms_scale = terms.empty() ? 0.0 : out.tol.terms * unit_roundoff(out.type);
  const auto poison = poison_pattern(out.type);
  comparison c;
  c.stats.output = out.name;
  c.stats.shape = std::move(shape_text);
  const std::size_t n = got.size() / width;
  c.stats.total = n;
  const double inf = std::numeric_limits<double>::infinity();
  const bool exact = !is_float(out.type);
  double worst_err = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double abs_err = 0, rel_err = 0;
    bool bad = false;
    if (exact) {
      const std::int64_t g = load_int(out.type, got, i), w = load_int(out.type, want, i);
      if (g != w) {
        bad = true;
        abs_err = std::abs(static_cast<double>(g) - static_cast<double>(w));
        rel_err = w != 0 ? abs_err / std::abs(static_cast<double>(w)) : 0;
      }
    } else {
      const double g = load_double(out.type, got, i), w = load_double(out.type, want, i);
      if (std::isnan(g) || std::isnan(w) || std::isinf(g) || std::isinf(w)) {
        // Non-finite values agree only when identical (NaN with NaN, inf with the same inf).
        bad = !((std::isnan(g) && std::isnan(w)) || g == w);
        if (bad) abs_err = rel_err = inf;
      } else {
        abs_err = std::abs(g - w);
        rel_err = w != 0 ? abs_err / std::abs(w) : 0;
        double allowed = out.tol.abs + out.tol.rel * std::abs(w);
        if (terms_scale > 0) {
          const double magnitude = std::abs(load_double(out.type, terms, i));
          if (std::isfinite(magnitude)) allowed += terms_scale * magnitude;
        }
        bad = abs_err > allowed;
      }
    }
    c.stats.max_abs = std::max(c.stats.max_abs, abs_err);
    c.stats.max_rel = std::max(c.stats.max_rel, rel_err);
    if (bad) {
      if (c.stats.first_indices.size() < static_cast<std::size_t>(std::max(max_indices, 0)))
        c.stats.first_indices.push_back(i);
      if (c.stats.count == 0 || abs_err > worst_err) {
        worst_err = abs_err;
        c.stats.worst_index = i;
        c.stats.worst_got = exact ? static_cast<double>(load_int(out.type, got, i)) : load_double(out.type, got, i);
        c.stats.worst_want = exact ? static_cast<double>(load_int(out.type, want, i)) : load_double(out.type, want, i);
      }
      if (!exact) {
        const double g = load_double(out.type, got, i);
        if (std::isnan(g)) ++c.stats.nans;
        if (std::memcmp(got.data() + i * width, poison.data(), width) == 0) ++c.unwritten;
        else if (!std::isfinite(g) && std::isfinite(load_double(out.type, want, i))) ++c.nonfinite;
      }
      ++c.stats.count;
    }
  }
  c.pass = c.stats.count == 0;
  return c;
}

/// What the degeneracy check needs to know about a slice of a buffer pair;
/// slices summarised separately (by different threads) merge into the
/// summary of the whole.
struct degeneracy_summary {
  std::size_t elements = 0;
  bool got_poison = true, want_poison = true;
  bool got_zero = true, want_zero = true, got_const = true, want_const = true;
  double g0 = 0, w0 = 0;  ///< the first elements of the slice
  std::size_t got_nonfinite = 0, want_nonfinite = 0;
};

/// Elements [first, last) of `got` and `want` (raw buffers of `d`).
inline degeneracy_summary summarize_degeneracy(dtype d, std::span<const std::byte> got, std::span<const std::byte> want,
                                               std::size_t first, std::size_t last) {
  degeneracy_summary s;
  if (first >= last) return s;
  const std::size_t w = size_of(d);
  s.elements = last - first;
  s.got_poison = is_poison(got.subspan(first * w, s.elements * w), d);
  s.want_poison = is_poison(want.subspan(first * w, s.elements * w), d);
  s.g0 = load_double(d, got, first);
  s.w0 = load_double(d, want, first);
  for (std::size_t i = first; i < last; ++i) {
    const double g = load_double(d, got, i), v = load_double(d, want, i);
    s.got_zero = s.got_zero && g == 0;
    s.want_zero = s.want_zero && v == 0;
    // Bitwise for NaN: a NaN-filled output is constant too.
    s.got_const = s.got_const && (g == s.g0 || (std::isnan(g) && std::isnan(s.g0)));
    s.want_const = s.want_const && (v == s.w0 || (std::isnan(v) && std::isnan(s.w0)));
    s.got_nonfinite += !std::isfinite(g);
    s.want_nonfinite += !std::isfinite(v);
  }
  return s;
}

/// The summary of slice `a` followed by slice `b`.
inline degeneracy_summary merge(const degeneracy_summary& a, const degeneracy_summary& b) {
  if (a.elements == 0) return b;
  if (b.elements == 0) return a;
  auto same = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  degeneracy_summary s = a;
  s.elements += b.elements;
  s.got_poison = a.got_poison && b.got_poison;
  s.want_poison = a.want_poison && b.want_poison;
  s.got_zero = a.got_zero && b.got_zero;
  s.want_zero = a.want_zero && b.want_zero;
  s.got_const = a.got_const && b.got_const && same(a.g0, b.g0);
  s.want_const = a.want_const && b.want_const && same(a.w0, b.w0);
  s.got_nonfinite += b.got_nonfinite;
  s.want_nonfinite += b.want_nonfinite;
  return s;
}

/// Why a buffer with summary `s` is degenerate, or "" when it is not.
inline std::string degenerate_reason(const degeneracy_summary& s) {
  if (s.elements == 0) return {};
  if (s.got_poison && !s.want_poison)
    return "the output was never written: it still holds the poison the validator fills outputs with before "
           "every run";
  if (s.got_nonfinite > 0 && s.want_nonfinite == 0)
    return fmt::format("{} of {} elements are NaN or inf while the reference has none", s.got_nonfinite, s.elements);
  if (s.got_zero && !s.want_zero) return "every element is 0 while the reference is not all zero";
  if (s.got_const && !s.want_const)
    return fmt::format("every element is the same value ({}) while the reference varies", s.g0);
  return {};
}

/// Why `got` is degenerate relative to `want`, or "" when it is not.
inline std::string degenerate_reason(dtype d, std::span<const std::byte> got, std::span<const std::byte> want) {
  return degenerate_reason(summarize_degeneracy(d, got, want, 0, got.size() / size_of(d)));
}

inline std::string describe(const comparison& c) {
  const auto& m = c.stats;
  if (!c.degenerate.empty())
    return fmt::format("output '{}' at {} is degenerate: {}", m.output, m.shape, c.degenerate);
  std::string s = fmt::format(
      "output '{}' at {}: {} of {} elements out of tolerance, max abs error {:.3g}, max rel error {:.3g}", m.output,
      m.shape, m.count, m.total, m.max_abs, m.max_rel);
  if (!m.first_indices.empty()) s += fmt::format(", first at index {}", m.first_indices.front());
  return s;
}

}  // namespace detail

/// Compares output `out` of a candidate (`got`) with the reference's
/// (`want`), both raw buffers of `out.type`, at the validation shape
/// `shape_text` (e.g. "N=1000,M=77", only used for messages). `max_indices`
/// bounds how many offending flat indices are recorded. `terms`, when not
/// empty, is the reference evaluated on the absolute values of the float
/// inputs (same size as `want`): it adds `tol.terms * u * |terms[i]|` to
/// each element's allowance (see `tolerance`).
///
/// @code
///   tensor_spec y{.name = "y", .type = dtype::f32, .shape = {"N"}, .tol = {.abs = 1e-5, .rel = 1e-5}};
///   auto c = compare_outputs(y, got, want, "N=1000");
///   // c.pass, c.stats.count, c.stats.first_indices, c.degenerate
///   auto d = compare_outputs(y, got, want, "N=1000", 8, want_on_abs_inputs);   // cancellation-aware
/// @endcode
/// @throws std::invalid_argument when the buffers differ in size or are not
///         whole elements (the caller allocated them wrong).
inline comparison compare_outputs(const tensor_spec& out, std::span<const std::byte> got,
                                  std::span<const std::byte> want, std::string shape_text, int max_indices = 8,
                                  std::span<const std::byte> terms = {}) {
  comparison c = detail::compare_elements(out, got, want, std::move(shape_text), max_indices, terms);
  c.degenerate = detail::degenerate_reason(out.type, got, want);
  c.pass = c.pass && c.degenerate.empty();
  return c;
}

/// `compare_outputs` on `threads` threads, for outputs at a benchmark shape
/// (16M floats took 0.14 s on one core of the development machine). Same result, bit for bit:
/// slices are compared separately and their statistics merged in order.
///
/// @code
///   auto c = compare_outputs_parallel(y, got, want, "N=16777216", std::thread::hardware_concurrency());
/// @endcode
inline comparison compare_outputs_parallel(const tensor_spec& out, std::span<const std::byte> got,
                                           std::span<const std::byte> want, std::string shape_text, unsigned threads,
                                           int max_indices = 8, std::span<const std::byte> terms = {}) {
  const std::size_t width = size_of(out.type);
  const std::size_t n = got.size() / width;
  const std::size_t parts = detail::slice_count(n, std::max(threads, 1u));
  if (parts == 1 || got.size() != want.size() || got.size() % width != 0)
    return compare_outputs(out, got, want, std::move(shape_text), max_indices, terms);
  std::vector<comparison> pieces(parts);
  std::vector<detail::degeneracy_summary> sums(parts);
  std::vector<std::size_t> firsts(parts);
  detail::for_each_slice(n, std::max(threads, 1u), [&](std::size_t k, std::size_t first, std::size_t last) {
    firsts[k] = first;
    pieces[k] = detail::compare_elements(out, got.subspan(first * width, (last - first) * width),
                                         want.subspan(first * width, (last - first) * width), {}, max_indices,
                                         terms.empty() ? terms : terms.subspan(first * width, (last - first) * width));
    sums[k] = detail::summarize_degeneracy(out.type, got, want, first, last);
  });
  comparison c;
  c.stats.output = out.name;
  c.stats.shape = std::move(shape_text);
  detail::degeneracy_summary all;
  double worst_err = 0;
  for (std::size_t k = 0; k < parts; ++k) {
    const auto& p = pieces[k].stats;
    const std::size_t first = firsts[k];
    const double piece_worst = std::isfinite(p.worst_got - p.worst_want) ? std::abs(p.worst_got - p.worst_want)
                                                                          : std::numeric_limits<double>::infinity();
    if (p.count > 0 && (c.stats.count == 0 || piece_worst > worst_err)) {
      worst_err = piece_worst;
      c.stats.worst_index = p.worst_index + first;
      c.stats.worst_got = p.worst_got;
      c.stats.worst_want = p.worst_want;
    }
    c.stats.nans += p.nans;
    c.nonfinite += pieces[k].nonfinite;
    c.unwritten += pieces[k].unwritten;
    c.stats.total += p.total;
    c.stats.count += p.count;
    c.stats.max_abs = std::max(c.stats.max_abs, p.max_abs);
    c.stats.max_rel = std::max(c.stats.max_rel, p.max_rel);
    for (auto i : p.first_indices)
      if (c.stats.first_indices.size() < static_cast<std::size_t>(std::max(max_indices, 0)))
        c.stats.first_indices.push_back(i + first);
    all = detail::merge(all, sums[k]);
  }
  c.degenerate = detail::degenerate_reason(all);
  c.pass = c.stats.count == 0 && c.degenerate.empty();
  return c;
}

/// The verdict for a failed comparison, with a one-line summary naming the
/// output, shape, count and largest errors (or the degenerate reason) and
/// `mismatch` filled: `nonfinite_output` when the kernel produced NaN or inf
/// where the reference is finite (not counting poison it never overwrote),
/// `wrong_result` otherwise.
///
/// @code
///   if (!c.pass) return make_wrong_result_verdict(c);   // wrong_result or nonfinite_output
/// @endcode
/// @throws std::logic_error when `c.pass` (a passing output is not wrong).
inline verdict make_wrong_result_verdict(const comparison& c) {
  if (c.pass) throw std::logic_error("make_wrong_result_verdict: the comparison passed");
  if (c.nonfinite > 0)
    return verdict{.kind = verdict_kind::nonfinite_output,
                   .summary = fmt::format("{} element{} NaN or inf where the reference is finite: {}", c.nonfinite,
                                          c.nonfinite == 1 ? " is" : "s are", detail::describe(c)),
                   .mismatch = c.stats};
  return verdict{.kind = verdict_kind::wrong_result, .summary = detail::describe(c), .mismatch = c.stats};
}

/// The repeated-runs race check: do two runs of one candidate on the same
/// inputs agree? Integers must be identical; floats must agree within the
/// output's own tolerance (`run_a` taken as the reference), NaN with NaN.
/// Bitwise equality would reject correct kernels that sum with float atomics
/// (the order, hence the rounding, changes run to run); a real race loses or
/// corrupts whole terms and lands far outside the tolerance. The two runs are
/// not checked for degeneracy: compare_outputs already judged each against
/// the reference.
///
/// @code
///   auto c = outputs_agree(y, first_run, second_run, "N=1000");
///   if (!c.pass) return make_unstable_verdict(c);
/// @endcode
/// @throws std::invalid_argument when the buffers differ in size.
inline comparison outputs_agree(const tensor_spec& out, std::span<const std::byte> run_a,
                                std::span<const std::byte> run_b, std::string shape_text, int max_indices = 8,
                                std::span<const std::byte> terms = {}) {
  return detail::compare_elements(out, run_b, run_a, std::move(shape_text), max_indices, terms);
}

/// The unstable verdict for two runs that disagree; `mismatch` holds where.
/// @throws std::logic_error when `c.pass`.
inline verdict make_unstable_verdict(const comparison& c) {
  if (c.pass) throw std::logic_error("make_unstable_verdict: the runs agree");
  return verdict{.kind = verdict_kind::unstable,
                 .summary = "repeated runs disagree on the same inputs (a race?): " + detail::describe(c),
                 .mismatch = c.stats};
}

SPECGEN_END_NAMESPACE
