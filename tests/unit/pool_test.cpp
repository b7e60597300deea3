#include <specgen/policy/pool.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace specgen;
using namespace specgen::policy;
using nlohmann::json;

TEST_CASE("pool policies model the concept, and so does any_pool") {
  STATIC_REQUIRE(pool_policy<static_split>);
  STATIC_REQUIRE(pool_policy<elastic>);
  STATIC_REQUIRE(pool_policy<any_pool>);
}

TEST_CASE("a static split ignores the queues and never rebalances") {
  const static_split s{.validation_fraction = 0.25};
  CHECK(s.validation_devices({}, 8) == 2);
  CHECK(s.validation_devices({.validation = 100, .profiling = 0}, 8) == 2);
  CHECK(s.validation_devices({}, 3) == 1);  // 0.75 rounds to 1
  CHECK(s.rebalance_interval() == duration{0});
  CHECK(s.validation_order() == queue_order::fifo);
  CHECK(static_split{.validation_fraction = 0.5}.validation_devices({}, 3) == 2);  // halves round up
  CHECK(static_split{.validation_fraction = 7.0}.validation_devices({}, 4) == 4);  // clamped to the pool
  CHECK(s.validation_devices({}, 0) == 0);
}

TEST_CASE("elastic splits in proportion to the previous epoch's peak queues, rounded to nearest") {
  const elastic e;
  CHECK(e.validation_devices({.validation = 6, .profiling = 2}, 8) == 6);
  CHECK(e.validation_devices({.validation = 1, .profiling = 3}, 8) == 2);
  CHECK(e.validation_devices({.validation = 1, .profiling = 2}, 8) == 3);  // 2.67 -> 3
  CHECK(e.validation_devices({.validation = 1, .profiling = 1}, 3) == 2);  // 1.5 -> 2
  CHECK(e.validation_devices({.validation = 2, .profiling = 5}, 7) == 2);
}

TEST_CASE("elastic splits evenly when both queues stayed empty, the odd device validating") {
  const elastic e;
  CHECK(e.validation_devices({}, 8) == 4);
  CHECK(e.validation_devices({}, 5) == 3);
  CHECK(e.validation_devices({}, 2) == 1);
}

TEST_CASE("elastic always keeps min_validation devices validating") {
  CHECK(elastic{}.validation_devices({.validation = 0, .profiling = 50}, 8) == 1);
  CHECK(elastic{.min_validation = 3}.validation_devices({.validation = 0, .profiling = 50}, 8) == 3);
  // validation wins over the profiling floor when the pool is too small for both
  CHECK(elastic{}.validation_devices({.validation = 0, .profiling = 50}, 1) == 1);
  CHECK(elastic{.min_validation = 5, .min_profiling = 5}.validation_devices({}, 6) == 5);
  CHECK(elastic{.min_validation = 9}.validation_devices({}, 4) == 4);
}

TEST_CASE("elastic keeps min_profiling devices profiling when devices remain") {
  CHECK(elastic{}.validation_devices({.validation = 50, .profiling = 0}, 8) == 7);
  CHECK(elastic{.min_profiling = 0}.validation_devices({.validation = 50, .profiling = 0}, 8) == 8);
  CHECK(elastic{.min_profiling = 3}.validation_devices({.validation = 50, .profiling = 1}, 8) == 5);
  CHECK(elastic{}.validation_devices({.validation = 50, .profiling = 0}, 2) == 1);
  CHECK(elastic{}.validation_devices({}, 0) == 0);
}

TEST_CASE("elastic defaults to the paper's latest-arrival-first validation and 5 s epochs") {
  const elastic e;
  CHECK(e.validation_order() == queue_order::lifo);
  CHECK(e.rebalance_interval() == seconds(5));
  CHECK(e.name() == "elastic");
}

TEST_CASE("queue orders print and parse by name") {
  CHECK(to_string(queue_order::lifo) == "lifo");
  CHECK(parse_queue_order("fifo") == queue_order::fifo);
  CHECK_FALSE(parse_queue_order("LIFO").has_value());
}

TEST_CASE("any_pool forwards to the policy it holds and gives its params back") {
  any_pool p = static_split{.validation_fraction = 0.75, .validation = queue_order::lifo};
  CHECK(p.name() == "static_split");
  CHECK(p.validation_devices({}, 4) == 3);
  CHECK(p.validation_order() == queue_order::lifo);
  REQUIRE(p.target<static_split>() != nullptr);
  CHECK(p.target<static_split>()->validation_fraction == 0.75);
  CHECK(p.target<elastic>() == nullptr);

  const any_pool copy = p;
  CHECK(copy.target<static_split>() == p.target<static_split>());  // copies share the immutable policy
}

TEST_CASE("a default any_pool is the paper's elastic policy") {
  const any_pool p;
  REQUIRE(p.target<elastic>() != nullptr);
  CHECK(*p.target<elastic>() == elastic{});
}

namespace {
struct everything_validates {
  int validation_devices(const queue_peaks&, int devices) const { return devices; }
  queue_order validation_order() const { return queue_order::fifo; }
  duration rebalance_interval() const { return duration{0}; }
  const char* name() const { return "everything_validates"; }
};
}  // namespace

TEST_CASE("any_pool holds a user's policy, written as custom: no table can rebuild it") {
  const any_pool p = everything_validates{};
  CHECK(p.validation_devices({}, 6) == 6);
  CHECK(p.config() == json{{"custom", "everything_validates"}});
}

