#include <specgen/task_io.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

using namespace specgen;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path examples = fs::path(SPECGEN_SOURCE_DIR) / "tasks" / "examples";

/// A small valid task; each test breaks one thing.
json minimal() {
  return json::parse(R"json({
    "name": "scale",
    "description": "y = 2 * x",
    "symbols": ["N", "M"],
    "benchmark_shape": {"N": 1024, "M": 64},
    "validation_shapes": [{"N": 1, "M": 1}, {"N": 77, "M": 3}],
    "inputs": [{"name": "x", "dtype": "f32", "shape": ["N", "M"]}],
    "outputs": [{"name": "y", "dtype": "f32", "shape": ["N", "M"]}],
    "reference": {
      "source": "extern \"C\" __global__ void scale(const float* x, float* y, int n) {}",
      "plan": "launch scale grid(cdiv(N * M, 256)) block(256) args(x, y, N * M)"
    }
  })json");
}

error fails(const json& j) {
  auto t = parse_task(j, "t.json");
  REQUIRE_FALSE(t);
  return t.error();
}

/// A fresh directory under the system temp dir, removed at scope exit.
struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("specgen_task_test_" + std::to_string(std::random_device{}()));
  temp_dir() { fs::create_directories(path); }
  ~temp_dir() { fs::remove_all(path); }
  temp_dir(const temp_dir&) = delete;  // owns the directory on disk
  temp_dir& operator=(const temp_dir&) = delete;
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
};

}  // namespace

TEST_CASE("a valid task file loads with defaults filled in") {
  auto t = parse_task(minimal(), "dir/t.json");
  REQUIRE(t);
  CHECK(t->name == "scale");
  CHECK(t->file == "dir/t.json");
  CHECK(t->symbols == std::vector<std::string>{"N", "M"});
  CHECK(t->benchmark_shape == shape_binding{{"N", 1024}, {"M", 64}});
  CHECK(t->validation_shapes.size() == 2);
  CHECK(t->inputs[0].init == distribution::normal);
  CHECK(t->outputs[0].tol == default_tolerance(dtype::f32));
  CHECK(t->baseline == t->reference);  // no baseline: time against the reference
  CHECK(t->compile_options.empty());
}

TEST_CASE("the three example tasks load and their plans resolve on every shape") {
  for (const char* name : {"vector_add", "softmax", "matmul"}) {
    INFO(name);
    auto t = load_task(examples / (std::string(name) + ".json"));
    if (!t) FAIL(t.error().what());
    CHECK(t->name == name);
    CHECK_FALSE(t->reference.source.empty());
    for (const auto* im : {&t->reference, &t->baseline}) {
      auto plan = parse_plan(im->plan);
      REQUIRE(plan);
      for (const auto& k : kernel_names(*plan)) CHECK(im->source.find("extern \"C\" __global__ void " + k + "(") != std::string::npos);
      CHECK(resolve(*plan, *t, t->benchmark_shape));
      for (const auto& shape : t->validation_shapes) CHECK(resolve(*plan, *t, shape));
    }
  }
}

TEST_CASE("example plans resolve to the geometry their kernels expect") {
  auto softmax = load_task(examples / "softmax.json");
  REQUIRE(softmax);
  auto r = resolve(*parse_plan(softmax->reference.plan), *softmax, softmax->benchmark_shape);
  REQUIRE(r);
  CHECK(r->scratch_bytes() == 4096 * 2 * 4);
  CHECK(r->launches[0].smem_bytes == 256 * 4);
  CHECK(softmax->baseline == softmax->reference);

  auto matmul = load_task(examples / "matmul.json");
  REQUIRE(matmul);
  CHECK(matmul->baseline.plan != matmul->reference.plan);
  auto m = resolve(*parse_plan(matmul->baseline.plan), *matmul, {{"M", 37}, {"N", 61}, {"K", 129}});
  REQUIRE(m);
  CHECK(m->launches[0].grid == std::array<std::uint32_t, 3>{4, 3, 1});
}

