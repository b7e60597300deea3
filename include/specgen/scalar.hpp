#pragma once
/// Typed scalars: the value a kernel's by-value parameter receives for a task
/// scalar, a size or a typed literal of a launch plan, and the checked
/// conversions between the types a plan can pass (`scalar_type`, task.hpp).
///
/// Integers are exact over the whole range of every width (u64 and i64
/// included); floats are held as a double and rounded to their type by the
/// conversion, so a converted value is exactly what the kernel receives.
///
/// @code
///   using specgen::scalar_type;
///   auto f = specgen::convert_scalar(specgen::scalar_value::of_real(1e-5), scalar_type::f32);
///   // f->real == double(1e-5f): the float the kernel sees
///   auto u = specgen::convert_scalar(specgen::scalar_value::of_int(300), scalar_type::u8);
///   // !u; u.error() == specgen::scalar_errc::out_of_range; specgen::range_text(scalar_type::u8) == "0 to 255"
///   auto i = specgen::convert_scalar(specgen::scalar_value::of_real(2.5), scalar_type::i32);
///   // !i; i.error() == specgen::scalar_errc::not_integral
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/inputs.hpp>
#include <specgen/task.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE

/// f16, bf16, f32 and f64.
constexpr bool is_floating(scalar_type t) noexcept { return t >= scalar_type::f16; }

/// Signed integers and every float type.
constexpr bool is_signed(scalar_type t) noexcept {
  switch (t) {
    case scalar_type::u8:
    case scalar_type::u16:
    case scalar_type::u32:
    case scalar_type::u64: return false;
    default: return true;
  }
}

/// The CUDA C++ parameter type a kernel takes for `t`: "int", "unsigned long
/// long", "float", "__half" (cuda_fp16.h), "__nv_bfloat16" (cuda_bf16.h), ...
constexpr std::string_view c_type_name(scalar_type t) noexcept {
  constexpr std::string_view names[] = {"signed char", "unsigned char", "short",  "unsigned short",
                                        "int",         "unsigned int",  "long long", "unsigned long long",
                                        "__half",      "__nv_bfloat16", "float",  "double"};
  return names[static_cast<std::size_t>(t)];
}

/// Smallest value of an integer type (0 for unsigned ones).
constexpr std::int64_t integer_min(scalar_type t) noexcept {
  if (!is_signed(t)) return 0;
  return size_of(t) == 8 ? std::numeric_limits<std::int64_t>::min()
                         : -(std::int64_t{1} << (8 * size_of(t) - 1));
}

/// Largest value of an integer type.
constexpr std::uint64_t integer_max(scalar_type t) noexcept {
  const std::size_t bits = 8 * size_of(t) - (is_signed(t) ? 1 : 0);
  return bits == 64 ? std::numeric_limits<std::uint64_t>::max() : (std::uint64_t{1} << bits) - 1;
}

/// Largest finite value of a float type.
constexpr double float_max(scalar_type t) noexcept {
  switch (t) {
    case scalar_type::f16: return 65504.0;
    case scalar_type::bf16: return 0x1.fep+127;
    case scalar_type::f32: return 0x1.fffffep+127;
    default: return std::numeric_limits<double>::max();
  }
}

/// A value of one scalar type, exactly.
struct scalar_value {
  scalar_type type = scalar_type::i64;
  /// Integer types: the value's 64-bit two's-complement pattern (a u64 above
  /// 2^63 - 1 reads negative here). 0 for float types.
  std::int64_t value = 0;
  /// Float types: the value (after `convert_scalar`, exactly as the type
  /// holds it). 0 for integer types.
  double real = 0;

  static constexpr scalar_value of_int(std::int64_t v) noexcept { return {scalar_type::i64, v, 0}; }
  static constexpr scalar_value of_uint(std::uint64_t v) noexcept {
    return {scalar_type::u64, static_cast<std::int64_t>(v), 0};
  }
  static constexpr scalar_value of_real(double v) noexcept { return {scalar_type::f64, 0, v}; }
  static constexpr scalar_value of(const scalar_spec& s) noexcept { return {s.type, s.value, s.real}; }

  /// "300", "-1", "18446744073709551615", "1e-05" (floats: the shortest text
  /// that reads back as the same double).
  [[nodiscard]] std::string to_string() const {
    if (is_floating(type)) return fmt::format("{}", real);
    if (is_signed(type)) return std::to_string(value);
    return std::to_string(static_cast<std::uint64_t>(value));
  }
  friend bool operator==(const scalar_value&, const scalar_value&) = default;
};

/// Why a value cannot be converted to a type.
enum class scalar_errc : std::uint8_t {
  not_integral,  ///< a float with a fractional part, to an integer type
  out_of_range,  ///< outside the integer type's range, or rounds to infinity in the float type (or is not finite)
};

