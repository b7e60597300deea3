#pragma once
/// A kernel optimisation task: what to compute, on which shapes, checked
/// against which reference, timed against which baseline.
/// (Loading from JSON: `load_task` / `parse_task` in task_io.hpp; the file
/// format is documented in docs/task-format.md.)
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

enum class dtype : std::uint8_t { f16, bf16, f32, f64, i8, u8, i32, i64 };

inline constexpr std::array<std::string_view, 8> dtype_names{"f16", "bf16", "f32", "f64", "i8", "u8", "i32", "i64"};

/// The name used in task files and plans: "f16", "bf16", "f32", ...
constexpr std::string_view to_string(dtype d) noexcept { return dtype_names[static_cast<std::size_t>(d)]; }
constexpr std::optional<dtype> parse_dtype(std::string_view s) noexcept {
  for (std::size_t i = 0; i < dtype_names.size(); ++i)
    if (dtype_names[i] == s) return static_cast<dtype>(i);
  return std::nullopt;
}
/// Bytes per element.
constexpr std::size_t size_of(dtype d) noexcept {
  constexpr std::size_t sizes[] = {2, 2, 4, 8, 1, 1, 4, 8};
  return sizes[static_cast<std::size_t>(d)];
}

/// The type of a scalar kernel argument: how a plan passes a task scalar, a
/// size or a typed literal by value. The names are also the plan's casts
/// (`N:u32`, `eps:f64`, `1e-5:f32`). f16 and bf16 travel as their 2-byte
/// IEEE binary16 / bfloat16 bit patterns (`__half`, `__nv_bfloat16`
/// parameters). Conversions and ranges: scalar.hpp.
enum class scalar_type : std::uint8_t { i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64 };

inline constexpr std::array<std::string_view, 12> scalar_type_names{"i8",  "u8",  "i16", "u16",  "i32", "u32",
                                                                    "i64", "u64", "f16", "bf16", "f32", "f64"};

/// The name used in task files and plans: "i32", "u64", "f32", ...
constexpr std::string_view to_string(scalar_type t) noexcept {
  return scalar_type_names[static_cast<std::size_t>(t)];
}
constexpr std::optional<scalar_type> parse_scalar_type(std::string_view s) noexcept {
  for (std::size_t i = 0; i < scalar_type_names.size(); ++i)
    if (scalar_type_names[i] == s) return static_cast<scalar_type>(i);
  return std::nullopt;
}
/// Bytes of the parameter, which is also its alignment: 1, 2, 4 or 8.
constexpr std::size_t size_of(scalar_type t) noexcept {
  constexpr std::size_t sizes[] = {1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8};
  return sizes[static_cast<std::size_t>(t)];
}

/// The kinds of input distribution. The first six are the named ones every
/// earlier task file used (their samples depend on the element type, see
/// `make_input`); the rest carry parameters and mean exactly what they say.
enum class distribution_kind : std::uint8_t {
  normal,          ///< N(0, 1) (integers: round(8 z))
  uniform,         ///< [0, 1) (integers: [0, 64))
  signed_uniform,  ///< [-1, 1) (integers: [-64, 64))
  large,           ///< ±[1e3, 1e4) with a random sign (finite in f16)
  zeros,
  ones,
  normal_of,       ///< normal(mean, std)
  uniform_of,      ///< uniform(lo, hi): [lo, hi)
  randint,         ///< randint(lo, hi): integers in [lo, hi)
  constant,        ///< const(v)
  arange,          ///< arange(start, step): start + step * i (arange alone: 0, 1, 2, ...)
};

inline constexpr std::array<std::string_view, 11> distribution_names{
    "normal", "uniform", "signed_uniform", "large", "zeros", "ones", "normal", "uniform", "randint", "const", "arange"};

/// How an input buffer is initialised for validation and timing: a named
/// distribution (`normal`, `uniform`, `signed_uniform`, `large`, `zeros`,
/// `ones`) or a parameterised one (`normal(mean, std)`, `uniform(lo, hi)`,
/// `randint(lo, hi)`, `const(v)`, `arange`, `arange(start, step)`).
/// `distribution::normal` and the other named ones are constants of this type.
///
/// @code
///   auto d = specgen::parse_distribution("normal(1000, 1)");   // rows with a large mean
///   specgen::to_string(*d) == "normal(1000, 1)";
///   specgen::distribution::large == *specgen::parse_distribution("large");
/// @endcode
struct distribution {
  distribution_kind kind = distribution_kind::normal;
  double a = 0;  ///< mean, lo, v or start
  double b = 0;  ///< std, hi or step

