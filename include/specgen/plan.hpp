#pragma once
/// The launch-plan language: how a candidate (and a task's reference or
/// baseline) says which `extern "C" __global__` kernels to launch, in which
/// order, with which geometry and arguments. No host code from a model ever
/// runs; the runtime executes a `resolved_plan`.
///
/// @code
///   auto plan = specgen::parse_plan(
///       "scratch tmp : f32[N]\n"
///       "launch row_max grid(N) block(256) args(x, tmp, M)\n"
///       "launch row_norm grid(N) block(256) smem(256 * 4) args(x, tmp, y, M)\n");
///   if (!plan) return report(plan.error().what());   // "line 2, column 20: grid.x: ..."
///   auto r = specgen::resolve(*plan, task, {{"N", 4096}, {"M", 1000}}, specgen::device_limits{});
///   // r->launches[1].grid == {4096, 1, 1}; r->launches[1].smem_bytes == 1024
/// @endcode
///
/// The full grammar, semantics and limits are in docs/plan-language.md.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/expr.hpp>
#include <specgen/inputs.hpp>
#include <specgen/scalar.hpp>
#include <specgen/task.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

namespace detail {

/// How many leading characters of `s` form a float literal of the plan
/// language, `['-'] (DIGITS ['.' [DIGITS]] | '.' DIGITS) [('e' | 'E') ['+' | '-'] DIGITS]`
/// with a '.' or an exponent (without either it is an integer); 0 when none.
constexpr std::size_t float_literal_length(std::string_view s) noexcept {
  std::size_t i = 0;
  auto digits = [&](std::size_t from) {
    while (from < s.size() && s[from] >= '0' && s[from] <= '9') ++from;
    return from;
  };
  if (i < s.size() && s[i] == '-') ++i;
  std::size_t end = digits(i);
  std::size_t mantissa = end - i;
  bool dot = false, exponent = false;
  if (end < s.size() && s[end] == '.') {
    dot = true;
    const std::size_t frac = digits(end + 1);
    mantissa += frac - end - 1;
    end = frac;
  }
  if (mantissa == 0) return 0;
  if (end < s.size() && (s[end] == 'e' || s[end] == 'E')) {
    std::size_t j = end + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    if (const std::size_t k = digits(j); k > j) {
      end = k;
      exponent = true;
    }
  }
  return dot || exponent ? end : 0;
}

/// A float literal's canonical text: the shortest that reads back as the same
/// double, always with a '.' or an exponent ("1e-05", "0.5", "2.0").
inline std::string float_literal_text(double d) {
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

/// Equal bit patterns: 0.0 and -0.0 differ (a kernel sees the sign).
inline bool same_bits(double a, double b) noexcept {
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

/// ":i8, :u8, ..., :f64".
inline std::string cast_names() {
  std::string out;
  for (auto n : scalar_type_names) out += fmt::format("{}:{}", out.empty() ? "" : ", ", n);
  return out;
}

}  // namespace detail

/// One kernel argument as written: a buffer name, a task scalar's name, a
/// size expression or a float literal, optionally followed by a cast to a
/// `scalar_type` (`N:i64`, `eps:f64`, `3:u32`, `1e-5:f32`; a float literal
/// always has one). Which kind a bare name is becomes known only against a
/// task, in `resolve`.
struct plan_arg {
  size_expr value{};                  ///< a name or a size expression (the literal 0 for a float literal)
  std::optional<scalar_type> cast{};  ///< how it is passed; nullopt: as the scalar's type, sizes as i32
  std::optional<double> real{};       ///< a float literal (`1e-5:f32`), finite
  int column = 0;                     ///< 1-based column in its line (not part of equality)
  friend bool operator==(const plan_arg& a, const plan_arg& b) noexcept {
    return a.value == b.value && a.cast == b.cast && a.real.has_value() == b.real.has_value() &&
           (!a.real || detail::same_bits(*a.real, *b.real));
  }
};

/// `scratch NAME : DTYPE[dim, ...] [zero]`: a device buffer the plan owns.
struct scratch_decl {
  std::string name{};
  dtype type = dtype::f32;
  std::vector<size_expr> shape{};  ///< elements = product of the dims
  bool zero = false;               ///< zero-filled before the first launch of every run
  int line = 0;                    ///< 1-based line (not part of equality)
  friend bool operator==(const scratch_decl& a, const scratch_decl& b) noexcept {
    return a.name == b.name && a.type == b.type && a.shape == b.shape && a.zero == b.zero;
  }
};

/// `launch KERNEL grid(...) block(...) [smem(...)] [args(...)]`.
struct launch_step {
  std::string kernel{};
  std::vector<size_expr> grid{};   ///< 1 to 3 dims: x, y, z
  std::vector<size_expr> block{};  ///< 1 to 3 dims: x, y, z
  size_expr smem{};                ///< dynamic shared memory in bytes (0 when not written)
  std::vector<plan_arg> args{};
  int line = 0;  ///< 1-based line (not part of equality)
  friend bool operator==(const launch_step& a, const launch_step& b) noexcept {
    return a.kernel == b.kernel && a.grid == b.grid && a.block == b.block && a.smem == b.smem &&
           a.args == b.args;
  }
};

/// `call FUNCTION(args)`: a vendor-library routine (cuBLAS) run in plan order.
/// Only trusted plans (a task's reference or baseline) may call; candidates
/// launch their own kernels (`launch_plan::has_calls`, `check_candidate_plan`).
struct call_step {
  std::string function{};
  std::vector<plan_arg> args{};
  std::size_t before_launch = 0;  ///< runs after launches [0, before_launch) and before the rest
  int line = 0;                   ///< 1-based line (not part of equality)
  friend bool operator==(const call_step& a, const call_step& b) noexcept {
    return a.function == b.function && a.args == b.args && a.before_launch == b.before_launch;
  }
};

/// A library routine a trusted plan may call. Row-major buffers, fp32
/// accumulation (no TF32), buffers of one dtype: f32, f16 or bf16 (gemv: f32).
struct library_function {
  std::string_view name;
  std::string_view signature;  ///< parameter names; upper-case after the buffers: sizes
  std::size_t buffers = 0;     ///< the first `buffers` parameters are buffers, the rest sizes
  std::string_view meaning;
};

inline constexpr std::array<library_function, 4> library_functions{{
    {"gemm", "A, B, C, M, N, K", 3, "C[M,N] = A[M,K] . B[K,N]"},
    {"gemm_nt", "A, B, C, M, N, K", 3, "C[M,N] = A[M,K] . B[N,K]^T"},
    {"gemm_batched", "A, B, C, BATCH, M, N, K", 3, "C[b] = A[b] . B[b]; A[BATCH,M,K], B[BATCH,K,N], C[BATCH,M,N]"},
    {"gemv", "A, x, y, M, K", 3, "y[M] = A[M,K] . x[K] (f32)"},
}};

inline const library_function* find_library_function(std::string_view name) noexcept {
  for (const auto& f : library_functions)
    if (f.name == name) return &f;
  return nullptr;
}

/// How many parameters `f` takes.
constexpr std::size_t arity(const library_function& f) noexcept {
  return static_cast<std::size_t>(std::count(f.signature.begin(), f.signature.end(), ',')) + 1;
}

/// A parsed plan. Equality ignores source positions: two plans are equal when
/// they declare and launch the same things.
struct launch_plan {
  std::vector<scratch_decl> scratch{};
  std::vector<launch_step> launches{};
  std::vector<call_step> calls{};  ///< in plan order (trusted plans only)

  [[nodiscard]] bool has_calls() const noexcept { return !calls.empty(); }

  /// Canonical text: scratch declarations first, then launches in order, every
  /// clause written out, expressions in canonical form.
  [[nodiscard]] std::string to_string() const {
    std::string out;
    auto list = [](const std::vector<size_expr>& v) {
      std::string s;
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i].to_string();
      return s;
    };
    for (const auto& s : scratch)
      out += fmt::format("scratch {} : {}[{}]{}\n", s.name, specgen::to_string(s.type), list(s.shape),
                         s.zero ? " zero" : "");
    auto arg_list = [](const std::vector<plan_arg>& v) {
      std::string args;
      for (std::size_t i = 0; i < v.size(); ++i) {
        args += (i ? ", " : "") + (v[i].real ? detail::float_literal_text(*v[i].real) : v[i].value.to_string());
        if (v[i].cast) args += fmt::format(":{}", specgen::to_string(*v[i].cast));
      }
      return args;
    };
    std::size_t next_call = 0;
    auto calls_before = [&](std::size_t launch) {
      for (; next_call < calls.size() && calls[next_call].before_launch <= launch; ++next_call)
        out += fmt::format("call {}({})\n", calls[next_call].function, arg_list(calls[next_call].args));
    };
    for (std::size_t i = 0; i < launches.size(); ++i) {
      calls_before(i);
      const auto& l = launches[i];
      out += fmt::format("launch {} grid({}) block({}) smem({}) args({})\n", l.kernel, list(l.grid),
                         list(l.block), l.smem.to_string(), arg_list(l.args));
    }
    calls_before(launches.size());
    return out;
  }
  friend bool operator==(const launch_plan&, const launch_plan&) = default;
};

namespace detail {
/// A plan's error: `message` about `field` ("grid.x", "block", "args[2]",
/// "scratch tmp", "kernel", ...) at a 1-based line and column of the plan
/// text (0 when unknown); `what()` reads "line 3, column 12: grid.y: ...".
inline error plan_failure(int line, int column, std::string field, std::string message) {
  return error{.message = std::move(message), .where = std::move(field), .line = line, .column = column};
}
}  // namespace detail

/// What a device allows. Defaults are an H200 / H100 (sm_90).
///
/// @code
///   specgen::device_limits ampere{.max_dynamic_smem_bytes = 166 * 1024};  // A100
/// @endcode
struct device_limits {
  std::int64_t max_threads_per_block = 1024;
  std::array<std::int64_t, 3> max_block_dims{1024, 1024, 64};
  std::array<std::int64_t, 3> max_grid_dims{2147483647, 65535, 65535};
  /// Dynamic shared memory per block after opting in (227 KiB on sm_90).
  std::int64_t max_dynamic_smem_bytes = 227 * 1024;
  /// Above this a kernel needs cudaFuncAttributeMaxDynamicSharedMemorySize set (48 KiB).
  std::int64_t smem_opt_in_bytes = 48 * 1024;
  /// Budget for all scratch buffers of one plan together. A choice, not a
  /// hardware limit: it leaves most of an H200's 141 GB to inputs, outputs and
  /// the KV store, and stops a plan from exhausting device memory by accident.
  std::int64_t max_scratch_bytes = std::int64_t{16} << 30;
  /// Kernel parameter space (4 KiB before CUDA 12.1's opt-in larger limit).
  std::int64_t max_param_bytes = 4096;
  /// Launches in one plan; more is almost surely a runaway generation.
  std::int64_t max_launches = 64;
  friend bool operator==(const device_limits&, const device_limits&) = default;
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(device_limits, max_threads_per_block, max_block_dims,
                                                max_grid_dims, max_dynamic_smem_bytes, smem_opt_in_bytes,
                                                max_scratch_bytes, max_param_bytes, max_launches)

/// Where a buffer argument comes from.
enum class buffer_role : std::uint8_t { input, output, scratch };

/// A kernel argument with everything evaluated: a buffer, or a scalar of
/// `type` passed by value (a size, a task scalar or a literal), already
/// converted and range-checked.
struct resolved_arg {
  bool is_buffer = false;
  std::string buffer{};                   ///< buffer name (is_buffer)
  buffer_role role = buffer_role::input;  ///< (is_buffer)
  /// Integer types (!is_buffer): the value as its 64-bit two's-complement
  /// pattern (a u64 above 2^63 - 1 reads negative; cast it to `std::uint64_t`).
  std::int64_t value = 0;
  scalar_type type = scalar_type::i32;  ///< how it is passed (!is_buffer)
  /// Float types (!is_buffer): the value exactly as the type holds it (an f32
  /// argument is a float converted to double).
  double real = 0;
  /// Equal arguments pass equal bytes (floats compare by their bits).
  friend bool operator==(const resolved_arg& a, const resolved_arg& b) noexcept {
    return a.is_buffer == b.is_buffer && a.buffer == b.buffer && a.role == b.role && a.value == b.value &&
           a.type == b.type && detail::same_bits(a.real, b.real);
  }
};

struct resolved_launch {
  std::string kernel{};
  std::array<std::uint32_t, 3> grid{1, 1, 1};
  std::array<std::uint32_t, 3> block{1, 1, 1};
  std::uint32_t smem_bytes = 0;
  bool smem_opt_in = false;  ///< smem_bytes exceeds `device_limits::smem_opt_in_bytes`
  std::vector<resolved_arg> args{};
  int line = 0;
  friend bool operator==(const resolved_launch&, const resolved_launch&) = default;
};

struct resolved_scratch {
  std::string name{};
  dtype type = dtype::f32;
  std::int64_t elements = 0;
  std::int64_t bytes = 0;
  bool zero = false;
  friend bool operator==(const resolved_scratch&, const resolved_scratch&) = default;
};

/// A library call with every argument evaluated and its buffers checked.
struct resolved_call {
  std::string function{};
  std::vector<resolved_arg> args{};  ///< buffers first, then sizes (i64), as `library_function::signature`
  dtype type = dtype::f32;           ///< the buffers' dtype
  std::size_t before_launch = 0;
  int line = 0;
  friend bool operator==(const resolved_call&, const resolved_call&) = default;
};

/// A plan evaluated for one shape and checked against one device: what the
/// runtime launches.
struct resolved_plan {
  std::vector<resolved_scratch> scratch{};
  std::vector<resolved_launch> launches{};
  std::vector<resolved_call> calls{};
  [[nodiscard]] std::int64_t scratch_bytes() const noexcept {
    std::int64_t b = 0;
    for (const auto& s : scratch) b += s.bytes;  // each and the sum were checked by resolve
    return b;
  }
  [[nodiscard]] bool needs_smem_opt_in() const noexcept {
    return std::any_of(launches.begin(), launches.end(), [](const auto& l) { return l.smem_opt_in; });
  }
  friend bool operator==(const resolved_plan&, const resolved_plan&) = default;
};

namespace detail {

inline std::string join_names(const std::vector<std::string>& v) {
  return v.empty() ? std::string("none") : fmt::format("{}", fmt::join(v, ", "));
}

/// A part of a plan line with its 0-based offset in the line.
struct plan_piece {
  std::string_view text;
  std::size_t offset = 0;
};

inline plan_piece trim_piece(plan_piece p) {
  while (!p.text.empty() && (p.text.front() == ' ' || p.text.front() == '\t')) {
    p.text.remove_prefix(1);
    ++p.offset;
  }
  while (!p.text.empty() && (p.text.back() == ' ' || p.text.back() == '\t')) p.text.remove_suffix(1);
  return p;
}

/// Split at commas outside parentheses.
inline std::vector<plan_piece> split_top_level(plan_piece p) {
  std::vector<plan_piece> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= p.text.size(); ++i) {
    if (i == p.text.size() || (p.text[i] == ',' && depth == 0)) {
      out.push_back(trim_piece({p.text.substr(start, i - start), p.offset + start}));
      start = i + 1;
    } else if (p.text[i] == '(') {
      ++depth;
    } else if (p.text[i] == ')') {
      --depth;
    }
  }
  return out;
}

class plan_parser {
 public:
  explicit plan_parser(std::string_view text) : text_(text) {}

