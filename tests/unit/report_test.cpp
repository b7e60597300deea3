// The report's data model, read from journals written here: what each view
// gets, and what a damaged journal gets.
#include <specgen/report.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// A fresh directory under the system's temporary one.
fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("specgen_report_test_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

json rec(std::string type, std::int64_t t_ns, json body) {
  body["type"] = std::move(type);
  body["t_ns"] = t_ns;
  return body;
}

json cand(std::int64_t id, int search, std::string origin, std::string trigger, std::int64_t prefix,
          std::string source = "extern \"C\" __global__ void k() {}") {
  return {{"id", id},
          {"task", "relu"},
          {"source", std::move(source)},
          {"plan", "launch k grid(1) block(1) args()"},
          {"prov",
           {{"search", search},
            {"round", 0},
            {"lane", 0},
            {"origin", std::move(origin)},
            {"trigger", std::move(trigger)},
            {"prefix_tokens", prefix},
            {"sample", 0},
            {"parents", json::array()}}}};
}

json stage(int search, std::int64_t id, const char* stage, const char* kind, std::int64_t busy_ns,
           std::optional<int> device = std::nullopt, std::optional<double> speedup = std::nullopt) {
  json j{{"search", search}, {"candidate", id}, {"stage", stage}, {"busy_ns", busy_ns},
         {"result", {{"kind", kind}, {"summary", ""}, {"log", ""}}}};
  if (device) j["device"] = *device;
  if (speedup) j["timing"] = {{"speedup", *speedup}, {"median_us", 10.0}};
  return j;
}

constexpr std::int64_t s = 1'000'000'000;

/// One search of task relu: a fork that yields candidate 1 (fast) and a main answer that yields
/// candidate 2 (faster), a terminated round, one compile error.
std::vector<json> small_run() {
  return {
      rec("run_start", 0, {{"format", 2}, {"seed", 1}, {"config", json::object()}}),
      rec("search_start", 0, {{"search", 0}, {"task", "relu"}}),
      rec("round_start", 0, {{"search", 0}, {"round", 0}}),
      rec("fork", 2 * s, {{"search", 0}, {"round", 0}, {"lane", 0}, {"trigger", "design_decision"},
                          {"prefix_tokens", 512}, {"samples", 2}, {"stream", 3}}),
      rec("extract_failed", 3 * s, {{"search", 0}, {"round", 0}, {"lane", 0}, {"origin", "fork"},
                                    {"trigger", "design_decision"}, {"prefix_tokens", 512}, {"sample", 1},
                                    {"reason", "no_code"}}),
      rec("candidate", 4 * s, {{"candidate", cand(1, 0, "fork", "design_decision", 512)}}),
      rec("evaluation", 5 * s, stage(0, 1, "compile", "ok", s / 2)),
      rec("evaluation", 6 * s, stage(0, 1, "validate", "ok", s / 2, 1)),
      rec("evaluation", 8 * s, stage(0, 1, "profile", "ok", s, 1, 1.25)),
      rec("terminated", 9 * s, {{"search", 0}, {"round", 0}, {"lane", 0}, {"by", 1}}),
      rec("round_end", 9 * s, {{"search", 0}, {"round", 0}, {"reason", "terminated"}, {"generated_tokens", 900}}),
      rec("round_start", 9 * s, {{"search", 0}, {"round", 1}}),
      rec("candidate", 12 * s,
          {{"candidate", cand(2, 0, "main", "", 0, "// </script><script>alert(1)</script>\nextern \"C\" __global__ void k() {}")}}),
      rec("candidate", 12 * s, {{"candidate", cand(3, 0, "main", "", 0)}}),
      rec("evaluation", 13 * s, stage(0, 3, "compile", "compile_error", s / 4)),
      rec("evaluation", 13 * s, stage(0, 2, "compile", "ok", s / 4)),
      rec("evaluation", 14 * s, stage(0, 2, "validate", "ok", s / 2, 0)),
      rec("evaluation", 16 * s, stage(0, 2, "profile", "ok", s, 0, 2.5)),
      rec("round_end", 16 * s, {{"search", 0}, {"round", 1}, {"reason", "answer"}, {"generated_tokens", 2000}}),
      rec("search_end", 16 * s, {{"search", 0}, {"reason", "round budget"}, {"best_speedup", 2.5}, {"best", 2},
                                 {"rounds", 2}, {"generated_tokens", 2000}}),
      rec("run_end", 16 * s, {{"e2e_seconds", 16.0}, {"generated_tokens", 2000}, {"profiled_kernels", 2},
                              {"pool_utilization", 0.2}, {"stream_failures", 0}}),
  };
}

void write_lines(const fs::path& p, const std::vector<json>& records, const std::string& tail = {}) {
  std::ofstream f(p, std::ios::binary);
  for (const auto& r : records) f << r.dump() << '\n';
  f << tail;
}

}  // namespace

