// Stored references: the file format's reader and writer, the check against
// a task, and task files that name one (`"reference": {"stored": ...}`) or a
// recorded baseline.
#include <specgen/stored_reference.hpp>
#include <specgen/task_io.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace specgen;

namespace {

fs::path temp_dir(const char* name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("specgen_stored_{}_{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<std::byte> floats(std::initializer_list<float> v) {
  std::vector<std::byte> out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.begin(), out.size());
  return out;
}

std::vector<std::byte> floats(std::size_t n, float first) {
  std::vector<std::byte> out(n * sizeof(float));
  for (std::size_t i = 0; i < n; ++i) {
    const float f = first + static_cast<float>(i);
    std::memcpy(out.data() + i * sizeof(float), &f, sizeof f);
  }
  return out;
}

/// y = relu(x) for x[N]: the benchmark shape N=8 (two cases) and validation N=3.
std::vector<stored_case_data> relu_cases() {
  std::vector<stored_case_data> cases;
  cases.push_back({.shape = {{"N", 8}}, .seed = 1, .what = "seed 1", .inputs = {{"x", floats(8, -4)}},
                   .outputs = {{"y", floats({0, 0, 0, 0, 0, 1, 2, 3})}}, .terms = {}});
  cases.push_back({.shape = {{"N", 8}}, .seed = 2, .what = "seed 2", .inputs = {{"x", floats(8, 1)}},
                   .outputs = {{"y", floats(8, 1)}}, .terms = {}});
  cases.push_back({.shape = {{"N", 3}}, .seed = 1, .what = "seed 1", .inputs = {{"x", floats({-1, 0, 2})}},
                   .outputs = {{"y", floats({0, 0, 2})}}, .terms = {{"y", floats({1, 0, 2})}}});
  return cases;
}

const char* relu_task = R"json({
  "name": "relu",
  "description": "y = max(x, 0)",
  "symbols": ["N"],
  "benchmark_shape": {"N": 8},
  "validation_shapes": [{"N": 3}],
  "distributions": [],
  "inputs": [{"name": "x", "dtype": "f32", "shape": ["N"]}],
  "outputs": [{"name": "y", "dtype": "f32", "shape": ["N"]}],
  "reference": {"stored": "relu.specref"},
  "baseline": {"recorded": {"ms": 0.25, "device": "NVIDIA H200", "what": "PyTorch eager", "details": {"samples": 40}}}
})json";

