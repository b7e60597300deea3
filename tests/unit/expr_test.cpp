#include <specgen/expr.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>

using namespace specgen;

namespace {

std::int64_t eval_text(const std::string& text, const size_binding& b = {}) {
  auto e = parse_size_expr(text);
  REQUIRE(e);
  auto v = e->eval(b);
  REQUIRE(v);
  return *v;
}

error parse_error(const std::string& text) {
  auto e = parse_size_expr(text);
  REQUIRE_FALSE(e);
  return e.error();
}

error eval_error(const std::string& text, const size_binding& b = {}) {
  auto e = parse_size_expr(text);
  REQUIRE(e);
  auto v = e->eval(b);
  REQUIRE_FALSE(v);
  return v.error();
}

}  // namespace

TEST_CASE("expressions follow the usual precedence and left associativity") {
  CHECK(eval_text("2 + 3 * 4") == 14);
  CHECK(eval_text("(2 + 3) * 4") == 20);
  CHECK(eval_text("10 - 4 - 3") == 3);
  CHECK(eval_text("100 / 10 / 5") == 2);
  CHECK(eval_text("-3 * -(2 + 1)") == 9);
  CHECK(eval_text("N*M + 1", {{"N", 6}, {"M", 7}}) == 43);
}

TEST_CASE("division truncates toward zero and cdiv rounds up") {
  CHECK(eval_text("7 / 2") == 3);
  CHECK(eval_text("-7 / 2") == -3);
  CHECK(eval_text("cdiv(7, 2)") == 4);
  CHECK(eval_text("cdiv(8, 2)") == 4);
  CHECK(eval_text("cdiv(-7, 2)") == -3);
  CHECK(eval_text("cdiv(N, 256)", {{"N", 1}}) == 1);
  CHECK(eval_text("cdiv(N, 256)", {{"N", 257}}) == 2);
}

TEST_CASE("min and max take two arguments") {
  CHECK(eval_text("min(N, 1024)", {{"N", 77}}) == 77);
  CHECK(eval_text("max(N, 1024)", {{"N", 77}}) == 1024);
  CHECK(eval_text("max(min(3, 5), -1)") == 3);
}

TEST_CASE("canonical printing keeps only needed parentheses and parses back to the same text") {
  const std::pair<const char*, const char*> cases[] = {
      {"cdiv(N,256)*4", "cdiv(N, 256) * 4"}, {"a-(b-c)", "a - (b - c)"}, {"(a-b)-c", "a - b - c"},
      {"a/(b*c)", "a / (b * c)"},            {"(a*b)/c", "a * b / c"},   {"-(a+b)", "-(a + b)"},
      {"--x", "--x"},                        {"a - -5", "a - -5"},       {"((N))", "N"},
      {"min( N ,max(M,2) )", "min(N, max(M, 2))"}};
  for (const auto& [in, canonical] : cases) {
    INFO(in);
    auto e = parse_size_expr(in);
    REQUIRE(e);
    CHECK(e->to_string() == canonical);
    auto again = parse_size_expr(e->to_string());
    REQUIRE(again);
    CHECK(*again == *e);
    CHECK(again->to_string() == canonical);
  }
}

TEST_CASE("equality is structural, not textual") {
  CHECK(*parse_size_expr("N*2") == *parse_size_expr(" N * 2 "));
  CHECK_FALSE(*parse_size_expr("N*2") == *parse_size_expr("2*N"));
  CHECK(size_expr{} == *parse_size_expr("0"));
  CHECK(size_expr::literal(-5) == *parse_size_expr("-5"));
}

TEST_CASE("names lists each symbol once, sorted") {
  auto e = parse_size_expr("M*N + cdiv(N, K) - M");
  REQUIRE(e);
  CHECK(e->names() == std::vector<std::string>{"K", "M", "N"});
  CHECK(parse_size_expr("4*4")->names().empty());
}

TEST_CASE("a single name or literal is recognised as such") {
  CHECK(parse_size_expr("x")->as_name() == std::optional<std::string_view>("x"));
  CHECK_FALSE(parse_size_expr("x + 0")->as_name());
  CHECK(parse_size_expr("42")->as_literal() == std::optional<std::int64_t>(42));
  CHECK_FALSE(parse_size_expr("N")->as_literal());
}

