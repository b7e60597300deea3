#include <specgen/policy/termination.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace specgen;
using namespace specgen::policy;

namespace {
const std::vector<double> history{1.2, 0.8, 1.6};  // mean 1.2, max 1.6
const history_view none{};
const history_view some{history};
}  // namespace

TEST_CASE("beats_mean stops when the new kernel is faster than the history's mean") {
  const termination::beats_mean t;
  CHECK(t.should_stop(some, 1.22));
  CHECK_FALSE(t.should_stop(some, 1.2));  // equal is not better
  CHECK_FALSE(t.should_stop(some, 0.9));
}

TEST_CASE("beats_mean and best_so_far ignore gains within the profiler's noise (min_gain)") {
  // Two measurements of equally fast kernels differ by noise; 1% by default must be beaten.
  CHECK_FALSE(termination::beats_mean{}.should_stop(some, 1.2 * 1.009));
  CHECK(termination::beats_mean{}.should_stop(some, 1.2 * 1.011));
  CHECK_FALSE(termination::best_so_far{}.should_stop(some, 1.6 * 1.009));
  CHECK(termination::best_so_far{}.should_stop(some, 1.6 * 1.011));
  CHECK_FALSE(termination::beats_mean{}.should_stop(none, 1.005));  // the baseline too
  // The twin measured 0.04% apart: stopped without a margin, not with one.
  const std::vector<double> twin{0.42817};
  CHECK(termination::beats_mean{.min_gain = 0}.should_stop({twin}, 0.42834));
  CHECK_FALSE(termination::beats_mean{}.should_stop({twin}, 0.42834));
  CHECK(termination::beats_mean{.min_gain = 0.10}.should_stop(some, 1.33));
  CHECK_FALSE(termination::beats_mean{.min_gain = 0.10}.should_stop(some, 1.31));
}

TEST_CASE("beats_mean with an empty history compares against the baseline threshold") {
  CHECK(termination::beats_mean{}.should_stop(none, 1.02));
  CHECK_FALSE(termination::beats_mean{}.should_stop(none, 1.0));
  CHECK_FALSE(termination::beats_mean{.empty_threshold = 2.0}.should_stop(none, 1.5));
  CHECK(termination::beats_mean{.empty_threshold = 0.0}.should_stop(none, 0.3));  // any valid kernel
}

TEST_CASE("first_valid stops on any profiled kernel, history or not") {
  CHECK(termination::first_valid{}.should_stop(none, 0.1));
  CHECK(termination::first_valid{}.should_stop(some, 0.1));
}

TEST_CASE("best_so_far stops only when the new kernel beats every earlier one") {
  const termination::best_so_far t;
  CHECK(t.should_stop(some, 1.63));
  CHECK_FALSE(t.should_stop(some, 1.5));  // beats the mean, not the best
  CHECK(t.should_stop(none, 1.1));
  CHECK_FALSE(t.should_stop(none, 0.9));
}

TEST_CASE("never never stops and reaches_target stops at the target whatever the history") {
  CHECK_FALSE(termination::never{}.should_stop(some, 100.0));
  const termination::reaches_target t{.target = 3.0};
  CHECK(t.should_stop(none, 3.0));
  CHECK(t.should_stop(some, 3.5));
  CHECK_FALSE(t.should_stop(some, 2.99));
}

TEST_CASE("any_of stops when any member would") {
  const termination::any_of t{termination::best_so_far{}, termination::reaches_target{.target = 1.4}};
  CHECK(t.should_stop(some, 1.45));        // target reached, not the best
  CHECK(t.should_stop(some, 1.7));         // best so far
  CHECK_FALSE(t.should_stop(some, 1.3));
}

TEST_CASE("the default termination is beats_mean") {
  const any_termination t = default_termination();
  CHECK(t.name() == "beats_mean");
  CHECK(t.should_stop(some, 1.3));
  CHECK_FALSE(t.should_stop(some, 1.1));
}

