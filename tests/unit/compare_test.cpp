#include <specgen/compare.hpp>
#include <specgen/inputs.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace specgen;

namespace {

template <class T>
std::vector<std::byte> bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<std::byte> halves(const std::vector<float>& v) {
  std::vector<std::uint16_t> h;
  for (float f : v) h.push_back(float_to_half(f));
  return bytes(h);
}

std::vector<std::byte> bf16s(const std::vector<float>& v) {
  std::vector<std::uint16_t> h;
  for (float f : v) h.push_back(float_to_bf16(f));
  return bytes(h);
}

tensor_spec out_spec(dtype d, tolerance tol = {.abs = 1e-5, .rel = 1e-5}) {
  return {.name = "y", .type = d, .shape = {"N"}, .tol = tol};
}

const std::vector<float> ramp{1, 2, 3, 4, 5, 6, 7, 8};
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();
constexpr float pinf = std::numeric_limits<float>::infinity();

}  // namespace

TEST_CASE("identical outputs pass with zero error") {
  auto c = compare_outputs(out_spec(dtype::f32), bytes(ramp), bytes(ramp), "N=8");
  CHECK(c.pass);
  CHECK(c.degenerate.empty());
  CHECK(c.stats == mismatch_stats{.output = "y", .shape = "N=8", .max_abs = 0, .max_rel = 0, .count = 0,
                                  .total = 8, .first_indices = {}});
}

TEST_CASE("differences within abs + rel * |want| pass and are still measured") {
  auto got = ramp;
  got[3] += 4 * 1e-3f;  // |want| = 4: allowed 1e-3 + 1e-3 * 4 = 5e-3
  auto c = compare_outputs(out_spec(dtype::f32, {.abs = 1e-3, .rel = 1e-3}), bytes(got), bytes(ramp), "N=8");
  CHECK(c.pass);
  CHECK(c.stats.count == 0);
  CHECK(c.stats.max_abs == Approx(4e-3).epsilon(1e-3));
  CHECK(c.stats.max_rel == Approx(1e-3).epsilon(1e-3));
}

TEST_CASE("one element off gives its count, errors and first index") {
  auto got = ramp;
  got[5] = 6.5f;
  auto c = compare_outputs(out_spec(dtype::f32), bytes(got), bytes(ramp), "N=8");
  CHECK_FALSE(c.pass);
  CHECK(c.degenerate.empty());
  CHECK(c.stats.count == 1);
  CHECK(c.stats.total == 8);
  CHECK(c.stats.max_abs == 0.5);
  CHECK(c.stats.max_rel == Approx(0.5 / 6));
  CHECK(c.stats.first_indices == std::vector<std::uint64_t>{5});
}

TEST_CASE("first indices are the earliest offenders, at most max_indices of them") {
  std::vector<float> want(100, 1.0f), got(100, 1.0f);
  want[0] = 0.5f;  // not constant, so only the element-wise rule is at work
  got[0] = 0.5f;
  for (int i = 10; i < 100; i += 10) got[static_cast<std::size_t>(i)] = 2.0f;
  auto c = compare_outputs(out_spec(dtype::f32), bytes(got), bytes(want), "N=100", 3);
  CHECK(c.stats.count == 9);
  CHECK(c.stats.first_indices == std::vector<std::uint64_t>{10, 20, 30});
}

TEST_CASE("the relative error skips elements where the reference is zero") {
  std::vector<float> want{0, 1, 2, 3}, got{1e-6f, 1, 2, 3};
  auto c = compare_outputs(out_spec(dtype::f32), bytes(got), bytes(want), "N=4");
  CHECK(c.pass);
  CHECK(c.stats.max_rel == 0);
  CHECK(c.stats.max_abs == Approx(1e-6));
}

