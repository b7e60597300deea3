// Modes are configurations of one engine, and a configuration survives JSON.
#include <specgen/modes.hpp>

#include <catch2/catch.hpp>

using namespace specgen;
using namespace specgen::policy;

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
    return r.error().what();
  };
  CHECK_THAT(err(R"({"mode": "fastest"})"), Catch::StartsWith("/mode: unknown mode 'fastest'"));
  CHECK_THAT(err(R"({"termnation": "never"})"),
             Catch::StartsWith("/termnation: unknown key 'termnation' (did you mean 'termination'?)"));
  CHECK(err(R"({"budget": {"max_rounds": 0}})") == "/budget/max_rounds: must be an integer in [1, 10000], got 0");
  CHECK_THAT(err(R"({"seed": -3})"), Catch::Contains("seed"));
  CHECK_THAT(err(R"({"strategy": {"evolve": {"lanes": 0}}})"), Catch::StartsWith("/strategy/evolve/lanes: "));
  CHECK_THAT(err(R"({"pool": {"elastic": {"min_validation": "one"}}})"),
             Catch::StartsWith("/pool/elastic/min_validation: must be "));
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
  CHECK(bad.error().where == "/fork_sampling/temprature");
  CHECK_THAT(bad.error().message, Catch::StartsWith("unknown key 'temprature' (did you mean 'temperature'?)"));
}

TEST_CASE("a multi-lane speculative mode stops whole rounds and keeps slots for forks; the paper's ladder does neither") {
  for (auto m : {"parallel+specgen", "evolve+specgen"}) {
    CAPTURE(m);
    const auto c = mode_config(m).value();
    CHECK(c.termination_scope == termination_scope::round);
    CHECK(c.fork_slot_share == 0.125);
  }
  CHECK(mode_config("specgen").value().termination_scope == termination_scope::lane);
  for (auto m : {"parallel", "+spec", "+kv"}) {
    CAPTURE(m);
    const auto c = mode_config(m).value();
    CHECK(c.termination_scope == termination_scope::lane);
    CHECK(c.fork_slot_share == 0);
  }
  auto c = config_from_json(nlohmann::json::parse(R"({"mode": "parallel+specgen", "termination_scope": "lane", "fork_slot_share": 0.5})"));
  REQUIRE(c);
  CHECK(c->termination_scope == termination_scope::lane);
  CHECK(c->fork_slot_share == 0.5);
  CHECK(to_json(*c)["termination_scope"] == "lane");
  auto err = [](const char* text) {
    auto r = config_from_json(nlohmann::json::parse(text));
    REQUIRE_FALSE(r);
    return std::string(r.error().what());
  };
  CHECK(err(R"({"termination_scope": "search"})") == R"(/termination_scope: must be one of "lane", "round", got "search")");
  CHECK_THAT(err(R"({"fork_slot_share": 1})"), Catch::StartsWith("/fork_slot_share: must be a number in [0, 0.9]"));
}

// ---- hostile and careless configs ------------------------------------------------------------

TEST_CASE("budget fields are read within ranges a run can use") {
  using Catch::Matchers::Contains;
  auto err = [](const char* text) {
    auto r = config_from_json(nlohmann::json::parse(text));
    REQUIRE_FALSE(r);
    return r.error().what();
  };
  // 1e10 s would overflow the deadline's nanoseconds and end every search at t = 0.
  CHECK_THAT(err(R"({"budget": {"max_seconds": 1e10}})"),
             Contains("/budget/max_seconds: must be a number in [0.001, 10000000], or 0 for none, got 1"));
  CHECK_THAT(err(R"({"budget": {"max_seconds": -5}})"), Contains("/budget/max_seconds: "));
  CHECK_THAT(err(R"({"budget": {"max_rounds": 2147483647}})"), Contains("/budget/max_rounds: "));
  CHECK_THAT(err(R"({"budget": {"target_speedup": -2}})"), Contains("/budget/target_speedup: "));
  CHECK_THAT(err(R"({"budget": {"target_speedup": 1e300}})"), Contains("/budget/target_speedup: "));
  auto ok = config_from_json(nlohmann::json::parse(R"({"budget": {"max_seconds": 1e7, "target_speedup": 0}})"));
  REQUIRE(ok);
  CHECK(ok->budget.max_seconds == 1e7);
}

TEST_CASE("sizes in a config are read within ranges, so none can exhaust memory") {
  using Catch::Matchers::Contains;
  using Catch::Matchers::StartsWith;
  auto err = [](const char* text) {
    auto r = config_from_json(nlohmann::json::parse(text));
    REQUIRE_FALSE(r);
    return r.error().what();
  };
  CHECK_THAT(err(R"({"strategy": {"parallel": {"seeds": 1000000}}})"), StartsWith("/strategy/parallel/seeds: ") && Contains("[1, 256]"));
  CHECK_THAT(err(R"({"strategy": {"evolve": {"lanes": 2147483647}}})"), StartsWith("/strategy/evolve/lanes: "));
  CHECK_THAT(err(R"({"strategy": {"evolve": {"population": 2147483647}}})"), StartsWith("/strategy/evolve/population: "));
  CHECK_THAT(err(R"({"strategy": {"evolve": {"tournament": 1000000000}}})"), StartsWith("/strategy/evolve/tournament: "));
  CHECK_THAT(err(R"({"trigger": {"fence_closed": {"samples": 1000000}}})"), StartsWith("/trigger/fence_closed/samples: "));
  CHECK_THAT(err(R"({"trigger": {"any_of": ["never", {"fence_closed": {"samples": 0}}]}})"),
             StartsWith("/trigger/any_of/1/fence_closed/samples: must be an integer in [1, 64], got 0"));
  CHECK_THAT(err(R"({"max_streams": 4294967296})"), StartsWith("/max_streams: "));
  CHECK_THAT(err(R"({"main_sampling": {"max_tokens": 2147483647}})"), StartsWith("/main_sampling/max_tokens: "));
  CHECK_THAT(err(R"({"fork_sampling": {"top_p": 0}})"), StartsWith("/fork_sampling/top_p: "));
  CHECK_THAT(err(R"({"mode": 7})"), StartsWith("/mode: must be a mode name, got 7"));
}

TEST_CASE("a mode given apart from a config must agree with the policies the config sets") {
  const auto file = nlohmann::json::parse(R"({"trigger": {"fence_closed": {"samples": 2}}, "budget": {"max_rounds": 3}})");
  const auto r = config_with_mode(file, "sequential");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("mode 'sequential' contradicts the config's trigger"));
  const auto two = config_with_mode(nlohmann::json::parse(R"({"trigger": "default", "pool": "elastic"})"), "sequential");
  REQUIRE_FALSE(two);
  CHECK_THAT(two.error().message, Catch::Contains("trigger and pool"));
  // A config that sets what the mode sets anyway, or only other keys, is fine; the mode replaces "mode".
  auto same = config_with_mode(nlohmann::json::parse(R"({"mode": "specgen", "trigger": "never", "budget": {"max_rounds": 3}})"),
                               "sequential");
  REQUIRE(same);
  CHECK(same->trigger.name() == "never");
  CHECK(same->budget.max_rounds == 3);
  auto full = config_with_mode(to_json(*mode_config("specgen")), "specgen");
  CHECK(full);
  // +kv is specgen with the paper's trigger set instead of the weighed default.
  auto paper = config_with_mode(to_json(*mode_config("+kv")), "specgen");
  REQUIRE_FALSE(paper);
  CHECK_THAT(paper.error().message, Catch::Contains("contradicts the config's trigger"));
}