TEST_CASE("a task round-trips through to_json") {
  for (const char* name : {"vector_add", "softmax", "matmul"}) {
    INFO(name);
    auto t = load_task(examples / (std::string(name) + ".json"));
    REQUIRE(t);
    const json j = to_json(*t);
    auto back = parse_task(j, t->file);
    if (!back) FAIL(back.error().what());
    CHECK(*back == *t);
    const json via_adl = *t;
    CHECK(via_adl == j);
  }
}

TEST_CASE("a suite is every task file of a directory, sorted by task name") {
  auto suite = load_suite(examples);
  if (!suite) FAIL(suite.error().what());
  REQUIRE(suite->size() == 3);
  CHECK((*suite)[0].name == "matmul");
  CHECK((*suite)[1].name == "softmax");
  CHECK((*suite)[2].name == "vector_add");
}

TEST_CASE("a suite rejects two files defining the same task") {
  temp_dir dir;
  dir.write("a.json", minimal().dump());
  dir.write("b.json", minimal().dump());
  auto suite = load_suite(dir.path);
  REQUIRE_FALSE(suite);
  CHECK(suite.error().file == (dir.path / "b.json").string());
  CHECK(suite.error().where == "/name");
  CHECK_THAT(suite.error().message, Catch::StartsWith("task 'scale' is also defined in " + (dir.path / "a.json").string()));
}

TEST_CASE("an empty directory is not a suite") {
  temp_dir dir;
  auto suite = load_suite(dir.path);
  REQUIRE_FALSE(suite);
  CHECK(suite.error().message == "no *.json task files in the directory");
}

TEST_CASE("errors render as file, JSON pointer and message") {
  json j = minimal();
  j["inputs"][0]["shape"][1] = "K";
  const auto e = fails(j);
  CHECK(e.where == "/inputs/0/shape/1");
  CHECK(e.what() == "t.json: /inputs/0/shape/1: 'K' uses unknown name 'K' (symbols: N, M)");
}

TEST_CASE("unknown keys are rejected and near misses get a suggestion") {
  json j = minimal();
  j["outputs"][0]["tolerence"] = {{"abs", 1e-3}};
  auto e = fails(j);
  CHECK(e.where == "/outputs/0/tolerence");
  CHECK(e.message == "unknown key 'tolerence' (did you mean 'tolerance'?); allowed: name, dtype, shape, tolerance");
  j = minimal();
  j["inputs"][0]["tolerance"] = {{"abs", 1e-3}};  // tolerances belong to outputs
  CHECK(fails(j).where == "/inputs/0/tolerance");
  j = minimal();
  j["frobnicate"] = true;
  CHECK(fails(j).message.rfind("unknown key 'frobnicate'; allowed: name,", 0) == 0);
}

TEST_CASE("missing required keys and wrong JSON types are reported at their field") {
  json j = minimal();
  j.erase("outputs");
  CHECK(fails(j).what() == "t.json: /: missing required key 'outputs'");
  j = minimal();
  j["symbols"] = "N";
  CHECK(fails(j).what() == "t.json: /symbols: must be an array of strings, got string");
  j = minimal();
  j["benchmark_shape"]["N"] = 10.5;
  CHECK(fails(j).what() == "t.json: /benchmark_shape/N: must be an integer, got 10.5");
}

TEST_CASE("dtypes and distributions must be known") {
  json j = minimal();
  j["inputs"][0]["dtype"] = "float32";
  CHECK(fails(j).message == "unknown dtype 'float32' (known: f16, bf16, f32, f64, i8, u8, i32, i64)");
  j = minimal();
  j["inputs"][0]["init"] = "gaussian";
  const auto e = fails(j);
  CHECK(e.where == "/inputs/0/init");
  CHECK(e.message == "unknown distribution 'gaussian' (known: normal, uniform, signed_uniform, large, zeros, ones, "
                     "normal(mean, std), uniform(lo, hi), randint(lo, hi), const(v), arange, arange(start, step))");
}