TEST_CASE("a run directory becomes one run with every view's data") {
  const fs::path dir = scratch("dir");
  write_lines(dir / "journal.jsonl", small_run());
  std::ofstream(dir / "results.json") << R"({"evaluator": "simulated_device", "best_speedup_geomean": 2.5})";
  auto runs = specgen::load_report_runs(dir);
  REQUIRE(runs);
  REQUIRE(runs->size() == 1);
  const json& d = runs->front().data;
  CHECK(runs->front().label == "specgen_report_test_dir");
  CHECK(d["evaluator"] == "simulated_device");
  CHECK(d["summary"]["geomean"] == 2.5);
  CHECK(d["summary"]["e2e_s"] == 16.0);
  // GPU rows from the records' device indices, compile first.
  CHECK(d["devices"] == json({"compile", "GPU 0", "GPU 1"}));
  REQUIRE(d["jobs"].size() == 7);
  // [device, t0, t1, stage, verdict, candidate, search]: the profile of candidate 1 held GPU 1 from 7 s to 8 s.
  const json& prof = d["jobs"][2];
  CHECK(d["devices"][prof[0].get<int>()] == "GPU 1");
  CHECK(prof[1] == 7.0);
  CHECK(prof[2] == 8.0);
  CHECK(d["stages"][prof[3].get<int>()] == "profile");
  CHECK(d["verdicts"][prof[4].get<int>()] == "ok");
  CHECK(prof[5] == 1);

  REQUIRE(d["searches"].size() == 1);
  const json& se = d["searches"][0];
  CHECK(se["task"] == "relu");
  CHECK(se["best"] == 2);
  CHECK(se["rounds"] == 2);
  CHECK(se["tokens"] == 2000);
  CHECK(se["forks"] == 1);
  CHECK(se["terminations"] == 1);
  CHECK(se["candidates"] == 3);
  // Final verdicts: two kernels profiled ok, one compile error.
  CHECK(se["verdicts"] == json({{"ok", 2}, {"compile_error", 1}}));
  // The best rose twice: 1.25 at 8 s, 2.5 at 16 s.
  CHECK(se["best_curve"] == json::array({json::array({8.0, 1.25}), json::array({16.0, 2.5})}));
  // Rounds as streams, ended by termination and by the answer.
  CHECK(se["streams"] == json::array({json::array({0, 0.0, 9.0, 0, "terminated"}), json::array({0, 9.0, 16.0, 1, "answer"})}));
  // The fork ran from its trigger (2 s) to its last result (the candidate at 4 s).
  REQUIRE(se["fork_spans"].size() == 1);
  const json& f = se["fork_spans"][0];
  CHECK(f[1] == 2.0);
  CHECK(f[2] == 4.0);
  CHECK(d["triggers"][f[3].get<int>()] == "design_decision");
  CHECK(f[4] == 512);
  CHECK(se["terminations_at"] == json::array({json::array({9.0, 0, 1})}));
  // The best kernel of the task, with its source.
  REQUIRE(d["best"].size() == 1);
  CHECK(d["best"][0]["candidate"] == 2);
  CHECK(d["best"][0]["speedup"] == 2.5);
  CHECK(d["best"][0]["t"] == 16.0);
  CHECK(d["best"][0]["source"].get<std::string>().find("</script>") != std::string::npos);
}

TEST_CASE("the page holds the data where no source can end its script element") {
  const fs::path dir = scratch("page");
  write_lines(dir / "journal.jsonl", small_run());
  auto runs = specgen::load_report_runs(dir / "journal.jsonl");
  REQUIRE(runs);
  std::vector<specgen::report_run> two{runs->front(), runs->front()};
  const std::string page = specgen::render_report(two, {.title = "t"});
  CHECK(page.find("__SPECGEN_REPORT_DATA__") == std::string::npos);
  // The kernel's "</script>" is in the page as "<\/script>" only.
  CHECK(page.find("<\\/script><script>alert(1)<\\/script>") != std::string::npos);
  CHECK(page.find("</script><script>alert(1)") == std::string::npos);
  // The data parses back, and repeated labels are told apart.
  const auto open = page.find("id=\"specgen-data\">");
  REQUIRE(open != std::string::npos);
  const auto from = page.find('>', open) + 1;
  const auto to = page.find("</script>", from);
  const json data = json::parse(page.substr(from, to - from));
  CHECK(data["format"] == "specgen-report/1");
  REQUIRE(data["runs"].size() == 2);
  CHECK(data["runs"][0]["label"] == "specgen_report_test_page");
  CHECK(data["runs"][1]["label"] == "specgen_report_test_page (2)");
}

TEST_CASE("a directory of journals is one run per mode") {
  const fs::path dir = scratch("modes");
  write_lines(dir / "specgen.jsonl", small_run());
  write_lines(dir / "sequential.jsonl", small_run());
  auto runs = specgen::load_report_runs(dir);
  REQUIRE(runs);
  REQUIRE(runs->size() == 2);
  CHECK((*runs)[0].label == "sequential");
  CHECK((*runs)[1].label == "specgen");
}