  expected<launch_plan, error> run() {
    std::size_t start = 0;
    while (start <= text_.size()) {
      std::size_t end = text_.find('\n', start);
      if (end == std::string_view::npos) end = text_.size();
      ++line_;
      std::string_view line = text_.substr(start, end - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (auto err = parse_line(line)) return unexpected(std::move(*err));
      start = end + 1;
    }
    if (plan_.launches.empty() && plan_.calls.empty())
      return unexpected(detail::plan_failure(0, 0, "", "the plan launches no kernel; write at least one line "
                                             "'launch KERNEL grid(...) block(...) args(...)'"));
    return std::move(plan_);
  }

 private:
  using maybe_error = std::optional<error>;

  error err(std::size_t offset, std::string field, std::string msg) const {
    return detail::plan_failure(line_, static_cast<int>(offset) + 1, std::move(field), std::move(msg));
  }

  maybe_error parse_line(std::string_view line) {
    // Comments: '#' or '//' to the end of the line (expressions contain neither).
    std::size_t cut = std::min(line.find('#'), line.find("//"));
    if (cut != std::string_view::npos) line = line.substr(0, cut);
    line_text_ = line;
    pos_ = 0;
    skip_space();
    if (pos_ == line.size()) return std::nullopt;
    const std::size_t at = pos_;
    const std::string_view word = read_word();
    if (word == "launch") return parse_launch();
    if (word == "scratch") return parse_scratch();
    if (word == "call") return parse_call();
    return err(at, "", fmt::format("expected a line starting with 'launch', 'scratch' or 'call', found '{}'",
                                   word.empty() ? line.substr(at, 1) : word));
  }

  void skip_space() {
    while (pos_ < line_text_.size() && (line_text_[pos_] == ' ' || line_text_[pos_] == '\t')) ++pos_;
  }
  std::string_view read_word() {
    const std::size_t start = pos_;
    while (pos_ < line_text_.size() && is_name_char(line_text_[pos_])) ++pos_;
    return line_text_.substr(start, pos_ - start);
  }
  std::string_view rest() const { return line_text_.substr(pos_); }
  std::string found_here() const {
    return pos_ >= line_text_.size() ? std::string("the end of the line")
                                     : fmt::format("'{}'", line_text_.substr(pos_, 12));
  }

  /// The text between the bracket at `pos_` and its partner; leaves `pos_` after the partner.
  expected<plan_piece, error> bracketed(char open, char close, const std::string& field) {
    const std::size_t start = pos_;
    int depth = 0;
    for (std::size_t i = pos_; i < line_text_.size(); ++i) {
      if (line_text_[i] == open) ++depth;
      else if (line_text_[i] == close && --depth == 0) {
        pos_ = i + 1;
        return plan_piece{line_text_.substr(start + 1, i - start - 1), start + 1};
      }
    }
    return unexpected(err(start, field, fmt::format("'{}' is never closed", open)));
  }

  expected<size_expr, error> expression(plan_piece p, const std::string& field) {
    if (p.text.empty()) return unexpected(err(p.offset, field, "expected an expression, found nothing"));
    auto e = parse_size_expr(p.text);
    if (!e) return unexpected(err(p.offset + (e.error().column - 1), field, e.error().message));
    return std::move(*e);
  }

  expected<std::vector<size_expr>, error> dims(plan_piece p, const std::string& clause) {
    auto parts = split_top_level(p);
    if (parts.size() > 3)
      return unexpected(err(parts[3].offset, clause, fmt::format("at most 3 dimensions (x, y, z), got {}", parts.size())));
    std::vector<size_expr> out;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      auto e = expression(parts[i], fmt::format("{}.{}", clause, "xyz"[i]));
      if (!e) return unexpected(e.error());
      out.push_back(std::move(*e));
    }
    return out;
  }

