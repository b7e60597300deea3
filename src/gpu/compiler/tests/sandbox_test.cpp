// The compile sandbox: a model-written source reaches the CUDA Toolkit's
// headers and the caller's include dirs, and nothing else of the host. Each
// layer (the empty environment, the file guard, Landlock) is shown to hold on
// its own, through wrapper scripts standing in for the helper program.
#include "support.hpp"

#include <specgen/gpu/compiler.hpp>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gpu = specgen::gpu;
namespace fs = std::filesystem;

namespace {

using specgen::gpu::testing::nvrtc_ready;
using specgen::gpu::testing::temp_dir;

void write_file(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The helper program the compiler would start, wrapped in a shell script
/// that runs `before` and then the helper with `extra` arguments (and
/// through `loader`, when given).
std::string wrapper(const fs::path& dir, const std::string& name, const std::string& before, const std::string& extra,
                    const std::string& loader = {}) {
  const fs::path script = dir / name;
  write_file(script, "#!/bin/sh\n" + before + "\nexec " + loader + " '" + std::string(SPECGEN_NVRTC_HELPER) +
                         "' \"$@\" " + extra + "\n");
  fs::permissions(script, fs::perms::owner_all);
  return script.string();
}

constexpr const char* secret_text = "SPECGEN_PLANTED_SECRET_7f3a9";
constexpr const char* kernel = "\nextern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n";

/// A file outside every allowed directory holding `secret_text`, a directory
/// the caller allows, and in it a header of its own and a link out.
struct host_files {
  temp_dir dir;
  fs::path secret = dir.path / "outside" / "secret.h";
  fs::path allowed = dir.path / "include";
  host_files() {
    fs::create_directories(secret.parent_path());
    fs::create_directories(allowed);
    write_file(secret, std::string(secret_text) + "\n");
    write_file(allowed / "mine.h", "#define SPECGEN_MINE 42\n");
    fs::create_symlink(secret, allowed / "link_out.h");
  }
};

/// The sources of an attack on the host's files, each of which must fail to
/// compile without echoing what it reached for.
std::vector<std::string> reads_of_the_host(const host_files& f) {
  std::string up;
  for (int i = 0; i < 24; ++i) up += "../";  // from the toolkit's include dir to "/" and beyond
  return {"#include \"/proc/self/environ\"" + std::string(kernel),
          "#include \"/etc/passwd\"" + std::string(kernel),
          "#include \"" + f.secret.string() + "\"" + kernel,
          "#include <" + up + f.secret.relative_path().string() + ">" + kernel,
          "#include \"link_out.h\"" + std::string(kernel),
          "#include \"/proc/self/fd/0\"" + std::string(kernel)};
}

/// Checks that every read of the host fails and the log echoes none of it,
/// that `__has_include` cannot tell a host file from a missing one, and that
/// toolkit and allowed headers still work.
void check_boundary(gpu::compiler& c, const host_files& f) {
  const gpu::compile_options opts{.include_dirs = {f.allowed.string()}};
  for (const auto& source : reads_of_the_host(f)) {
    INFO(source);
    auto r = c.compile(source, opts);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().kind == gpu::compile_failure_kind::compile_error);
    CHECK(r.error().log.find(secret_text) == std::string::npos);
    CHECK(r.error().log.find("SPECGEN_TEST_API_KEY") == std::string::npos);
    CHECK(r.error().log.find("root:") == std::string::npos);
    CHECK(r.error().log.find("cannot open source file") != std::string::npos);
  }
  // The existence oracle: a host file looks exactly as absent as a missing one.
  auto probe = c.compile("#if __has_include(\"" + f.secret.string() + "\") || __has_include(\"/etc/passwd\")\n" +
                             "#error the host is visible\n#endif\n" + kernel,
                         opts);
  INFO((probe ? std::string() : probe.error().log));
  CHECK(probe.has_value());

  auto allowed = c.compile(std::string("#include <cuda_fp16.h>\n#include <cuda/std/cstdint>\n#include \"mine.h\"\n") +
                               "#if SPECGEN_MINE != 42\n#error\n#endif\n" + kernel,
                           opts);
  INFO((allowed ? std::string() : allowed.error().log));
  CHECK(allowed.has_value());
  CHECK(c.stats().denied_file_accesses > 0);
}

/// Sets an environment variable for the test's duration.
struct scoped_env {
  std::string name;
  scoped_env(std::string n, const char* value) : name(std::move(n)) { ::setenv(name.c_str(), value, 1); }
  ~scoped_env() { ::unsetenv(name.c_str()); }
  scoped_env(const scoped_env&) = delete;  // restores on destruction
  scoped_env& operator=(const scoped_env&) = delete;
};

}  // namespace