void write_text(const fs::path& p, std::string_view text) {
  std::ofstream(p, std::ios::binary) << text;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("a stored reference is written, read back and checked against its task") {
  const fs::path dir = temp_dir("roundtrip");
  REQUIRE(stored_reference::write(dir / "relu.specref", "relu", relu_cases(), {{"tool", "test"}}));
  write_text(dir / "relu.json", relu_task);

  auto t = load_task(dir / "relu.json");
  REQUIRE(t);
  CHECK(t->reference.stored == (dir / "relu.specref").lexically_normal().string());
  REQUIRE(t->baseline.recorded);
  CHECK(t->baseline.recorded->ms == 0.25);
  CHECK(t->baseline.recorded->device == "NVIDIA H200");
  CHECK(nlohmann::json::parse(t->baseline.recorded->details) == nlohmann::json{{"samples", 40}});
  CHECK(parse_task(to_json(*t), t->file).value() == *t);  // the task format round-trips

  auto ref = stored_reference::open(t->reference.stored);
  REQUIRE(ref);
  CHECK(ref->task_name() == "relu");
  CHECK(nlohmann::json::parse(ref->producer()) == nlohmann::json{{"tool", "test"}});
  REQUIRE(ref->cases().size() == 3);
  CHECK(ref->cases_at({{"N", 8}}) == std::vector<std::size_t>{0, 1});
  CHECK(ref->cases_at({{"N", 3}}) == std::vector<std::size_t>{2});
  CHECK(ref->check(*t));
  const auto y = ref->read(ref->cases()[0].outputs.at("y"));
  REQUIRE(y);
  CHECK(*y == floats({0, 0, 0, 0, 0, 1, 2, 3}));
  const auto terms = ref->read(ref->cases()[2].terms.at("y"));
  REQUIRE(terms);
  CHECK(*terms == floats({1, 0, 2}));
  for (const auto& c : ref->cases())
    for (const auto& [name, b] : c.inputs) CHECK(b.offset % 64 == 0);
  fs::remove_all(dir);
}

TEST_CASE("a task without a baseline beside a stored reference has none, and kinds do not mix") {
  const fs::path dir = temp_dir("kinds");
  REQUIRE(stored_reference::write(dir / "relu.specref", "relu", relu_cases()));
  auto j = nlohmann::json::parse(relu_task);
  j.erase("baseline");
  auto t = parse_task(j, (dir / "relu.json").string());
  REQUIRE(t);
  CHECK(t->baseline == implementation{});
  CHECK_FALSE(to_json(*t).contains("baseline"));
  CHECK(parse_task(to_json(*t), t->file).value() == *t);

  auto error_of = [&](nlohmann::json bad) {
    auto r = parse_task(bad, "relu.json");
    REQUIRE_FALSE(r);
    return r.error().what();
  };
  auto both = nlohmann::json::parse(relu_task);
  both["reference"]["plan"] = "launch k grid(1) block(1) args(x, y, N)";
  CHECK_THAT(error_of(both), Catch::Contains("/reference: give one of"));
  auto recorded_ref = nlohmann::json::parse(relu_task);
  recorded_ref["reference"] = {{"recorded", {{"ms", 1}, {"device", "x"}}}};
  CHECK_THAT(error_of(recorded_ref), Catch::Contains("/reference/recorded: a reference computes outputs"));
  auto stored_base = nlohmann::json::parse(relu_task);
  stored_base["baseline"] = {{"stored", "relu.specref"}};
  CHECK_THAT(error_of(stored_base), Catch::Contains("/baseline/stored: a baseline is timed"));
  auto zero_ms = nlohmann::json::parse(relu_task);
  zero_ms["baseline"]["recorded"]["ms"] = 0;
  CHECK_THAT(error_of(zero_ms), Catch::Contains("/baseline/recorded/ms: must be a time in milliseconds > 0, got 0"));
  auto no_device = nlohmann::json::parse(relu_task);
  no_device["baseline"]["recorded"].erase("device");
  CHECK_THAT(error_of(no_device), Catch::Contains("/baseline/recorded: missing required key 'device'"));
  fs::remove_all(dir);
}

TEST_CASE("a damaged or mismatched stored reference is an error naming the file and the place") {
  const fs::path dir = temp_dir("damaged");
  const fs::path file = dir / "relu.specref";
  REQUIRE(stored_reference::write(file, "relu", relu_cases()));
  write_text(dir / "relu.json", relu_task);
  const std::string good = bytes_of(file);

  SECTION("a flipped byte in a buffer fails its checksum when read") {
    auto ref = stored_reference::open(file);
    REQUIRE(ref);
    std::string bad = good;
    bad[static_cast<std::size_t>(ref->cases()[0].outputs.at("y").offset) + 5] ^= 0x40;
    write_text(file, bad);
    auto y = ref->read(ref->cases()[0].outputs.at("y"));
    REQUIRE_FALSE(y);
    CHECK_THAT(y.error().what(), Catch::Contains("relu.specref") && Catch::Contains("are damaged: their checksum is"));
  }
  SECTION("a truncated file is refused when opened, and so is the task") {
    write_text(file, good.substr(0, good.size() - 10));
    auto ref = stored_reference::open(file);
    REQUIRE_FALSE(ref);
    CHECK_THAT(ref.error().what(), Catch::Contains("run past the end of the file"));
    auto t = load_task(dir / "relu.json");
    REQUIRE_FALSE(t);
    CHECK_THAT(t.error().what(), Catch::Contains("run past the end of the file"));
  }
  SECTION("not a stored reference") {
    write_text(file, "{\"task\": \"relu\"}                    ");
    auto ref = stored_reference::open(file);
    REQUIRE_FALSE(ref);
    CHECK_THAT(ref.error().what(), Catch::Contains("does not start with \"SPECREF1\""));
  }
  SECTION("a header naming another task, or sizes the task's shapes do not give") {
    REQUIRE(stored_reference::write(file, "gelu", relu_cases()));
    auto t = load_task(dir / "relu.json");
    REQUIRE_FALSE(t);
    CHECK_THAT(t.error().what(), Catch::Contains("/task: the stored reference is for task 'gelu', not 'relu'"));
    auto cases = relu_cases();
    cases[2].outputs["y"] = floats({0, 0});
    REQUIRE(stored_reference::write(file, "relu", cases));
    t = load_task(dir / "relu.json");
    REQUIRE_FALSE(t);
    CHECK_THAT(t.error().what(), Catch::Contains("/cases/2/outputs/y/bytes: 8 bytes; 'y' (f32 N) at N=3 needs 12"));
    cases = relu_cases();
    cases[2].inputs.clear();
    REQUIRE(stored_reference::write(file, "relu", cases));
    t = load_task(dir / "relu.json");
    REQUIRE_FALSE(t);
    CHECK_THAT(t.error().what(), Catch::Contains("/cases/2/inputs: holds no 'x'"));
    cases = relu_cases();
    cases.pop_back();  // nothing at the validation shape
    REQUIRE(stored_reference::write(file, "relu", cases));
    t = load_task(dir / "relu.json");
    REQUIRE_FALSE(t);
    CHECK_THAT(t.error().what(), Catch::Contains("no case at validation shape 0 (N=3)"));
  }
  SECTION("a header with a wrong field names its pointer") {
    auto ref = stored_reference::open(file);
    REQUIRE(ref);
    // Rewrite the header with the first case's offset misaligned: same length, one digit changed.
    const std::uint64_t len = [&] {
      std::uint64_t n = 0;
      for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(good[8 + static_cast<std::size_t>(i)]);
      return n;
    }();
    std::string header = good.substr(16, static_cast<std::size_t>(len));
    const std::string from = fmt::format("\"offset\":{}", ref->cases()[0].inputs.at("x").offset);
    const auto at = header.find(from);
    REQUIRE(at != std::string::npos);
    header[at + from.size() - 1] = static_cast<char>(header[at + from.size() - 1] == '1' ? '2' : '1');
    write_text(file, good.substr(0, 16) + header + good.substr(16 + header.size()));
    auto bad = stored_reference::open(file);
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().what(), Catch::Contains("/cases/0/inputs/x: offset") && Catch::Contains("is not a multiple of 64"));
    auto j = nlohmann::json::parse(good.substr(16, static_cast<std::size_t>(len)));
    j["cases"][1]["outputs"]["y"]["xxh3"] = "xyz";
    const std::string text = j.dump();
    std::string head = "SPECREF1";
    for (int i = 0; i < 8; ++i) head.push_back(static_cast<char>((text.size() >> (8 * i)) & 0xffu));
    write_text(file, head + text + std::string(1 << 16, '\0'));
    bad = stored_reference::open(file);
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().what(), Catch::Contains("/cases/1/outputs/y/xxh3: must be 16 hex digits"));
  }
  fs::remove_all(dir);
}