TEST_CASE("make_pool reads a policy by name with its defaults, or with params") {
  auto by_name = make_pool("elastic");
  REQUIRE(by_name);
  CHECK(*by_name->target<elastic>() == elastic{});

  auto with_params = make_pool(json::parse(
      R"({"elastic":{"min_validation":2,"min_profiling":0,"validation":"fifo","interval_s":2.5}})"));
  REQUIRE(with_params);
  CHECK(*with_params->target<elastic>() ==
        elastic{.min_validation = 2, .min_profiling = 0, .validation = queue_order::fifo, .interval = seconds(2.5)});

  auto split = make_pool(json::parse(R"({"static_split":{"validation_fraction":0.25}})"));
  REQUIRE(split);
  CHECK(*split->target<static_split>() == static_split{.validation_fraction = 0.25});
}

TEST_CASE("config() writes what make_pool reads back to an equal policy") {
  const elastic e{.min_validation = 3, .validation = queue_order::fifo, .interval = seconds(0.25)};
  const static_split s{.validation_fraction = 0.125, .validation = queue_order::lifo};
  const json je = any_pool(e).config();
  const json js = any_pool(s).config();
  CHECK(je == json::parse(
                  R"({"elastic":{"min_validation":3,"min_profiling":1,"validation":"fifo","interval_s":0.25,"work_conserving":true}})"));
  CHECK(js == json::parse(R"({"static_split":{"validation_fraction":0.125,"validation":"lifo","work_conserving":false}})"));
  CHECK(*make_pool(je)->target<elastic>() == e);
  CHECK(*make_pool(js)->target<static_split>() == s);
  CHECK(config_of(e) == je);
  CHECK(config_of(s) == js);
}

TEST_CASE("make_pool rejects configs with a message that names the problem") {
  auto message = [](const char* text) {
    auto r = make_pool(json::parse(text));
    REQUIRE_FALSE(r);
    return r.error().what();
  };
  CHECK_THAT(message(R"("elastc")"), Catch::Contains("/: unknown pool kind 'elastc' (did you mean 'elastic'?)"));
  CHECK_THAT(message(R"({"elastic":{"min_validaton":2}})"),
             Catch::StartsWith("/elastic/min_validaton: unknown key 'min_validaton' (did you mean 'min_validation'?)"));
  CHECK_THAT(message(R"({"static_split":{"validation_fraction":1.5}})"),
             Catch::Contains("validation_fraction") && Catch::Contains("[0, 1]") && Catch::Contains("1.5"));
  CHECK_THAT(message(R"({"elastic":{"validation":"random"}})"), Catch::Contains("one of \"fifo\", \"lifo\""));
  CHECK_THAT(message(R"({"elastic":{"min_validation":-1}})"), Catch::StartsWith("/elastic/min_validation: "));
  CHECK_THAT(message(R"({"elastic":{"min_profiling":1.5}})"), Catch::Contains("integer"));
  CHECK_THAT(message(R"({"elastic":{"interval_s":"5"}})"), Catch::StartsWith("/elastic/interval_s: "));
  CHECK_THAT(message(R"({"elastic":[1]})"), Catch::Contains("must be an object"));
  CHECK_THAT(message(R"({"elastic":{},"static_split":{}})"), Catch::Contains("names one pool kind"));
  CHECK_THAT(message(R"({"elastic":{"interval_s":-1}})"), Catch::StartsWith("/elastic/interval_s: "));
}

TEST_CASE("an elastic epoch is 0 (never) or at least 0.1 s: a nanosecond epoch would never let a run end") {
  for (const char* text : {R"({"elastic":{"interval_s":1e-9}})", R"({"elastic":{"interval_s":0.05}})",
                           R"({"elastic":{"interval_s":1e10}})", R"({"elastic":{"min_validation":1000000}})"}) {
    auto r = make_pool(json::parse(text));
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().where, Catch::StartsWith("/elastic/"));
  }
  CHECK_THAT(make_pool(json::parse(R"({"elastic":{"interval_s":1e-9}})")).error().message,
             Catch::Contains("a number in [0.1, 86400], or 0 for never"));
  CHECK(make_pool(json::parse(R"({"elastic":{"interval_s":0}})"))->rebalance_interval() == duration{0});
  CHECK(make_pool(json::parse(R"({"elastic":{"interval_s":0.1}})"))->rebalance_interval() == seconds(0.1));
}


TEST_CASE("elastic conserves work by default; the static split, the fixed baseline, does not unless asked") {
  CHECK(elastic{}.conserves_work());
  CHECK_FALSE(elastic{.work_conserving = false}.conserves_work());
  CHECK_FALSE(static_split{}.conserves_work());
  CHECK(static_split{.work_conserving = true}.conserves_work());
  CHECK(any_pool{}.conserves_work());
  CHECK_FALSE(any_pool(static_split{}).conserves_work());
  CHECK(any_pool(static_split{.work_conserving = true}).conserves_work());
  CHECK_FALSE(any_pool(everything_validates{}).conserves_work());  // a policy without the member keeps strict roles

  auto strict = make_pool(json::parse(R"({"elastic":{"work_conserving":false}})"));
  REQUIRE(strict);
  CHECK(*strict->target<elastic>() == elastic{.work_conserving = false});
  CHECK_FALSE(strict->conserves_work());
  auto lending = make_pool(json::parse(R"({"static_split":{"work_conserving":true}})"));
  REQUIRE(lending);
  CHECK(lending->conserves_work());
  auto bad = make_pool(json::parse(R"({"elastic":{"work_conserving":"yes"}})"));
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().what(), Catch::StartsWith("/elastic/work_conserving: ") && Catch::Contains("true or false"));
}