  static const distribution normal, uniform, signed_uniform, large, zeros, ones;

  /// A random distribution of unit scale or `large`: the ones the evaluator
  /// may replace with its own validation distributions.
  [[nodiscard]] constexpr bool is_replaceable() const noexcept { return kind <= distribution_kind::large; }
  friend constexpr bool operator==(const distribution&, const distribution&) = default;
};

inline constexpr distribution distribution::normal{distribution_kind::normal, 0, 0};
inline constexpr distribution distribution::uniform{distribution_kind::uniform, 0, 0};
inline constexpr distribution distribution::signed_uniform{distribution_kind::signed_uniform, 0, 0};
inline constexpr distribution distribution::large{distribution_kind::large, 0, 0};
inline constexpr distribution distribution::zeros{distribution_kind::zeros, 0, 0};
inline constexpr distribution distribution::ones{distribution_kind::ones, 0, 0};

/// The distribution's text, as task files write it: "normal", "large",
/// "normal(1000, 1)", "randint(0, 10)", "const(0.5)", "arange", "arange(1, 0.5)".
inline std::string to_string(const distribution& d) {
  const std::string_view name = distribution_names[static_cast<std::size_t>(d.kind)];
  switch (d.kind) {
    case distribution_kind::normal_of:
    case distribution_kind::uniform_of:
    case distribution_kind::randint: return fmt::format("{}({}, {})", name, d.a, d.b);
    case distribution_kind::constant: return fmt::format("{}({})", name, d.a);
    case distribution_kind::arange:
      return d.a == 0 && d.b == 1 ? std::string(name) : fmt::format("{}({}, {})", name, d.a, d.b);
    default: return std::string(name);
  }
}

namespace detail {

/// The distribution in `s`, or why there is none.
inline std::pair<std::optional<distribution>, std::string> read_distribution(std::string_view s) {
  auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  auto fail = [&](std::string why) { return std::pair{std::optional<distribution>{}, std::move(why)}; };
  s = trim(s);
  const std::size_t open = s.find('(');
  const std::string_view name = trim(s.substr(0, open));
  std::vector<double> args;
  if (open != std::string_view::npos) {
    if (s.back() != ')') return fail(fmt::format("'{}': expected ')' at the end", s));
    std::string_view inner = s.substr(open + 1, s.size() - open - 2);
    while (true) {
      const std::size_t comma = inner.find(',');
      const std::string_view part = trim(inner.substr(0, comma));
      double v = 0;
      const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
      if (part.empty() || ec != std::errc{} || end != part.data() + part.size() || !std::isfinite(v))
        return fail(fmt::format("'{}': '{}' is not a finite number", s, part));
      args.push_back(v);
      if (comma == std::string_view::npos) break;
      inner.remove_prefix(comma + 1);
    }
  }
  static constexpr std::string_view parameterised =
      "normal(mean, std), uniform(lo, hi), randint(lo, hi), const(v), arange, arange(start, step)";
  if (open == std::string_view::npos) {
    for (std::size_t i = 0; i <= static_cast<std::size_t>(distribution_kind::ones); ++i)
      if (distribution_names[i] == name) return {distribution{static_cast<distribution_kind>(i), 0, 0}, {}};
    if (name == "arange") return {distribution{distribution_kind::arange, 0, 1}, {}};
    return fail(fmt::format("unknown distribution '{}' (known: normal, uniform, signed_uniform, large, zeros, ones, {})",
                            s, parameterised));
  }
  auto want = [&](std::size_t n) -> std::string {
    return args.size() == n ? std::string()
                            : fmt::format("'{}': {} takes {} parameter{}, got {}", s, name, n, n == 1 ? "" : "s", args.size());
  };
  distribution d{};
  if (name == "normal") d = {distribution_kind::normal_of, 0, 0};
  else if (name == "uniform") d = {distribution_kind::uniform_of, 0, 0};
  else if (name == "randint") d = {distribution_kind::randint, 0, 0};
  else if (name == "const") d = {distribution_kind::constant, 0, 0};
  else if (name == "arange") d = {distribution_kind::arange, 0, 0};
  else return fail(fmt::format("unknown distribution '{}' (with parameters: {})", s, parameterised));
  if (auto e = want(d.kind == distribution_kind::constant ? 1 : 2); !e.empty()) return fail(e);
  d.a = args[0];
  d.b = args.size() > 1 ? args[1] : 0;
  if (d.kind == distribution_kind::normal_of && d.b < 0)
    return fail(fmt::format("'{}': the standard deviation must not be negative", s));
  if ((d.kind == distribution_kind::uniform_of || d.kind == distribution_kind::randint) && !(d.b > d.a))
    return fail(fmt::format("'{}': hi must be greater than lo", s));
  if (d.kind == distribution_kind::randint &&
      (d.a != std::floor(d.a) || d.b != std::floor(d.b) || std::abs(d.a) > 9007199254740992.0 ||
       std::abs(d.b) > 9007199254740992.0))
    return fail(fmt::format("'{}': randint's bounds must be integers of magnitude at most 2^53", s));
  return {d, {}};
}

}  // namespace detail

