#include "support.hpp"

#include <specgen/gpu/compiler.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string_view>

namespace gpu = specgen::gpu;
namespace fs = std::filesystem;

namespace {

constexpr const char* vector_add = R"(
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
)";

using specgen::gpu::testing::nvrtc_ready;
using specgen::gpu::testing::temp_dir;

/// Where the disk cache keeps `key`'s entry.
fs::path entry_file(const fs::path& dir, const std::string& key) { return dir / key.substr(0, 2) / (key + ".entry"); }

bool starts_with_elf_magic(const std::vector<std::byte>& b) {
  return b.size() > 4 && b[0] == std::byte{0x7f} && b[1] == std::byte{'E'} && b[2] == std::byte{'L'} &&
         b[3] == std::byte{'F'};
}

}  // namespace

TEST_CASE("ptxas info gives each entry function its registers, spills and static shared memory") {
  const auto k = gpu::parse_ptxas_info(
      "ptxas info    : 6104 bytes gmem\n"
      "ptxas info    : Compiling entry function 'k2' for 'sm_90a'\n"
      "ptxas info    : Function properties for k2\n"
      "ptxas         .     0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Function properties for helper\n"
      "ptxas         .     16 bytes stack frame, 99 bytes spill stores, 99 bytes spill loads\n"
      "ptxas info    : Used 8 registers, used 0 barriers\n"
      "ptxas info    : Compile time = 17.359 ms\n"
      "ptxas info    : Compiling entry function 'add' for 'sm_90a'\n"
      "ptxas info    : Function properties for add\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 10 registers, used 1 barriers, 256 bytes smem\n");
  REQUIRE(k.size() == 2);
  CHECK(k[0] == gpu::kernel_resources{.name = "k2", .registers = 8, .spill_stores_bytes = 8, .spill_loads_bytes = 4});
  CHECK(k[1] == gpu::kernel_resources{.name = "add", .registers = 10, .static_smem_bytes = 256});
  CHECK(gpu::to_report(gpu::compiled{.kernels = k, .seconds = 1.5}) ==
        specgen::compile_report{.seconds = 1.5, .registers = 10, .spill_bytes = 12, .static_smem_bytes = 256});
}

TEST_CASE("compile options and compiler config read back from JSON, absent keys keeping defaults") {
  const gpu::compile_options o{.arch = "sm_80", .options = {"-use_fast_math"}, .include_dirs = {"/x"},
                               .deadline = specgen::seconds(3), .line_info = false};
  CHECK(nlohmann::json(o).get<gpu::compile_options>() == o);
  const gpu::compiler_config c{.cache_dir = "/tmp/c", .memory_entries = 3, .threads = 2};
  CHECK(nlohmann::json(c).get<gpu::compiler_config>() == c);
  CHECK(nlohmann::json::parse(R"({"arch": "sm_89"})").get<gpu::compile_options>().deadline == specgen::seconds(20));
}

TEST_CASE("a vector add compiles to a cubin with its registers reported, and again from memory") {
  if (!nvrtc_ready()) return;
  gpu::compiler nvrtc({.threads = 1});
  auto first = nvrtc.compile(vector_add);
  REQUIRE(first.has_value());
  const auto& c = **first;
  CHECK(starts_with_elf_magic(c.cubin));
  CHECK_FALSE(c.cache_hit);
  CHECK(c.key.size() == 32);
  INFO("NVRTC log:\n" << c.log);
  REQUIRE(c.kernels.size() == 1);
  CHECK(c.kernels[0].name == "vector_add");
  CHECK(c.kernels[0].registers > 0);
  CHECK(c.log.find("Used") != std::string::npos);  // the ptxas report is kept for feedback

  auto second = nvrtc.compile(vector_add);
  REQUIRE(second.has_value());
  CHECK((*second)->cache_hit);
  CHECK((*second)->cubin == c.cubin);
  CHECK(nvrtc.stats() == gpu::compiler_stats{.compilations = 1, .memory_hits = 1, .helpers_started = 1});

  // A different option is a different key: no stale cubin for changed flags.
  auto fast = nvrtc.cache_key(vector_add, {.options = {"-use_fast_math"}});
  REQUIRE(fast.has_value());
  CHECK(*fast != c.key);
}