TEST_CASE("a torn last line is skipped with a note; a damaged line is an error naming it") {
  const fs::path dir = scratch("damaged");
  write_lines(dir / "journal.jsonl", small_run(), R"({"type":"candidate","t_ns":17)");
  auto torn = specgen::load_report_runs(dir);
  REQUIRE(torn);
  REQUIRE(torn->front().notes.size() == 1);
  CHECK(torn->front().notes[0].find("journal.jsonl:22: a torn last line") != std::string::npos);
  CHECK(torn->front().data["searches"][0]["best"] == 2);

  auto records = small_run();
  write_lines(dir / "journal.jsonl", {records[0], records[1]}, "{\"type\": \"fork\"\n");
  auto bad = specgen::load_report_runs(dir);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().line == 3);
  CHECK(bad.error().what().find("journal.jsonl: line 3: not a journal record") != std::string::npos);

  // A record without a field a view needs names the record's line and the field.
  write_lines(dir / "journal.jsonl", {records[0], rec("round_start", 1, {{"round", 0}})});
  auto missing = specgen::load_report_runs(dir);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().what() ==
        (dir / "journal.jsonl").string() + ": line 2: /search: missing (required) (in the round_start record)");

  write_lines(dir / "journal.jsonl", {});
  auto empty = specgen::load_report_runs(dir);
  REQUIRE_FALSE(empty);
  CHECK(empty.error().message.find("no journal records") != std::string::npos);

  auto nothing = specgen::load_report_runs(scratch("nothing"));
  REQUIRE_FALSE(nothing);
  CHECK(nothing.error().message.find("no journal here") != std::string::npos);
  CHECK_FALSE(specgen::load_report_runs(dir / "absent.jsonl"));
  std::ofstream(dir / "results.json") << "{}";
  auto results = specgen::load_report_runs(dir / "results.json");
  REQUIRE_FALSE(results);
  CHECK(results.error().message.find("a JSON file, not a journal") != std::string::npos);
}

TEST_CASE("a field of the wrong type is an error naming the line and its JSON pointer, never a silent default") {
  const fs::path dir = scratch("wrong_type");
  auto records = small_run();
  // Nested: the evaluation's result kind; the candidate's provenance; the profile's speedup.
  records[7]["result"]["kind"] = 7;
  write_lines(dir / "journal.jsonl", records);
  auto kind = specgen::load_report_runs(dir);
  REQUIRE_FALSE(kind);
  CHECK(kind.error().file == (dir / "journal.jsonl").string());
  CHECK(kind.error().line == 8);
  CHECK(kind.error().where == "/result/kind");
  CHECK(kind.error().what() == (dir / "journal.jsonl").string() +
                                   ": line 8: /result/kind: expected a string, found number 7 (in the evaluation record)");

  records = small_run();
  records[5]["candidate"]["prov"]["lane"] = "zero";
  write_lines(dir / "journal.jsonl", records);
  auto lane = specgen::load_report_runs(dir);
  REQUIRE_FALSE(lane);
  CHECK(lane.error().line == 6);
  CHECK(lane.error().where == "/candidate/prov/lane");

  records = small_run();
  records[8]["timing"]["speedup"] = true;
  write_lines(dir / "journal.jsonl", records);
  auto speedup = specgen::load_report_runs(dir);
  REQUIRE_FALSE(speedup);
  CHECK(speedup.error().where == "/timing/speedup");

  // An optional field the report reads with a default, given with another type.
  records = small_run();
  records[3]["samples"] = "two";
  write_lines(dir / "journal.jsonl", records);
  auto samples = specgen::load_report_runs(dir);
  REQUIRE_FALSE(samples);
  CHECK(samples.error().line == 4);
  CHECK(samples.error().where == "/samples");

  // results.json beside the journal is read the same way, and named.
  write_lines(dir / "journal.jsonl", small_run());
  std::ofstream(dir / "results.json") << R"({"evaluator": 3})";
  auto results = specgen::load_report_runs(dir);
  REQUIRE_FALSE(results);
  CHECK(results.error().what() == (dir / "results.json").string() + ": /evaluator: expected a string, found number 3");

  // Missing optional keys, nulls and unknown keys are fine: the format is open.
  records = small_run();
  records[3].erase("samples");
  records[3]["lane"] = nullptr;
  records[3]["future_key"] = {{"any", "thing"}};
  write_lines(dir / "journal.jsonl", records);
  fs::remove(dir / "results.json");
  auto open = specgen::load_report_runs(dir);
  REQUIRE(open);
  CHECK(open->front().data["searches"][0]["fork_spans"][0][5] == 1);
}

TEST_CASE("a long best kernel is cut, saying how much was left out") {
  const fs::path dir = scratch("long");
  auto records = small_run();
  records[12]["candidate"]["source"] = std::string(5000, 'x');
  write_lines(dir / "journal.jsonl", records);
  auto runs = specgen::load_report_runs(dir, {.max_source_bytes = 1000});
  REQUIRE(runs);
  const std::string src = runs->front().data["best"][0]["source"];
  CHECK(src.size() < 1100);
  CHECK(src.find("(4000 more bytes not shown)") != std::string::npos);
}