/// Parses `to_string`'s forms (spaces allowed). Parameters must be finite;
/// `std` non-negative, `hi > lo`, `randint`'s bounds integral. nullopt
/// when the text is none of them; `distribution_error` says why.
inline std::optional<distribution> parse_distribution(std::string_view s) { return detail::read_distribution(s).first; }

/// Why `parse_distribution(s)` fails, or "" when it succeeds.
inline std::string distribution_error(std::string_view s) { return detail::read_distribution(s).second; }

/// The tolerance of an output, and how the validator applies it (see
/// docs/validation-math.md). An element passes when
///
///     |got - want| <= abs + rel * |want| + terms * u * |T|
///
/// where T is the same element of the reference evaluated on the absolute
/// values of the floating-point inputs (the magnitude of the terms that
/// produced the output, so a sum that cancels to near zero gets the
/// allowance fp32 rounding of its terms needs) and u is the unit roundoff of
/// the arithmetic: 2^-24 for f32, f16 and bf16 outputs (computed in f32),
/// 2^-53 for f64. `terms = 0` is the fixed abs/rel pair alone. Integers
/// compare exactly, whatever the tolerance says.
struct tolerance {
  double abs = 1e-5;
  double rel = 1e-5;
  double terms = 16;
  friend bool operator==(const tolerance&, const tolerance&) = default;
};

/// The tolerance a task file gets when an output names none: tight enough to
/// catch a precision downgrade (f32 computed in f16 misses 1e-5), loose enough
/// for a reordered floating-point reduction. Integers compare exactly.
constexpr tolerance default_tolerance(dtype d) noexcept {
  switch (d) {
    case dtype::f16: return {.abs = 1e-3, .rel = 1e-3, .terms = 16};
    case dtype::bf16: return {.abs = 1e-2, .rel = 1e-2, .terms = 16};
    case dtype::f32: return {.abs = 1e-5, .rel = 1e-5, .terms = 16};
    case dtype::f64: return {.abs = 1e-10, .rel = 1e-10, .terms = 16};
    default: return {.abs = 0, .rel = 0, .terms = 0};
  }
}

/// An input or output buffer. Shape entries are size expressions over the
/// task's symbols (e.g. "N", "M*K", "cdiv(N,128)").
struct tensor_spec {
  std::string name{};
  dtype type = dtype::f32;
  std::vector<std::string> shape{};
  distribution init = distribution::normal;  ///< inputs only
  tolerance tol{};                           ///< outputs only
  friend bool operator==(const tensor_spec&, const tensor_spec&) = default;
};

/// A binding of every size symbol to a value.
using shape_binding = std::map<std::string, std::int64_t>;

namespace detail {
/// "N=1000,M=77": a shape as `mismatch_stats::shape` and error messages show it.
inline std::string binding_text(const shape_binding& b) {
  std::string out;
  for (const auto& [k, v] : b) out += fmt::format("{}{}={}", out.empty() ? "" : ",", k, v);
  return out;
}
}  // namespace detail

/// A reference or baseline implementation: device code with a launch plan, or
/// a named host callback registered through the C++ API (cuBLAS, ...).
/// A baseline time measured outside the evaluator and written into the task
/// (`"baseline": {"recorded": {...}}`), e.g. PyTorch eager's time for an
/// imported KernelBench problem. A speedup against it is `ms` over the
/// candidate's median time.
struct recorded_time {
  double ms = 0;         ///< the recorded time of one run, milliseconds (> 0)
  std::string device{};  ///< the GPU it was measured on, as the driver names it ("NVIDIA H200")
  std::string what{};    ///< what was timed ("PyTorch 2.11.0 eager")
  std::string details{}; ///< further measurements, a JSON object's text ("" for none)
  friend bool operator==(const recorded_time&, const recorded_time&) = default;
};