TEST_CASE("a source cannot read the host's files or environment, nor probe for them") {
  if (!nvrtc_ready()) return;
  scoped_env key("SPECGEN_TEST_API_KEY", secret_text);
  host_files f;
  gpu::compiler c({.threads = 1});
  check_boundary(c, f);
  INFO(c.sandbox());
  CHECK(c.sandbox().find("empty environment") != std::string::npos);
}

TEST_CASE("the file guard alone holds the boundary where Landlock is missing") {
  if (!nvrtc_ready()) return;
  scoped_env key("SPECGEN_TEST_API_KEY", secret_text);
  host_files f;
  gpu::compiler c({.threads = 1, .helper_program = wrapper(f.dir.path, "guard-only", "", "--no-landlock")});
  check_boundary(c, f);
  CHECK(c.sandbox().find("file guard") != std::string::npos);
  CHECK(c.sandbox().find("Landlock (ABI") == std::string::npos);
}

TEST_CASE("Landlock alone holds the boundary where the kernel has it") {
  if (!nvrtc_ready()) return;
  {
    gpu::compiler probe({.threads = 1});
    REQUIRE(probe.compile(kernel).has_value());
    if (probe.sandbox().find("Landlock (ABI") == std::string::npos) {
      WARN("Landlock is not available here, skipping: " << probe.sandbox());
      return;
    }
  }
  scoped_env key("SPECGEN_TEST_API_KEY", secret_text);
  host_files f;
  gpu::compiler c({.threads = 1, .helper_program = wrapper(f.dir.path, "landlock-only", "", "--no-guard")});
  // Without the guard NVRTC sees "permission denied" where the guard says "no such file",
  // so only the reads are checked here, not the __has_include oracle.
  const gpu::compile_options opts{.include_dirs = {f.allowed.string()}};
  for (const auto& source : reads_of_the_host(f)) {
    INFO(source);
    auto r = c.compile(source, opts);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().log.find(secret_text) == std::string::npos);
    CHECK(r.error().log.find("root:") == std::string::npos);
  }
  CHECK(c.compile("#include <cuda_fp16.h>\n#include \"mine.h\"\n" + std::string(kernel), opts).has_value());
}

TEST_CASE("the helper runs with an environment of its own, not the caller's") {
  if (!nvrtc_ready()) return;
  scoped_env key("SPECGEN_TEST_API_KEY", secret_text);
  temp_dir dir;
  const fs::path seen = dir.path / "env.txt";
  gpu::compiler c({.threads = 1, .helper_program = wrapper(dir.path, "env", "env > '" + seen.string() + "'", "")});
  REQUIRE(c.compile(kernel).has_value());
  const std::string env = read_all(seen);
  CHECK(env.find("SPECGEN_TEST_API_KEY") == std::string::npos);
  CHECK(env.find(secret_text) == std::string::npos);
  CHECK(env.find("CUDA_CACHE_DISABLE=1") != std::string::npos);
}

