#include <specgen/json.hpp>
#include <specgen/names.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

using namespace specgen;
using nlohmann::json;

namespace {

template <class T>
T round_trip(const T& value) {
  return json::parse(json(value).dump()).get<T>();
}

measurement sample_measurement() {
  return {.median_us = 12.5,
          .spread = 0.013,
          .samples_us = {12.4, 12.5, 12.75, 0.1 + 0.2},
          .baseline_median_us = 40.125,
          .speedup = 40.125 / 12.5,
          .sm_clock_mhz = 1980,
          .metrics = {{"dram_throughput_pct", 71.25}, {"achieved_occupancy", 0.5}}};
}

verdict sample_mismatch_verdict() {
  return {.kind = verdict_kind::wrong_result,
          .summary = "output y differs at 3 of 1000 elements",
          .log = "max |got - want| = 0.5",
          .mismatch = mismatch_stats{.output = "y",
                                     .shape = "N=1000,M=77",
                                     .max_abs = 0.5,
                                     .max_rel = 0.25,
                                     .count = 3,
                                     .total = 1000,
                                     .first_indices = {7, 19, (1ull << 63) + 5}}};
}

candidate sample_candidate() {
  return {.id = 42,
          .task = "softmax",
          .prov = {.search = 2,
                   .round = 7,
                   .lane = 1,
                   .from = origin::fork,
                   .trigger = "fence",
                   .prefix_tokens = 5123,
                   .sample = 3,
                   .parents = {5, 17}},
          .source = "extern \"C\" __global__ void k(float* y) {\n  y[threadIdx.x] = 1.0f; // \"quoted\" \xc3\xa9\n}\n",
          .plan = "launch k grid(cdiv(N,256)) block(256) args(y)",
          .created = timestamp(123'456'789'012'345)};
}

}  // namespace

TEST_CASE("dtype and distribution names are the task-file spellings and parse back") {
  CHECK(dtype_names == std::array<std::string_view, 8>{"f16", "bf16", "f32", "f64", "i8", "u8", "i32", "i64"});
  CHECK(distribution_names == std::array<std::string_view, 11>{"normal", "uniform", "signed_uniform", "large",
                                                               "zeros", "ones", "normal", "uniform", "randint",
                                                               "const", "arange"});
  for (std::size_t i = 0; i < dtype_names.size(); ++i) {
    const auto t = static_cast<dtype>(i);
    CHECK(parse_dtype(to_string(t)) == t);
  }
  for (const auto& d : {distribution::normal, distribution::uniform, distribution::signed_uniform, distribution::large,
                        distribution::zeros, distribution::ones})
    CHECK(parse_distribution(to_string(d)) == d);
  CHECK(to_string(dtype::bf16) == "bf16");
  CHECK(to_string(distribution::signed_uniform) == "signed_uniform");
}

TEST_CASE("unknown or differently cased names do not parse") {
  CHECK_FALSE(parse_dtype("float32"));
  CHECK_FALSE(parse_dtype("F32"));
  CHECK_FALSE(parse_distribution("gaussian"));
  CHECK_FALSE(parse_origin(""));
  CHECK_FALSE(parse_stage("link"));
  CHECK_FALSE(parse_finish_reason("aborted"));
  CHECK(parse_origin("fork") == origin::fork);
  CHECK(parse_stage("profile") == stage::profile);
  CHECK(parse_finish_reason("length") == finish_reason::length);
}

TEST_CASE("enums are written as their names") {
  CHECK(json(verdict_kind::wrong_result) == "wrong_result");
  CHECK(json(origin::fork) == "fork");
  CHECK(json(stage::validate) == "validate");
  CHECK(json(finish_reason::cancelled) == "cancelled");
  CHECK(json(dtype::i64) == "i64");
  CHECK(json(distribution::zeros) == "zeros");
}

