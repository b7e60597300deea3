// The runtime's host-side behaviour, on any machine: a missing driver is an
// error value with a message, plan arguments reach the kernel as resolve()
// typed them, the profile statistics, the module cache, and the CUPTI and
// NVML loaders' library lists, and the cubin reader on NVRTC's own cubins.
#include "cubin_info.hpp"
#include "gpu/loader/cupti.hpp"
#include "gpu/loader/driver.hpp"
#include "lru_cache.hpp"  // and the bounded cache it wraps
#include "marshal.hpp"
#include "gpu/loader/nvml.hpp"
#include "sample_stats.hpp"

#include <specgen/gpu/compiler.hpp>
#include "runtime.hpp"
#include <specgen/plan.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace specgen;
using namespace specgen::gpu;
namespace rt = specgen::gpu::detail;

namespace {

template <class T>
T read_param(rt::kernel_params& p, std::size_t i) {
  REQUIRE(p.bytes(i) == sizeof(T));
  T v{};
  std::memcpy(&v, p.data()[i], sizeof v);
  return v;
}

task two_buffer_task() {
  task t;
  t.name = "scale";
  t.symbols = {"N"};
  t.inputs = {{.name = "x", .type = dtype::f32, .shape = {"N"}}};
  t.outputs = {{.name = "y", .type = dtype::f32, .shape = {"N"}}};
  return t;
}

}  // namespace

TEST_CASE("a driver library that cannot be loaded is a no_driver error naming the file and the fix") {
  auto api = rt::open_driver({"/nonexistent/libcuda.so.1"});
  REQUIRE_FALSE(api);
  CHECK(api.error().what == runtime_error::kind::no_driver);
  CHECK_THAT(api.error().message, Catch::StartsWith("no NVIDIA driver found (/nonexistent/libcuda.so.1 could not be loaded): "));
  CHECK_THAT(api.error().message, Catch::Contains("SPECGEN_CUDA_LIBRARY"));
}

