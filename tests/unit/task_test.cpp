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

task_error fails(const json& j) {
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
  CHECK(suite.error().field == "/name");
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
  CHECK(e.field == "/inputs/0/shape/1");
  CHECK(e.what() == "t.json: /inputs/0/shape/1: 'K' uses unknown name 'K' (symbols: N, M)");
}

TEST_CASE("unknown keys are rejected and near misses get a suggestion") {
  json j = minimal();
  j["outputs"][0]["tolerence"] = {{"abs", 1e-3}};
  auto e = fails(j);
  CHECK(e.field == "/outputs/0/tolerence");
  CHECK(e.message == "unknown key 'tolerence' (did you mean 'tolerance'?); allowed: name, dtype, shape, tolerance");
  j = minimal();
  j["inputs"][0]["tolerance"] = {{"abs", 1e-3}};  // tolerances belong to outputs
  CHECK(fails(j).field == "/inputs/0/tolerance");
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
  CHECK(e.field == "/inputs/0/init");
  CHECK(e.message == "unknown distribution 'gaussian' (known: normal, uniform, signed_uniform, large, zeros, ones)");
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
  CHECK(fails(j).field == "/validation_shapes");
}

TEST_CASE("shapes must parse and be positive on every shape") {
  json j = minimal();
  j["outputs"][0]["shape"][0] = "N +";
  auto e = fails(j);
  CHECK(e.field == "/outputs/0/shape/0");
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
  CHECK(fails(j).field == "/name");
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
  CHECK(e.field == "/reference/plan");
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

TEST_CASE("an implementation is source with a plan, or a host callback, never both") {
  json j = minimal();
  j["baseline"] = {{"host", "cublas_sgemm"}};
  auto t = parse_task(j, "t.json");
  REQUIRE(t);
  CHECK(t->baseline.is_host());
  CHECK(t->baseline.host == "cublas_sgemm");
  j["baseline"]["plan"] = "launch scale grid(1) block(1)";
  CHECK(fails(j).what() == "t.json: /baseline: give either 'host' or 'source' with 'plan', not both");
  j = minimal();
  j["reference"].erase("plan");
  CHECK(fails(j).what() == "t.json: /reference/plan: the source needs a launch plan: give 'plan'");
  j = minimal();
  j["reference"] = json::object();
  CHECK(fails(j).message == "give 'source' (or 'source_file') with 'plan', or 'host'");
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
  CHECK(e.error().field == "/reference/source_file");
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
    CHECK(t.error().field == "/reference/source_file");
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
  CHECK(t.error().field == "/reference/source_file");
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

