// The kernels a cubin records (read_cubin_kernels), against ptxas's report of
// the same compile; malformed images; and that the report reaches later
// processes and disk cache hits, which NVRTC's own cache once took from them.
#include "support.hpp"

#include "gpu/common/elf64.hpp"
#include "gpu/compiler/disk_cache.hpp"

#include <specgen/gpu/compiler.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

extern char** environ;

namespace gpu = specgen::gpu;
namespace elf64 = specgen::gpu::detail::elf64;
namespace fs = std::filesystem;

namespace {

using specgen::gpu::testing::nvrtc_ready;
using specgen::gpu::testing::temp_dir;

/// Entry functions of every kind: extern "C", mangled C++ names, template
/// instances; static shared memory; a local array (a stack frame); a
/// non-inlined device function, which is no kernel.
constexpr const char* kernels_source = R"(
extern "C" __global__ void reverse(const float* a, float* b) {
  __shared__ float s[256];
  s[threadIdx.x] = a[threadIdx.x];
  __syncthreads();
  b[threadIdx.x] = s[255 - threadIdx.x];
}
// blockIdx.z: before sm_80 ptxas records that with a value-less attribute.
template <class T> __global__ void twice(T* x) { x[threadIdx.x + blockIdx.z * blockDim.x] *= 2; }
template __global__ void twice<float>(float*);
template __global__ void twice<double>(double*);
__global__ void mangled(int* x) {
  __shared__ double d[3];
  d[threadIdx.x % 3] = x[0];
  __syncthreads();
  x[threadIdx.x] = static_cast<int>(d[(threadIdx.x + 1) % 3]);
}
extern "C" __device__ __noinline__ float triple(float v) { return v * 3.0f; }
extern "C" __global__ void framed(float* x, int n) {
  float acc[64];
  for (int k = 0; k < 64; ++k) acc[k] = x[k * n + threadIdx.x];
  float s = 0;
  for (int k = 0; k < 64; ++k) s += acc[(k * 7 + n) % 64];
  x[threadIdx.x] = triple(s);
}
)";

const std::set<std::string> kernel_names{"reverse", "_Z5twiceIfEvPT_", "_Z5twiceIdEvPT_", "_Z7mangledPi", "framed"};

const gpu::kernel_resources* find(const std::vector<gpu::kernel_resources>& ks, const std::string& name) {
  const auto it = std::find_if(ks.begin(), ks.end(), [&name](const gpu::kernel_resources& k) { return k.name == name; });
  return it == ks.end() ? nullptr : &*it;
}

bool has_ptxas_report(const std::string& log) { return log.find("Compiling entry function") != std::string::npos; }

std::shared_ptr<const gpu::compiled> compile_or_skip(gpu::compiler& c, const char* source, const std::string& arch) {
  auto r = c.compile(source, {.arch = arch});
  if (!r) {
    WARN("NVRTC " << gpu::compiler::nvrtc_version().value_or("?") << " cannot build " << arch
                  << ", skipping it: " << r.error().message);
    return nullptr;
  }
  return *r;
}

std::vector<std::byte> vector_add_cubin() {
  gpu::compiler c({.threads = 1});
  auto r = c.compile(R"(extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
})");
  REQUIRE(r.has_value());
  return (*r)->cubin;
}

void put_u16(std::vector<std::byte>& b, std::size_t at, std::uint16_t v) {
  b[at] = std::byte(v & 0xff);
  b[at + 1] = std::byte(v >> 8);
}
void put_u32(std::vector<std::byte>& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i, v >>= 8) b[at + static_cast<std::size_t>(i)] = std::byte(v & 0xff);
}

/// The section of `cubin` named `name` (which the test needs to be there).
elf64::section section_named(std::span<const std::byte> cubin, std::string_view name) {
  auto img = elf64::read_image(cubin);
  REQUIRE(img.has_value());
  for (const auto& s : img->sections)
    if (s.name == name) return s;
  FAIL("no section " << name);
  return {};
}

}  // namespace