  maybe_error parse_launch() {
    launch_step step{.line = line_};
    skip_space();
    const std::size_t name_at = pos_;
    step.kernel = std::string(read_word());
    if (!is_identifier(step.kernel))
      return err(name_at, "kernel", fmt::format("expected a kernel name after 'launch', found {}", found_here()));
    bool seen[4] = {};
    static constexpr std::string_view clauses[] = {"grid", "block", "smem", "args"};
    for (;;) {
      skip_space();
      if (pos_ == line_text_.size()) break;
      const std::size_t at = pos_;
      const std::string_view word = read_word();
      const auto* it = std::find(std::begin(clauses), std::end(clauses), word);
      if (it == std::end(clauses))
        return err(at, "",
                   word.empty() ? fmt::format("expected a clause (grid, block, smem, args), found {}", found_here())
                                : fmt::format("unknown clause '{}' (expected grid, block, smem or args)", word));
      const auto k = static_cast<std::size_t>(it - std::begin(clauses));
      const std::string field(word);
      if (seen[k]) return err(at, field, fmt::format("{}(...) is given twice", word));
      seen[k] = true;
      skip_space();
      if (pos_ == line_text_.size() || line_text_[pos_] != '(')
        return err(pos_, field, fmt::format("expected '(' after {}, found {}", word, found_here()));
      auto inner = bracketed('(', ')', field);
      if (!inner) return inner.error();
      if (k == 0 || k == 1) {
        auto d = dims(*inner, field);
        if (!d) return d.error();
        (k == 0 ? step.grid : step.block) = std::move(*d);
      } else if (k == 2) {
        auto e = expression(trim_piece(*inner), field);
        if (!e) return e.error();
        step.smem = std::move(*e);
      } else if (auto a = parse_args(*inner, step.args)) {
        return a;
      }
    }
    if (!seen[0]) return err(line_text_.size(), "grid", fmt::format("launch of '{}' needs grid(...)", step.kernel));
    if (!seen[1]) return err(line_text_.size(), "block", fmt::format("launch of '{}' needs block(...)", step.kernel));
    plan_.launches.push_back(std::move(step));
    return std::nullopt;
  }