TEST_CASE("a syntax error gives the position and draws a caret under it") {
  const auto e = parse_error("N + * 2");
  CHECK(e.code == errc::syntax);
  CHECK(e.column == 5);
  CHECK(e.what() == "column 5: expected a number, a name or '(', found '*'\n  N + * 2\n      ^");
}

TEST_CASE("syntax errors say what was expected") {
  CHECK(parse_error("").message == "expected an expression, found nothing");
  CHECK(parse_error("(N + 1").message == "expected ')' to close the '(' at column 1, found the end");
  CHECK(parse_error("N M").message == "unexpected 'M' after a complete expression");
  CHECK(parse_error("cdiv(N)").message == "cdiv(a, b) takes 2 arguments, got 1");
  CHECK(parse_error("min(1, 2, 3)").message == "min(a, b) takes 2 arguments, got more");
  CHECK(parse_error("ceil(N, 2)").message == "unknown function 'ceil' (known: cdiv, max, min)");
  CHECK(parse_error("N % 2").message == "unexpected '%' after a complete expression");
  CHECK(parse_error("2N").message == "unexpected 'N' in a number");
}

TEST_CASE("an unknown name lists the known names") {
  const auto e = eval_error("N + K", {{"N", 1}, {"M", 2}});
  CHECK(e.code == errc::unknown_name);
  CHECK(e.column == 5);
  CHECK(e.message == "unknown name 'K' (known: M, N)");
}

TEST_CASE("a lookup function can supply the values") {
  auto e = parse_size_expr("N * 2 + Q");
  REQUIRE(e);
  auto lookup = [](std::string_view n) -> std::optional<std::int64_t> {
    if (n == "N") return 21;
    return std::nullopt;
  };
  auto v = e->eval(lookup);
  REQUIRE_FALSE(v);
  CHECK(v.error().message == "unknown name 'Q'");
  CHECK(*parse_size_expr("N * 2")->eval(lookup) == 42);
}

TEST_CASE("division by zero is an error at the operator") {
  const auto e = eval_error("N / (M - M)", {{"N", 1}, {"M", 3}});
  CHECK(e.code == errc::division_by_zero);
  CHECK(e.column == 3);
  CHECK(e.message == "division by zero: the divisor 'M - M' is 0");
  CHECK(eval_error("cdiv(N, 0)", {{"N", 1}}).code == errc::division_by_zero);
}

TEST_CASE("signed 64-bit overflow is detected, never wrapped") {
  CHECK(eval_error("N * N", {{"N", std::int64_t{1} << 32}}).code == errc::overflow);
  CHECK(eval_error("N + 1", {{"N", std::numeric_limits<std::int64_t>::max()}}).code == errc::overflow);
  CHECK(eval_error("-N - 2", {{"N", std::numeric_limits<std::int64_t>::max()}}).code == errc::overflow);
  CHECK(eval_error("-N", {{"N", std::numeric_limits<std::int64_t>::min()}}).code == errc::overflow);
  CHECK(eval_error("N / -1", {{"N", std::numeric_limits<std::int64_t>::min()}}).code == errc::overflow);
  CHECK(eval_text("9223372036854775807") == std::numeric_limits<std::int64_t>::max());
  const auto lit = parse_error("9223372036854775808");
  CHECK(lit.code == errc::overflow);
  CHECK(lit.message == "integer literal 9223372036854775808 does not fit in signed 64 bits");
}

TEST_CASE("absurdly nested input is rejected instead of exhausting the stack") {
  CHECK(parse_error(std::string(5000, '(') + "1" + std::string(5000, ')')).message.find("nested too deeply") !=
        std::string::npos);
  CHECK(parse_error(std::string(5000, '-') + "1").message.find("nested too deeply") != std::string::npos);
  std::string chain = "1";
  for (int i = 0; i < 5000; ++i) chain += "+1";
  CHECK(parse_error(chain).message.find("nested too deeply") != std::string::npos);
  std::string ok = "1";
  for (int i = 0; i < 150; ++i) ok += "+1";
  CHECK(eval_text(ok) == 151);
}

TEST_CASE("copies share the parsed tree") {
  auto e = parse_size_expr("cdiv(N, 128)");
  REQUIRE(e);
  const size_expr copy = *e;
  CHECK(copy == *e);
  CHECK(&copy.text() == &e->text());
  CHECK(copy.text() == "cdiv(N, 128)");
}
