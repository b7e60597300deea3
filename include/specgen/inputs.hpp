#pragma once
/// Host-side buffers for validation: deterministic inputs, the poison written
/// into outputs before every checked run, guard canaries around every buffer,
/// and the checksum that proves a kernel left its inputs alone.
///
/// Everything here is CUDA-free arithmetic, identical on every platform and
/// standard library, so a validation failure reproduces from (task, seed).
///
/// @code
///   specgen::tensor_spec x{.name = "x", .type = specgen::dtype::f16, .shape = {"N"}};
///   auto n = specgen::element_count(x, {{"N", 4096}});          // expected<int64_t, error>: 4096
///   auto bytes = specgen::make_input(x, *n, /*seed=*/7);         // 8192 bytes of N(0, 1) halves
///   auto sum = specgen::checksum(bytes);                          // compare again after the run
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/detail/hash.hpp>
#include <specgen/detail/xxh3.hpp>
#include <specgen/expected.hpp>
#include <specgen/expr.hpp>
#include <specgen/task.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

// ---------------------------------------------------------------------------
// Half-precision conversions (IEEE binary16 and bfloat16), round to nearest even.

/// Nearest binary16 to `f`, ties to even; overflow gives ±inf, NaN stays a
/// quiet NaN with the sign kept.
///
/// @code
///   specgen::float_to_half(1.0f) == 0x3C00;   specgen::float_to_half(65520.0f) == 0x7C00;  // inf
/// @endcode
constexpr std::uint16_t float_to_half(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  // 65520 is halfway between 65504 (odd mantissa, the largest half) and 65536: ties go up, to inf.
  if (ax >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (ax >= 0x38800000u) {  // normal half: round the 13 dropped bits, let a carry bump the exponent
    const std::uint32_t rounded = ax + 0xFFFu + ((ax >> 13) & 1u) - 0x38000000u;  // rebias 127 -> 15
    return static_cast<std::uint16_t>(sign | (rounded >> 13));
  }
  // Subnormal half (units of 2^-24): shift the full significand, rounding by hand.
  const std::uint32_t e = ax >> 23;
  const std::uint32_t shift = 126 - e;
  if (shift > 24) return sign;  // below half of the smallest subnormal
  const std::uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
  std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q may reach 0x400: the smallest normal, correctly
  return static_cast<std::uint16_t>(sign | q);
}

/// The exact float value of a binary16 bit pattern.
constexpr float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    const float mag = static_cast<float>(mant) * (1.0f / 16777216.0f);  // exact: mant * 2^-24
    return sign ? -mag : mag;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// Nearest bfloat16 to `f`, ties to even; NaN stays a quiet NaN.
constexpr std::uint16_t float_to_bf16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

/// The exact float value of a bfloat16 bit pattern.
constexpr float bf16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

namespace detail {

// Word j of a buffer's stream is mix64 (detail/hash.hpp) of a counter, so element
// i never depends on element i-1 and any slice of a buffer can be regenerated on its own.
constexpr std::uint64_t word_at(std::uint64_t key, std::uint64_t j) noexcept {
  return mix64(key + (j + 1) * splitmix64_gamma);
}

/// N(0, 1) as the Irwin-Hall sum of 12 uniforms of 16 bits (three words):
/// integer arithmetic, so bit-identical on every libm, unlike Box-Muller or
/// std::normal_distribution. Tails stop at ±6, which validation never needs.
constexpr double normal_at(std::uint64_t key, std::uint64_t i) noexcept {
  std::int64_t sum = 0;
  for (std::uint64_t k = 0; k < 3; ++k) {
    const std::uint64_t w = word_at(key, 3 * i + k);
    for (int s = 0; s < 64; s += 16) sum += static_cast<std::int64_t>((w >> s) & 0xFFFFu);
  }
  // Each 16-bit lane is uniform on {0..65535}; centre each at 32767.5 (mean 12 * 32767.5 = 393210).
  return (static_cast<double>(sum) - 393210.0) / 65536.0;
}

/// Uniform on [0, 1) with `bits` random bits: exactly representable in a
/// type with that many significand bits, so f16 never rounds up to 1.
constexpr double unit_at(std::uint64_t key, std::uint64_t i, int bits) noexcept {
  return static_cast<double>(word_at(key, i) >> (64 - bits)) / static_cast<double>(std::uint64_t{1} << bits);
}

constexpr int significand_bits(dtype d) noexcept {
  switch (d) {
    case dtype::f16: return 11;
    case dtype::bf16: return 8;
    case dtype::f32: return 24;
    default: return 53;
  }
}

constexpr bool is_float(dtype d) noexcept {
  return d == dtype::f16 || d == dtype::bf16 || d == dtype::f32 || d == dtype::f64;
}

inline double float_sample(const distribution& dist, dtype d, std::uint64_t key, std::uint64_t i) noexcept {
  const int bits = significand_bits(d);
  switch (dist.kind) {
    case distribution_kind::normal: return normal_at(key, i);
    case distribution_kind::uniform: return unit_at(key, i, bits);
    case distribution_kind::signed_uniform: return 2.0 * unit_at(key, i, bits) - 1.0;
    case distribution_kind::large: {
      // Uniform magnitude in [1e3, 1e4) with a random sign: big enough to expose
      // a lost term or an f16 intermediate, small enough that sums of a few stay finite in f16.
      const std::uint64_t w = word_at(key, i);
      const double mag = 1000.0 + 9000.0 * static_cast<double>(w >> 11) / 9007199254740992.0;
      return (w & 1u) ? -mag : mag;
    }
    case distribution_kind::zeros: return 0.0;
    case distribution_kind::ones: return 1.0;
    case distribution_kind::normal_of: return dist.a + dist.b * normal_at(key, i);
    case distribution_kind::uniform_of: return dist.a + (dist.b - dist.a) * unit_at(key, i, 53);
    case distribution_kind::randint:  // bounds are integers below 2^53 in magnitude
      return std::min(dist.a + std::floor(unit_at(key, i, 53) * (dist.b - dist.a)), dist.b - 1);
    case distribution_kind::constant: return dist.a;
    case distribution_kind::arange: return dist.a + dist.b * static_cast<double>(i);
  }
  return 0.0;
}

struct int_range {
  std::int64_t lo, hi;
};

constexpr int_range int_limits(dtype d) noexcept {
  switch (d) {
    case dtype::i8: return {-128, 127};
    case dtype::u8: return {0, 255};
    case dtype::i32: return {std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()};
    default: return {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()};
  }
}

/// `v` rounded to the nearest integer and clamped to `lim` (NaN gives 0).
inline std::int64_t clamp_round(double v, int_range lim) noexcept {
  if (!(v == v)) return 0;
  if (v <= static_cast<double>(lim.lo)) return lim.lo;
  if (v >= static_cast<double>(lim.hi)) return lim.hi;
  return static_cast<std::int64_t>(std::llround(v));
}

/// Named distributions keep integer inputs small (|v| < 64 except `large`)
/// so that sums and products over a few thousand elements cannot overflow
/// i32 in a correct kernel; parameterised ones mean what they say, rounded
/// to integers and clamped to the type.
inline std::int64_t int_sample(const distribution& dist, dtype d, std::uint64_t key, std::uint64_t i) noexcept {
  const int_range lim = int_limits(d);
  const bool is_unsigned = lim.lo == 0;
  auto pick = [&](std::int64_t lo, std::int64_t hi) {  // uniform on [lo, hi), hi - lo < 2^32
    const auto span = static_cast<std::uint64_t>(hi - lo);
    return lo + static_cast<std::int64_t>(((word_at(key, i) >> 32) * span) >> 32);
  };
  std::int64_t v = 0;
  switch (dist.kind) {
    case distribution_kind::normal: v = static_cast<std::int64_t>(std::lround(8.0 * normal_at(key, i))); break;
    case distribution_kind::uniform: v = pick(0, 64); break;
    case distribution_kind::signed_uniform: v = pick(-64, 64); break;
    case distribution_kind::large: {
      const std::int64_t hi = lim.hi < 10000 ? lim.hi + 1 : 10000, lo = std::min<std::int64_t>(1000, hi / 2);
      v = pick(lo, hi);
      if (!is_unsigned && (word_at(key, i) & 1u)) v = -v;
      break;
    }
    case distribution_kind::zeros: v = 0; break;
    case distribution_kind::ones: v = 1; break;
    case distribution_kind::uniform_of:
      // Integers in [ceil(lo), hi): the integer analogue of a half-open interval.
      return clamp_round(std::floor(float_sample({distribution_kind::uniform_of, std::ceil(dist.a), dist.b}, dtype::f64,
                                                 key, i)),
                         lim);
    default: return clamp_round(float_sample(dist, dtype::f64, key, i), lim);
  }
  if (is_unsigned && v < 0) v = -v;  // unsigned types take the magnitude
  return std::clamp(v, lim.lo, lim.hi);
}

template <class T>
void store(std::byte* p, T v) noexcept {
  std::memcpy(p, &v, sizeof v);
}

/// Writes one element of type `d` holding `v` (already in range for integers).
inline void store_float(dtype d, std::byte* p, double v) noexcept {
  switch (d) {
    case dtype::f16: store(p, float_to_half(static_cast<float>(v))); break;
    case dtype::bf16: store(p, float_to_bf16(static_cast<float>(v))); break;
    case dtype::f32: store(p, static_cast<float>(v)); break;
    default: store(p, v); break;
  }
}

inline void store_int(dtype d, std::byte* p, std::int64_t v) noexcept {
  switch (d) {
    case dtype::i8: store(p, static_cast<std::int8_t>(v)); break;
    case dtype::u8: store(p, static_cast<std::uint8_t>(v)); break;
    case dtype::i32: store(p, static_cast<std::int32_t>(v)); break;
    default: store(p, v); break;
  }
}

/// The stream key: every (seed, name, shape) gets its own independent stream,
/// so two inputs of one task never hold the same data.
inline std::uint64_t input_key(const tensor_spec& t, std::int64_t elements, std::uint64_t seed) noexcept {
  std::uint64_t h = fnv1a(t.name);
  for (const auto& dim : t.shape) h = fnv1a(dim, h ^ 0x2Cu);  // ',' between dimensions
  return mix64(mix64(seed) ^ mix64(h + static_cast<std::uint64_t>(elements)));
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Inputs.

/// The number of elements of `t` at `shape`: the product of its size
/// expressions (a shape with no dimensions is a scalar, 1 element).
/// Errors name the buffer and dimension: a syntax error, an unknown symbol,
/// a negative dimension or a product beyond 64 bits.
///
/// @code
///   tensor_spec a{.name = "a", .shape = {"M", "K"}};
///   element_count(a, {{"M", 3}, {"K", 4}});   // 12
///   element_count(a, {{"M", 3}});             // error: "... unknown name 'K' (known: M) ..."
/// @endcode
inline expected<std::int64_t, error> element_count(const tensor_spec& t, const shape_binding& shape) {
  std::int64_t n = 1;
  for (std::size_t d = 0; d < t.shape.size(); ++d) {
    auto where = [&] { return fmt::format("buffer '{}' dimension {} ('{}')", t.name, d, t.shape[d]); };
    auto e = parse_size_expr(t.shape[d]);
    if (!e) return unexpected(error{fmt::format("{}: {}", where(), e.error().what())});
    auto v = e->eval(shape);
    if (!v) return unexpected(error{fmt::format("{}: {}", where(), v.error().what())});
    if (*v < 0) return unexpected(error{fmt::format("{} is {}: sizes must not be negative", where(), *v)});
    if (__builtin_mul_overflow(n, *v, &n))
      return unexpected(error{fmt::format("{}: the element count overflows signed 64 bits", where())});
  }
  return n;
}

/// `elements` values of `t.type` drawn from `t.init` (or `override`),
/// deterministic in (seed, t.name, t.shape, elements) and identical on every
/// platform. Named distributions: normal N(0, 1); uniform [0, 1);
/// signed_uniform [-1, 1); large ±[1e3, 1e4) (finite in f16); zeros; ones.
/// Integer types get small integers from them (normal: round(8 z); uniform
/// [0, 64); signed_uniform [-64, 64); large ±[1e3, 1e4) clipped to the type;
/// unsigned types take |v|). Parameterised ones mean what they say for every
/// type: normal(mean, std), uniform(lo, hi) ([lo, hi); integers
/// [ceil(lo), hi)), randint(lo, hi) (integers in [lo, hi)), const(v),
/// arange(start, step) (start + step * i); integers are rounded and clamped
/// to the type, floats rounded to it (so an f16 arange past 65504 is inf).
///
/// @code
///   auto a = make_input(spec, 1024, 1);
///   auto b = make_input(spec, 1024, 2, distribution::large);                 // another seed and distribution
///   auto c = make_input(spec, 1024, 3, *parse_distribution("normal(1000, 1)"));
/// @endcode
/// @throws std::invalid_argument when `elements` is negative (use element_count first).
inline std::vector<std::byte> make_input(const tensor_spec& t, std::int64_t elements, std::uint64_t seed,
                                         std::optional<distribution> override = {});

/// Elements `first .. first + out.size() / size_of(t.type)` of
/// `make_input(t, elements, seed, override)`, written into `out`. Every element
/// depends only on its index, so disjoint slices can be filled by different
/// threads and the result is the same bytes as `make_input`.
///
/// @code
///   std::vector<std::byte> all(n * 4);
///   fill_input(spec, n, 7, {}, 0, std::span(all).first(n * 2));        // elements [0, n/2)
///   fill_input(spec, n, 7, {}, n / 2, std::span(all).subspan(n * 2));  // elements [n/2, n)
/// @endcode
/// @throws std::invalid_argument when the slice lies outside [0, elements).
inline void fill_input(const tensor_spec& t, std::int64_t elements, std::uint64_t seed,
                       std::optional<distribution> override, std::uint64_t first, std::span<std::byte> out) {
  const std::size_t width = size_of(t.type);
  const std::uint64_t count = out.size() / width;
  if (elements < 0 || out.size() % width != 0 || first > static_cast<std::uint64_t>(elements) ||
      count > static_cast<std::uint64_t>(elements) - first)
    throw std::invalid_argument("fill_input: the slice lies outside the buffer");
  const distribution dist = override.value_or(t.init);
  const std::uint64_t key = detail::input_key(t, elements, seed);
  std::byte* p = out.data();
  if (detail::is_float(t.type)) {
    for (std::uint64_t i = first; i < first + count; ++i, p += width)
      detail::store_float(t.type, p, detail::float_sample(dist, t.type, key, i));
  } else {
    for (std::uint64_t i = first; i < first + count; ++i, p += width)
      detail::store_int(t.type, p, detail::int_sample(dist, t.type, key, i));
  }
}

inline std::vector<std::byte> make_input(const tensor_spec& t, std::int64_t elements, std::uint64_t seed,
                                         std::optional<distribution> override) {
  if (elements < 0) throw std::invalid_argument("make_input: negative element count");
  std::vector<std::byte> out(static_cast<std::uint64_t>(elements) * size_of(t.type));
  fill_input(t, elements, seed, override, 0, out);
  return out;
}

/// Replaces every element of a floating-point buffer of `d` with its
/// absolute value (the sign bit cleared, NaN stays NaN); integer buffers are
/// left alone. The validator evaluates the reference on such inputs to learn
/// the magnitude of the terms behind each output (`tolerance::terms`).
inline void make_absolute(std::span<std::byte> buf, dtype d) noexcept {
  const std::size_t width = size_of(d);
  if (!detail::is_float(d)) return;
  // The sign is the top bit of the last byte of each little-endian element.
  for (std::size_t i = width - 1; i < buf.size(); i += width) buf[i] &= std::byte{0x7F};
}

// ---------------------------------------------------------------------------
// Poison, canaries, checksums.

/// One element of poison for an output of type `d`: a quiet NaN with an
/// 0xA5 payload for floats (so an unwritten element can never pass a
/// comparison), 0xA5 bytes for integers.
inline std::vector<std::byte> poison_pattern(dtype d) {
  std::vector<std::byte> out(size_of(d), std::byte{0xA5});
  switch (d) {
    case dtype::f16: detail::store(out.data(), std::uint16_t{0x7EA5}); break;
    case dtype::bf16: detail::store(out.data(), std::uint16_t{0x7FE5}); break;
    case dtype::f32: detail::store(out.data(), std::uint32_t{0x7FE5A5A5u}); break;
    case dtype::f64: detail::store(out.data(), std::uint64_t{0x7FFDA5A5A5A5A5A5ull}); break;
    default: break;
  }
  return out;
}

/// Fills `buf` with the poison of `d`, element by element (a trailing
/// partial element gets the pattern's leading bytes).
inline void fill_poison(std::span<std::byte> buf, dtype d) {
  const auto pat = poison_pattern(d);
  // One element, then copies of what is already written, doubling: a 64 MiB
  // output is poisoned in milliseconds instead of a byte loop's tenth of a second.
  const std::size_t head = std::min(buf.size(), pat.size());
  std::memcpy(buf.data(), pat.data(), head);
  for (std::size_t done = head; done < buf.size();) {
    const std::size_t n = std::min(done, buf.size() - done);
    std::memcpy(buf.data() + done, buf.data(), n);
    done += n;
  }
}

/// True when every byte of `buf` is still the poison of `d`: the kernel
/// never wrote this output.
inline bool is_poison(std::span<const std::byte> buf, dtype d) {
  const auto pat = poison_pattern(d);
  // The first element is the pattern, and the buffer repeats with the
  // pattern's period (buf[i] == buf[i + width] everywhere): one memcmp.
  const std::size_t head = std::min(buf.size(), pat.size());
  if (std::memcmp(buf.data(), pat.data(), head) != 0) return false;
  return buf.size() <= pat.size() || std::memcmp(buf.data(), buf.data() + pat.size(), buf.size() - pat.size()) == 0;
}

/// Bytes of guard placed before and after every device buffer. 256 keeps the
/// buffer itself 256-byte aligned, as cudaMalloc's own are.
inline constexpr std::size_t canary_bytes = 256;

/// Fills a guard region with pseudo-random bytes derived from `seed`; a
/// random pattern (rather than a constant) catches a kernel that writes
/// plausible values out of bounds, zeros included.
///
/// @code
///   std::vector<std::byte> guard(specgen::canary_bytes);
///   specgen::fill_canary(guard, 42);
///   // ... run the kernel ...
///   if (!specgen::check_canary(guard, 42)) { /* out-of-bounds write */ }
/// @endcode
inline void fill_canary(std::span<std::byte> buf, std::uint64_t seed) noexcept {
  const std::uint64_t key = detail::mix64(seed ^ 0xCA9A2EC0FFEEull);
  for (std::size_t i = 0; i < buf.size(); ++i)
    buf[i] = static_cast<std::byte>(detail::word_at(key, i / 8) >> (8 * (i % 8)));
}

/// The offset of the first byte that differs from `fill_canary(seed)`, or
/// nullopt when the guard is intact.
inline std::optional<std::size_t> first_canary_damage(std::span<const std::byte> buf, std::uint64_t seed) noexcept {
  const std::uint64_t key = detail::mix64(seed ^ 0xCA9A2EC0FFEEull);
  for (std::size_t i = 0; i < buf.size(); ++i)
    if (buf[i] != static_cast<std::byte>(detail::word_at(key, i / 8) >> (8 * (i % 8)))) return i;
  return std::nullopt;
}

/// True when the guard still holds exactly what `fill_canary(buf, seed)` wrote.
inline bool check_canary(std::span<const std::byte> buf, std::uint64_t seed) noexcept {
  return !first_canary_damage(buf, seed).has_value();
}

/// A fast 64-bit content hash for the before/after check of inputs: XXH3,
/// which reads a 64 MiB input several times faster than a byte- or word-serial
/// hash. The value lives only for one validation (it is never persisted); a
/// damaged input matches its old checksum with probability 2^-64.
inline std::uint64_t checksum(std::span<const std::byte> buf) noexcept { return detail::xxh3_64(buf.data(), buf.size()); }

SPECGEN_END_NAMESPACE