/// How a task's reference or baseline is computed: device code with a plan,
/// a registered host callback, stored outputs (reference only), or a
/// recorded time (baseline only).
struct implementation {
  std::string source{};  ///< CUDA source (kind plan)
  std::string plan{};    ///< launch plan text (kind plan, see plan.hpp)
  std::string host{};    ///< registered host callback name (kind host)
  /// A stored-reference file (stored_reference.hpp): inputs and reference
  /// outputs written by an importer, in place of a reference kernel. The
  /// path as loaded, relative ones resolved against the task file's folder.
  std::string stored{};
  std::optional<recorded_time> recorded{};  ///< a recorded baseline time
  /// True for a host callback, false for device code with a plan.
  [[nodiscard]] bool is_host() const noexcept { return !host.empty(); }
  [[nodiscard]] bool is_stored() const noexcept { return !stored.empty(); }
  [[nodiscard]] bool is_recorded() const noexcept { return recorded.has_value(); }
  /// Device code with a plan: something the evaluator compiles and runs.
  [[nodiscard]] bool is_device_code() const noexcept { return !plan.empty() || !source.empty(); }
  friend bool operator==(const implementation&, const implementation&) = default;
};

/// A named constant the task passes to its kernels by value (`eps`, `alpha`,
/// a seed). Plans pass it by name (`args(x, y, eps, N)`), as its type or
/// converted by a cast (`eps:f64`); see docs/plan-language.md.
///
/// @code
///   specgen::scalar_spec eps{.name = "eps", .type = specgen::scalar_type::f32, .real = 1e-5};
///   specgen::scalar_spec seed{.name = "seed", .type = specgen::scalar_type::u64, .value = -1};  // 2^64 - 1
/// @endcode
struct scalar_spec {
  std::string name{};
  scalar_type type = scalar_type::f32;
  /// Integer types: the value, exactly, as its 64-bit two's-complement
  /// pattern (a u64 above 2^63 - 1 reads negative here; cast it to
  /// `std::uint64_t`). 0 for float types.
  std::int64_t value = 0;
  /// Float types: the value as written; f32, f16 and bf16 ones are rounded
  /// to their type when passed. 0 for integer types.
  double real = 0;
  friend bool operator==(const scalar_spec&, const scalar_spec&) = default;
};

/// A kernel optimisation task. Its reference and baseline plans and every
/// candidate's plan pass the task's buffers, sizes and `scalars`; a host
/// reference (`host_reference`, gpu/evaluation.hpp) receives the task and
/// reads the scalars from `t.scalars`.
struct task {
  std::string name{};
  std::string description{};           ///< what the prompt tells the model
  std::vector<std::string> symbols{};  ///< size symbols, e.g. {"N", "M"}
  shape_binding benchmark_shape{};     ///< the timed shape
  std::vector<shape_binding> validation_shapes{};
  /// Per validation shape (same index; may be shorter): inputs whose
  /// distribution differs at that shape from their `init`, e.g. rows with a
  /// large mean at one shape only.
  std::vector<std::map<std::string, distribution>> validation_inits{};
  /// Which of the evaluator's extra input distributions (validation cases
  /// that replace the inputs' own random inits, such as `large`) the task's
  /// tolerances hold for. nullopt: every one when each floating-point output
  /// has a `terms` allowance (the tolerance then scales with the inputs), none
  /// otherwise. An empty list: the inputs' own distributions only.
  std::optional<std::vector<distribution>> distributions{};
  std::vector<tensor_spec> inputs{};
  std::vector<tensor_spec> outputs{};
  implementation reference{};
  /// What speedups are measured against. Empty (nothing set) only beside a
  /// stored reference: no speedup is measured then.
  implementation baseline{};
  std::vector<std::string> compile_options{};
  /// Named constants passed to kernels by value (plans pass them by name).
  std::vector<scalar_spec> scalars{};
  std::string file{};  ///< where it was loaded from ("" if built in code)
  friend bool operator==(const task&, const task&) = default;
};

SPECGEN_END_NAMESPACE
