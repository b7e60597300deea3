#include <specgen/inputs.hpp>

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace specgen;

namespace {

template <class T>
std::vector<T> as(const std::vector<std::byte>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

std::vector<double> decode(dtype d, const std::vector<std::byte>& b) {
  std::vector<double> out;
  switch (d) {
    case dtype::f16: for (auto h : as<std::uint16_t>(b)) out.push_back(half_to_float(h)); break;
    case dtype::bf16: for (auto h : as<std::uint16_t>(b)) out.push_back(bf16_to_float(h)); break;
    case dtype::f32: for (auto f : as<float>(b)) out.push_back(f); break;
    case dtype::f64: for (auto f : as<double>(b)) out.push_back(f); break;
    case dtype::i8: for (auto f : as<std::int8_t>(b)) out.push_back(f); break;
    case dtype::u8: for (auto f : as<std::uint8_t>(b)) out.push_back(f); break;
    case dtype::i32: for (auto f : as<std::int32_t>(b)) out.push_back(f); break;
    case dtype::i64: for (auto f : as<std::int64_t>(b)) out.push_back(static_cast<double>(f)); break;
  }
  return out;
}

struct moments {
  double mean, sd, min, max;
};

moments moments_of(const std::vector<double>& v) {
  double s = 0, s2 = 0, lo = v.front(), hi = v.front();
  for (double x : v) {
    s += x;
    s2 += x * x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  const double n = static_cast<double>(v.size()), mean = s / n;
  return {mean, std::sqrt(s2 / n - mean * mean), lo, hi};
}

tensor_spec spec(dtype d, distribution init = distribution::normal, std::string name = "x") {
  return {.name = std::move(name), .type = d, .shape = {"N"}, .init = init};
}

}  // namespace

TEST_CASE("every binary16 value survives a round trip through float exactly") {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float f = half_to_float(bits);
    if (std::isnan(f)) {
      CHECK(std::isnan(half_to_float(float_to_half(f))));
      continue;
    }
    REQUIRE(float_to_half(f) == bits);
  }
}

TEST_CASE("every bfloat16 value survives a round trip through float exactly") {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float f = bf16_to_float(bits);
    if (std::isnan(f)) {
      CHECK(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    REQUIRE(float_to_bf16(f) == bits);
  }
}

TEST_CASE("half conversion rounds to nearest with ties to even") {
  // Spacing of halves in [1, 2) is 2^-10.
  const float ulp = 1.0f / 1024.0f;
  CHECK(float_to_half(1.0f + ulp / 2) == 0x3C00);               // tie, 1.0 is even: down
  CHECK(float_to_half(1.0f + 3 * ulp / 2) == 0x3C02);           // tie, 1+ulp is odd: up
  CHECK(float_to_half(1.0f + ulp / 2 + ulp / 64) == 0x3C01);    // above the tie: up
  CHECK(float_to_half(65504.0f) == 0x7BFF);                     // largest half
  CHECK(float_to_half(65519.0f) == 0x7BFF);                     // below the tie to inf
  CHECK(float_to_half(65520.0f) == 0x7C00);                     // tie rounds to even: inf
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);        // smallest subnormal
  CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);        // tie with 0: even
  CHECK(float_to_half(std::ldexp(3.0f, -25)) == 0x0002);        // 1.5 units: tie, up to even 2
  CHECK(float_to_half(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)) == 0x0400);  // carries into the normals
  CHECK(float_to_half(-0.0f) == 0x8000);
}

TEST_CASE("bfloat16 conversion rounds to nearest with ties to even") {
  const float ulp = 1.0f / 128.0f;  // spacing in [1, 2)
  CHECK(float_to_bf16(1.0f + ulp / 2) == 0x3F80);
  CHECK(float_to_bf16(1.0f + 3 * ulp / 2) == 0x3F82);
  CHECK(float_to_bf16(1.0f + ulp / 2 + ulp / 64) == 0x3F81);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to inf
}

TEST_CASE("infinities and NaN convert to and from half and bfloat16") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(float_to_half(inf) == 0x7C00);
  CHECK(float_to_half(-inf) == 0xFC00);
  CHECK(float_to_half(1e6f) == 0x7C00);
  CHECK(half_to_float(0x7C00) == inf);
  CHECK(float_to_bf16(inf) == 0x7F80);
  CHECK(bf16_to_float(0xFF80) == -inf);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK((float_to_half(nan) & 0x7C00) == 0x7C00);
  CHECK((float_to_half(nan) & 0x03FF) != 0);
  CHECK(std::isnan(half_to_float(float_to_half(nan))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(nan))));
  // A NaN whose payload sits only in the low bits must not truncate to inf.
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::bit_cast<float>(0x7F800001u)))));
  CHECK(std::isnan(half_to_float(float_to_half(std::bit_cast<float>(0x7F800001u)))));
}