TEST_CASE("every symbol is bound in every shape, to a positive value, and nothing else is") {
  json j = minimal();
  j["validation_shapes"][1].erase("M");
  CHECK(fails(j).what() == "t.json: /validation_shapes/1: symbol 'M' has no value");
  j = minimal();
  j["benchmark_shape"]["K"] = 3;
  CHECK(fails(j).what() == "t.json: /benchmark_shape/K: 'K' is not a declared symbol (symbols: N, M)");
  j = minimal();
  j["validation_shapes"][0]["N"] = 0;
  CHECK(fails(j).what() == "t.json: /validation_shapes/0/N: must be at least 1, got 0");
  j = minimal();
  j["validation_shapes"] = json::array();
  CHECK(fails(j).where == "/validation_shapes");
}

TEST_CASE("shapes must parse and be positive on every shape") {
  json j = minimal();
  j["outputs"][0]["shape"][0] = "N +";
  auto e = fails(j);
  CHECK(e.where == "/outputs/0/shape/0");
  CHECK(e.message.rfind("column 4: expected a number, a name or '(', found the end", 0) == 0);
  j = minimal();
  j["outputs"][0]["shape"][0] = "N - 1";
  CHECK(fails(j).what() ==
        "t.json: /outputs/0/shape/0: at shape M=1,N=1: 'N - 1' = 0; dimensions must be at least 1");
  j = minimal();
  j["outputs"][0]["shape"] = json::array({"N", 2});  // integers are allowed as dims
  CHECK(parse_task(j, "t.json")->outputs[0].shape == std::vector<std::string>{"N", "2"});
}

TEST_CASE("names are identifiers, unique, and symbols are not function names") {
  json j = minimal();
  j["symbols"] = {"N", "M", "N"};
  CHECK(fails(j).what() == "t.json: /symbols/2: symbol 'N' is declared twice");
  j = minimal();
  j["symbols"] = {"N", "M", "min"};
  CHECK(fails(j).message == "'min' is a function of size expressions; choose another name");
  j = minimal();
  j["outputs"][0]["name"] = "x";
  CHECK(fails(j).what() == "t.json: /outputs/0/name: buffer 'x' is declared twice");
  j = minimal();
  j["outputs"][0]["name"] = "N";
  CHECK(fails(j).message == "'N' is already a size symbol");
  j = minimal();
  j["name"] = "my task";
  CHECK(fails(j).where == "/name");
}

TEST_CASE("at least one output is required and tolerances are non-negative") {
  json j = minimal();
  j["outputs"] = json::array();
  CHECK(fails(j).what() == "t.json: /outputs: at least one output is required");
  j = minimal();
  j["outputs"][0]["tolerance"] = {{"rel", -1}};
  CHECK(fails(j).what() == "t.json: /outputs/0/tolerance/rel: must be finite and non-negative, got -1");
}

TEST_CASE("the reference plan must parse, name kernels of the source and resolve on every shape") {
  json j = minimal();
  j["reference"]["plan"] = "launch scale grid(N) block(256) args(x, y, N, M";
  auto e = fails(j);
  CHECK(e.where == "/reference/plan");
  CHECK(e.message == "line 1, column 37: args: '(' is never closed");
  j = minimal();
  j["reference"]["plan"] = "launch scael grid(N) block(256) args(x, y)";
  CHECK(fails(j).message == "launches kernel 'scael', which the source does not define");
  j = minimal();
  j = minimal();
  j["reference"]["plan"] = "launch scale grid(N) block(M * 32) args(x, y)";
  CHECK(fails(j).what() ==
        "t.json: /reference/plan: at shape M=64,N=1024: line 1: block.x: 'M * 32' = 2048 exceeds the device limit of "
        "1024");
  j["reference"]["plan"] = "launch scale grid(N - 1) block(32) args(x, y)";
  CHECK(fails(j).message == "at shape M=1,N=1: line 1: grid.x: 'N - 1' = 0; it must be at least 1");
}