  maybe_error parse_args(plan_piece inner, std::vector<plan_arg>& out) {
    if (trim_piece(inner).text.empty()) return std::nullopt;  // args()
    const auto parts = split_top_level(inner);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const std::string field = fmt::format("args[{}]", i);
      plan_piece value = parts[i];
      plan_arg arg{.column = static_cast<int>(value.offset) + 1};
      if (const auto colon = value.text.rfind(':'); colon != std::string_view::npos) {
        const auto cast = trim_piece({value.text.substr(colon + 1), value.offset + colon + 1});
        arg.cast = parse_scalar_type(cast.text);
        if (!arg.cast)
          return err(cast.offset, field, fmt::format("unknown cast ':{}' (expected {})", cast.text, cast_names()));
        value = trim_piece({value.text.substr(0, colon), value.offset});
      }
      if (const std::size_t n = float_literal_length(value.text); n > 0) {
        const std::string_view literal = value.text.substr(0, n);
        if (n + 1 == value.text.size() && (value.text[n] == 'f' || value.text[n] == 'F'))
          return err(value.offset + n, field,
                     fmt::format("'{}' is C; in a plan write '{}:f32' (a cast, not a suffix)", value.text, literal));
        if (n == value.text.size()) {
          if (!arg.cast)
            return err(value.offset, field,
                       fmt::format("the float literal {0} needs a type: write '{0}:f32' for a 'float' parameter or "
                                   "'{0}:f64' for a 'double'",
                                   literal));
          double v = 0;
          const auto [end, ec] = std::from_chars(literal.data(), literal.data() + literal.size(), v);
          if (ec != std::errc{} || end != literal.data() + literal.size() || !std::isfinite(v))
            return err(value.offset, field, fmt::format("the float literal {} is out of the range of a double", literal));
          arg.real = v;
          out.push_back(std::move(arg));
          continue;
        }
      }
      auto e = expression(value, field);
      if (!e) return e.error();
      arg.value = std::move(*e);
      out.push_back(std::move(arg));
    }
    return std::nullopt;
  }

