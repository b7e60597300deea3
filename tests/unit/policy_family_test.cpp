// The one mechanism behind every policy family: holding (ownership), writing
// (config_of) and building (the family's table), checked family by family.
#include <specgen/engine_config.hpp>
#include <specgen/policy/family.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <concepts>
#include <string>
#include <vector>

using namespace specgen;
using namespace specgen::policy;

namespace {

/// Every kind of a family's table, built from its bare name, written by config(), and built again
/// from that config to the same config.
template <class Family>
void check_round_trip(const std::vector<std::string>& skip = {}) {
  for (const auto& row : Family::kinds) {
    const std::string kind(row.kind);
    if (std::find(skip.begin(), skip.end(), kind) != skip.end()) continue;
    INFO(Family::name << " " << kind);
    auto built = make<Family>(nlohmann::json(kind));
    REQUIRE(built);
    const nlohmann::json written = built->config();
    auto again = make<Family>(written);
    REQUIRE(again);
    CHECK(again->config() == written);
  }
}

}  // namespace

TEST_CASE("every kind of every family rebuilds from the config it writes") {
  check_round_trip<trigger_family>({"any_of"});
  check_round_trip<termination_family>({"any_of"});
  check_round_trip<pool_family>();
  check_round_trip<strategy_family>();
  check_round_trip<kv_family>();
  check_round_trip<prompt_family>();
}

TEST_CASE("an unknown kind names the family, the nearest kind and the table, at its JSON pointer") {
  CHECK(make_pool("elastik").error().what() ==
        "/: unknown pool kind 'elastik' (did you mean 'elastic'?); known: elastic, static_split");
  CHECK(make_strategy("beam").error().what() == "/: unknown strategy kind 'beam'; known: refine, parallel, evolve");
  CHECK(make_kv(nlohmann::json::parse(R"({"ssd_kv": {}})")).error().what() ==
        "/ssd_kv: unknown kv kind 'ssd_kv'; known: no_kv, host_kv, remote_gpu_kv, backed_kv");
  // Inside a document: the pointer starts where the config sits.
  auto nested = make<trigger_family>(nlohmann::json::parse(R"({"any_of": ["never", {"fence_closd": {}}]})"), "/trigger");
  REQUIRE_FALSE(nested);
  CHECK(nested.error().where == "/trigger/any_of/1/fence_closd");
  CHECK_THAT(nested.error().message, Catch::StartsWith("unknown trigger kind 'fence_closd' (did you mean 'fence_closed'?)"));
}

TEST_CASE("a kind without parameters refuses any") {
  CHECK(make_kv(nlohmann::json::parse(R"({"no_kv": {"capacity_bytes": 1}})")).error().what() ==
        R"(/no_kv: takes no parameters, got {"capacity_bytes":1})");
  CHECK(make_trigger(nlohmann::json::parse(R"({"never": {"samples": 2}})")).error().what() ==
        R"(/never: takes no parameters, got {"samples":2})");
  CHECK(make_termination(nlohmann::json::parse(R"({"first_valid": {}})")));
}

TEST_CASE("shared families share one instance; cloned families copy the state") {
  const any_pool pool = static_split{.validation_fraction = 0.25};
  const any_pool pool_copy = pool;
  CHECK(pool_copy.target<static_split>() == pool.target<static_split>());

  const any_kv kv = remote_gpu_kv{};
  any_kv kv_copy = kv;
  CHECK(kv_copy.target<remote_gpu_kv>() != kv.target<remote_gpu_kv>());
  const std::vector<token_id> prefix(64, 7);
  kv_copy.store(0, prefix);  // the copy's index only
  CHECK(kv_copy.stats()->resident > 0);
  CHECK(kv.stats()->resident == 0);
}

TEST_CASE("a host's own policy is held by any family's wrapper and written as custom") {
  struct stop_at_three {
    bool should_stop(const history_view& h, double) const { return h.speedups.size() >= 3; }
    std::string name() const { return "stop_at_three"; }
  };
  const any_termination t = stop_at_three{};
  CHECK(t.config() == nlohmann::json{{"custom", "stop_at_three"}});
  CHECK(t.target<stop_at_three>() != nullptr);
  CHECK(t.target<termination::beats_mean>() == nullptr);
}

TEST_CASE("engine_config is a value: copies are independent") {
  static_assert(std::copyable<engine_config>);
  engine_config a;
  a.kv = remote_gpu_kv{};
  a.trigger = default_trigger();
  engine_config b = a;
  const std::vector<token_id> prefix(64, 3);
  b.kv.store(1, prefix);
  CHECK(b.kv.stats()->resident > 0);
  CHECK(a.kv.stats()->resident == 0);
  CHECK(to_json(a) == to_json(b));
  b.seed = 9;
  CHECK(a.seed == 1);
}

TEST_CASE("read_config_fields reads each field onto a config; an error's where is its JSON pointer") {
  engine_config c;
  REQUIRE(read_config_fields(nlohmann::json::parse(R"({"seed": 7, "pool": "elastic", "budget": {"max_rounds": 3}})"), c));
  CHECK(c.seed == 7);
  CHECK(c.pool.name() == "elastic");
  CHECK(c.budget.max_rounds == 3);
  auto bad = read_config_fields(nlohmann::json::parse(R"({"pool": {"elastic": {"interval_s": -1}}})"), c);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().where == "/pool/elastic/interval_s");
  CHECK_THAT(bad.error().message, Catch::StartsWith("must be a number in [0.1, 86400], or 0 for never (seconds), got -1"));
  auto unknown = read_config_fields(nlohmann::json::parse(R"({"trigger": {"never": {}, "gate": {"min_gap_token": 1}}})"), c);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().where == "/trigger/gate/min_gap_token");
  CHECK_THAT(unknown.error().message, Catch::StartsWith("unknown key 'min_gap_token' (did you mean 'min_gap_tokens'?)"));
  auto typo = read_config_fields(nlohmann::json::parse(R"({"sead": 1})"), c);
  REQUIRE_FALSE(typo);
  CHECK(typo.error().what() == "/sead: " + typo.error().message);
  CHECK_THAT(typo.error().message, Catch::StartsWith("unknown key 'sead' (did you mean 'seed'?)"));
}

TEST_CASE("a copied block index is independent of its original") {
  block_index a(4);
  const std::vector<std::uint64_t> keys{1, 2, 3};
  a.insert(keys, 0);
  block_index b = a;
  const std::vector<std::uint64_t> more{4, 5, 6};
  b.insert(more, 1);  // evicts in b only, through b's own list
  CHECK(a.lru_order() == std::vector<std::uint64_t>{1, 2, 3});
  CHECK(b.stats().resident == 4);
  CHECK(a.match(keys) == 3);
  a.touch(std::vector<std::uint64_t>{3});
  CHECK(a.lru_order().front() == 3);
}

TEST_CASE("host_backing reports the copy's time from the clock it is given, zero without one") {
  const std::vector<std::uint64_t> key{42};
  std::vector<std::byte> bytes(64, std::byte{1}), out(64);
  host_backing untimed(1024, 64);
  REQUIRE(untimed.put(key, bytes));
  CHECK(*untimed.get(key, out) == duration{0});
  timestamp now{0};
  host_backing timed(1024, 64, [&] { return now += std::chrono::microseconds(5); });
  REQUIRE(timed.put(key, bytes));
  CHECK(*timed.get(key, out) == std::chrono::microseconds(5));
}