TEST_CASE("an implementation is one kind: source with a plan, a host callback, stored outputs or a recorded time") {
  json j = minimal();
  j["baseline"] = {{"host", "cublas_sgemm"}};
  auto t = parse_task(j, "t.json");
  REQUIRE(t);
  CHECK(t->baseline.is_host());
  CHECK(t->baseline.host == "cublas_sgemm");
  j["baseline"]["plan"] = "launch scale grid(1) block(1)";
  CHECK(fails(j).what() == "t.json: /baseline: give one of 'host', 'source' with 'plan', 'stored' (a reference) or "
                           "'recorded' (a baseline), not several");
  j = minimal();
  j["reference"].erase("plan");
  CHECK(fails(j).what() == "t.json: /reference/plan: the source needs a launch plan: give 'plan'");
  j = minimal();
  j["reference"] = json::object();
  CHECK(fails(j).message == "give 'source' (or 'source_file') with 'plan', 'host', or 'stored'");
  j = minimal();
  j["baseline"] = json::object();
  CHECK(fails(j).what() == "t.json: /baseline: give 'source' (or 'source_file') with 'plan', 'host', or 'recorded'");
}

TEST_CASE("source and plan may be written as arrays of lines") {
  json j = minimal();
  j["reference"]["plan"] = {"# one launch", "launch scale grid(N) block(256) args(x, y, N)"};
  auto t = parse_task(j, "t.json");
  REQUIRE(t);
  CHECK(t->reference.plan == "# one launch\nlaunch scale grid(N) block(256) args(x, y, N)\n");
}

TEST_CASE("a source file is read relative to the task file") {
  temp_dir dir;
  dir.write("k.cu", "extern \"C\" __global__ void scale(const float* x, float* y, int n) {}\n");
  json j = minimal();
  j["reference"].erase("source");
  j["reference"]["source_file"] = "k.cu";
  dir.write("t.json", j.dump());
  auto t = load_task(dir.path / "t.json");
  REQUIRE(t);
  CHECK(t->reference.source.rfind("extern \"C\"", 0) == 0);
  j["reference"]["source_file"] = "missing.cu";
  dir.write("t.json", j.dump());
  auto e = load_task(dir.path / "t.json");
  REQUIRE_FALSE(e);
  CHECK(e.error().where == "/reference/source_file");
  CHECK(e.error().message.rfind("cannot read 'missing.cu' (looked in '", 0) == 0);
}

TEST_CASE("a file that is not JSON, or is missing, is an error naming the file") {
  temp_dir dir;
  dir.write("bad.json", "{ \"name\": ");
  auto e = load_task(dir.path / "bad.json");
  REQUIRE_FALSE(e);
  CHECK(e.error().file == (dir.path / "bad.json").string());
  CHECK(e.error().message.rfind("not valid JSON: ", 0) == 0);
  auto missing = load_task(dir.path / "nope.json");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message == "cannot open the file: No such file or directory");
}

TEST_CASE("task files may contain comments") {
  temp_dir dir;
  dir.write("c.json", "// a comment\n" + minimal().dump());
  CHECK(load_task(dir.path / "c.json"));
}

TEST_CASE("a task built in code is checked by validate_task with the same messages") {
  task t = *parse_task(minimal(), "");
  CHECK(validate_task(t));
  t.outputs[0].tol.abs = -1;
  auto ok = validate_task(t);
  REQUIRE_FALSE(ok);
  CHECK(ok.error().what() == "<task>: /outputs/0/tolerance/abs: must be finite and non-negative, got -1");
}

// ---- hostile and careless files ---------------------------------------------------------

TEST_CASE("a task file that is a FIFO is refused at once instead of blocking") {
  temp_dir dir;
  REQUIRE(::mkfifo((dir.path / "t.json").c_str(), 0600) == 0);
  auto t = load_task(dir.path / "t.json");
  REQUIRE_FALSE(t);
  CHECK_THAT(t.error().message, Catch::Contains("FIFO") && Catch::Contains("not a regular file"));
}