TEST_CASE("every enum value round-trips through JSON") {
  for (std::size_t i = 0; i < verdict_names.size(); ++i)
    CHECK(round_trip(static_cast<verdict_kind>(i)) == static_cast<verdict_kind>(i));
  for (std::size_t i = 0; i < stage_names.size(); ++i)
    CHECK(round_trip(static_cast<stage>(i)) == static_cast<stage>(i));
  for (std::size_t i = 0; i < origin_names.size(); ++i)
    CHECK(round_trip(static_cast<origin>(i)) == static_cast<origin>(i));
  for (std::size_t i = 0; i < finish_reason_names.size(); ++i)
    CHECK(round_trip(static_cast<finish_reason>(i)) == static_cast<finish_reason>(i));
  for (std::size_t i = 0; i < dtype_names.size(); ++i)
    CHECK(round_trip(static_cast<dtype>(i)) == static_cast<dtype>(i));
  for (const char* d : {"normal", "large", "normal(1000, 1)", "uniform(-1, 2)", "randint(0, 5)", "const(2)", "arange"})
    CHECK(round_trip(*parse_distribution(d)) == *parse_distribution(d));
}

TEST_CASE("an unknown enum name is a read error that lists the accepted names") {
  REQUIRE_THROWS_AS(json("float32").get<dtype>(), detail::json_read_error);
  try {
    (void)json("float32").get<dtype>();
  } catch (const json::exception& e) {  // a json_read_error is one of nlohmann's exceptions
    const std::string what = e.what();
    CHECK(what.find("unknown dtype \"float32\"") != std::string::npos);
    CHECK(what.find("\"bf16\"") != std::string::npos);
  }
  CHECK_THROWS_WITH(json(3).get<verdict_kind>(), Catch::StartsWith("expected one of \"compile_error\", ") &&
                                                     Catch::EndsWith("found number 3"));
}

TEST_CASE("verdicts, mismatches and compile reports round-trip") {
  const auto v = sample_mismatch_verdict();
  CHECK(round_trip(v) == v);
  CHECK(round_trip(*v.mismatch) == *v.mismatch);
  const verdict plain{.kind = verdict_kind::compile_error, .summary = "error: expected ';'", .log = "line 3", .mismatch = {}};
  CHECK(round_trip(plain) == plain);
  const compile_report c{.seconds = 0.8125, .cache_hit = true, .registers = 64, .spill_bytes = 16, .static_smem_bytes = 4096};
  CHECK(round_trip(c) == c);
}

TEST_CASE("an absent optional is an absent key") {
  verdict plain;
  plain.kind = verdict_kind::fault;
  CHECK_FALSE(json(plain).contains("mismatch"));
  evaluation unprofiled;
  unprofiled.id = 3;
  CHECK_FALSE(json(unprofiled).contains("timing"));
  CHECK_FALSE(round_trip(unprofiled).timing);
}

TEST_CASE("measurements and evaluations round-trip bit for bit") {
  const auto m = sample_measurement();
  CHECK(round_trip(m) == m);
  const evaluation e{.id = 9,
                     .result = {.kind = verdict_kind::ok, .summary = "ok", .log = "", .mismatch = {}},
                     .compile = {.seconds = 1.5, .registers = 40},
                     .timing = m};
  CHECK(round_trip(e) == e);
  CHECK(round_trip(e).timing->samples_us[3] == 0.1 + 0.2);
}

TEST_CASE("infinite doubles survive as strings instead of becoming null") {
  mismatch_stats m;
  m.output = "y";
  m.max_abs = std::numeric_limits<double>::infinity();
  m.max_rel = -std::numeric_limits<double>::infinity();
  const json j = m;
  CHECK(j["max_abs"] == "inf");
  CHECK(j["max_rel"] == "-inf");
  CHECK(round_trip(m) == m);

  measurement nan_speedup;
  nan_speedup.speedup = std::nan("");
  CHECK(json(nan_speedup)["speedup"] == "nan");
  CHECK(std::isnan(round_trip(nan_speedup).speedup));
  CHECK_THROWS_WITH(json::parse(R"({"speedup": "fast"})").get<measurement>(),
                    "/speedup: expected a number (or \"inf\", \"-inf\", \"nan\"), found string \"fast\"");
}

TEST_CASE("provenance and candidates round-trip, with the creation time in integral nanoseconds") {
  const auto c = sample_candidate();
  CHECK(round_trip(c.prov) == c.prov);
  const auto back = round_trip(c);
  CHECK(back.id == c.id);
  CHECK(back.task == c.task);
  CHECK(back.prov == c.prov);
  CHECK(back.source == c.source);
  CHECK(back.plan == c.plan);
  CHECK(back.created == c.created);
  CHECK(back.content_hash() == c.content_hash());

  const json j = c;
  CHECK(j["created_ns"].is_number_integer());
  CHECK(j["created_ns"] == 123'456'789'012'345);
  CHECK(j["prov"]["origin"] == "fork");
  CHECK(j["hash"] == fmt::format("{:016x}", c.content_hash()));
}