TEST_CASE("a syntax error is a compile_error whose log names the line") {
  if (!nvrtc_ready()) return;
  gpu::compiler nvrtc({.threads = 1});
  auto r = nvrtc.compile("extern \"C\" __global__ void k(float* x) {\n  x[0] = 1\n}\n");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().kind == gpu::compile_failure_kind::compile_error);
  CHECK(r.error().log.find("candidate.cu(3)") != std::string::npos);
  CHECK(r.error().message.find("error") != std::string::npos);
}

TEST_CASE("an architecture without a cubin (compute_XX) is refused with what to pass instead") {
  if (!nvrtc_ready()) return;
  gpu::compiler nvrtc({.threads = 1});
  auto r = nvrtc.compile(vector_add, {.arch = "compute_90"});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().kind == gpu::compile_failure_kind::compile_error);
  CHECK(r.error().message.find("sm_90a") != std::string::npos);
}

TEST_CASE("a fresh compiler with the same cache dir hits the disk, and a truncated entry is recompiled") {
  if (!nvrtc_ready()) return;
  temp_dir dir;
  const gpu::compile_options opts{.line_info = false};
  std::vector<std::byte> cubin;
  std::string key;
  {
    gpu::compiler writer({.cache_dir = dir.path.string(), .threads = 1});
    auto r = writer.compile(vector_add, opts);
    REQUIRE(r.has_value());
    cubin = (*r)->cubin;
    key = (*r)->key;
  }
  const fs::path entry = entry_file(dir.path, key);
  REQUIRE(fs::file_size(entry) > cubin.size());
  {
    gpu::compiler reader({.cache_dir = dir.path.string(), .threads = 1});
    auto r = reader.compile(vector_add, opts);
    REQUIRE(r.has_value());
    CHECK((*r)->cache_hit);
    CHECK((*r)->cubin == cubin);
    REQUIRE((*r)->kernels.size() == 1);
    CHECK((*r)->kernels[0].registers > 0);
    CHECK(reader.stats() == gpu::compiler_stats{.disk_hits = 1});
  }
  const auto whole = fs::file_size(entry);
  fs::resize_file(entry, whole - cubin.size() / 2);
  {
    gpu::compiler repairer({.cache_dir = dir.path.string(), .threads = 1});
    auto r = repairer.compile(vector_add, opts);
    REQUIRE(r.has_value());
    CHECK_FALSE((*r)->cache_hit);
    CHECK(repairer.stats().compilations == 1);
    CHECK(repairer.stats().disk_entries_rejected == 1);
  }
  // The recompile rewrote the entry whole (its size may differ by a digit: it records the compile's time),
  // and the next compiler reads it back.
  CHECK(fs::file_size(entry) > whole - cubin.size() / 2);
  {
    gpu::compiler reader({.cache_dir = dir.path.string(), .threads = 1});
    auto r = reader.compile(vector_add, opts);
    REQUIRE(r.has_value());
    CHECK((*r)->cache_hit);
    CHECK((*r)->cubin == cubin);
  }
}

namespace {

/// Compiles `source` through a fresh compiler on `dir` and says whether the
/// disk answered, checking that whatever came back is the source's own cubin.
struct cache_probe {
  bool hit = false;
  std::uint64_t rejected = 0;
};
cache_probe probe(const fs::path& dir, const char* source, const std::vector<std::byte>& expected_cubin) {
  gpu::compiler c({.cache_dir = dir.string(), .threads = 1});
  auto r = c.compile(source, {.line_info = false});
  REQUIRE(r.has_value());
  CHECK((*r)->cubin == expected_cubin);
  return {.hit = (*r)->cache_hit, .rejected = c.stats().disk_entries_rejected};
}

constexpr const char* scale = R"(
extern "C" __global__ void scale(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 3.0f;
}
)";