TEST_CASE("a source_file that is a FIFO, a device or a directory is an error at /reference/source_file") {
  temp_dir dir;
  REQUIRE(::mkfifo((dir.path / "k.cu").c_str(), 0600) == 0);
  fs::create_directories(dir.path / "src.cu");
  for (const auto& [source, what] : {std::pair{"k.cu", "FIFO"}, std::pair{"/dev/zero", "character device"},
                                     std::pair{"src.cu", "directory"}}) {
    json j = minimal();
    j["reference"].erase("source");
    j["reference"]["source_file"] = source;
    dir.write("t.json", j.dump());
    auto t = load_task(dir.path / "t.json");
    REQUIRE_FALSE(t);
    CHECK(t.error().where == "/reference/source_file");
    CHECK_THAT(t.error().message, Catch::Contains(what) && Catch::Contains("not a regular file"));
  }
}

TEST_CASE("a source_file over 4 MiB is refused with the limit in the message") {
  temp_dir dir;
  dir.write("big.cu", std::string((4u << 20) + 1, ' '));
  json j = minimal();
  j["reference"].erase("source");
  j["reference"]["source_file"] = "big.cu";
  dir.write("t.json", j.dump());
  auto t = load_task(dir.path / "t.json");
  REQUIRE_FALSE(t);
  CHECK(t.error().where == "/reference/source_file");
  CHECK_THAT(t.error().message, Catch::Contains("over the limit of 4.0 MiB"));
}

TEST_CASE("a number too large for a double is an error value, not an exception") {
  temp_dir dir;
  json j = minimal();
  dir.write("t.json", j.dump().replace(j.dump().find("1024"), 4, "1e999"));
  auto t = load_task(dir.path / "t.json");
  REQUIRE_FALSE(t);
  CHECK_THAT(t.error().message, Catch::Contains("not valid JSON") && Catch::Contains("1e999"));
}

TEST_CASE("a task file nested hundreds of thousands deep is an error value naming the depth limit") {
  temp_dir dir;
  dir.write("t.json", std::string(200'000, '[') + std::string(200'000, ']'));
  auto t = load_task(dir.path / "t.json");
  REQUIRE_FALSE(t);
  CHECK_THAT(t.error().message, Catch::Contains("nested more than 64 levels"));
}

TEST_CASE("a suite directory holding a FIFO named *.json says so instead of blocking") {
  temp_dir dir;
  dir.write("a.json", minimal().dump());
  REQUIRE(::mkfifo((dir.path / "b.json").c_str(), 0600) == 0);
  auto suite = load_suite(dir.path);
  REQUIRE_FALSE(suite);
  CHECK(suite.error().file == (dir.path / "b.json").string());
  CHECK_THAT(suite.error().message, Catch::Contains("FIFO"));
}


// ---- scalars -----------------------------------------------------------------------------

namespace {

/// `minimal()` with scalars, passed by the reference plan.
json with_scalars() {
  json j = minimal();
  j["scalars"] = json::parse(R"json([
    {"name": "alpha", "type": "f32", "value": 1e-5},
    {"name": "beta", "type": "f64", "value": -0.25},
    {"name": "seed", "type": "u64", "value": 18446744073709551615},
    {"name": "lo", "type": "i64", "value": -9223372036854775808},
    {"name": "tag", "type": "u8", "value": 255},
    {"name": "two", "type": "i16", "value": 2.0},
    {"name": "h", "type": "f16", "value": 1}
  ])json");
  j["reference"]["source"] =
      "extern \"C\" __global__ void scale(const float* x, float* y, int n, float alpha, double beta,\n"
      "                                   unsigned long long seed, long long lo, unsigned char tag) {}";
  j["reference"]["plan"] = "launch scale grid(cdiv(N * M, 256)) block(256) args(x, y, N * M, alpha, beta, seed, lo, tag)";
  return j;
}

}  // namespace