TEST_CASE("termination configs round-trip through JSON") {
  const std::vector<any_termination> all{
      termination::beats_mean{.empty_threshold = 1.5, .min_gain = 0.03}, termination::first_valid{}, termination::best_so_far{},
      termination::never{}, termination::reaches_target{.target = 4.0},
      termination::any_of{termination::beats_mean{}, termination::reaches_target{.target = 2.5}}};
  for (const auto& t : all) {
    auto back = make_termination(t.config());
    REQUIRE(back);
    CHECK(back->config() == t.config());
    CHECK(back->name() == t.name());
  }
  CHECK(config_of(termination::reaches_target{.target = 4.0}) == nlohmann::json{{"reaches_target", {{"target", 4.0}}}});
  auto parsed = make_termination(nlohmann::json::parse(R"({"any_of": ["beats_mean", {"reaches_target": {"target": 4}}]})"));
  REQUIRE(parsed);
  CHECK(parsed->should_stop(some, 4.0));
  CHECK(parsed->should_stop(some, 1.3));
  CHECK_FALSE(parsed->should_stop(some, 1.0));
}

TEST_CASE("make_termination rejects bad configs with messages that say what to fix") {
  auto message = [](const char* text) {
    auto t = make_termination(nlohmann::json::parse(text));
    REQUIRE_FALSE(t);
    return t.error().what();
  };
  using Catch::Matchers::Contains;
  using Catch::Matchers::StartsWith;
  CHECK_THAT(message(R"("beats_men")"), Contains("/: unknown termination kind 'beats_men' (did you mean 'beats_mean'?)"));
  CHECK_THAT(message(R"({"reaches_target": {"target": -1}})"),
             Contains("/reaches_target/target: must be a number in [0.001, 1000], got -1"));
  CHECK_THAT(message(R"({"reaches_target": {"goal": 2}})"), Contains("/reaches_target/goal: unknown key 'goal'") && Contains("target"));
  CHECK_THAT(message(R"({"beats_mean": {"empty_threshold": "one"}})"), Contains("empty_threshold") && Contains("number"));
  CHECK_THAT(message(R"({"beats_mean": {"min_gain": -0.01}})"), Contains("/beats_mean/min_gain: must be a number in [0, 10]"));
  CHECK_THAT(message(R"({"best_so_far": {"min_gain": -1}})"), Contains("min_gain"));
  CHECK_THAT(message(R"({"first_valid": {"x": 1}})"), Contains("takes no parameters"));
  CHECK_THAT(message(R"({"any_of": []})"), Contains("non-empty array"));
  CHECK_THAT(message(R"({"any_of": ["never", "nope"]})"), StartsWith("/any_of/1: unknown termination kind 'nope'"));
}

TEST_CASE("a termination config nests any_of at most 16 deep, and a deeper one is refused at once with the limit") {
  auto nested = [](int depth) {
    nlohmann::json j = "never";
    for (int i = 0; i < depth; ++i) j = nlohmann::json{{"any_of", nlohmann::json::array({std::move(j), "beats_mean"})}};
    return j;
  };
  CHECK(make_termination(nested(16)));
  for (int depth : {17, 100'000}) {
    const auto t = make_termination(nested(depth));
    REQUIRE_FALSE(t);
    CHECK_THAT(t.error().message, Catch::Contains("nested more than 16 levels"));
  }
}

TEST_CASE("termination thresholds are speedups within [0, 1000] and margins within [0, 10]") {
  for (const char* text : {R"({"reaches_target": {"target": 1e308}})", R"({"beats_mean": {"empty_threshold": -2}})",
                           R"({"best_so_far": {"min_gain": 1e300}})"})
    CHECK_FALSE(make_termination(nlohmann::json::parse(text)));
  CHECK(make_termination(nlohmann::json::parse(R"({"reaches_target": {"target": 1000}})")));
  CHECK_THROWS_AS(any_termination(termination::reaches_target{.target = std::nan("")}), std::invalid_argument);
}

