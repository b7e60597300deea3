// Modes are configurations of one engine, and a configuration survives JSON.
#include <specgen/modes.hpp>

#include <catch2/catch.hpp>

using namespace specgen;

TEST_CASE("every mode's configuration reads back from its own JSON") {
  for (auto name : mode_names) {
    CAPTURE(name);
    auto c = mode_config(name);
    REQUIRE(c);
    const auto j = to_json(*c);
    auto back = config_from_json(j);
    REQUIRE(back);
    CHECK(to_json(*back) == j);
  }
}

TEST_CASE("the ablation ladder adds one mechanism per step") {
  auto names = [](std::string_view m) {
    auto c = mode_config(m).value();
    return std::vector<std::string>{c.trigger.name(), c.pool.name(), std::string(to_string(c.pool.validation_order())),
                                    c.kv.name()};
  };
  const auto seq = names("sequential"), spec = names("+spec"), el = names("+elastic"), pr = names("+priority"),
             kv = names("+kv");
  CHECK(seq[0] != spec[0]);                                   // +spec: speculation on
  CHECK(spec[1] != el[1]);                                    // +elastic: the split follows the queues
  CHECK((el[2] == "fifo" && pr[2] == "lifo"));                // +priority: latest-first validation
  CHECK((pr[3] != kv[3] && kv == names("specgen")));          // +kv: remote KV; that is specgen
  CHECK(mode_config("parallel+specgen").value().strategy.name() == "parallel");
  CHECK(mode_config("evolve").value().trigger.name() == seq[0]);
}

TEST_CASE("config errors name the key and what is wrong") {
  auto err = [](const char* text) {
    auto r = config_from_json(nlohmann::json::parse(text));
    REQUIRE_FALSE(r);
    return r.error().message;
  };
  CHECK_THAT(err(R"({"mode": "fastest"})"), Catch::Contains("unknown mode 'fastest'"));
  CHECK_THAT(err(R"({"termnation": "never"})"), Catch::Contains("unknown key 'termnation'"));
  CHECK_THAT(err(R"({"budget": {"max_rounds": 0}})"), Catch::Contains("max_rounds must be >= 1"));
  CHECK_THAT(err(R"({"seed": -3})"), Catch::Contains("seed"));
  CHECK_THAT(err(R"({"strategy": {"evolve": {"lanes": 0}}})"), Catch::Contains("lanes"));
  CHECK_THAT(err(R"({"pool": {"elastic": {"min_validation": "one"}}})"), Catch::Contains("min_validation"));
}

TEST_CASE("overrides apply on top of the mode") {
  auto c = config_from_json(nlohmann::json::parse(
      R"({"mode": "sequential", "seed": 7, "budget": {"max_rounds": 3, "target_speedup": 1.5}, "termination": "first_valid"})"));
  REQUIRE(c);
  CHECK(c->seed == 7);
  CHECK(c->budget.max_rounds == 3);
  CHECK(c->budget.target_speedup == 1.5);
  CHECK(c->termination.name() == "first_valid");
  CHECK(c->strategy.name() == "refine");

  auto f = config_from_json(nlohmann::json::parse(R"({"fork_sampling": {"temperature": 0.3, "max_tokens": 2048}})"));
  REQUIRE(f);
  CHECK(f->fork_sampling.temperature == 0.3);
  CHECK(f->fork_sampling.max_tokens == 2048);
  CHECK(f->fork_sampling.top_p == 1.0);  // untouched fields keep the mode's value
  auto bad = config_from_json(nlohmann::json::parse(R"({"fork_sampling": {"temprature": 0.3}})"));
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("unknown key 'temprature'"));
}