TEST_CASE("NaN matches NaN but not a number, and infinities match only themselves") {
  std::vector<float> want{1, qnan, pinf, -pinf, 5, 6};
  auto same = compare_outputs(out_spec(dtype::f32), bytes(want), bytes(want), "N=6");
  CHECK(same.pass);

  auto got = want;
  got[0] = qnan;   // NaN where the reference is a number
  got[1] = 2;     // a number where the reference is NaN
  got[2] = -pinf;  // wrong infinity
  got[4] = pinf;   // inf where the reference is finite
  auto c = compare_outputs(out_spec(dtype::f32), bytes(got), bytes(want), "N=6");
  CHECK_FALSE(c.pass);
  CHECK(c.stats.count == 4);
  CHECK(c.stats.first_indices == std::vector<std::uint64_t>{0, 1, 2, 4});
  CHECK(c.stats.max_abs == std::numeric_limits<double>::infinity());
}

TEST_CASE("an all-zero output is rejected even within a loose tolerance") {
  std::vector<float> want{1e-4f, -2e-4f, 3e-4f, 0}, got(4, 0.0f);
  auto c = compare_outputs(out_spec(dtype::f32, {.abs = 1e-3, .rel = 0}), bytes(got), bytes(want), "N=4");
  CHECK(c.stats.count == 0);
  CHECK_FALSE(c.pass);
  CHECK_THAT(c.degenerate, Catch::Contains("every element is 0"));
}

TEST_CASE("a constant output is rejected when the reference varies") {
  std::vector<float> want{0.5f, 0.5001f, 0.4999f, 0.5f}, got(4, 0.5f);
  auto c = compare_outputs(out_spec(dtype::f32, {.abs = 1e-3, .rel = 0}), bytes(got), bytes(want), "N=4");
  CHECK(c.stats.count == 0);
  CHECK_FALSE(c.pass);
  CHECK_THAT(c.degenerate, Catch::Contains("same value (0.5)"));
}

TEST_CASE("zero and constant outputs pass when the reference is zero or constant too") {
  std::vector<float> zeros(4, 0.0f), sevens(4, 7.0f);
  CHECK(compare_outputs(out_spec(dtype::f32), bytes(zeros), bytes(zeros), "N=4").pass);
  CHECK(compare_outputs(out_spec(dtype::f32), bytes(sevens), bytes(sevens), "N=4").pass);
}

TEST_CASE("NaN or inf in the output is degenerate when the reference has none") {
  auto got = ramp;
  got[2] = qnan;
  auto c = compare_outputs(out_spec(dtype::f32), bytes(got), bytes(ramp), "N=8");
  CHECK_FALSE(c.pass);
  CHECK_THAT(c.degenerate, Catch::Contains("1 of 8 elements are NaN or inf"));
}

TEST_CASE("an output still holding the poison is reported as never written") {
  std::vector<std::byte> got(ramp.size() * sizeof(float));
  fill_poison(got, dtype::f32);
  auto c = compare_outputs(out_spec(dtype::f32), got, bytes(ramp), "N=8");
  CHECK_FALSE(c.pass);
  CHECK(c.stats.count == 8);
  CHECK_THAT(c.degenerate, Catch::Contains("never written"));

  std::vector<std::byte> ints(32);
  fill_poison(ints, dtype::i32);
  const std::vector<std::int32_t> want{1, 2, 3, 4, 5, 6, 7, 8};
  auto ci = compare_outputs(out_spec(dtype::i32), ints, bytes(want), "N=8");
  CHECK_THAT(ci.degenerate, Catch::Contains("never written"));
}

TEST_CASE("integers are compared exactly whatever the tolerance") {
  std::vector<std::int32_t> want{100000, 200000, 3, 4}, got = want;
  got[1] += 1;  // within rel 1e-5 * 200000 = 2 if tolerances applied
  auto c = compare_outputs(out_spec(dtype::i32), bytes(got), bytes(want), "N=4");
  CHECK_FALSE(c.pass);
  CHECK(c.stats.count == 1);
  CHECK(c.stats.first_indices == std::vector<std::uint64_t>{1});
  CHECK(c.stats.max_abs == 1);

  std::vector<std::int64_t> big{(std::int64_t{1} << 60) + 1, 2}, big_off{std::int64_t{1} << 60, 2};
  CHECK_FALSE(compare_outputs(out_spec(dtype::i64), bytes(big_off), bytes(big), "N=2").pass);
  CHECK(compare_outputs(out_spec(dtype::u8), bytes(std::vector<std::uint8_t>{1, 255}),
                        bytes(std::vector<std::uint8_t>{1, 255}), "N=2")
            .pass);
}

