// Input distributions a task can state: parameterised distributions, their
// text form, per-validation-shape overrides, the list of the evaluator's extra
// distributions a task allows, and the `terms` part of a tolerance.
#include <specgen/compare.hpp>
#include <specgen/inputs.hpp>
#include <specgen/task_io.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace specgen;
using nlohmann::json;

namespace {

std::vector<double> floats_of(const tensor_spec& t, std::int64_t n, std::uint64_t seed,
                              std::optional<distribution> d = {}) {
  const auto bytes = make_input(t, n, seed, d);
  std::vector<double> out;
  for (std::int64_t i = 0; i < n; ++i) out.push_back(detail::load_double(t.type, bytes, static_cast<std::size_t>(i)));
  return out;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double stddev(const std::vector<double>& v) {
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

json task_json() {
  return json::parse(R"json({
    "name": "norm",
    "description": "y = layernorm(x) over rows of M",
    "symbols": ["N", "M"],
    "benchmark_shape": {"N": 1024, "M": 64},
    "validation_shapes": [{"N": 1, "M": 1}, {"shape": {"N": 7, "M": 300}, "inits": {"x": "normal(1000, 1)"}}],
    "inputs": [{"name": "x", "dtype": "f32", "shape": ["N", "M"], "init": "uniform(-2, 2)"}],
    "outputs": [{"name": "y", "dtype": "f32", "shape": ["N", "M"], "tolerance": {"abs": 1e-4, "rel": 1e-4, "terms": 0}}],
    "distributions": ["normal", "signed_uniform"],
    "reference": {
      "source": "extern \"C\" __global__ void norm(const float* x, float* y, int n) {}",
      "plan": "launch norm grid(N) block(256) args(x, y, M)"
    }
  })json");
}

}  // namespace

TEST_CASE("distributions round-trip through their text") {
  for (const char* text : {"normal", "uniform", "signed_uniform", "large", "zeros", "ones", "normal(1000, 1)",
                           "uniform(-3, 0.5)", "randint(0, 10)", "const(0.25)", "arange", "arange(1, 0.5)"}) {
    auto d = parse_distribution(text);
    INFO(text);
    REQUIRE(d);
    CHECK(to_string(*d) == text);
    CHECK(distribution_error(text).empty());
  }
  CHECK(*parse_distribution(" normal( 5 ,2 ) ") == *parse_distribution("normal(5, 2)"));
  CHECK(*parse_distribution("large") == distribution::large);
  CHECK(*parse_distribution("arange(0, 1)") == *parse_distribution("arange"));
  CHECK(parse_distribution("normal")->is_replaceable());
  CHECK_FALSE(parse_distribution("normal(0, 1)")->is_replaceable());
  CHECK_FALSE(distribution::zeros.is_replaceable());
}

TEST_CASE("a malformed distribution says what is wrong") {
  CHECK(distribution_error("gauss(0, 1)") ==
        "unknown distribution 'gauss(0, 1)' (with parameters: normal(mean, std), uniform(lo, hi), randint(lo, hi), "
        "const(v), arange, arange(start, step))");
  CHECK(distribution_error("normal(0)") == "'normal(0)': normal takes 2 parameters, got 1");
  CHECK(distribution_error("const(1, 2)") == "'const(1, 2)': const takes 1 parameter, got 2");
  CHECK(distribution_error("normal(0, -1)") == "'normal(0, -1)': the standard deviation must not be negative");
  CHECK(distribution_error("uniform(1, 1)") == "'uniform(1, 1)': hi must be greater than lo");
  CHECK(distribution_error("randint(0.5, 3)") ==
        "'randint(0.5, 3)': randint's bounds must be integers of magnitude at most 2^53");
  CHECK(distribution_error("normal(0, 1") == "'normal(0, 1': expected ')' at the end");
  CHECK(distribution_error("normal(x, 1)") == "'normal(x, 1)': 'x' is not a finite number");
  CHECK(distribution_error("const(inf)") == "'const(inf)': 'inf' is not a finite number");
}

TEST_CASE("parameterised distributions generate what they say") {
  const tensor_spec f{.name = "x", .type = dtype::f32, .shape = {"N"}};
  const auto n = std::int64_t{20000};
  const auto normal = floats_of(f, n, 3, *parse_distribution("normal(1000, 2)"));
  CHECK(mean(normal) == Approx(1000).margin(0.1));
  CHECK(stddev(normal) == Approx(2).epsilon(0.05));
  const auto uni = floats_of(f, n, 3, *parse_distribution("uniform(-3, 5)"));
  CHECK(*std::min_element(uni.begin(), uni.end()) >= -3);
  CHECK(*std::max_element(uni.begin(), uni.end()) < 5);
  CHECK(mean(uni) == Approx(1).margin(0.1));
  const auto ints = floats_of(f, n, 3, *parse_distribution("randint(-2, 3)"));
  for (double v : ints) {
    CHECK(v == std::floor(v));
    CHECK((v >= -2 && v < 3));
  }
  CHECK(std::count(ints.begin(), ints.end(), -2.0) > 0);
  CHECK(std::count(ints.begin(), ints.end(), 2.0) > 0);
  const auto c = floats_of(f, 10, 3, *parse_distribution("const(0.5)"));
  CHECK(c == std::vector<double>(10, 0.5));
  const auto a = floats_of(f, 4, 3, *parse_distribution("arange(1, 0.5)"));
  CHECK(a == std::vector<double>{1, 1.5, 2, 2.5});

  const tensor_spec u8{.name = "k", .type = dtype::u8, .shape = {"N"}};
  const auto r = floats_of(u8, 300, 1, *parse_distribution("arange"));
  CHECK(r[7] == 7);
  CHECK(r[299] == 255);  // clamped to the type
  const auto small = floats_of(u8, 1000, 1, *parse_distribution("uniform(0.5, 3)"));
  for (double v : small) CHECK((v == 1 || v == 2));
  // The named distributions keep their type-dependent meaning (and bytes).
  const tensor_spec i32{.name = "k", .type = dtype::i32, .shape = {"N"}};
  const auto named = floats_of(i32, 1000, 1, distribution::uniform);
  CHECK(*std::max_element(named.begin(), named.end()) <= 63);
}

TEST_CASE("make_absolute clears the sign of floats and leaves integers") {
  const tensor_spec f{.name = "x", .type = dtype::f16, .shape = {"N"}};
  auto bytes = make_input(f, 64, 5, distribution::signed_uniform);
  auto before = bytes;
  make_absolute(bytes, dtype::f16);
  for (std::size_t i = 0; i < 64; ++i)
    CHECK(detail::load_double(dtype::f16, bytes, i) == std::abs(detail::load_double(dtype::f16, before, i)));
  const tensor_spec k{.name = "k", .type = dtype::i32, .shape = {"N"}};
  auto ints = make_input(k, 64, 5, distribution::signed_uniform);
  auto same = ints;
  make_absolute(ints, dtype::i32);
  CHECK(ints == same);
}

TEST_CASE("a task states per-shape inits, the distributions it allows and the terms allowance") {
  auto t = parse_task(task_json(), "t.json");
  REQUIRE(t);
  CHECK(to_string(t->inputs[0].init) == "uniform(-2, 2)");
  REQUIRE(t->validation_inits.size() == 2);
  CHECK(t->validation_inits[0].empty());
  CHECK(to_string(t->validation_inits[1].at("x")) == "normal(1000, 1)");
  CHECK(t->validation_shapes[1] == shape_binding{{"N", 7}, {"M", 300}});
  REQUIRE(t->distributions);
  CHECK(*t->distributions == std::vector<distribution>{distribution::normal, distribution::signed_uniform});
  CHECK(t->outputs[0].tol == tolerance{.abs = 1e-4, .rel = 1e-4, .terms = 0});
  // Round trip through the task-file format.
  auto again = parse_task(to_json(*t), "t.json");
  REQUIRE(again);
  CHECK(*again == *t);
  // Without the new fields nothing new is written (task hashes stay as they were).
  json plain = task_json();
  plain.erase("distributions");
  plain["validation_shapes"][1] = {{"N", 7}, {"M", 300}};
  plain["outputs"][0]["tolerance"].erase("terms");
  auto p = parse_task(plain, "t.json");
  REQUIRE(p);
  CHECK(p->outputs[0].tol.terms == default_tolerance(dtype::f32).terms);
  CHECK_FALSE(p->distributions);
  const json back = to_json(*p);
  CHECK_FALSE(back.contains("distributions"));
  CHECK_FALSE(back["outputs"][0]["tolerance"].contains("terms"));
  CHECK(back["validation_shapes"][1] == json{{"N", 7}, {"M", 300}});
}

TEST_CASE("bad inits and distribution lists are refused with where and why") {
  auto fails = [](const json& j) {
    auto t = parse_task(j, "t.json");
    REQUIRE_FALSE(t);
    return t.error();
  };
  json j = task_json();
  j["validation_shapes"][1]["inits"]["z"] = "normal";
  CHECK(fails(j).what() == "t.json: /validation_shapes/1/inits/z: 'z' is not an input of the task (inputs: x)");
  j = task_json();
  j["validation_shapes"][1]["inits"]["x"] = "normal(1)";
  CHECK(fails(j).what() == "t.json: /validation_shapes/1/inits/x: 'normal(1)': normal takes 2 parameters, got 1");
  j = task_json();
  j["validation_shapes"][1]["extra"] = 1;
  CHECK(fails(j).where == "/validation_shapes/1/extra");
  j = task_json();
  j["distributions"] = "large";
  CHECK(fails(j).where == "/distributions");
  j = task_json();
  j["distributions"][1] = "huge";
  CHECK(fails(j).where == "/distributions/1");
  j = task_json();
  j["outputs"][0]["tolerance"]["terms"] = -1;
  CHECK(fails(j).what() == "t.json: /outputs/0/tolerance/terms: must be finite and non-negative, got -1");
}