TEST_CASE("SPECGEN_CUDA_LIBRARY replaces the default library names") {
  ::setenv("SPECGEN_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  CHECK(rt::driver_candidates() == std::vector<std::string>{"/nonexistent/libcuda.so.1"});
  ::unsetenv("SPECGEN_CUDA_LIBRARY");
  CHECK(rt::driver_candidates() == std::vector<std::string>{"libcuda.so.1", "libcuda.so"});
}

TEST_CASE("without a driver every device call fails cleanly with the same message") {
  // First use of the process-wide driver in this executable, so the variable decides.
  ::setenv("SPECGEN_CUDA_LIBRARY", "/nonexistent", 1);
  auto n = device_count();
  REQUIRE_FALSE(n);
  CHECK(n.error().what == runtime_error::kind::no_driver);
  CHECK_THAT(n.error().message, Catch::StartsWith("no NVIDIA driver found (/nonexistent could not be loaded): "));
  auto d = query_device(0);
  REQUIRE_FALSE(d);
  CHECK(d.error() == n.error());
  auto ctx = gpu_context::create(0);
  REQUIRE_FALSE(ctx);
  CHECK(ctx.error() == n.error());
}

TEST_CASE("the NVRTC architecture is arch-specific from Hopper on") {
  CHECK(nvrtc_arch(9, 0) == "sm_90a");
  CHECK(nvrtc_arch(10, 0) == "sm_100a");
  CHECK(nvrtc_arch(8, 0) == "sm_80");
  CHECK(nvrtc_arch(8, 9) == "sm_89");
}

TEST_CASE("only faults and timeouts make a context unusable") {
  CHECK(is_sticky(runtime_error::kind::fault));
  CHECK(is_sticky(runtime_error::kind::timeout));
  CHECK_FALSE(is_sticky(runtime_error::kind::launch_failed));
  CHECK_FALSE(is_sticky(runtime_error::kind::invalid_plan));
  CHECK(to_string(runtime_error::kind::fault) == "fault");
  CHECK(to_string(runtime_error::kind::internal) == "internal");
}

TEST_CASE("buffers are passed as device addresses and sizes as int or long long by value") {
  auto t = two_buffer_task();
  auto plan = parse_plan("launch scale grid(cdiv(N, 256)) block(256) args(x, y, N, N:i64)\n");
  REQUIRE(plan);
  auto r = resolve(*plan, t, {{"N", 3000000000 / 2}});
  REQUIRE(r);
  std::map<std::string, std::uint64_t> ptrs{{"x", 0x7f0000001000}, {"y", 0x7f0000802000}};
  auto p = rt::marshal_args(r->launches[0], ptrs);
  REQUIRE(p);
  REQUIRE(p->size() == 4);
  CHECK(read_param<std::uint64_t>(*p, 0) == 0x7f0000001000);
  CHECK(read_param<std::uint64_t>(*p, 1) == 0x7f0000802000);
  CHECK(read_param<std::int32_t>(*p, 2) == 1500000000);
  CHECK(read_param<long long>(*p, 3) == 1500000000LL);
}

TEST_CASE("marshalled parameters stay valid when the parameter block is moved") {
  auto t = two_buffer_task();
  auto plan = parse_plan("launch scale grid(1) block(32) args(N, x)\n");
  REQUIRE(plan);
  auto r = resolve(*plan, t, {{"N", 7}});
  REQUIRE(r);
  std::vector<rt::kernel_params> all;
  for (int i = 0; i < 8; ++i) {  // reallocation moves the earlier blocks
    auto p = rt::marshal_args(r->launches[0], {{"x", 0x1000u + static_cast<unsigned>(i)}});
    REQUIRE(p);
    all.push_back(std::move(*p));
  }
  for (int i = 0; i < 8; ++i) {
    CHECK(read_param<std::int32_t>(all[static_cast<std::size_t>(i)], 0) == 7);
    CHECK(read_param<std::uint64_t>(all[static_cast<std::size_t>(i)], 1) == 0x1000u + static_cast<unsigned>(i));
  }
}

TEST_CASE("a buffer the caller did not provide is an invalid_plan error naming it") {
  auto t = two_buffer_task();
  auto plan = parse_plan("launch scale grid(1) block(32) args(x, y, N)\n");
  REQUIRE(plan);
  auto r = resolve(*plan, t, {{"N", 7}});
  REQUIRE(r);
  auto p = rt::marshal_args(r->launches[0], {{"x", 0x1000}});
  REQUIRE_FALSE(p);
  CHECK(p.error().what == runtime_error::kind::invalid_plan);
  CHECK_THAT(p.error().message, Catch::Contains("argument 1") && Catch::Contains("'y'"));
}

TEST_CASE("every scalar type is passed in its own width: integers exactly, floats as IEEE bits") {
  auto t = two_buffer_task();
  t.scalars = {{.name = "k", .type = scalar_type::i8, .value = -3},
               {.name = "tag", .type = scalar_type::u8, .value = 255},
               {.name = "s", .type = scalar_type::i16, .value = -32768},
               {.name = "us", .type = scalar_type::u16, .value = 65535},
               {.name = "i", .type = scalar_type::i32, .value = std::numeric_limits<std::int32_t>::min()},
               {.name = "u", .type = scalar_type::u32, .value = 4294967295},
               {.name = "lo", .type = scalar_type::i64, .value = std::numeric_limits<std::int64_t>::min()},
               {.name = "seed", .type = scalar_type::u64, .value = -1},
               {.name = "h", .type = scalar_type::f16, .real = 1.5},
               {.name = "b", .type = scalar_type::bf16, .real = 1.5},
               {.name = "eps", .type = scalar_type::f32, .real = 1e-5},
               {.name = "beta", .type = scalar_type::f64, .real = 0.1}};
  auto plan = parse_plan(
      "launch k grid(1) block(32) args(k, tag, s, us, i, u, lo, seed, h, b, eps, beta, x, "
      "0.1:f16, 0.1:bf16, -2.5:f32, 1e-300:f64, N:u64, 7:u8, -1:i16, eps:f64, beta:f32, N:f32)\n");
  REQUIRE(plan);
  auto r = resolve(*plan, t, {{"N", 3000000000}});
  REQUIRE(r);
  auto p = rt::marshal_args(r->launches[0], {{"x", 0x7f0000001000}});
  REQUIRE(p);
  REQUIRE(p->size() == 23);
  CHECK(read_param<std::int8_t>(*p, 0) == -3);
  CHECK(read_param<std::uint8_t>(*p, 1) == 255);
  CHECK(read_param<std::int16_t>(*p, 2) == -32768);
  CHECK(read_param<std::uint16_t>(*p, 3) == 65535);
  CHECK(read_param<std::int32_t>(*p, 4) == std::numeric_limits<std::int32_t>::min());
  CHECK(read_param<std::uint32_t>(*p, 5) == 4294967295u);
  CHECK(read_param<long long>(*p, 6) == std::numeric_limits<long long>::min());
  CHECK(read_param<unsigned long long>(*p, 7) == std::numeric_limits<unsigned long long>::max());
  CHECK(read_param<std::uint16_t>(*p, 8) == 0x3E00);  // 1.5 as binary16
  CHECK(read_param<std::uint16_t>(*p, 9) == 0x3FC0);  // 1.5 as bfloat16
  CHECK(read_param<float>(*p, 10) == 1e-5f);
  CHECK(read_param<std::uint32_t>(*p, 10) == 0x3727C5ACu);  // the float's bits
  CHECK(read_param<double>(*p, 11) == 0.1);
  CHECK(read_param<std::uint64_t>(*p, 11) == 0x3FB999999999999Aull);
  CHECK(read_param<std::uint64_t>(*p, 12) == 0x7f0000001000);
  CHECK(read_param<std::uint16_t>(*p, 13) == 0x2E66);  // 0.1 rounded to binary16
  CHECK(read_param<std::uint16_t>(*p, 14) == 0x3DCD);  // 0.1 rounded to bfloat16
  CHECK(read_param<float>(*p, 15) == -2.5f);
  CHECK(read_param<double>(*p, 16) == 1e-300);
  CHECK(read_param<std::uint64_t>(*p, 17) == 3000000000u);
  CHECK(read_param<std::uint8_t>(*p, 18) == 7);
  CHECK(read_param<std::int16_t>(*p, 19) == -1);
  CHECK(read_param<double>(*p, 20) == 1e-5);  // the value as written, not the float
  CHECK(read_param<float>(*p, 21) == 0.1f);
  CHECK(read_param<float>(*p, 22) == 3e9f);
  // Integer parameters hold exactly their bytes, and the slot's other bytes stay zero.
  unsigned char slot[8];
  std::memcpy(slot, p->data()[1], 8);
  CHECK((slot[0] == 0xFF && slot[1] == 0 && slot[7] == 0));
}

TEST_CASE("median, MAD and quantiles of the profile samples") {
  CHECK(rt::median_of({}) == 0);
  CHECK(rt::median_of({3, 1, 2}) == 2);
  CHECK(rt::median_of({4, 1, 3, 2}) == 2.5);
  CHECK(rt::mad_of({1, 2, 3, 4, 100}) == 1);  // |x - 3| = 2, 1, 0, 1, 97
  CHECK(rt::sorted_quantile({1, 2, 3, 4, 5}, 0.25) == 2);
  CHECK(rt::sorted_quantile({1, 2, 3, 4}, 0.25) == Approx(1.75));
  CHECK(rt::sorted_quantile({7}, 0.75) == 7);
}

TEST_CASE("the noise of the median is 1.2533 x 1.4826 x MAD / sqrt(n) / median") {
  CHECK(rt::relative_noise({10, 10, 10}) == 0);
  CHECK(rt::relative_noise({1, 2, 3}) == Approx(1.2533 * 1.4826 * 1.0 / std::sqrt(3.0) / 2.0));
  CHECK(rt::relative_noise({100, 101, 99, 100, 102, 98}) ==
        Approx(1.2533 * 1.4826 * 1.0 / std::sqrt(6.0) / 100.0));  // median 100, |x - 100| median 1
  CHECK(std::isinf(rt::relative_noise({5})));
  CHECK(std::isinf(rt::relative_noise({})));
  CHECK(std::isinf(rt::relative_noise({0, 0, 1, -1})));  // a median of 0 with spread never stops the rule
}

TEST_CASE("the spread is the interquartile range over the median") {
  CHECK(rt::relative_spread({1, 2, 3, 4, 5}) == Approx(2.0 / 3.0));
  CHECK(rt::relative_spread({5, 4, 3, 2, 1}) == Approx(2.0 / 3.0));  // order does not matter
  CHECK(rt::relative_spread({10, 10, 10, 10}) == 0);
  CHECK(rt::relative_spread({}) == 0);
}

TEST_CASE("the stopping rule needs min_samples and the target noise") {
  const std::vector<double> steady(30, 50.0);
  CHECK(rt::noise_reached(steady, 20, 0.005));
  CHECK_FALSE(rt::noise_reached(steady, 31, 0.005));
  CHECK_FALSE(rt::noise_reached({50}, 0, 0.005));  // one sample never suffices
  std::vector<double> noisy;
  for (int i = 0; i < 40; ++i) noisy.push_back(i % 2 ? 100.0 : 120.0);
  CHECK_FALSE(rt::noise_reached(noisy, 20, 0.005));  // median 110, MAD 10: noise 0.027
  CHECK(rt::noise_reached(noisy, 20, 0.1));
}

TEST_CASE("the module cache keeps the most recently used entries") {
  rt::lru_cache<int> c(2);
  c.put("a", 1);
  c.put("b", 2);
  REQUIRE(c.find("a"));
  CHECK(*c.find("a") == 1);
  c.put("c", 3);  // drops b, the least recent
  CHECK(c.contains("a"));
  CHECK_FALSE(c.contains("b"));
  CHECK(c.find("b") == nullptr);
  CHECK(*c.find("c") == 3);
  c.put("a", 10);  // replaces, and a becomes the most recent
  CHECK(c.size() == 2);
  CHECK(*c.find("a") == 10);
  c.put("d", 4);  // drops c
  CHECK_FALSE(c.contains("c"));
  CHECK(c.contains("a"));
  CHECK(c.contains("d"));
  rt::lru_cache<int> one(0);  // a capacity of 0 keeps one
  one.put("x", 1);
  CHECK(one.capacity() == 1);
  CHECK(one.size() == 1);
}

TEST_CASE("the bounded cache keeps its byte budget, never drops the newest entry, and peek() leaves recency alone") {
  rt::bounded_cache<int> c({.max_bytes = 100});
  c.put("a", 1, 60);
  c.put("b", 2, 30);
  CHECK(c.bytes() == 90);
  REQUIRE(c.peek("a"));  // not renewed: "a" is still the oldest
  c.put("c", 3, 30);     // 120 bytes: drops a
  CHECK_FALSE(c.contains("a"));
  CHECK(c.bytes() == 60);
  REQUIRE(c.find("b"));  // renewed: "c" is now the oldest
  c.put("d", 4, 50);     // 110 bytes: drops c
  CHECK_FALSE(c.contains("c"));
  CHECK(c.contains("b"));
  c.put("b", 5, 10);  // replacing counts the new weight only
  CHECK(c.bytes() == 60);
  c.put("huge", 6, 1000);  // alone over the budget: kept until the next put
  CHECK(c.size() == 1);
  CHECK(*c.find("huge") == 6);
  rt::bounded_cache<int> both({.max_entries = 2, .max_bytes = 1000});
  both.put("x", 1, 1);
  both.put("y", 2, 1);
  both.put("z", 3, 1);
  CHECK(both.size() == 2);
  CHECK_FALSE(both.contains("x"));
}

TEST_CASE("libcupti and NVML are looked for where the toolkit and the driver put them, or where the variables say") {
  ::unsetenv("SPECGEN_CUPTI_LIBRARY");
  const auto cupti = rt::cupti_candidates();
  REQUIRE(cupti.size() >= 5);
  CHECK(cupti[0] == fmt::format("libcupti.so.{}", CUDA_VERSION / 1000));
  CHECK(std::find(cupti.begin(), cupti.end(), fmt::format("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.{}",
                                                          CUDA_VERSION / 1000)) != cupti.end());
  ::setenv("SPECGEN_CUPTI_LIBRARY", "/nonexistent/libcupti.so", 1);
  CHECK(rt::cupti_candidates() == std::vector<std::string>{"/nonexistent/libcupti.so"});
  ::unsetenv("SPECGEN_CUPTI_LIBRARY");

  ::unsetenv("SPECGEN_NVML_LIBRARY");
  CHECK(rt::nvml_candidates() == std::vector<std::string>{"libnvidia-ml.so.1"});
  ::setenv("SPECGEN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  CHECK(rt::nvml_candidates() == std::vector<std::string>{"/nonexistent/libnvidia-ml.so.1"});
  ::unsetenv("SPECGEN_NVML_LIBRARY");
}

TEST_CASE("a libcupti that cannot be loaded is a reason naming the file and the variable") {
  auto r = rt::probe_cupti({"/nonexistent/libcupti.so.13"});
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message,
             Catch::StartsWith("libcupti not found (/nonexistent/libcupti.so.13 could not be loaded"));
  CHECK_THAT(r.error().message, Catch::Contains("SPECGEN_CUPTI_LIBRARY"));
}

TEST_CASE("the toolkit's libcupti, where installed, has every function the activity pass uses") {
  ::unsetenv("SPECGEN_CUPTI_LIBRARY");
  auto r = rt::probe_cupti(rt::cupti_candidates());
  if (!r) {
    WARN("no libcupti here: " << r.error().message);
    return;
  }
  CHECK_FALSE(r->empty());
}

namespace {

/// The cubin NVRTC makes of `source` for sm_90a, or nothing (with a warning) without NVRTC.
std::optional<std::vector<std::byte>> cubin_of(const std::string& source) {
  static compiler nvrtc({.memory_entries = 0, .threads = 1});
  if (auto v = compiler::nvrtc_version(); !v) {
    WARN("NVRTC not available, skipping: " << v.error().message);
    return std::nullopt;
  }
  auto r = nvrtc.compile(source, {.arch = "sm_90a"});
  if (!r) FAIL("compile failed: " << r.error().message << "\n" << r.error().log);
  return (*r)->cubin;
}

template <class T>
void poke(std::vector<std::byte>& image, std::size_t at, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    image.at(at + i) = static_cast<std::byte>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xff);
}

template <class T>
T peek(const std::vector<std::byte>& image, std::size_t at) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= std::to_integer<std::uint64_t>(image.at(at + i)) << (8 * i);
  return static_cast<T>(v);
}