  maybe_error parse_call() {
    call_step step{.before_launch = plan_.launches.size(), .line = line_};
    skip_space();
    const std::size_t name_at = pos_;
    step.function = std::string(read_word());
    const library_function* f = find_library_function(step.function);
    if (!f) {
      std::vector<std::string> known;
      for (const auto& g : library_functions) known.emplace_back(g.name);
      return err(name_at, "call",
                 step.function.empty()
                     ? fmt::format("expected a library function after 'call', found {}", found_here())
                     : fmt::format("unknown library function '{}' (known: {})", step.function, join_names(known)));
    }
    skip_space();
    if (pos_ == line_text_.size() || line_text_[pos_] != '(')
      return err(pos_, "call", fmt::format("expected '(' after {}, found {}", step.function, found_here()));
    auto inner = bracketed('(', ')', "call");
    if (!inner) return inner.error();
    if (auto a = parse_args(*inner, step.args)) return a;
    for (std::size_t i = 0; i < step.args.size(); ++i) {
      const plan_arg& a = step.args[i];
      const auto at = static_cast<std::size_t>(a.column - 1);
      const std::string field = fmt::format("{}.args[{}]", f->name, i);
      if (a.real)
        return err(at, field, fmt::format("{} takes buffers and sizes ({}), not a float", f->name, f->signature));
      if (a.cast && a.cast != scalar_type::i32 && a.cast != scalar_type::i64)
        return err(at, field,
                   fmt::format("{} takes its sizes as i64; the cast ':{}' does not apply (only :i32 and :i64 are "
                               "accepted here, and change nothing)",
                               f->name, to_string(*a.cast)));
    }
    if (step.args.size() != arity(*f))
      return err(inner->offset, "call",
                 fmt::format("{} takes {} arguments ({}), got {}", f->name, arity(*f), f->signature, step.args.size()));
    skip_space();
    if (pos_ != line_text_.size()) return err(pos_, "call", fmt::format("unexpected {} after the call", found_here()));
    plan_.calls.push_back(std::move(step));
    return std::nullopt;
  }

  maybe_error parse_scratch() {
    scratch_decl decl{.line = line_};
    skip_space();
    const std::size_t name_at = pos_;
    decl.name = std::string(read_word());
    if (!is_identifier(decl.name))
      return err(name_at, "scratch", fmt::format("expected a buffer name after 'scratch', found {}", found_here()));
    const std::string field = "scratch " + decl.name;
    for (const auto& s : plan_.scratch)
      if (s.name == decl.name)
        return err(name_at, field, fmt::format("declared twice (first on line {})", s.line));
    skip_space();
    if (pos_ == line_text_.size() || line_text_[pos_] != ':')
      return err(pos_, field, fmt::format("expected ':' then a type like f32[N], found {}", found_here()));
    ++pos_;
    skip_space();
    const std::size_t type_at = pos_;
    const std::string_view type = read_word();
    const auto t = parse_dtype(type);
    if (!t)
      return err(type_at, field,
                 fmt::format("unknown dtype '{}' (known: {})", type, fmt::join(dtype_names, ", ")));
    decl.type = *t;
    skip_space();
    if (pos_ == line_text_.size() || line_text_[pos_] != '[')
      return err(pos_, field, fmt::format("expected '[' and the element count after the dtype, found {}", found_here()));
    auto inner = bracketed('[', ']', field);
    if (!inner) return inner.error();
    for (const auto& part : split_top_level(*inner)) {
      auto e = expression(part, field);
      if (!e) return e.error();
      decl.shape.push_back(std::move(*e));
    }
    skip_space();
    const std::size_t flag_at = pos_;
    const std::string_view flag = read_word();
    if (flag == "zero") {
      decl.zero = true;
      skip_space();
    } else if (!flag.empty()) {
      pos_ = flag_at;
    }
    if (pos_ != line_text_.size())
      return err(pos_, field, fmt::format("unexpected {} (only 'zero' may follow the shape)", found_here()));
    plan_.scratch.push_back(std::move(decl));
    return std::nullopt;
  }