TEST_CASE("a helper killed mid-compile is an internal failure, and the next compile starts a new one") {
  if (!nvrtc_ready()) return;
  temp_dir dir;
  const fs::path pid_file = dir.path / "helper.pid";
  // The wrapper records its pid; exec keeps it for the helper.
  gpu::compiler c({.threads = 1, .helper_program = wrapper(dir.path, "record-pid", "echo $$ > '" + pid_file.string() + "'", "")});
  // The source includes a named pipe: NVRTC's read of it waits until this
  // test opens the other end, so the helper is known to be compiling (neither
  // still starting nor already done) when it is killed, however slowly a
  // loaded machine runs it.
  const fs::path include = dir.path / "include";
  fs::create_directories(include);
  const fs::path gate = include / "gate.h";
  REQUIRE(::mkfifo(gate.c_str(), 0600) == 0);
  const gpu::compile_options opts{.include_dirs = {include.string()}, .deadline = specgen::seconds(60)};
  std::mutex m;
  std::condition_variable cv;
  std::optional<gpu::compiler::result> got;
  c.compile_async("#include \"gate.h\"\n" + std::string(kernel), opts, [&](gpu::compiler::result r) {
    std::lock_guard lock(m);
    got = std::move(r);
    cv.notify_one();
  });
  const auto answered = [&] {
    std::lock_guard lock(m);
    return got.has_value();
  };
  // A non-blocking open for writing succeeds once NVRTC has the pipe open for
  // reading. Until then the compile cannot end but by the compiler's own
  // limits (the helper's start-up limit, the deadline and its grace), which
  // end this wait too.
  int writer = -1;
  while ((writer = ::open(gate.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0 && errno == ENXIO && !answered())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (writer < 0 && answered())
    FAIL("the compile ended before NVRTC opened the pipe: "
         << (*got ? std::string("it succeeded") : got->error().message + "\n" + got->error().log));
  REQUIRE(writer >= 0);
  const pid_t pid = std::stoi(read_all(pid_file));
  REQUIRE(::kill(pid, SIGKILL) == 0);
  {
    std::unique_lock lock(m);
    // The helper's end is seen at once; the compile's deadline and grace bound it in any case.
    REQUIRE(cv.wait_for(lock, opts.deadline + std::chrono::seconds(60), [&] { return got.has_value(); }));
  }
  ::close(writer);
  REQUIRE_FALSE(got->has_value());
  CHECK(got->error().kind == gpu::compile_failure_kind::internal);
  CHECK_THAT(got->error().message, Catch::Contains("while compiling"));
  CHECK_THAT(got->error().message, Catch::Contains("signal 9"));

  auto next = c.compile(kernel, opts);  // the same directories: a helper of the same set
  INFO((next ? std::string() : next.error().message + "\n" + next.error().log));
  REQUIRE(next.has_value());
  CHECK(c.stats().helpers_started == 2);
}

TEST_CASE("the helper finds NVRTC's builtins without the loader's cache or path") {
  if (!nvrtc_ready()) return;
  // The loader this program runs under, with its cache switched off: only the
  // system's default directories are searched, as on a machine whose toolkit
  // folder was never registered with ldconfig.
  std::string loader;
  {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);)
      if (auto at = line.find('/'); at != std::string::npos && line.find("/ld-linux") != std::string::npos) {
        loader = line.substr(at);
        break;
      }
  }
  if (loader.empty()) {
    WARN("cannot find this program's dynamic loader, skipping");
    return;
  }
  temp_dir dir;
  gpu::compiler c({.threads = 1, .helper_program = wrapper(dir.path, "no-cache", "unset LD_LIBRARY_PATH", "",
                                                           "'" + loader + "' --inhibit-cache")});
  auto r = c.compile("#include <cuda_fp16.h>\n" + std::string(kernel));
  INFO((r ? std::string() : r.error().message + "\n" + r.error().log));
  CHECK(r.has_value());
}

TEST_CASE("a helper program that cannot be run makes compiles unavailable, with what to do") {
  if (!nvrtc_ready()) return;
  gpu::compiler c({.threads = 1, .helper_program = "/nonexistent/specgen-nvrtc"});
  auto r = c.compile(kernel);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().kind == gpu::compile_failure_kind::unavailable);
  CHECK_THAT(r.error().message, Catch::Contains("SPECGEN_NVRTC_HELPER"));
}