constexpr const char* counter_source = R"(
__device__ int counter;
extern "C" __global__ void count(int* out) { out[0] = ++counter; }
)";

}  // namespace

TEST_CASE("the cubin reader finds writable device globals in NVRTC's cubins, and nothing else") {
  const auto counter = cubin_of(counter_source);
  if (!counter) return;
  const auto table = cubin_of(R"(
__device__ float table[4] = {1, 2, 3, 4};
extern "C" __global__ void look_up(float* out) { out[threadIdx.x] = table[threadIdx.x & 3]; }
)");
  const auto constant = cubin_of(R"(
__constant__ float weights[4] = {1, 2, 3, 4};
extern "C" __global__ void weigh(float* out) { out[threadIdx.x] = weights[threadIdx.x & 3]; }
)");
  const auto plain = cubin_of(R"(
extern "C" __global__ void twice(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2.f; }
)");
  const auto heap = cubin_of(R"(
extern "C" __global__ void hide(int* out) { int* p = (int*)malloc(64); p[0] = 1; out[0] = p[0]; free(p); }
)");

  auto c = rt::inspect_cubin(*counter);
  REQUIRE(c);
  CHECK(c->has_writable_globals());
  CHECK(c->global_sections == std::vector<std::string>{".nv.global"});
  CHECK(c->global_bytes >= 4);
  CHECK(c->heap_functions.empty());

  auto t = rt::inspect_cubin(*table);
  REQUIRE(t);
  CHECK(t->has_writable_globals());
  CHECK(t->global_sections == std::vector<std::string>{".nv.global.init"});
  CHECK(t->global_bytes >= 16);

  auto k = rt::inspect_cubin(*constant);
  REQUIRE(k);
  CHECK_FALSE(k->has_writable_globals());  // __constant__ lives in .nv.constant3: read-only for kernels
  CHECK(k->global_bytes == 0);

  auto p = rt::inspect_cubin(*plain);
  REQUIRE(p);
  CHECK_FALSE(p->has_writable_globals());
  CHECK(p->heap_functions.empty());

  auto h = rt::inspect_cubin(*heap);
  REQUIRE(h);
  CHECK_FALSE(h->has_writable_globals());
  CHECK(h->heap_functions == std::vector<std::string>{"malloc", "free"});

  CHECK(rt::is_global_section(".nv.global"));
  CHECK(rt::is_global_section(".nv.global.init"));
  CHECK_FALSE(rt::is_global_section(".nv.globalx"));
  CHECK_FALSE(rt::is_global_section(".nv.constant0.k"));
  CHECK_FALSE(rt::is_global_section(".rela.nv.global"));
}