TEST_CASE("inputs are deterministic in seed, name and shape") {
  const auto x = spec(dtype::f32);
  CHECK(make_input(x, 1000, 1) == make_input(x, 1000, 1));
  CHECK(make_input(x, 1000, 1) != make_input(x, 1000, 2));
  CHECK(make_input(x, 1000, 1) != make_input(spec(dtype::f32, distribution::normal, "y"), 1000, 1));
  auto other_shape = x;
  other_shape.shape = {"M"};
  CHECK(make_input(x, 1000, 1) != make_input(other_shape, 1000, 1));
  // Pinned: a change here changes every recorded validation, so it must be deliberate.
  CHECK(checksum(make_input(x, 1000, 1)) == 0x0718196b0d45b5abull);
}

TEST_CASE("inputs have one element per element count of the requested type") {
  for (auto d : {dtype::f16, dtype::bf16, dtype::f32, dtype::f64, dtype::i8, dtype::u8, dtype::i32, dtype::i64})
    CHECK(make_input(spec(d), 37, 3).size() == 37 * size_of(d));
  CHECK(make_input(spec(dtype::f32), 0, 3).empty());
  CHECK_THROWS_AS(make_input(spec(dtype::f32), -1, 3), std::invalid_argument);
}

TEST_CASE("float distributions have the documented moments over 1e5 samples") {
  constexpr std::int64_t n = 100000;
  for (auto d : {dtype::f32, dtype::f64, dtype::f16, dtype::bf16}) {
    INFO(to_string(d));
    auto m = moments_of(decode(d, make_input(spec(d, distribution::normal), n, 11)));
    CHECK(std::abs(m.mean) < 0.02);
    CHECK(std::abs(m.sd - 1.0) < 0.02);
    CHECK(m.min < -3.0);
    CHECK(m.max > 3.0);

    m = moments_of(decode(d, make_input(spec(d, distribution::uniform), n, 11)));
    CHECK(std::abs(m.mean - 0.5) < 0.01);
    CHECK(std::abs(m.sd - std::sqrt(1.0 / 12)) < 0.01);
    CHECK(m.min >= 0.0);
    CHECK(m.max < 1.0);

    m = moments_of(decode(d, make_input(spec(d, distribution::signed_uniform), n, 11)));
    CHECK(std::abs(m.mean) < 0.01);
    CHECK(std::abs(m.sd - std::sqrt(1.0 / 3)) < 0.01);
    CHECK(m.min >= -1.0);
    CHECK(m.max < 1.0);

    CHECK(moments_of(decode(d, make_input(spec(d), 100, 1, distribution::zeros))).max == 0.0);
    const auto ones = moments_of(decode(d, make_input(spec(d), 100, 1, distribution::ones)));
    CHECK((ones.min == 1.0 && ones.max == 1.0));
  }
}

TEST_CASE("the large distribution has mixed signs and magnitudes 1e3 to 1e4, finite in f16") {
  for (auto d : {dtype::f16, dtype::bf16, dtype::f32}) {
    INFO(to_string(d));
    const auto v = decode(d, make_input(spec(d, distribution::large), 100000, 5));
    std::size_t negative = 0;
    for (double x : v) {
      REQUIRE(std::isfinite(x));
      REQUIRE(std::abs(x) >= 1000.0);
      REQUIRE(std::abs(x) <= 10000.0);
      REQUIRE(std::abs(x) <= 6e4);
      negative += x < 0;
    }
    CHECK(negative > 45000);
    CHECK(negative < 55000);
  }
}

TEST_CASE("integer inputs are small integers within their type") {
  const auto i32 = decode(dtype::i32, make_input(spec(dtype::i32, distribution::signed_uniform), 10000, 2));
  auto m = moments_of(i32);
  CHECK(m.min >= -64);
  CHECK(m.max < 64);
  CHECK(m.min < -50);

  m = moments_of(decode(dtype::u8, make_input(spec(dtype::u8, distribution::normal), 10000, 2)));
  CHECK(m.min >= 0);
  CHECK(m.max > 10);

  m = moments_of(decode(dtype::i8, make_input(spec(dtype::i8, distribution::large), 10000, 2)));
  CHECK(m.min >= -128);
  CHECK(m.max <= 127);
  CHECK(m.min < -60);
  CHECK(m.max > 60);

  m = moments_of(decode(dtype::i64, make_input(spec(dtype::i64, distribution::large), 10000, 2)));
  CHECK(m.min <= -1000);
  CHECK(m.max >= 1000);
  CHECK(m.max < 10000);
}

TEST_CASE("element_count multiplies the shape's size expressions") {
  tensor_spec a{.name = "a", .shape = {"M", "cdiv(K, 2)"}};
  auto n = element_count(a, {{"M", 3}, {"K", 7}});
  REQUIRE(n);
  CHECK(*n == 12);
  auto scalar = element_count(tensor_spec{.name = "s"}, {});
  REQUIRE(scalar);
  CHECK(*scalar == 1);
}