  std::string_view text_;
  std::string_view line_text_;
  std::size_t pos_ = 0;
  int line_ = 0;
  launch_plan plan_;
};

}  // namespace detail

/// Parse plan text. Blank lines and comments ('#' or '//' to the end of a
/// line) are ignored; at least one launch is required.
///
/// @code
///   auto p = specgen::parse_plan("launch add grid(cdiv(N, 256)) block(256) args(a, b, c, N)");
///   // p->launches[0].args[3].value.to_string() == "N"
/// @endcode
inline expected<launch_plan, error> parse_plan(std::string_view text) {
  return detail::plan_parser(text).run();
}

/// The distinct kernels a plan launches, in order of first launch.
inline std::vector<std::string> kernel_names(const launch_plan& plan) {
  std::vector<std::string> out;
  for (const auto& l : plan.launches)
    if (std::find(out.begin(), out.end(), l.kernel) == out.end()) out.push_back(l.kernel);
  return out;
}

/// Evaluate `plan` for one shape and check it against the task's buffers,
/// symbols and scalars and the device's limits. `binding` must give every
/// task symbol a value; expressions may use only the task's symbols.
///
/// @code
///   auto r = specgen::resolve(plan, task, task.benchmark_shape);
///   if (!r) candidate_verdict = {verdict_kind::invalid_plan, r.error().what()};
/// @endcode
inline expected<resolved_plan, error> resolve(const launch_plan& plan, const task& t,
                                                   const shape_binding& binding,
                                                   const device_limits& limits = {}) {
  using detail::join_names;
  size_binding values;
  for (const auto& s : t.symbols) {
    auto it = binding.find(s);
    if (it == binding.end())
      return unexpected(detail::plan_failure(0, 0, "binding", fmt::format("symbol '{}' has no value in the shape", s)));
    values.emplace(s, it->second);
  }
  std::vector<std::string> input_names, output_names, scratch_names, scalar_names;
  for (const auto& b : t.inputs) input_names.push_back(b.name);
  for (const auto& b : t.outputs) output_names.push_back(b.name);
  for (const auto& s : t.scalars) scalar_names.push_back(s.name);
  auto is_buffer = [&](const std::string& n) {
    return std::count(input_names.begin(), input_names.end(), n) ||
           std::count(output_names.begin(), output_names.end(), n) ||
           std::count(scratch_names.begin(), scratch_names.end(), n);
  };
  auto find_scalar = [&](std::string_view n) -> const scalar_spec* {
    for (const auto& s : t.scalars)
      if (s.name == n) return &s;
    return nullptr;
  };

  auto eval = [&](const size_expr& e, int line, int column, const std::string& field)
      -> expected<std::int64_t, error> {
    auto v = e.eval(values);
    if (v) return *v;
    std::string msg = v.error().message;
    if (v.error().code == errc::unknown_name)
      for (const auto& n : e.names())
        if (!values.count(n) && (is_buffer(n) || find_scalar(n)))
          msg = fmt::format("'{}' is a {}; expressions may use only size symbols ({})", n,
                            is_buffer(n) ? "buffer" : "task scalar", join_names(t.symbols));
    const int col = column > 0 ? column + (v.error().column - 1) : 0;
    return unexpected(detail::plan_failure(line, col, field, fmt::format("'{}': {}", e.to_string(), msg)));
  };
  // "2048" (or "-1") for a literal, "'cdiv(N, 256)' = 16" otherwise.
  auto shown = [](const size_expr& e, std::int64_t v) {
    return e.as_literal() || e.to_string() == std::to_string(v) ? std::to_string(v)
                                                                 : fmt::format("'{}' = {}", e.to_string(), v);
  };

  if (static_cast<std::int64_t>(plan.launches.size()) > limits.max_launches)
    return unexpected(detail::plan_failure(plan.launches[static_cast<std::size_t>(limits.max_launches)].line, 0, "",
                                 fmt::format("the plan has {} launches; at most {} are allowed",
                                             plan.launches.size(), limits.max_launches)));

  resolved_plan out;
  std::int64_t scratch_total = 0;
  for (const auto& s : plan.scratch) {
    const std::string field = "scratch " + s.name;
    if (is_buffer(s.name) || values.count(s.name) || find_scalar(s.name))
      return unexpected(
          detail::plan_failure(s.line, 0, field, "the name is already a task buffer, size symbol or scalar; choose another"));
    std::int64_t elements = 1;
    for (std::size_t i = 0; i < s.shape.size(); ++i) {
      auto v = eval(s.shape[i], s.line, 0, field);
      if (!v) return unexpected(v.error());
      if (*v < 1)
        return unexpected(detail::plan_failure(s.line, 0, field,
                                     fmt::format("dimension {} is {}; it must be at least 1", i, shown(s.shape[i], *v))));
      if (__builtin_mul_overflow(elements, *v, &elements))
        return unexpected(detail::plan_failure(s.line, 0, field, "the element count overflows signed 64 bits"));
    }
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(elements, static_cast<std::int64_t>(size_of(s.type)), &bytes) ||
        __builtin_add_overflow(scratch_total, bytes, &scratch_total) || scratch_total > limits.max_scratch_bytes)
      return unexpected(detail::plan_failure(s.line, 0, field,
                                   fmt::format("{} elements of {} take the plan's scratch past its budget of {} "
                                               "bytes",
                                               elements, to_string(s.type), limits.max_scratch_bytes)));
    scratch_names.push_back(s.name);
    out.scratch.push_back({.name = s.name, .type = s.type, .elements = elements, .bytes = bytes, .zero = s.zero});
  }

  for (const auto& l : plan.launches) {
    resolved_launch r{.kernel = l.kernel, .line = l.line};
    auto fail = [&](std::string field, std::string msg) {
      return unexpected(detail::plan_failure(l.line, 0, std::move(field), std::move(msg)));
    };
    for (int which = 0; which < 2; ++which) {
      const auto& exprs = which == 0 ? l.grid : l.block;
      const auto& maxes = which == 0 ? limits.max_grid_dims : limits.max_block_dims;
      auto& dims = which == 0 ? r.grid : r.block;
      const char* clause = which == 0 ? "grid" : "block";
      if (exprs.empty() || exprs.size() > 3) return fail(clause, "needs 1 to 3 dimensions");
      for (std::size_t i = 0; i < exprs.size(); ++i) {
        const std::string field = fmt::format("{}.{}", clause, "xyz"[i]);
        auto v = eval(exprs[i], l.line, 0, field);
        if (!v) return unexpected(v.error());
        if (*v < 1)
          return fail(field, fmt::format("{}; it must be at least 1", shown(exprs[i], *v)));
        if (*v > maxes[i])
          return fail(field, fmt::format("{} exceeds the device limit of {}", shown(exprs[i], *v), maxes[i]));
        dims[i] = static_cast<std::uint32_t>(*v);
      }
    }
    const std::int64_t threads = std::int64_t{r.block[0]} * r.block[1] * r.block[2];
    if (threads > limits.max_threads_per_block)
      return fail("block", fmt::format("{} x {} x {} = {} threads per block; at most {} are allowed", r.block[0],
                                       r.block[1], r.block[2], threads, limits.max_threads_per_block));

    auto smem = eval(l.smem, l.line, 0, "smem");
    if (!smem) return unexpected(smem.error());
    if (*smem < 0) return fail("smem", fmt::format("{} bytes; it must not be negative", shown(l.smem, *smem)));
    if (*smem > limits.max_dynamic_smem_bytes)
      return fail("smem", fmt::format("{} bytes exceeds the device's {} bytes of dynamic shared memory per block",
                                      shown(l.smem, *smem), limits.max_dynamic_smem_bytes));
    r.smem_bytes = static_cast<std::uint32_t>(*smem);
    r.smem_opt_in = *smem > limits.smem_opt_in_bytes;

    std::int64_t param_bytes = 0;
    for (std::size_t i = 0; i < l.args.size(); ++i) {
      const auto& a = l.args[i];
      const std::string field = fmt::format("args[{}]", i);
      auto arg_fail = [&](std::string msg) { return unexpected(detail::plan_failure(l.line, a.column, field, std::move(msg))); };
      resolved_arg ra;
      const auto name = a.real ? std::nullopt : a.value.as_name();
      const scalar_spec* scalar = name && !values.count(std::string(*name)) ? find_scalar(*name) : nullptr;
      if (name && !values.count(std::string(*name)) && !scalar) {
        const std::string n(*name);
        if (std::count(input_names.begin(), input_names.end(), n)) ra.role = buffer_role::input;
        else if (std::count(output_names.begin(), output_names.end(), n)) ra.role = buffer_role::output;
        else if (std::count(scratch_names.begin(), scratch_names.end(), n)) ra.role = buffer_role::scratch;
        else
          return arg_fail(fmt::format("unknown name '{}' (inputs: {}; outputs: {}; scratch: {}; symbols: {}; "
                                      "scalars: {})",
                                      n, join_names(input_names), join_names(output_names), join_names(scratch_names),
                                      join_names(t.symbols), join_names(scalar_names)));
        if (a.cast)
          return arg_fail(fmt::format("'{}' is a buffer; a cast (:{}) applies only to sizes, scalars and literals", n,
                                      to_string(*a.cast)));
        ra.is_buffer = true;
        ra.buffer = n;
        param_bytes = (param_bytes + 7) / 8 * 8 + 8;
      } else {
        // The value with its own type, how messages show it, and its text for a suggested fix.
        scalar_value from;
        std::string shown_value, text;
        if (a.real) {
          from = scalar_value::of_real(*a.real);
          shown_value = text = detail::float_literal_text(*a.real);
        } else if (scalar) {
          from = scalar_value::of(*scalar);
          text = scalar->name;
          shown_value = fmt::format("'{}' = {}", scalar->name, from.to_string());
        } else {
          auto v = eval(a.value, l.line, a.column, field);
          if (!v) return unexpected(v.error());
          from = scalar_value::of_int(*v);
          text = a.value.to_string();
          shown_value = shown(a.value, *v);
        }
        const scalar_type to = a.cast ? *a.cast : scalar ? scalar->type : scalar_type::i32;
        auto converted = convert_scalar(from, to);
        if (!converted) {
          if (converted.error() == scalar_errc::not_integral)
            return arg_fail(fmt::format("{} is not an integer, so it cannot be passed as {}", shown_value, to_string(to)));
          auto better = detail::wider_type_for(from, to);
          std::string msg = is_floating(to) ? fmt::format("{} is out of the range of {} ({})", shown_value,
                                                          to_string(to), range_text(to))
                                            : fmt::format("{} does not fit in {}", shown_value, to_string(to));
          if (better)
            msg += fmt::format("; write '{}:{}' and take {} '{}' parameter", text, to_string(*better),
                               detail::article(c_type_name(*better)), c_type_name(*better));
          else if (!is_floating(to))
            msg += " nor in any other integer type";
          return arg_fail(std::move(msg));
        }
        ra.type = to;
        ra.value = converted->value;
        ra.real = converted->real;
        const auto size = static_cast<std::int64_t>(size_of(to));
        param_bytes = (param_bytes + size - 1) / size * size + size;
      }
      r.args.push_back(std::move(ra));
    }
    if (param_bytes > limits.max_param_bytes)
      return fail("args", fmt::format("{} bytes of kernel parameters exceed the limit of {}", param_bytes,
                                      limits.max_param_bytes));
    out.launches.push_back(std::move(r));
  }

  for (const auto& c : plan.calls) {
    const library_function& f = *find_library_function(c.function);  // parse_plan admits known ones only
    auto fail = [&](int column, std::string field, std::string msg) {
      return unexpected(detail::plan_failure(c.line, column, std::move(field), std::move(msg)));
    };
    resolved_call rc{.function = c.function, .before_launch = c.before_launch, .line = c.line};
    std::vector<std::pair<dtype, std::int64_t>> buffers;  // dtype, elements
    for (std::size_t i = 0; i < c.args.size(); ++i) {
      const auto& a = c.args[i];
      const std::string field = fmt::format("{}.args[{}]", c.function, i);
      auto name = a.value.as_name();
      const bool buffer_name = name && !values.count(std::string(*name)) && is_buffer(std::string(*name));
      resolved_arg ra;
      if (i < f.buffers) {
        if (!buffer_name)
          return fail(a.column, field,
                      fmt::format("'{}' must be a buffer ({} takes {})", a.value.to_string(), f.name, f.signature));
        const std::string n(*name);
        dtype type = dtype::f32;
        std::int64_t elements = 0;
        if (auto sc = std::find_if(out.scratch.begin(), out.scratch.end(), [&](const auto& x) { return x.name == n; });
            sc != out.scratch.end()) {
          type = sc->type;
          elements = sc->elements;
          ra.role = buffer_role::scratch;
        } else {
          // A task buffer: its shape was checked at load time, so it evaluates here.
          const auto is_n = [&](const tensor_spec& b) { return b.name == n; };
          auto in = std::find_if(t.inputs.begin(), t.inputs.end(), is_n);
          const bool input = in != t.inputs.end();
          const tensor_spec& b = input ? *in : *std::find_if(t.outputs.begin(), t.outputs.end(), is_n);
          auto count = element_count(b, values);
          if (!count) return fail(a.column, field, count.error().message);
          type = b.type;
          elements = *count;
          ra.role = input ? buffer_role::input : buffer_role::output;
        }
        ra.is_buffer = true;
        ra.buffer = n;
        buffers.emplace_back(type, elements);
      } else {
        if (buffer_name) return fail(a.column, field, fmt::format("'{}' is a buffer; {} takes {}", *name, f.name, f.signature));
        auto v = eval(a.value, c.line, a.column, field);
        if (!v) return unexpected(v.error());
        if (*v < 1 || *v > std::numeric_limits<std::int32_t>::max())
          return fail(a.column, field, fmt::format("{} must be in [1, 2^31)", shown(a.value, *v)));
        ra.value = *v;
        ra.type = scalar_type::i64;
      }
      rc.args.push_back(std::move(ra));
    }
    rc.type = buffers[0].first;
    const bool gemv = f.name == "gemv";
    if (gemv ? rc.type != dtype::f32 : !(rc.type == dtype::f32 || rc.type == dtype::f16 || rc.type == dtype::bf16))
      return fail(0, c.function, fmt::format("{} buffers may not be {} (supported: {})", f.name, to_string(rc.type),
                                             gemv ? "f32" : "f32, f16, bf16"));
    for (std::size_t i = 1; i < buffers.size(); ++i)
      if (buffers[i].first != rc.type)
        return fail(0, c.function, fmt::format("'{}' is {} but '{}' is {}; the buffers must share one dtype",
                                               rc.args[i].buffer, to_string(buffers[i].first), rc.args[0].buffer,
                                               to_string(rc.type)));
    // Elements each buffer must hold: the routine reads and writes exactly these.
    // In double: exact below 2^53 elements, far beyond any buffer, and never overflowing.
    auto size = [&](std::size_t k) { return static_cast<double>(rc.args[f.buffers + k].value); };
    std::array<double, 3> need{};
    if (f.name == "gemm" || f.name == "gemm_nt") need = {size(0) * size(2), size(2) * size(1), size(0) * size(1)};
    else if (f.name == "gemm_batched")
      need = {size(0) * size(1) * size(3), size(0) * size(3) * size(2), size(0) * size(1) * size(2)};
    else need = {size(0) * size(1), size(1), size(0)};  // gemv
    for (std::size_t i = 0; i < 3; ++i)
      if (static_cast<double>(buffers[i].second) < need[i])
        return fail(0, c.function, fmt::format("'{}' holds {} elements; {}({}) needs {:.0f}", rc.args[i].buffer,
                                               buffers[i].second, f.name, f.signature, need[i]));
    out.calls.push_back(std::move(rc));
  }
  return out;
}

/// Why a candidate's plan is refused although it parses: candidates launch
/// their own kernels and may not call library routines. Empty when fine.
inline std::optional<error> check_candidate_plan(const launch_plan& plan) {
  if (!plan.has_calls()) return std::nullopt;
  return detail::plan_failure(plan.calls.front().line, 0, "call",
                    fmt::format("'call {}' is for a task's reference and baseline only; a candidate launches its own "
                                "kernels",
                                plan.calls.front().function));
}

SPECGEN_END_NAMESPACE