TEST_CASE("the cubin reader returns an error for truncated, garbled and hostile images, never crashes") {
  CHECK_FALSE(rt::inspect_cubin({}));
  const std::vector<std::byte> few(10, std::byte{0x7f});
  CHECK_FALSE(rt::inspect_cubin(few));
  std::mt19937_64 rng(7);
  std::vector<std::byte> garbage(4096);
  for (auto& b : garbage) b = static_cast<std::byte>(rng() & 0xff);
  auto g = rt::inspect_cubin(garbage);
  REQUIRE_FALSE(g);
  CHECK_THAT(g.error().message, Catch::Contains("not an ELF image"));
  const std::string ptx = ".version 9.0\n.target sm_90a\n.address_size 64\n";
  CHECK_FALSE(rt::inspect_cubin(std::as_bytes(std::span(ptx))));

  const auto good = cubin_of(counter_source);
  if (!good) return;
  REQUIRE(rt::inspect_cubin(*good));
  const auto shoff = peek<std::uint64_t>(*good, 0x28);
  const auto shnum = peek<std::uint16_t>(*good, 0x3c);

  // Every prefix: an error or an answer, never a read past the end. Cut
  // inside the section headers, it must be an error.
  for (std::size_t len = 0; len < good->size(); ++len) {
    const std::span<const std::byte> prefix(good->data(), len);
    auto r = rt::inspect_cubin(prefix);
    if (len < shoff + std::uint64_t{shnum} * 64) CHECK_FALSE(r);
  }

  const auto patched = [&](auto&& change) {
    auto image = *good;
    change(image);
    return rt::inspect_cubin(image);
  };
  CHECK_FALSE(patched([](auto& i) { i[4] = std::byte{1}; }));  // ELF32
  CHECK_FALSE(patched([](auto& i) { i[5] = std::byte{2}; }));  // big-endian
  CHECK_FALSE(patched([](auto& i) { poke<std::uint64_t>(i, 0x28, ~std::uint64_t{0} - 8); }));  // e_shoff wraps
  CHECK_FALSE(patched([](auto& i) { poke<std::uint64_t>(i, 0x28, 0); }));
  CHECK_FALSE(patched([](auto& i) { poke<std::uint16_t>(i, 0x3a, 40); }));      // e_shentsize
  CHECK_FALSE(patched([](auto& i) { poke<std::uint16_t>(i, 0x3c, 0xfff0); }));  // e_shnum past the end
  CHECK_FALSE(patched([&](auto& i) { poke<std::uint16_t>(i, 0x3e, shnum); }));  // e_shstrndx out of range
  CHECK_FALSE(patched([](auto& i) { poke<std::uint16_t>(i, 0x3e, 0); }));
  // Extended numbering with an absurd count in section 0.
  CHECK_FALSE(patched([&](auto& i) {
    poke<std::uint16_t>(i, 0x3c, 0);
    poke<std::uint64_t>(i, shoff + 32, ~std::uint64_t{0});
  }));
  // Each section in turn: a name outside the name table, an offset that wraps,
  // a size past the end. Errors, or (a NOBITS size) an answer; never a crash.
  for (std::uint16_t s = 1; s < shnum; ++s) {
    const std::size_t at = shoff + std::size_t{s} * 64;
    CHECK_FALSE(patched([&](auto& i) { poke<std::uint32_t>(i, at, 0xfffffff0u); }));
    const bool nobits = peek<std::uint32_t>(*good, at + 4) == 8;
    auto wrapped = patched([&](auto& i) { poke<std::uint64_t>(i, at + 24, ~std::uint64_t{0} - 4); });
    auto huge = patched([&](auto& i) { poke<std::uint64_t>(i, at + 32, ~std::uint64_t{0} - 4); });
    if (!nobits) {
      CHECK_FALSE(wrapped);
      CHECK_FALSE(huge);
    }
  }
  // Random corruption of the headers and the tables: any answer, no crash.
  for (int round = 0; round < 2000; ++round) {
    auto image = *good;
    for (int flips = 0; flips < 8; ++flips) {
      const auto where = rng() % 2 ? rng() % 64 : shoff + rng() % (std::uint64_t{shnum} * 64);
      image[static_cast<std::size_t>(where % image.size())] = static_cast<std::byte>(rng() & 0xff);
    }
    (void)rt::inspect_cubin(image);
  }
}