TEST_CASE("task scalars load with their exact values and pass through the reference plan") {
  auto t = parse_task(with_scalars(), "t.json");
  if (!t) FAIL(t.error().what());
  REQUIRE(t->scalars.size() == 7);
  CHECK(t->scalars[0] == scalar_spec{.name = "alpha", .type = scalar_type::f32, .real = 1e-5});  // as written
  CHECK(t->scalars[1] == scalar_spec{.name = "beta", .type = scalar_type::f64, .real = -0.25});
  CHECK(static_cast<std::uint64_t>(t->scalars[2].value) == 18446744073709551615ull);
  CHECK(t->scalars[3].value == std::numeric_limits<std::int64_t>::min());
  CHECK(t->scalars[4] == scalar_spec{.name = "tag", .type = scalar_type::u8, .value = 255});
  CHECK(t->scalars[5] == scalar_spec{.name = "two", .type = scalar_type::i16, .value = 2});  // an integral float
  CHECK(t->scalars[6] == scalar_spec{.name = "h", .type = scalar_type::f16, .real = 1.0});    // an integer as a float
  auto plan = parse_plan(t->reference.plan);
  REQUIRE(plan);
  auto r = resolve(*plan, *t, t->benchmark_shape);
  REQUIRE(r);
  const auto& args = r->launches[0].args;
  CHECK(args[3] == resolved_arg{.type = scalar_type::f32, .real = static_cast<double>(1e-5f)});
  CHECK(args[5] == resolved_arg{.value = -1, .type = scalar_type::u64});
  CHECK(args[7] == resolved_arg{.value = 255, .type = scalar_type::u8});
  // A task without scalars writes none: existing task files read and write as before.
  CHECK_FALSE(to_json(*parse_task(minimal(), "t.json")).contains("scalars"));
}

TEST_CASE("task scalars round-trip through to_json exactly") {
  auto t = parse_task(with_scalars(), "t.json");
  REQUIRE(t);
  const json j = to_json(*t);
  CHECK(j["scalars"][2]["value"].dump() == "18446744073709551615");
  CHECK(j["scalars"][3]["value"].dump() == "-9223372036854775808");
  CHECK(j["scalars"][0] == json{{"name", "alpha"}, {"type", "f32"}, {"value", 1e-5}});
  auto back = parse_task(j, "t.json");
  if (!back) FAIL(back.error().what());
  CHECK(*back == *t);
  CHECK(parse_task(json::parse(j.dump()), "t.json").value() == *t);  // through text too
}

TEST_CASE("a scalar's type and value are checked with a message at the value") {
  auto scalar_fails = [](json scalar) {
    json j = minimal();
    j["scalars"] = json::array({std::move(scalar)});
    return fails(j);
  };
  CHECK(scalar_fails({{"name", "a"}, {"type", "f8"}, {"value", 1}}).what() ==
        "t.json: /scalars/0/type: unknown scalar type 'f8' (known: i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, "
        "f32, f64)");
  CHECK(scalar_fails({{"name", "a"}, {"type", "u8"}, {"value", 256}}).what() ==
        "t.json: /scalars/0/value: 256 is out of the range of u8 (0 to 255)");
  CHECK(scalar_fails({{"name", "a"}, {"type", "u32"}, {"value", -1}}).message ==
        "-1 is out of the range of u32 (0 to 4294967295)");
  CHECK(scalar_fails({{"name", "a"}, {"type", "i64"}, {"value", 9223372036854775808ull}}).message ==
        "9223372036854775808 is out of the range of i64 (-9223372036854775808 to 9223372036854775807)");
  CHECK(scalar_fails({{"name", "a"}, {"type", "i32"}, {"value", 1.5}}).message ==
        "1.5 is not an integer; type i32 needs an integral value");
  CHECK(scalar_fails({{"name", "a"}, {"type", "u64"}, {"value", 1e20}}).message ==
        "1e+20 is out of the range of u64 (0 to 18446744073709551615)");
  CHECK(scalar_fails({{"name", "a"}, {"type", "f32"}, {"value", 1e39}}).message ==
        "1e+39 is out of the range of f32 (-3.4028234663852886e+38 to 3.4028234663852886e+38)");
  CHECK(scalar_fails({{"name", "a"}, {"type", "f16"}, {"value", 70000}}).message ==
        "70000 is out of the range of f16 (-65504 to 65504)");
  CHECK(scalar_fails({{"name", "a"}, {"type", "f32"}, {"value", "1e-5"}}).what() ==
        "t.json: /scalars/0/value: must be a number, got \"1e-5\"");
  CHECK(scalar_fails({{"name", "a"}, {"type", "f32"}}).what() == "t.json: /scalars/0: missing required key 'value'");
  CHECK(scalar_fails({{"name", "a"}, {"dtype", "f32"}, {"value", 1}}).message ==
        "unknown key 'dtype' (did you mean 'type'?); allowed: name, type, value");
  json j = minimal();
  j["scalars"] = {{"eps", 1e-5}};
  CHECK(fails(j).what() ==
        "t.json: /scalars: must be an array of scalars like [{\"name\": \"eps\", \"type\": \"f32\", \"value\": "
        "1e-5}], got object");
}