TEST_CASE("element_count names the buffer and the unknown symbol") {
  tensor_spec a{.name = "a", .shape = {"M", "K"}};
  auto n = element_count(a, {{"M", 3}});
  REQUIRE_FALSE(n);
  CHECK_THAT(n.error().message, Catch::Contains("buffer 'a'") && Catch::Contains("unknown name 'K'") &&
                                    Catch::Contains("known: M"));
}

TEST_CASE("element_count rejects syntax errors, negative sizes and overflow") {
  auto bad = element_count(tensor_spec{.name = "a", .shape = {"N +"}}, {{"N", 1}});
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("dimension 0"));
  auto negative = element_count(tensor_spec{.name = "a", .shape = {"N - 10"}}, {{"N", 1}});
  REQUIRE_FALSE(negative);
  CHECK_THAT(negative.error().message, Catch::Contains("negative"));
  auto huge = element_count(tensor_spec{.name = "a", .shape = {"N", "N", "N"}}, {{"N", 1 << 30}});
  REQUIRE_FALSE(huge);
  CHECK_THAT(huge.error().message, Catch::Contains("overflows"));
}

TEST_CASE("poison is a NaN for floats and 0xA5 bytes for integers") {
  CHECK(std::isnan(half_to_float(as<std::uint16_t>(poison_pattern(dtype::f16)).front())));
  CHECK(std::isnan(bf16_to_float(as<std::uint16_t>(poison_pattern(dtype::bf16)).front())));
  CHECK(std::isnan(as<float>(poison_pattern(dtype::f32)).front()));
  CHECK(std::isnan(as<double>(poison_pattern(dtype::f64)).front()));
  CHECK(poison_pattern(dtype::i32) == std::vector<std::byte>(4, std::byte{0xA5}));
  CHECK(poison_pattern(dtype::u8) == std::vector<std::byte>(1, std::byte{0xA5}));

  std::vector<std::byte> buf(64);
  fill_poison(buf, dtype::f32);
  CHECK(is_poison(buf, dtype::f32));
  for (float f : as<float>(buf)) CHECK(std::isnan(f));
  buf[9] = std::byte{0};
  CHECK_FALSE(is_poison(buf, dtype::f32));
}

TEST_CASE("a canary detects a single flipped byte anywhere in the guard") {
  std::vector<std::byte> guard(canary_bytes);
  fill_canary(guard, 42);
  CHECK(check_canary(guard, 42));
  CHECK_FALSE(check_canary(guard, 43));
  for (std::size_t i : {std::size_t{0}, std::size_t{100}, canary_bytes - 1}) {
    auto damaged = guard;
    damaged[i] ^= std::byte{0x01};
    CHECK_FALSE(check_canary(damaged, 42));
    CHECK(first_canary_damage(damaged, 42) == i);
  }
}

TEST_CASE("a canary is not a constant fill, so zeros written out of bounds are caught") {
  std::vector<std::byte> guard(canary_bytes);
  fill_canary(guard, 7);
  CHECK_FALSE(check_canary(std::vector<std::byte>(canary_bytes), 7));
  std::size_t distinct = 0;
  for (std::size_t i = 1; i < guard.size(); ++i) distinct += guard[i] != guard[i - 1];
  CHECK(distinct > 200);
}

TEST_CASE("the checksum changes when any single byte changes") {
  const auto data = make_input(spec(dtype::f32), 1001, 9);  // 4004 bytes: a partial final word
  const auto sum = checksum(data);
  CHECK(checksum(data) == sum);
  for (std::size_t i : {std::size_t{0}, std::size_t{7}, std::size_t{2048}, data.size() - 1}) {
    auto mutated = data;
    mutated[i] ^= std::byte{0x80};
    CHECK(checksum(mutated) != sum);
  }
  auto shorter = data;
  shorter.pop_back();
  CHECK(checksum(shorter) != sum);
  CHECK(checksum(std::vector<std::byte>(3)) != checksum(std::vector<std::byte>(4)));
}

TEST_CASE("fill_poison repeats the element pattern over any length, a partial element included") {
  for (dtype d : {dtype::f16, dtype::bf16, dtype::f32, dtype::f64, dtype::i8, dtype::i32, dtype::i64}) {
    const auto pat = poison_pattern(d);
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{8}, std::size_t{1001},
                          std::size_t{65536 + 5}}) {
      std::vector<std::byte> buf(n, std::byte{0});
      fill_poison(buf, d);
      bool same = true;
      for (std::size_t i = 0; i < n; ++i) same = same && buf[i] == pat[i % pat.size()];
      CHECK(same);
      CHECK(is_poison(buf, d));
      if (n > 0) {
        buf[n - 1] ^= std::byte{1};  // the last byte, in the partial element if there is one
        CHECK_FALSE(is_poison(buf, d));
        buf[n - 1] ^= std::byte{1};
        buf[n / 2] ^= std::byte{0x10};
        CHECK_FALSE(is_poison(buf, d));
      }
    }
  }
}