TEST_CASE("a cubin names every kernel with the registers, shared memory and stack frame ptxas reports") {
  if (!nvrtc_ready()) return;
  gpu::compiler nvrtc({.threads = 1});
  for (const std::string arch : {"sm_75", "sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"}) {
    INFO("arch " << arch);
    const auto c = compile_or_skip(nvrtc, kernels_source, arch);
    if (!c) continue;
    INFO("NVRTC log:\n" << c->log);
    const auto from_cubin = gpu::read_cubin_kernels(c->cubin);
    REQUIRE(from_cubin.has_value());

    std::set<std::string> names;
    for (const auto& k : *from_cubin) {
      names.insert(k.name);
      CHECK(k.registers > 0);
      CHECK(k.spill_stores_bytes == 0);  // not in a cubin
    }
    REQUIRE(names == kernel_names);
    CHECK(find(*from_cubin, "reverse")->static_smem_bytes == 1024);
    CHECK(find(*from_cubin, "_Z7mangledPi")->static_smem_bytes == 24);
    CHECK(find(*from_cubin, "_Z5twiceIfEvPT_")->static_smem_bytes == 0);
    CHECK(find(*from_cubin, "framed")->stack_frame_bytes > 0);

    // Where ptxas reported, both agree on everything the cubin records.
    if (has_ptxas_report(c->log)) {
      auto reported = gpu::parse_ptxas_info(c->log);
      std::set<std::string> reported_names;
      for (const auto& r : reported) {
        reported_names.insert(r.name);
        const auto* k = find(*from_cubin, r.name);
        REQUIRE(k);
        CHECK(k->registers == r.registers);
        CHECK(k->static_smem_bytes == r.static_smem_bytes);
        CHECK(k->stack_frame_bytes == r.stack_frame_bytes);
      }
      CHECK(reported_names == kernel_names);
    } else {
      WARN("NVRTC's log for " << arch << " has no ptxas report; the cubin alone was checked");
    }
    // The compile's report is the cubin's, with the log's spills.
    CHECK(c->kernels == gpu::kernels_of_compile(c->cubin, gpu::parse_ptxas_info(c->log)));
    CHECK(c->kernels.size() == kernel_names.size());
  }
}

TEST_CASE("the cubin decides which kernels exist; ptxas's report adds the spills") {
  if (!nvrtc_ready()) return;
  const auto cubin = vector_add_cubin();
  const std::vector<gpu::kernel_resources> reported{
      {.name = "ghost", .registers = 40},
      {.name = "vector_add", .registers = 999, .spill_stores_bytes = 8, .spill_loads_bytes = 4, .static_smem_bytes = 7}};
  const auto k = gpu::kernels_of_compile(cubin, reported);
  REQUIRE(k.size() == 1);
  CHECK(k[0].name == "vector_add");
  CHECK(k[0].registers > 0);
  CHECK(k[0].registers < 999);
  CHECK(k[0].static_smem_bytes == 0);
  CHECK(k[0].spill_stores_bytes == 8);
  CHECK(k[0].spill_loads_bytes == 4);

  // No report at all: every kernel still, spills unknown (0).
  const auto bare = gpu::kernels_of_compile(cubin, {});
  REQUIRE(bare.size() == 1);
  CHECK(bare[0].registers == k[0].registers);
  CHECK(bare[0].spill_stores_bytes == 0);

  // An unreadable cubin leaves the report as it is.
  CHECK(gpu::kernels_of_compile(std::span<const std::byte>(cubin).first(100), reported) == reported);
}