TEST_CASE("backend values round-trip") {
  const usage u{.prompt_tokens = 1200, .cached_prompt_tokens = 1024, .completion_tokens = 9000, .reasoning_tokens = 8000};
  CHECK(round_trip(u) == u);
  const request_context r{.task = "matmul", .search = 3, .round = 11, .lane = 2, .seed = 0xfedcba9876543210ull};
  CHECK(round_trip(r) == r);
  const sampling s{.temperature = 0.1, .top_p = 1.0, .max_tokens = 4096};
  CHECK(round_trip(s) == s);

  const kv_lease k{.cached_tokens = 16384, .fetch_time = std::chrono::nanoseconds(1'234'567), .handle = 77};
  const json j = k;
  CHECK(j["fetch_time_ns"] == 1'234'567);
  const auto back = round_trip(k);
  CHECK(back.cached_tokens == k.cached_tokens);
  CHECK(back.fetch_time == k.fetch_time);
  CHECK(back.handle == k.handle);
}

TEST_CASE("reading keeps defaults for absent keys and ignores unknown ones") {
  const auto s = json::parse(R"({"temperature": 0.2, "future_knob": true})").get<sampling>();
  CHECK(s == sampling{.temperature = 0.2});
  CHECK(json::object().get<compile_report>() == compile_report{});
}

TEST_CASE("a present key of the wrong type is an error, not a silent default") {
  CHECK_THROWS_AS(json::parse(R"({"max_tokens": "many"})").get<sampling>(), detail::json_read_error);
  CHECK_THROWS_WITH(json::parse(R"({"max_tokens": "many"})").get<sampling>(),
                    Catch::StartsWith("/max_tokens: expected an integer in [") && Catch::EndsWith("found string \"many\""));
  CHECK_THROWS_WITH(json::parse(R"([1, 2])").get<usage>(), "expected an object, found array [1,2]");
  // A null is an absent key: the default stays.
  CHECK(json::parse(R"({"max_tokens": null})").get<sampling>() == sampling{});
}

TEST_CASE("a wrong-typed nested value names its JSON pointer, however deep") {
  auto pointer_of = [](const char* text) {
    try {
      (void)json::parse(text).get<evaluation>();
    } catch (const detail::json_read_error& e) {
      return e.pointer() + " | " + e.problem();
    }
    return std::string("no error");
  };
  CHECK(pointer_of(R"({"result": {"mismatch": {"max_abs": true}}})") ==
        "/result/mismatch/max_abs | expected a number (or \"inf\", \"-inf\", \"nan\"), found boolean true");
  CHECK(pointer_of(R"({"result": {"mismatch": {"first_indices": [1, 2, -3]}}})") ==
        "/result/mismatch/first_indices/2 | expected an integer in [0, 18446744073709551615], found number -3");
  CHECK(pointer_of(R"({"timing": {"metrics": {"a/b": "x"}}})") ==
        "/timing/metrics/a~1b | expected a number (or \"inf\", \"-inf\", \"nan\"), found string \"x\"");
  CHECK(pointer_of(R"({"result": {"kind": "okay"}})").starts_with("/result/kind | unknown verdict \"okay\"; expected one of"));
  CHECK(pointer_of(R"({"result": {"kind": "ok"}, "timing": {"speedup": "inf"}})") == "no error");

  // The error of a whole file: its name, the line of a JSONL record and the pointer.
  try {
    (void)json::parse(R"({"prov": {"round": "3"}})").get<candidate>();
    FAIL("no error");
  } catch (const detail::json_read_error& e) {
    const error err = e.at("run.jsonl", 7);
    CHECK(err.file == "run.jsonl");
    CHECK(err.line == 7);
    CHECK(err.where == "/prov/round");
    CHECK_THAT(err.what(), Catch::StartsWith("run.jsonl: line 7: /prov/round: expected an integer in ["));
  }
}