TEST_CASE("f16 and bf16 outputs are compared as their float values") {
  const std::vector<float> want{1.0f, 2.0f, -3.0f, 0.25f};
  auto got = want;
  got[1] = 2.0078125f;  // four halves above 2: off by 2^-7, beyond 1e-3 + 1e-3 * 2
  auto h = compare_outputs(out_spec(dtype::f16, default_tolerance(dtype::f16)), halves(got), halves(want), "N=4");
  CHECK_FALSE(h.pass);
  CHECK(h.stats.max_abs == 0.0078125);
  CHECK(h.stats.first_indices == std::vector<std::uint64_t>{1});

  auto loose = compare_outputs(out_spec(dtype::f16, {.abs = 1e-2, .rel = 0}), halves(got), halves(want), "N=4");
  CHECK(loose.pass);

  got[1] = 2.015625f;  // the next bf16 above 2: off by 2^-6, within bf16's default tolerance
  auto b = compare_outputs(out_spec(dtype::bf16, default_tolerance(dtype::bf16)), bf16s(got), bf16s(want), "N=4");
  CHECK(b.pass);
  CHECK(b.stats.max_abs == 0.015625);
}

TEST_CASE("buffers of different sizes are a programming error") {
  CHECK_THROWS_AS(compare_outputs(out_spec(dtype::f32), bytes(ramp), bytes(std::vector<float>{1}), "N=8"),
                  std::invalid_argument);
  CHECK_THROWS_AS(compare_outputs(out_spec(dtype::f32), std::vector<std::byte>(6), std::vector<std::byte>(6), ""),
                  std::invalid_argument);
}

TEST_CASE("a wrong-result verdict names the output, shape, count and largest errors") {
  auto got = ramp;
  got[5] = 6.5f;
  auto c = compare_outputs(out_spec(dtype::f32), bytes(got), bytes(ramp), "N=8");
  const verdict v = make_wrong_result_verdict(c);
  CHECK(v.kind == verdict_kind::wrong_result);
  CHECK(v.mismatch == c.stats);
  CHECK(v.summary ==
        "output 'y' at N=8: 1 of 8 elements out of tolerance, max abs error 0.5, max rel error 0.0833, "
        "first at index 5");
}

TEST_CASE("a wrong-result verdict for a degenerate output gives the reason") {
  std::vector<float> got(8, 0.0f);
  const verdict v = make_wrong_result_verdict(compare_outputs(out_spec(dtype::f32), bytes(got), bytes(ramp), "N=8"));
  CHECK(v.summary == "output 'y' at N=8 is degenerate: every element is 0 while the reference is not all zero");
  REQUIRE(v.mismatch);
  CHECK(v.mismatch->count == 8);
}

TEST_CASE("a passing comparison cannot be turned into a failing verdict") {
  auto c = compare_outputs(out_spec(dtype::f32), bytes(ramp), bytes(ramp), "N=8");
  CHECK_THROWS_AS(make_wrong_result_verdict(c), std::logic_error);
  CHECK_THROWS_AS(make_unstable_verdict(c), std::logic_error);
}

TEST_CASE("repeated runs agree within the output tolerance, as float atomics need") {
  std::vector<float> a{1000.0f, 2.0f, 3.0f}, b = a;
  b[0] = 1000.0001f;  // a reordered sum: one ulp apart
  CHECK(outputs_agree(out_spec(dtype::f32), bytes(a), bytes(b), "N=3").pass);

  b[0] = 999.0f;  // a lost term
  auto c = outputs_agree(out_spec(dtype::f32), bytes(a), bytes(b), "N=3");
  CHECK_FALSE(c.pass);
  CHECK(c.stats.first_indices == std::vector<std::uint64_t>{0});
  const verdict v = make_unstable_verdict(c);
  CHECK(v.kind == verdict_kind::unstable);
  CHECK_THAT(v.summary, Catch::StartsWith("repeated runs disagree"));
}