/// The range of a type as messages show it: "0 to 255", "-128 to 127",
/// "-65504 to 65504", "-3.4028234663852886e+38 to 3.4028234663852886e+38".
inline std::string range_text(scalar_type t) {
  if (is_floating(t)) return fmt::format("-{0} to {0}", float_max(t));
  return fmt::format("{} to {}", integer_min(t), integer_max(t));
}

namespace detail {

/// `d` (finite) rounded to the float type `t` (to nearest, ties to even; f16
/// and bf16 through float), or nullopt when it rounds to infinity.
inline std::optional<double> round_to_float_type(double d, scalar_type t) noexcept {
  if (t == scalar_type::f64) return d;
  // At and above FLT_MAX + half an ulp a double rounds to infinity in float; checked
  // before converting, since converting a double out of float's range is undefined.
  if (!(std::fabs(d) < 0x1.ffffffp+127)) return std::nullopt;
  const auto f = static_cast<float>(d);
  if (t == scalar_type::f32) return static_cast<double>(f);
  if (t == scalar_type::f16) {
    const std::uint16_t h = float_to_half(f);
    if ((h & 0x7FFFu) == 0x7C00u) return std::nullopt;
    return static_cast<double>(half_to_float(h));
  }
  const std::uint16_t b = float_to_bf16(f);
  if ((b & 0x7FFFu) == 0x7F80u) return std::nullopt;
  return static_cast<double>(bf16_to_float(b));
}

}  // namespace detail

/// `from` as a value of type `to`: integers checked against the range of
/// `to`, floats to an integer type only when integral and in range, values to
/// a float type rounded to it (to nearest) and refused when they round to
/// infinity. A float `from` must be finite.
inline expected<scalar_value, scalar_errc> convert_scalar(const scalar_value& from, scalar_type to) noexcept {
  if (!is_floating(from.type)) {
    const bool negative = is_signed(from.type) && from.value < 0;
    if (is_floating(to)) {
      const double d = is_signed(from.type) ? static_cast<double>(from.value)
                                            : static_cast<double>(static_cast<std::uint64_t>(from.value));
      auto r = detail::round_to_float_type(d, to);
      if (!r) return unexpected(scalar_errc::out_of_range);
      return scalar_value{to, 0, *r};
    }
    const bool fits = negative ? is_signed(to) && from.value >= integer_min(to)
                               : static_cast<std::uint64_t>(from.value) <= integer_max(to);
    if (!fits) return unexpected(scalar_errc::out_of_range);
    return scalar_value{to, from.value, 0};
  }
  const double d = from.real;
  if (!std::isfinite(d)) return unexpected(scalar_errc::out_of_range);
  if (is_floating(to)) {
    auto r = detail::round_to_float_type(d, to);
    if (!r) return unexpected(scalar_errc::out_of_range);
    return scalar_value{to, 0, *r};
  }
  if (d != std::trunc(d)) return unexpected(scalar_errc::not_integral);
  // Powers of two are exact doubles: [lo, hi) is exactly the type's range.
  const double lo = is_signed(to) ? -std::ldexp(1.0, static_cast<int>(8 * size_of(to) - 1)) : 0.0;
  const double hi = std::ldexp(1.0, static_cast<int>(8 * size_of(to) - (is_signed(to) ? 1 : 0)));
  if (!(d >= lo && d < hi)) return unexpected(scalar_errc::out_of_range);
  const std::int64_t v = d < 0 ? static_cast<std::int64_t>(d)
                               : static_cast<std::int64_t>(static_cast<std::uint64_t>(d));
  return scalar_value{to, v, 0};
}

namespace detail {

/// The type a message suggests when `from` does not fit `to`: the narrowest
/// integer type at least as wide that holds it (of `to`'s signedness first),
/// or a wider float type; nullopt when there is none.
inline std::optional<scalar_type> wider_type_for(const scalar_value& from, scalar_type to) noexcept {
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t i = 0; i < scalar_type_names.size(); ++i) {
      const auto t = static_cast<scalar_type>(i);
      if (t == to || is_floating(t) != is_floating(to)) continue;
      if (is_floating(t) ? pass == 1 || size_of(t) <= size_of(to)
                         : size_of(t) < size_of(to) || (is_signed(t) == is_signed(to)) != (pass == 0))
        continue;
      if (convert_scalar(from, t)) return t;
    }
  return std::nullopt;
}

/// "an" before "int" and "unsigned ...", else "a".
constexpr std::string_view article(std::string_view word) noexcept {
  return !word.empty() && (word.front() == 'i' || word.front() == 'u') ? "an" : "a";
}

}  // namespace detail

SPECGEN_END_NAMESPACE
