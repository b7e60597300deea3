// expected's monadic operations: what each does with a value and with an
// error, with lvalues, const lvalues, rvalues (move-only values) and void.
#include <specgen/expected.hpp>

#include <catch2/catch.hpp>

#include <memory>
#include <string>

using specgen::error;
using specgen::expected;
using specgen::unexpected;

namespace {

expected<int> parse(const std::string& s) {
  if (s.empty() || s.find_first_not_of("-0123456789") != std::string::npos)
    return unexpected(error{"not a number: '" + s + "'"});
  return std::stoi(s);
}

expected<int> positive(int v) {
  if (v <= 0) return unexpected(error{"not positive: " + std::to_string(v)});
  return v;
}

struct code_error {
  int code = 0;
};

}  // namespace

TEST_CASE("and_then chains fallible steps and stops at the first error") {
  CHECK(parse("42").and_then(positive).value() == 42);
  auto negative = parse("-3").and_then(positive);
  REQUIRE_FALSE(negative);
  CHECK(negative.error().message == "not positive: -3");
  int calls = 0;
  auto bad = parse("x").and_then([&](int v) {
    ++calls;
    return positive(v);
  });
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "not a number: 'x'");
  CHECK(calls == 0);
  // From a const lvalue, the value is passed as const.
  const expected<int> c = 5;
  CHECK(c.and_then([](const int& v) { return positive(v - 10); }).error().message == "not positive: -5");
}

TEST_CASE("transform maps a value, keeps an error, and may produce void") {
  CHECK(parse("21").transform([](int v) { return 2 * v; }).value() == 42);
  auto s = parse("7").transform([](int v) { return std::to_string(v) + "x"; });
  static_assert(std::is_same_v<decltype(s), expected<std::string>>);
  CHECK(*s == "7x");
  CHECK(parse("?").transform([](int v) { return v + 1; }).error().message == "not a number: '?'");
  int seen = 0;
  expected<void> done = parse("9").transform([&](int v) { seen = v; });
  CHECK(done.has_value());
  CHECK(seen == 9);
}

TEST_CASE("or_else recovers from an error; transform_error changes its type") {
  auto recovered = parse("oops").or_else([](const error&) -> expected<int> { return 0; });
  CHECK(recovered.value() == 0);
  auto kept = parse("3").or_else([](const error&) -> expected<int> { return 0; });
  CHECK(kept.value() == 3);
  auto coded = parse("oops").transform_error([](const error& e) { return code_error{static_cast<int>(e.message.size())}; });
  static_assert(std::is_same_v<decltype(coded), expected<int, code_error>>);
  REQUIRE_FALSE(coded);
  CHECK(coded.error().code == static_cast<int>(std::string("not a number: 'oops'").size()));
  CHECK(parse("4").transform_error([](const error&) { return code_error{1}; }).value() == 4);
}

TEST_CASE("rvalue chains move values that cannot be copied") {
  auto make = [](bool ok) -> expected<std::unique_ptr<int>> {
    if (!ok) return unexpected(error{"no pointer"});
    return std::make_unique<int>(6);
  };
  auto seven = make(true).transform([](std::unique_ptr<int> p) { return *p + 1; });
  CHECK(seven.value() == 7);
  auto owned = make(true).and_then([](std::unique_ptr<int> p) -> expected<std::unique_ptr<int>> { return p; });
  REQUIRE(owned);
  CHECK(**owned == 6);
  CHECK(make(false).transform([](std::unique_ptr<int> p) { return *p; }).error().message == "no pointer");
  CHECK(*make(false).value_or(std::make_unique<int>(1)) == 1);
}

TEST_CASE("expected<void> chains like the others") {
  expected<void> ok;
  expected<void> failed = unexpected(error{"failed"});
  CHECK(ok.and_then([] { return parse("1"); }).value() == 1);
  CHECK(failed.and_then([] { return parse("1"); }).error().message == "failed");
  CHECK(ok.transform([] { return 3; }).value() == 3);
  CHECK(failed.transform([] { return 3; }).error().message == "failed");
  int recovered = 0;
  CHECK(failed.or_else([&](const error&) -> expected<void> {
                 ++recovered;
                 return {};
               }).has_value());
  CHECK(recovered == 1);
  CHECK(ok.or_else([](const error& e) -> expected<void> { return unexpected(e); }).has_value());
  CHECK(failed.transform_error([](const error&) { return code_error{2}; }).error().code == 2);
}