TEST_CASE("repeated integer runs must be identical, and constant runs are not degenerate") {
  std::vector<std::int32_t> a{5, 5, 5}, b{5, 6, 5};
  CHECK(outputs_agree(out_spec(dtype::i32), bytes(a), bytes(a), "N=3").pass);
  CHECK_FALSE(outputs_agree(out_spec(dtype::i32), bytes(a), bytes(b), "N=3").pass);
}

TEST_CASE("the parallel comparison gives exactly the sequential result") {
  const std::size_t n = (std::size_t{1} << 20) + 3;  // several slices and a ragged end
  std::vector<float> want(n), got(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = got[i] = static_cast<float>(i % 977) * 0.5f - 100.0f;
  const auto spec = out_spec(dtype::f32);
  auto same = [&](const std::vector<float>& g, const std::vector<float>& w) {
    const auto seq = compare_outputs(spec, bytes(g), bytes(w), "N");
    const auto par = compare_outputs_parallel(spec, bytes(g), bytes(w), "N", 8);
    CHECK(par.pass == seq.pass);
    CHECK(par.stats == seq.stats);
    CHECK(par.degenerate == seq.degenerate);
    return par;
  };
  CHECK(same(got, want).pass);
  // Mismatches in several slices: counts, maxima and the first indices in order.
  for (std::size_t i : {std::size_t{3}, std::size_t{400000}, std::size_t{700001}, n - 1}) got[i] += 1.0f;
  auto c = same(got, want);
  CHECK(c.stats.count == 4);
  CHECK(c.stats.first_indices == std::vector<std::uint64_t>{3, 400000, 700001, n - 1});
  // Degenerate: constant across every slice, zero, and never written.
  std::fill(got.begin(), got.end(), 1.0f);
  CHECK_THAT(same(got, want).degenerate, Catch::Contains("same value"));
  std::fill(got.begin(), got.end(), 0.0f);
  CHECK_THAT(same(got, want).degenerate, Catch::Contains("every element is 0"));
  std::vector<std::byte> poisoned(n * 4);
  fill_poison(poisoned, dtype::f32);
  const auto seq = compare_outputs(spec, poisoned, bytes(want), "N");
  const auto par = compare_outputs_parallel(spec, poisoned, bytes(want), "N", 8);
  CHECK(par.degenerate == seq.degenerate);
  CHECK_THAT(par.degenerate, Catch::Contains("never written"));
}

namespace {

/// Dot products of K large random-signed terms: the reference in double, an
/// fp32 evaluation (sequential, like one thread of a tiled GEMM), one with
/// the operands rounded to half precision, and the magnitude of the terms.
struct dots {
  std::vector<float> exact, fp32, half, terms;
};

dots make_dots(int outputs, int k) {
  dots d;
  const tensor_spec in{.name = "a", .type = dtype::f32, .shape = {"N"}};
  const auto a = make_input(in, static_cast<std::int64_t>(outputs) * k, 1, distribution::large);
  const auto b = make_input(in, static_cast<std::int64_t>(outputs) * k, 2, distribution::large);
  for (int o = 0; o < outputs; ++o) {
    double exact = 0, mag = 0;
    float f = 0, h = 0;
    for (int i = 0; i < k; ++i) {
      const std::size_t at = static_cast<std::size_t>(o) * static_cast<std::size_t>(k) + static_cast<std::size_t>(i);
      const float x = static_cast<float>(detail::load_double(dtype::f32, a, at));
      const float y = static_cast<float>(detail::load_double(dtype::f32, b, at));
      exact += static_cast<double>(x) * y;
      mag += std::abs(static_cast<double>(x) * y);
      f = std::fma(x, y, f);
      h = std::fma(half_to_float(float_to_half(x)), half_to_float(float_to_half(y)), h);
    }
    d.exact.push_back(static_cast<float>(exact));
    d.fp32.push_back(f);
    d.half.push_back(h);
    d.terms.push_back(static_cast<float>(mag));
  }
  return d;
}

}  // namespace

TEST_CASE("the terms allowance accepts fp32 rounding where outputs cancel, and still rejects half precision") {
  const dots d = make_dots(2000, 1024);
  const auto spec = out_spec(dtype::f32);  // abs 1e-5, rel 1e-5, terms 16 (the f32 default)
  // Without the terms magnitude the fixed pair rejects the correct fp32 sums...
  const auto plain = compare_outputs(spec, bytes(d.fp32), bytes(d.exact), "K=1024");
  CHECK_FALSE(plain.pass);
  CHECK(plain.stats.count > 10);  // the outputs that cancel to near zero
  // ...with it, every one passes,
  const auto with_terms = compare_outputs(spec, bytes(d.fp32), bytes(d.exact), "K=1024", 8, bytes(d.terms));
  CHECK(with_terms.pass);
  // while half-precision operands stay far outside it,
  const auto half = compare_outputs(spec, bytes(d.half), bytes(d.exact), "K=1024", 8, bytes(d.terms));
  CHECK_FALSE(half.pass);
  CHECK(half.stats.count > 1500);
  CHECK(make_wrong_result_verdict(half).kind == verdict_kind::wrong_result);
  // and terms = 0 is the fixed pair alone.
  auto fixed = spec;
  fixed.tol.terms = 0;
  CHECK_FALSE(compare_outputs(fixed, bytes(d.fp32), bytes(d.exact), "K=1024", 8, bytes(d.terms)).pass);
  // The parallel comparison and the agreement check take the allowance too.
  const auto par = compare_outputs_parallel(spec, bytes(d.fp32), bytes(d.exact), "K=1024", 4, 8, bytes(d.terms));
  CHECK(par == with_terms);
  const auto par_half = compare_outputs_parallel(spec, bytes(d.half), bytes(d.exact), "K=1024", 4, 8, bytes(d.terms));
  CHECK(par_half == half);
  CHECK(outputs_agree(spec, bytes(d.exact), bytes(d.fp32), "K=1024", 8, bytes(d.terms)).pass);
  CHECK(unit_roundoff(dtype::f32) == 0x1p-24);
  CHECK(unit_roundoff(dtype::f64) == 0x1p-53);
  CHECK_THROWS_AS(compare_outputs(spec, bytes(d.fp32), bytes(d.exact), "K", 8, bytes(std::vector<float>{1})),
                  std::invalid_argument);
}

TEST_CASE("NaN or inf a kernel computed is nonfinite_output; poison it never overwrote is wrong_result") {
  const auto spec = out_spec(dtype::f32);
  auto nan_out = ramp;
  nan_out[3] = pinf;
  auto c = compare_outputs(spec, bytes(nan_out), bytes(ramp), "N=8");
  CHECK(c.nonfinite == 1);
  CHECK(c.unwritten == 0);
  const verdict v = make_wrong_result_verdict(c);
  CHECK(v.kind == verdict_kind::nonfinite_output);
  CHECK(v.summary.starts_with("1 element is NaN or inf where the reference is finite: "));
  REQUIRE(v.mismatch);
  CHECK(v.mismatch->worst_index == 3);

  std::vector<std::byte> unwritten = bytes(ramp);
  fill_poison(std::span(unwritten).subspan(16), dtype::f32);  // elements 4..7 never written
  auto u = compare_outputs(spec, unwritten, bytes(ramp), "N=8");
  CHECK(u.unwritten == 4);
  CHECK(u.nonfinite == 0);
  CHECK(make_wrong_result_verdict(u).kind == verdict_kind::wrong_result);
  // NaN where the reference is NaN too is no mismatch at all.
  auto both = ramp;
  both[0] = qnan;
  CHECK(compare_outputs(spec, bytes(both), bytes(both), "N=8").nonfinite == 0);
}