TEST_CASE("scalar names are identifiers distinct from symbols, buffers and each other") {
  auto name_fails = [](std::vector<std::string> names) {
    json j = minimal();
    j["scalars"] = json::array();
    for (const auto& n : names) j["scalars"].push_back({{"name", n}, {"type", "f32"}, {"value", 1}});
    return fails(j);
  };
  CHECK(name_fails({"eps", "eps"}).what() == "t.json: /scalars/1/name: scalar 'eps' is declared twice (first at "
                                             "/scalars/0)");
  CHECK(name_fails({"N"}).what() == "t.json: /scalars/0/name: 'N' is already a size symbol");
  CHECK(name_fails({"x"}).what() == "t.json: /scalars/0/name: 'x' is already a buffer");
  CHECK(name_fails({"y"}).message == "'y' is already a buffer");
  CHECK(name_fails({"1eps"}).message == "'1eps' is not a name (letters, digits, '_')");
  CHECK(name_fails({"cdiv"}).message == "'cdiv' is a function of size expressions; choose another name");
}

TEST_CASE("the reference plan passes scalars by the plan's rules") {
  json j = with_scalars();
  j["reference"]["plan"] = "launch scale grid(1) block(1) args(x, y, N, alpha:i32)";
  CHECK(fails(j).what() ==
        "t.json: /reference/plan: at shape M=64,N=1024: line 1, column 45: args[3]: 'alpha' = 1e-05 is not an "
        "integer, so it cannot be passed as i32");
  j["reference"]["plan"] = "launch scale grid(1) block(1) args(x, y, N, 0.5)";
  CHECK(fails(j).message ==
        "line 1, column 45: args[3]: the float literal 0.5 needs a type: write '0.5:f32' for a 'float' parameter or "
        "'0.5:f64' for a 'double'");
  j["reference"]["plan"] = "launch scale grid(1) block(1) args(x, y, N, alpha:f64, 0.5:f32, tag:u16, seed:f32)";
  CHECK(parse_task(j, "t.json"));
}

TEST_CASE("validate_task checks the scalars of a task built in code") {
  task t = *parse_task(minimal(), "");
  t.scalars = {{.name = "k", .type = scalar_type::i8, .value = 300}};
  auto ok = validate_task(t);
  REQUIRE_FALSE(ok);
  CHECK(ok.error().what() == "<task>: /scalars/0/value: 300 is out of the range of i8 (-128 to 127)");
  t.scalars = {{.name = "eps", .type = scalar_type::f32, .real = std::numeric_limits<double>::quiet_NaN()}};
  CHECK(validate_task(t).error().message == "nan is not a finite number");
  t.scalars = {{.name = "seed", .type = scalar_type::u64, .value = -1}, {.name = "eps", .real = 1e-5}};
  CHECK(validate_task(t));
}