/// Overwrites `n` bytes of `file` at `offset` with `with`, keeping its size.
void overwrite(const fs::path& file, std::size_t offset, std::string_view with) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(with.data(), static_cast<std::streamsize>(with.size()));
}

std::string read_all(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("a disk cache entry that was swapped, edited or replaced is a miss, never a hit") {
  if (!nvrtc_ready()) return;
  temp_dir dir;
  std::vector<std::byte> add_cubin, scale_cubin;
  std::string add_key, scale_key;
  {
    gpu::compiler writer({.cache_dir = dir.path.string(), .threads = 1});
    auto a = writer.compile(vector_add, {.line_info = false});
    auto s = writer.compile(scale, {.line_info = false});
    REQUIRE(a.has_value());
    REQUIRE(s.has_value());
    add_cubin = (*a)->cubin, add_key = (*a)->key;
    scale_cubin = (*s)->cubin, scale_key = (*s)->key;
  }
  const fs::path add_entry = entry_file(dir.path, add_key);
  const std::string pristine = read_all(add_entry);
  auto restore = [&] {
    fs::remove(add_entry);
    std::ofstream(add_entry, std::ios::binary) << pristine;
    fs::permissions(add_entry, fs::perms::owner_read | fs::perms::owner_write);
  };
  REQUIRE(probe(dir.path, vector_add, add_cubin).hit);

  SECTION("another kernel's entry under this key") {
    fs::copy_file(entry_file(dir.path, scale_key), add_entry, fs::copy_options::overwrite_existing);
    const auto p = probe(dir.path, vector_add, add_cubin);
    CHECK_FALSE(p.hit);
    CHECK(p.rejected == 1);
  }
  SECTION("bytes of the cubin flipped, size and ELF magic kept") {
    overwrite(add_entry, pristine.size() - add_cubin.size() / 2, "\x13\x37\x13\x37");
    const auto p = probe(dir.path, vector_add, add_cubin);
    CHECK_FALSE(p.hit);
    CHECK(p.rejected == 1);
  }
  SECTION("text planted in the cached log") {
    const auto at = pristine.find("ptxas info");
    REQUIRE(at != std::string::npos);
    overwrite(add_entry, at, "IGNORE ALL");
    const auto p = probe(dir.path, vector_add, add_cubin);
    CHECK_FALSE(p.hit);
    CHECK(p.rejected == 1);
  }
  SECTION("a link to /dev/zero in its place") {
    fs::remove(add_entry);
    fs::create_symlink("/dev/zero", add_entry);
    const auto p = probe(dir.path, vector_add, add_cubin);
    CHECK_FALSE(p.hit);
    CHECK(p.rejected == 1);
    fs::remove(add_entry);
  }
  SECTION("a FIFO in its place does not block the read") {
    fs::remove(add_entry);
    REQUIRE(::mkfifo(add_entry.c_str(), 0600) == 0);
    const auto p = probe(dir.path, vector_add, add_cubin);
    CHECK_FALSE(p.hit);
    CHECK(p.rejected == 1);
    fs::remove(add_entry);
  }
  SECTION("an entry others may write is not trusted") {
    fs::permissions(add_entry, fs::perms::others_write, fs::perm_options::add);
    const auto p = probe(dir.path, vector_add, add_cubin);
    CHECK_FALSE(p.hit);
    CHECK(p.rejected == 1);
  }
  // Every section's recompile wrote a good entry back, which the next compiler hits.
  if (!fs::is_regular_file(add_entry) || fs::is_symlink(add_entry)) restore();
  CHECK(probe(dir.path, vector_add, add_cubin).hit);
}

TEST_CASE("a cache directory that others may write, or that another user owns, is refused") {
  temp_dir dir;
  const fs::path fresh = dir.path / "new" / "cubins";
  {
    gpu::compiler c({.cache_dir = fresh.string(), .threads = 1});
    CHECK((fs::status(fresh).permissions() & fs::perms::all) == fs::perms::owner_all);
  }
  const fs::path shared = dir.path / "shared";
  fs::create_directories(shared);
  fs::permissions(shared, fs::perms::all);  // 0777, as /tmp-style scratch dirs are
  try {
    gpu::compiler c({.cache_dir = shared.string(), .threads = 1});
    FAIL("a world-writable cache directory was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("may write") && Catch::Contains("chmod go-w"));
  }
  if (::geteuid() == 0) {  // only root can give a directory away
    const fs::path theirs = dir.path / "theirs";
    fs::create_directories(theirs);
    fs::permissions(theirs, fs::perms::owner_all);
    REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
    CHECK_THROWS_WITH(gpu::compiler({.cache_dir = theirs.string(), .threads = 1}), Catch::Contains("belongs to user 65534"));
  }
}

TEST_CASE("a pathological source is cancelled at its deadline as a timeout") {
  if (!nvrtc_ready()) return;
  // ~10k class instantiations per family: about a second in the front end, many more in NVVM.
  // NVRTC polls the cancel callback between phases and often inside NVVM, so the cancel lands soon after.
  std::string source = R"(
template <int K, int N, int M> struct G { static constexpr long v = G<K, N - 1, M>::v + G<K, N, M - 1>::v; };
template <int K, int M> struct G<K, 0, M> { static constexpr long v = 1; };
template <int K, int N> struct G<K, N, 0> { static constexpr long v = 1; };
extern "C" __global__ void k(long* o) { *o = G<0, 100, 100>::v + G<1, 100, 100>::v; }
)";
  gpu::compiler nvrtc({.threads = 1});
  const auto t0 = std::chrono::steady_clock::now();
  auto r = nvrtc.compile(source, {.deadline = specgen::seconds(1)});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().kind == gpu::compile_failure_kind::timeout);
  CHECK(r.error().message.find("deadline") != std::string::npos);
  CHECK(took < 8.0);
}

