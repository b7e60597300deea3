// The one way files are read (detail/files.hpp), and the loaders that use it.
#include <specgen/detail/files.hpp>
#include <specgen/journal.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

using namespace specgen;
using namespace specgen::detail;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("specgen_files_test_" + std::to_string(std::random_device{}()));
  temp_dir() { fs::create_directories(path); }
  ~temp_dir() { fs::remove_all(path); }
  temp_dir(const temp_dir&) = delete;  // owns the directory on disk
  temp_dir& operator=(const temp_dir&) = delete;
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return path / name;
  }
  fs::path fifo(const std::string& name) const {
    REQUIRE(::mkfifo((path / name).c_str(), 0600) == 0);
    return path / name;
  }
};

constexpr file_kind small{"test file", 16};

}  // namespace

TEST_CASE("a regular file is read whole when within its limit") {
  temp_dir dir;
  const auto full = read_regular_file(dir.write("a", "0123456789abcdef"), small);
  REQUIRE(full);
  CHECK(*full == "0123456789abcdef");
  const auto empty = read_regular_file(dir.write("e", ""), small);
  REQUIRE(empty);
  CHECK(empty->empty());
}

TEST_CASE("a file over its limit is refused, naming the kind and the limit") {
  temp_dir dir;
  const auto r = read_regular_file(dir.write("a", "0123456789abcdefX"), small);
  REQUIRE_FALSE(r);
  CHECK(r.error().message == (dir.path / "a").string() +
                                 ": the test file is 17 bytes, over the limit of 16 bytes for a test file; check that "
                                 "the path names the right file (split a larger one)");
}

TEST_CASE("a FIFO, a device, a directory and a missing file are refused at once, each saying what it is") {
  temp_dir dir;
  const auto fifo = read_regular_file(dir.fifo("p"), small);
  REQUIRE_FALSE(fifo);
  CHECK_THAT(fifo.error().message, Catch::Contains("the test file is a FIFO (named pipe), not a regular file"));
  const auto zero = read_regular_file("/dev/zero", small);
  REQUIRE_FALSE(zero);
  CHECK_THAT(zero.error().message, Catch::Contains("a character device"));
  const auto directory = read_regular_file(dir.path, small);
  REQUIRE_FALSE(directory);
  CHECK_THAT(directory.error().message, Catch::Contains("a directory"));
  const auto missing = read_regular_file(dir.path / "nope", small);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message == (dir.path / "nope").string() + ": cannot open the file: No such file or directory");
}

TEST_CASE("JSON errors are values: syntax, numbers out of range and deep nesting") {
  CHECK(parse_json(R"({"a": [1, 2]} // comment)", "f.json"));
  CHECK_FALSE(parse_json(R"({"a": 1} // comment)", "f.json", /*comments=*/false));
  const auto big = parse_json(R"({"a": 1e999})", "f.json");
  REQUIRE_FALSE(big);
  CHECK_THAT(big.error().message, Catch::StartsWith("f.json: not valid JSON: ") && Catch::Contains("1e999"));
  CHECK(parse_json(std::string(63, '[') + std::string(63, ']'), "f.json"));
  const auto deep = parse_json(std::string(100'000, '[') + std::string(100'000, ']'), "f.json");
  REQUIRE_FALSE(deep);
  CHECK_THAT(deep.error().message, Catch::Contains("nested more than 64 levels"));
}

TEST_CASE("the *.json entries of a directory are listed whatever they are, sorted") {
  temp_dir dir;
  dir.write("b.json", "{}");
  dir.write("a.json", "{}");
  dir.write("c.txt", "");
  dir.fifo("d.json");
  const auto files = json_files_in(dir.path);
  REQUIRE(files);
  CHECK(*files == std::vector<fs::path>{dir.path / "a.json", dir.path / "b.json", dir.path / "d.json"});
  CHECK_FALSE(json_files_in(dir.path / "none"));
}

TEST_CASE("lines are read one by one, the last one possibly unterminated, each within the limit") {
  temp_dir dir;
  auto lines = [&](const std::string& text) {
    auto in = line_reader::open(dir.write("l", text), small);
    REQUIRE(in);
    std::vector<std::string> out;
    std::string line;
    for (;;) {
      auto got = in->next(line);
      REQUIRE(got);
      if (*got == line_reader::end) break;
      out.push_back(line + (*got == line_reader::unterminated ? "|torn" : ""));
    }
    return out;
  };
  CHECK(lines("").empty());
  CHECK(lines("a\n\nb\n") == std::vector<std::string>{"a", "", "b"});
  CHECK(lines("a\nbc") == std::vector<std::string>{"a", "bc|torn"});
  auto in = line_reader::open(dir.write("long", "short\n0123456789abcdefXYZ\n"), small);
  REQUIRE(in);
  std::string line;
  const auto first = in->next(line);
  REQUIRE(first);
  CHECK(*first == line_reader::terminated);
  const auto too_long = in->next(line);
  REQUIRE_FALSE(too_long);
  CHECK_THAT(too_long.error().message, Catch::Contains(":2: the line is longer than 16 bytes"));
  CHECK_FALSE(line_reader::open(dir.fifo("p"), small));
}

TEST_CASE("a journal that is a FIFO is refused at once instead of blocking the resume") {
  temp_dir dir;
  const auto r = load_journal(dir.fifo("journal.jsonl"));
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("journal") && Catch::Contains("FIFO") && Catch::Contains("not a regular file"));
  const auto zero = load_journal("/dev/zero");
  REQUIRE_FALSE(zero);
  CHECK_THAT(zero.error().message, Catch::Contains("character device"));
}