TEST_CASE("a truncated or malformed cubin is an error, never a crash") {
  if (!nvrtc_ready()) return;
  const auto good = vector_add_cubin();
  REQUIRE(gpu::read_cubin_kernels(good).has_value());
  const std::span<const std::byte> all(good);

  SECTION("every cut into the section headers") {
    auto img = elf64::read_image(all);
    REQUIRE(img.has_value());
    std::uint64_t headers_end = 0;  // the section headers end where the last of them does
    for (std::size_t at = 0x28, i = 0; i < 8; ++i) headers_end |= std::to_integer<std::uint64_t>(good[at + i]) << (8 * i);
    headers_end += img->sections.size() * elf64::section_header_size;
    REQUIRE(headers_end <= good.size());
    for (std::size_t n = 0; n < good.size(); ++n) {
      const auto r = gpu::read_cubin_kernels(all.first(n));
      if (n < headers_end) {
        INFO(n << " bytes of " << good.size());
        CHECK_FALSE(r.has_value());
      }
    }
  }
  SECTION("headers that do not describe the image") {
    auto bad = good;
    SECTION("32-bit") { bad[4] = std::byte{1}; }
    SECTION("big-endian") { bad[5] = std::byte{2}; }
    SECTION("section headers past the end") { put_u32(bad, 0x28, static_cast<std::uint32_t>(good.size() + 1)); }
    SECTION("odd section header size") { put_u16(bad, 0x3a, 40); }
    SECTION("more sections than fit") { put_u16(bad, 0x3c, 0xfff0); }
    SECTION("no name table") { put_u16(bad, 0x3e, 0xfff0); }
    const auto r = gpu::read_cubin_kernels(bad);
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message, Catch::StartsWith("unreadable cubin: "));
  }
  SECTION("attributes that do not fit their section or name nothing") {
    const auto info = section_named(all, ".nv.info");
    REQUIRE(info.size >= 12);
    auto bad = good;
    const auto at = static_cast<std::size_t>(info.offset);
    SECTION("a value running past the section") { put_u16(bad, at + 2, 0xfff0); }
    SECTION("a format specgen does not know") { bad[at] = std::byte{0x09}; }
    SECTION("a symbol index past the table") {
      REQUIRE(std::to_integer<int>(good[at]) == 4);  // NVRTC writes EIATTR_REGCOUNT first
      REQUIRE(std::to_integer<int>(good[at + 1]) == 0x2f);
      put_u32(bad, at + 4, 0xfffffff0u);
    }
    CHECK_FALSE(gpu::read_cubin_kernels(bad).has_value());
  }
  SECTION("a symbol whose name lies outside its string table") {
    const auto symtab = section_named(all, ".symtab");
    auto bad = good;
    put_u32(bad, static_cast<std::size_t>(symtab.offset) + elf64::symbol_size, 0xfffffff0u);  // symbol 1's name
    CHECK_FALSE(gpu::read_cubin_kernels(bad).has_value());
  }
  SECTION("random damage is read or refused") {
    std::mt19937 rng(7);
    for (int round = 0; round < 2000; ++round) {
      auto bad = good;
      for (int flips = 0; flips < 4; ++flips) {
        const auto at = std::uniform_int_distribution<std::size_t>(0, bad.size() - 1)(rng);
        bad[at] = std::byte(std::uniform_int_distribution<int>(0, 255)(rng));
      }
      (void)gpu::read_cubin_kernels(bad);  // anything but a crash
    }
    SUCCEED();
  }
}

// ---- later processes ----------------------------------------------------------------

/// Run only as a child of the next test: compiles $SPECGEN_TEST_CHILD_SOURCE
/// with a fresh compiler (no disk cache) and writes what it got to
/// $SPECGEN_TEST_CHILD_OUT as JSON.
TEST_CASE("(child) compiles one source and reports its kernels", "[.][compile-child]") {
  const char* source = std::getenv("SPECGEN_TEST_CHILD_SOURCE");
  const char* out = std::getenv("SPECGEN_TEST_CHILD_OUT");
  REQUIRE(source);
  REQUIRE(out);
  // Read before anything of specgen ran: the library sets it when it is loaded.
  const char* cache_disable = std::getenv("CUDA_CACHE_DISABLE");
  gpu::compiler c({.threads = 1});
  auto r = c.compile(source);
  nlohmann::json j{{"cache_disable", cache_disable ? cache_disable : "(unset)"}, {"ok", r.has_value()}};
  if (r) {
    j["kernels"] = (*r)->kernels;
    j["log"] = (*r)->log;
    j["cache_hit"] = (*r)->cache_hit;
  } else {
    j["error"] = r.error().message;
  }
  std::ofstream(out) << j.dump();
}