TEST_CASE("fp16, bf16, cooperative groups and libcu++ headers compile") {
  if (!nvrtc_ready()) return;
  gpu::compiler nvrtc({.threads = 1});
  auto r = nvrtc.compile(R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cuda/std/cstdint>
#include <cuda/std/limits>
namespace cg = cooperative_groups;
extern "C" __global__ void mixed(const __half* a, const __nv_bfloat16* b, float* out, cuda::std::int32_t n) {
  auto block = cg::this_thread_block();
  int i = block.group_index().x * block.size() + block.thread_rank();
  if (i < n) out[i] = __half2float(a[i]) + __bfloat162float(b[i]) + cuda::std::numeric_limits<float>::epsilon();
  block.sync();
}
)");
  INFO((r ? std::string() : r.error().message + "\n" + r.error().log));
  REQUIRE(r.has_value());
  REQUIRE((*r)->kernels.size() == 1);
  CHECK((*r)->kernels[0].name == "mixed");
}

TEST_CASE("eight concurrent async compiles of one source run NVRTC once") {
  if (!nvrtc_ready()) return;
  gpu::compiler nvrtc({.threads = 8});
  std::mutex m;
  std::condition_variable cv;
  std::vector<gpu::compiler::result> results;
  for (int i = 0; i < 8; ++i)
    nvrtc.compile_async(vector_add, {}, [&](gpu::compiler::result r) {
      std::lock_guard lock(m);
      results.push_back(std::move(r));
      cv.notify_one();
    });
  std::unique_lock lock(m);
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return results.size() == 8; }));
  int fresh = 0;
  for (const auto& r : results) {
    REQUIRE(r.has_value());
    CHECK((*r)->cubin == (*results[0])->cubin);
    fresh += (*r)->cache_hit ? 0 : 1;
  }
  CHECK(fresh == 1);
  const auto s = nvrtc.stats();
  CHECK(s.compilations == 1);
  CHECK(s.memory_hits + s.joined == 7);
}
