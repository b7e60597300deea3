// The runtime's host-side behaviour, on any machine: a missing driver is an
// error value with a message, and plan arguments reach the kernel as resolve()
// typed them.
#include "driver.hpp"
#include "marshal.hpp"

#include <specgen/gpu/runtime.hpp>
#include <specgen/plan.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>

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