namespace {

/// Runs this test program's child test case in a fresh process whose
/// environment lacks CUDA_CACHE_DISABLE, and returns what it wrote.
nlohmann::json compile_in_child(const std::string& source, const fs::path& dir, int n) {
  const fs::path out = dir / ("child-" + std::to_string(n) + ".json");
  const fs::path log = dir / ("child-" + std::to_string(n) + ".log");
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!std::string_view(*e).starts_with("CUDA_CACHE_DISABLE=")) env.emplace_back(*e);
  env.push_back("SPECGEN_TEST_CHILD_SOURCE=" + source);
  env.push_back("SPECGEN_TEST_CHILD_OUT=" + out.string());
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = fs::read_symlink("/proc/self/exe").string(), tag = "[compile-child]";
  std::vector<char*> argv{self.data(), tag.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  std::ifstream child_log(log);
  INFO("the child's output:\n" << std::string(std::istreambuf_iterator<char>(child_log), {}));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  std::ifstream in(out);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("a second process that compiles the same source still gets every kernel and the ptxas report") {
  if (!nvrtc_ready()) return;
  temp_dir dir;
  // A source no process on this machine compiled before: the first child
  // compiles it for real, and the second would be answered by NVRTC's own
  // cache if it were on.
  const std::string salt = std::to_string(std::random_device{}()) + std::to_string(::getpid());
  const std::string source = "#define SALT " + salt + "\n" + R"(
extern "C" __global__ void salted(float* x) {
  __shared__ float s[256];
  s[threadIdx.x] = x[threadIdx.x] + SALT;
  __syncthreads();
  x[threadIdx.x] = s[255 - threadIdx.x];
})";
  for (int n = 0; n < 2; ++n) {
    INFO("process " << n + 1);
    const auto j = compile_in_child(source, dir.path, n);
    INFO(j.dump(2));
    REQUIRE(j.at("ok").get<bool>());
    CHECK(j.at("cache_disable") == "1");  // set when the library was loaded, before main
    CHECK_FALSE(j.at("cache_hit").get<bool>());
    const auto kernels = j.at("kernels").get<std::vector<gpu::kernel_resources>>();
    REQUIRE(kernels.size() == 1);
    CHECK(kernels[0].name == "salted");
    CHECK(kernels[0].registers > 0);
    CHECK(kernels[0].static_smem_bytes == 1024);
    // NVRTC's cache is off, so ptxas ran and reported (the spills come from nowhere else).
    CHECK(has_ptxas_report(j.at("log").get<std::string>()));
  }
}

TEST_CASE("a disk cache entry stored without a kernel report is read back with the cubin's kernels") {
  if (!nvrtc_ready()) return;
  temp_dir dir;
  const gpu::compile_options opts{.line_info = false};
  const char* source = R"(extern "C" __global__ void shifted(float* x) {
  __shared__ float s[256];
  s[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  x[threadIdx.x] = s[(threadIdx.x + 1) % 256];
})";
  gpu::compiler fresh({.threads = 1});
  auto compiled = fresh.compile(source, opts);
  REQUIRE(compiled.has_value());
  REQUIRE((*compiled)->kernels.size() == 1);
  const auto expected = (*compiled)->kernels[0];
  CHECK(expected.registers > 0);

  // As an entry looks that was written from a compile NVRTC answered from its
  // own cache: an empty log, no kernels.
  auto bare = **compiled;
  bare.kernels.clear();
  bare.log.clear();
  auto cache = gpu::detail::disk_cache::open(dir.path.string());
  REQUIRE(cache.has_value());
  cache->store(bare);

  gpu::compiler reader({.cache_dir = dir.path.string(), .threads = 1});
  auto r = reader.compile(source, opts);
  REQUIRE(r.has_value());
  CHECK((*r)->cache_hit);
  CHECK(reader.stats().disk_hits == 1);
  REQUIRE((*r)->kernels.size() == 1);
  CHECK((*r)->kernels[0].name == "shifted");
  CHECK((*r)->kernels[0].registers == expected.registers);
  CHECK((*r)->kernels[0].static_smem_bytes == 1024);
}
