#include <specgen/plan.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace specgen;

namespace {

/// Row softmax: x[N, M] -> y[N, M].
task softmax_task() {
  return task{.name = "softmax",
              .description = "row softmax",
              .symbols = {"N", "M"},
              .benchmark_shape = {{"N", 4096}, {"M", 4096}},
              .validation_shapes = {{{"N", 7}, {"M", 1000}}},
              .inputs = {{.name = "x", .shape = {"N", "M"}}},
              .outputs = {{.name = "y", .shape = {"N", "M"}}}};
}

const shape_binding shape{{"N", 4096}, {"M", 1000}};

launch_plan parsed(const std::string& text) {
  auto p = parse_plan(text);
  INFO(text);
  if (!p) FAIL(p.error().what());
  return *p;
}

error parse_fails(const std::string& text) {
  auto p = parse_plan(text);
  INFO(text);
  REQUIRE_FALSE(p);
  return p.error();
}

error resolve_fails(const std::string& text, const device_limits& limits = {}) {
  auto r = resolve(parsed(text), softmax_task(), shape, limits);
  INFO(text);
  REQUIRE_FALSE(r);
  return r.error();
}

resolved_plan resolved(const std::string& text, const shape_binding& b = shape) {
  auto r = resolve(parsed(text), softmax_task(), b);
  INFO(text);
  if (!r) FAIL(r.error().what());
  return *r;
}

}  // namespace

TEST_CASE("a plan is scratch declarations and launches, one per line, with comments") {
  const auto p = parsed(
      "# two passes\n"
      "scratch tmp : f32[N]\n"
      "\n"
      "launch row_max grid(N) block(256) args(x, tmp, M)   // first\n"
      "launch row_norm grid(N) block(256) smem(256 * 4) args(x, tmp, y, M:i64)\r\n");
  REQUIRE(p.scratch.size() == 1);
  CHECK(p.scratch[0].name == "tmp");
  CHECK(p.scratch[0].type == dtype::f32);
  CHECK(p.scratch[0].line == 2);
  REQUIRE(p.launches.size() == 2);
  CHECK(p.launches[0].kernel == "row_max");
  CHECK(p.launches[0].line == 4);
  CHECK(p.launches[0].smem == size_expr{});
  CHECK(p.launches[1].smem.to_string() == "256 * 4");
  REQUIRE(p.launches[1].args.size() == 4);
  CHECK(p.launches[1].args[3].cast == scalar_type::i64);
  CHECK(p.launches[1].args[3].column == 66);
}

TEST_CASE("clauses may come in any order; grid and block are required, smem and args optional") {
  const auto a = parsed("launch k args(x, y) block(128) grid(cdiv(N, 128))");
  const auto b = parsed("launch k grid(cdiv(N,128)) block(128) smem(0) args(x,y)");
  CHECK(a == b);
  CHECK(parsed("launch k grid(1) block(1)").launches[0].args.empty());
  CHECK(parsed("launch k grid(1) block(1) args()").launches[0].args.empty());
}

TEST_CASE("canonical text parses back to an equal plan") {
  const auto p = parsed(
      "launch a grid(cdiv(N,16),cdiv(M,16)) block(16,16) args(x,y,N*M:i64)\n"
      "scratch acc : f64[N, 2] zero\n"
      "launch b grid(N) block(32) smem(32*8) args(acc, y, M:i32)\n");
  const std::string text = p.to_string();
  CHECK(text ==
        "scratch acc : f64[N, 2] zero\n"
        "launch a grid(cdiv(N, 16), cdiv(M, 16)) block(16, 16) smem(0) args(x, y, N * M:i64)\n"
        "launch b grid(N) block(32) smem(32 * 8) args(acc, y, M:i32)\n");
  const auto again = parsed(text);
  CHECK(again == p);
  CHECK(again.to_string() == text);
}

TEST_CASE("kernel_names lists each launched kernel once, in launch order") {
  const auto p = parsed(
      "launch b grid(1) block(1)\n"
      "launch a grid(1) block(1)\n"
      "launch b grid(1) block(1)\n");
  CHECK(kernel_names(p) == std::vector<std::string>{"b", "a"});
}

TEST_CASE("parse errors name the line, the column, the field and the problem") {
  CHECK(parse_fails("launch k grid(1) block(1)\nlauch k grid(1)").what() ==
        "line 2, column 1: expected a line starting with 'launch', 'scratch' or 'call', found 'lauch'");
  CHECK(parse_fails("launch k grid(N +) block(32)").what() ==
        "line 1, column 18: grid.x: expected a number, a name or '(', found the end");
  CHECK(parse_fails("launch k grid(N) threads(32)").what() ==
        "line 1, column 18: unknown clause 'threads' (expected grid, block, smem or args)");
  CHECK(parse_fails("launch k grid(N) block(32").what() == "line 1, column 23: block: '(' is never closed");
  CHECK(parse_fails("launch k grid(N)").what() == "line 1, column 17: block: launch of 'k' needs block(...)");
  CHECK(parse_fails("launch k block(1)").message == "launch of 'k' needs grid(...)");
  CHECK(parse_fails("launch k grid(N) grid(M) block(1)").message == "grid(...) is given twice");
  CHECK(parse_fails("launch k grid(1, 1, 1, 1) block(1)").message == "at most 3 dimensions (x, y, z), got 4");
  CHECK(parse_fails("launch k<<<N, 256>>>(x)").message ==
        "expected a clause (grid, block, smem, args), found '<<<N, 256>>>'");
  CHECK(parse_fails("launch grid(N) block(1)").where == "");
  CHECK(parse_fails("launch 9k grid(N) block(1)").where == "kernel");
  CHECK(parse_fails("launch k grid(1) block(1) args(x, N:f33)").what() ==
        "line 1, column 37: args[1]: unknown cast ':f33' (expected :i8, :u8, :i16, :u16, :i32, :u32, :i64, :u64, "
        ":f16, :bf16, :f32, :f64)");
  CHECK(parse_fails("launch k grid(1) block(1) args(x, , y)").what() ==
        "line 1, column 35: args[1]: expected an expression, found nothing");
}

TEST_CASE("scratch declarations are checked when parsed") {
  CHECK(parse_fails("scratch t : f33[N]\nlaunch k grid(1) block(1)").what() ==
        "line 1, column 13: scratch t: unknown dtype 'f33' (known: f16, bf16, f32, f64, i8, u8, i32, i64)");
  CHECK(parse_fails("scratch t : f32\nlaunch k grid(1) block(1)").message ==
        "expected '[' and the element count after the dtype, found the end of the line");
  CHECK(parse_fails("scratch t : f32[N] zeros\nlaunch k grid(1) block(1)").message ==
        "unexpected 'zeros' (only 'zero' may follow the shape)");
  CHECK(parse_fails("scratch t : f32[N]\nscratch t : f32[M]\nlaunch k grid(1) block(1)").what() ==
        "line 2, column 9: scratch t: declared twice (first on line 1)");
}

TEST_CASE("a plan without a launch is an error") {
  const auto e = parse_fails("# nothing here\n\nscratch t : f32[N]\n");
  CHECK(e.line == 0);
  CHECK(e.what() ==
        "the plan launches no kernel; write at least one line 'launch KERNEL grid(...) block(...) args(...)'");
}

TEST_CASE("resolving evaluates geometry and classifies arguments") {
  const auto r = resolved(
      "scratch stats : f32[N, 2] zero\n"
      "launch row_stats grid(N) block(256) smem(256 * 4) args(x, stats, M)\n"
      "launch row_norm grid(cdiv(M, 32), N) block(32, 8) args(x, stats, y, N * M:i64)\n");
  REQUIRE(r.scratch.size() == 1);
  CHECK(r.scratch[0] == resolved_scratch{.name = "stats", .type = dtype::f32, .elements = 8192, .bytes = 32768, .zero = true});
  CHECK(r.scratch_bytes() == 32768);
  REQUIRE(r.launches.size() == 2);
  CHECK(r.launches[0].grid == std::array<std::uint32_t, 3>{4096, 1, 1});
  CHECK(r.launches[0].smem_bytes == 1024);
  CHECK_FALSE(r.launches[0].smem_opt_in);
  CHECK(r.launches[1].grid == std::array<std::uint32_t, 3>{32, 4096, 1});
  CHECK(r.launches[1].block == std::array<std::uint32_t, 3>{32, 8, 1});
  const auto& args = r.launches[1].args;
  REQUIRE(args.size() == 4);
  CHECK(args[0] == resolved_arg{.is_buffer = true, .buffer = "x", .role = buffer_role::input});
  CHECK(args[1].role == buffer_role::scratch);
  CHECK(args[2].role == buffer_role::output);
  CHECK(args[3] == resolved_arg{.value = 4096 * 1000, .type = scalar_type::i64});
  CHECK(r.launches[0].args[2] == resolved_arg{.value = 1000, .type = scalar_type::i32});
  CHECK_FALSE(r.needs_smem_opt_in());
}

TEST_CASE("dynamic shared memory above 48 KiB is allowed but flagged for opt-in") {
  const auto r = resolved("launch k grid(N) block(256) smem(64 * 1024) args(x)");
  CHECK(r.launches[0].smem_opt_in);
  CHECK(r.needs_smem_opt_in());
  CHECK(resolve_fails("launch k grid(N) block(256) smem(228 * 1024) args(x)").what() ==
        "line 1: smem: '228 * 1024' = 233472 bytes exceeds the device's 232448 bytes of dynamic shared memory per "
        "block");
  CHECK(resolve_fails("launch k grid(N) block(256) smem(0 - 4) args(x)").message ==
        "'0 - 4' = -4 bytes; it must not be negative");
}

TEST_CASE("grid and block dimensions are checked against the device") {
  CHECK(resolve_fails("launch k grid(N - N) block(32)").what() == "line 1: grid.x: 'N - N' = 0; it must be at least 1");
  CHECK(resolve_fails("launch k grid(1) block(2048)").what() == "line 1: block.x: 2048 exceeds the device limit of 1024");
  CHECK(resolve_fails("launch k grid(1) block(1, 1, 128)").message == "128 exceeds the device limit of 64");
  CHECK(resolve_fails("launch k grid(1, N * 16) block(1)").what() ==
        "line 1: grid.y: 'N * 16' = 65536 exceeds the device limit of 65535");
  CHECK(resolve_fails("launch k grid(N * N * N) block(1)").where == "grid.x");
  CHECK(resolved("launch k grid(2147483647) block(1)").launches[0].grid[0] == 2147483647u);
  CHECK(resolve_fails("launch k grid(1) block(32, 64)").what() ==
        "line 1: block: 32 x 64 x 1 = 2048 threads per block; at most 1024 are allowed");
}

TEST_CASE("arguments must name a task buffer, a scratch buffer or a size expression") {
  CHECK(resolve_fails("launch k grid(1) block(1) args(x, z)").what() ==
        "line 1, column 35: args[1]: unknown name 'z' (inputs: x; outputs: y; scratch: none; symbols: N, M; "
        "scalars: none)");
  CHECK(resolve_fails("launch k grid(1) block(1) args(x:i32)").message ==
        "'x' is a buffer; a cast (:i32) applies only to sizes, scalars and literals");
  CHECK(resolve_fails("launch k grid(1) block(1) args(y / 2)").message ==
        "'y / 2': 'y' is a buffer; expressions may use only size symbols (N, M)");
  CHECK(resolve_fails("launch k grid(K) block(1)").message == "'K': unknown name 'K' (known: M, N)");
}

TEST_CASE("a size that does not fit an i32 parameter asks for :i64") {
  const shape_binding big{{"N", 100000}, {"M", 100000}};
  auto r = resolve(parsed("launch k grid(1) block(1) args(N * M)"), softmax_task(), big);
  REQUIRE_FALSE(r);
  CHECK(r.error().message ==
        "'N * M' = 10000000000 does not fit in i32; write 'N * M:i64' and take a 'long long' parameter");
  CHECK(resolve(parsed("launch k grid(1) block(1) args(N * M:i64)"), softmax_task(), big));
}

TEST_CASE("scratch buffers are checked for names, sizes and the budget") {
  CHECK(resolve_fails("scratch x : f32[N]\nlaunch k grid(1) block(1)").what() ==
        "line 1: scratch x: the name is already a task buffer, size symbol or scalar; choose another");
  CHECK(resolve_fails("scratch t : f32[N - N]\nlaunch k grid(1) block(1)").message ==
        "dimension 0 is 'N - N' = 0; it must be at least 1");
  const device_limits small{.max_scratch_bytes = 1000};
  CHECK(resolve_fails("scratch t : f64[N]\nlaunch k grid(1) block(1)", small).message ==
        "4096 elements of f64 take the plan's scratch past its budget of 1000 bytes");
}

TEST_CASE("every task symbol needs a value in the binding") {
  auto r = resolve(parsed("launch k grid(1) block(1)"), softmax_task(), {{"N", 3}});
  REQUIRE_FALSE(r);
  CHECK(r.error().what() == "binding: symbol 'M' has no value in the shape");
}

TEST_CASE("kernel parameter space and launch count are bounded") {
  std::string args;
  for (int i = 0; i < 600; ++i) args += i ? ", x" : "x";
  CHECK(resolve_fails("launch k grid(1) block(1) args(" + args + ")").message ==
        "4800 bytes of kernel parameters exceed the limit of 4096");
  std::string many;
  for (int i = 0; i < 3; ++i) many += "launch k grid(1) block(1)\n";
  CHECK(resolve_fails(many, device_limits{.max_launches = 2}).what() ==
        "line 3: the plan has 3 launches; at most 2 are allowed");
}

TEST_CASE("device limits round-trip through JSON and default to an H200") {
  const device_limits h200{};
  CHECK(h200.max_dynamic_smem_bytes == 232448);
  CHECK(h200.smem_opt_in_bytes == 49152);
  const device_limits a100{.max_dynamic_smem_bytes = 166 * 1024};
  const nlohmann::json j = a100;
  CHECK(j.at("max_dynamic_smem_bytes") == 166 * 1024);
  CHECK(j.get<device_limits>() == a100);
  CHECK(nlohmann::json::object().get<device_limits>() == h200);
}

namespace {

/// y[M, N] = x[M, K] . w[N, K]^T (+ bias, ReLU): a library call then a kernel.
task linear_task() {
  return task{.name = "linear",
              .description = "linear layer",
              .symbols = {"M", "N", "K"},
              .benchmark_shape = {{"M", 64}, {"N", 32}, {"K", 16}},
              .validation_shapes = {{{"M", 3}, {"N", 5}, {"K", 7}}},
              .inputs = {{.name = "x", .shape = {"M", "K"}}, {.name = "w", .shape = {"N", "K"}},
                         {.name = "h", .type = dtype::f16, .shape = {"M", "K"}}},
              .outputs = {{.name = "y", .shape = {"M", "N"}}}};
}

}  // namespace

TEST_CASE("trusted plans call library routines in plan order") {
  const auto p = parsed(
      "scratch acc : f32[M, N]\n"
      "call gemm_nt(x, w, acc, M, N, K)\n"
      "launch bias_relu grid(cdiv(M * N, 256)) block(256) args(acc, y, M * N)\n"
      "call gemm_nt(x, w, y, M, N, K)   # again, after the kernel\n");
  REQUIRE(p.calls.size() == 2);
  CHECK(p.calls[0].before_launch == 0);
  CHECK(p.calls[1].before_launch == 1);
  CHECK(p.calls[0].line == 2);
  CHECK(p.has_calls());
  CHECK(parsed(p.to_string()) == p);  // canonical text keeps the order
  CHECK(p.to_string().find("call gemm_nt(x, w, acc, M, N, K)\nlaunch bias_relu") != std::string::npos);
  CHECK(kernel_names(p) == std::vector<std::string>{"bias_relu"});

  const auto r = resolve(p, linear_task(), {{"M", 64}, {"N", 32}, {"K", 16}});
  REQUIRE(r);
  REQUIRE(r->calls.size() == 2);
  const auto& c = r->calls[0];
  CHECK(c.function == "gemm_nt");
  CHECK(c.type == dtype::f32);
  CHECK(c.args[0] == resolved_arg{.is_buffer = true, .buffer = "x", .role = buffer_role::input});
  CHECK(c.args[2] == resolved_arg{.is_buffer = true, .buffer = "acc", .role = buffer_role::scratch});
  CHECK(c.args[3] == resolved_arg{.value = 64, .type = scalar_type::i64});
  CHECK(c.args[5].value == 16);

  // A plan may consist of calls alone.
  CHECK(parsed("call gemm_nt(x, w, y, M, N, K)").launches.empty());
}

TEST_CASE("library calls are checked: name, arity, buffers, sizes, dtypes and capacity") {
  CHECK(parse_fails("call gemmm(x, w, y, M, N, K)").what() ==
        "line 1, column 6: call: unknown library function 'gemmm' (known: gemm, gemm_nt, gemm_batched, gemv)");
  CHECK(parse_fails("call gemm(x, w, y, M, N)").message == "gemm takes 6 arguments (A, B, C, M, N, K), got 5");
  CHECK(parse_fails("call gemm x, w").message == "expected '(' after gemm, found 'x, w'");

  auto fails = [](const std::string& text) {
    auto r = resolve(parsed(text), linear_task(), {{"M", 64}, {"N", 32}, {"K", 16}});
    INFO(text);
    REQUIRE_FALSE(r);
    return r.error().what();
  };
  CHECK(fails("call gemm_nt(x, M, y, M, N, K)") ==
        "line 1, column 17: gemm_nt.args[1]: 'M' must be a buffer (gemm_nt takes A, B, C, M, N, K)");
  CHECK(fails("call gemm_nt(x, w, y, x, N, K)") ==
        "line 1, column 23: gemm_nt.args[3]: 'x' is a buffer; gemm_nt takes A, B, C, M, N, K");
  CHECK(fails("call gemm_nt(x, w, y, M - 64, N, K)") ==
        "line 1, column 23: gemm_nt.args[3]: 'M - 64' = 0 must be in [1, 2^31)");
  CHECK(fails("call gemm_nt(h, w, y, M, N, K)") ==
        "line 1: gemm_nt: 'w' is f32 but 'h' is f16; the buffers must share one dtype");
  CHECK(fails("call gemv(h, h, h, M, K)") == "line 1: gemv: gemv buffers may not be f16 (supported: f32)");
  // w is [N, K] = 512 elements; gemm (not _nt) reads B as [K, N] with K = 2 * 16 here.
  CHECK(fails("call gemm_nt(x, w, y, M, N, 2 * K)") ==
        "line 1: gemm_nt: 'x' holds 1024 elements; gemm_nt(A, B, C, M, N, K) needs 2048");
}

TEST_CASE("a candidate plan may not call library routines") {
  CHECK_FALSE(check_candidate_plan(parsed("launch k grid(1) block(1)")));
  const auto refused = check_candidate_plan(parsed("launch k grid(1) block(1)\ncall gemm(x, w, y, M, N, K)"));
  REQUIRE(refused);
  CHECK(refused->what() ==
        "line 2: call: 'call gemm' is for a task's reference and baseline only; a candidate launches its own kernels");
}

// ---- scalar arguments: task scalars, casts and typed literals -------------------------

namespace {

/// The softmax task with one scalar of several types.
task scalar_task() {
  task t = softmax_task();
  t.scalars = {{.name = "eps", .type = scalar_type::f32, .real = 1e-5},
               {.name = "beta", .type = scalar_type::f64, .real = 0.1},
               {.name = "seed", .type = scalar_type::u64, .value = -1},  // 2^64 - 1
               {.name = "lo", .type = scalar_type::i64, .value = std::numeric_limits<std::int64_t>::min()},
               {.name = "k", .type = scalar_type::i8, .value = -3},
               {.name = "h", .type = scalar_type::f16, .real = 0.1},
               {.name = "b", .type = scalar_type::bf16, .real = 0.1}};
  return t;
}

std::vector<resolved_arg> scalar_args(const std::string& args, const shape_binding& b = shape) {
  const std::string text = "launch k grid(1) block(1) args(" + args + ")";
  auto r = resolve(parsed(text), scalar_task(), b);
  INFO(text);
  if (!r) FAIL(r.error().what());
  return r->launches[0].args;
}

error scalar_fails(const std::string& args, const device_limits& limits = {}) {
  const std::string text = "launch k grid(1) block(1) args(" + args + ")";
  auto r = resolve(parsed(text), scalar_task(), shape, limits);
  INFO(text);
  REQUIRE_FALSE(r);
  return r.error();
}

resolved_arg int_arg(scalar_type t, std::int64_t v) { return resolved_arg{.value = v, .type = t}; }
resolved_arg float_arg(scalar_type t, double v) { return resolved_arg{.type = t, .real = v}; }

}  // namespace

TEST_CASE("arguments take every scalar type as a cast, and float literals with a type") {
  const auto p = parsed("launch k grid(1) block(1) args(x, 1e-5:f32, 0.5:f64, 3:u32, -1:i64, 7:u8, N:u64, eps, "
                        "eps:f64, .5:f16, 2.:bf16, -1.5E3:f64, N * M:i16)");
  const auto& a = p.launches[0].args;
  REQUIRE(a.size() == 13);
  CHECK(a[0] == plan_arg{.value = *parse_size_expr("x")});
  CHECK(a[1] == plan_arg{.cast = scalar_type::f32, .real = 1e-5});
  CHECK(a[1].column == 35);
  CHECK(a[2] == plan_arg{.cast = scalar_type::f64, .real = 0.5});
  CHECK(a[3] == plan_arg{.value = size_expr::literal(3), .cast = scalar_type::u32});
  CHECK(a[4] == plan_arg{.value = *parse_size_expr("-1"), .cast = scalar_type::i64});
  CHECK(a[5].cast == scalar_type::u8);
  CHECK(a[6] == plan_arg{.value = *parse_size_expr("N"), .cast = scalar_type::u64});
  CHECK(a[7] == plan_arg{.value = *parse_size_expr("eps")});
  CHECK(a[8] == plan_arg{.value = *parse_size_expr("eps"), .cast = scalar_type::f64});
  CHECK(a[9] == plan_arg{.cast = scalar_type::f16, .real = 0.5});
  CHECK(a[10] == plan_arg{.cast = scalar_type::bf16, .real = 2.0});
  CHECK(a[11] == plan_arg{.cast = scalar_type::f64, .real = -1500.0});
  CHECK(a[12].cast == scalar_type::i16);
  CHECK_FALSE(a[12].real);
  // A float literal is not an integer expression: equal only to a float literal.
  CHECK_FALSE(plan_arg{.value = size_expr::literal(2), .cast = scalar_type::f32} ==
              plan_arg{.cast = scalar_type::f32, .real = 2.0});
}

TEST_CASE("canonical text writes every argument form and parses back to an equal plan") {
  const auto p = parsed(
      "launch k grid(1) block(1) args(x, 1e-5:f32, 0.5:f64, 3:u32, -1:i64, 7:u8, N:u64, eps, eps:f64, .5:f16, "
      "2.:bf16, -1.5E3:f64, N*M:i16, 1e300:f64)");
  const std::string text = p.to_string();
  CHECK(text ==
        "launch k grid(1) block(1) smem(0) args(x, 1e-05:f32, 0.5:f64, 3:u32, -1:i64, 7:u8, N:u64, eps, eps:f64, "
        "0.5:f16, 2.0:bf16, -1500.0:f64, N * M:i16, 1e+300:f64)\n");
  const auto again = parsed(text);
  CHECK(again == p);
  CHECK(again.to_string() == text);
  // Shortest round-trip digits: the double comes back exactly.
  const auto third = parsed("launch k grid(1) block(1) args(0.1:f64, 3.4028234663852886e+38:f32, 1e-300:f64)");
  CHECK(parsed(third.to_string()) == third);
  CHECK(third.launches[0].args[2].real == 1e-300);
}

TEST_CASE("a float literal needs a type, and C suffixes are refused with the plan's spelling") {
  CHECK(parse_fails("launch k grid(1) block(1) args(x, 1e-5)").what() ==
        "line 1, column 35: args[1]: the float literal 1e-5 needs a type: write '1e-5:f32' for a 'float' parameter "
        "or '1e-5:f64' for a 'double'");
  CHECK(parse_fails("launch k grid(1) block(1) args(0.5)").message ==
        "the float literal 0.5 needs a type: write '0.5:f32' for a 'float' parameter or '0.5:f64' for a 'double'");
  CHECK(parse_fails("launch k grid(1) block(1) args(x, 1e-5f)").what() ==
        "line 1, column 39: args[1]: '1e-5f' is C; in a plan write '1e-5:f32' (a cast, not a suffix)");
  CHECK(parse_fails("launch k grid(1) block(1) args(2.5f:f32)").message ==
        "'2.5f' is C; in a plan write '2.5:f32' (a cast, not a suffix)");
  CHECK(parse_fails("launch k grid(1) block(1) args(1e999:f64)").message ==
        "the float literal 1e999 is out of the range of a double");
  // Not float literals: size expressions, whose parser explains.
  CHECK(parse_fails("launch k grid(1) block(1) args(1e:f32)").message == "unexpected 'e' in a number");
  CHECK(parse_fails("launch k grid(1) block(1) args(N * 0.5:f32)").where == "args[0]");
}

TEST_CASE("task scalars pass by name as their type, and casts convert them") {
  const auto a = scalar_args("eps, beta, seed, lo, k, h, b");
  REQUIRE(a.size() == 7);
  CHECK(a[0] == float_arg(scalar_type::f32, static_cast<double>(1e-5f)));  // rounded to float
  CHECK(a[1] == float_arg(scalar_type::f64, 0.1));
  CHECK(a[2] == int_arg(scalar_type::u64, -1));
  CHECK(static_cast<std::uint64_t>(a[2].value) == std::numeric_limits<std::uint64_t>::max());
  CHECK(a[3] == int_arg(scalar_type::i64, std::numeric_limits<std::int64_t>::min()));
  CHECK(a[4] == int_arg(scalar_type::i8, -3));
  CHECK(a[5] == float_arg(scalar_type::f16, static_cast<double>(half_to_float(float_to_half(0.1f)))));
  CHECK(a[5].real == 0.0999755859375);
  CHECK(a[6] == float_arg(scalar_type::bf16, 0.10009765625));

  const auto c = scalar_args("eps:f64, eps:f16, beta:f32, k:i64, k:f32, seed:f64, lo:f32");
  CHECK(c[0] == float_arg(scalar_type::f64, 1e-5));  // the value as written, not the float
  CHECK(c[1] == float_arg(scalar_type::f16, static_cast<double>(half_to_float(float_to_half(1e-5f)))));
  CHECK(c[2] == float_arg(scalar_type::f32, static_cast<double>(0.1f)));
  CHECK(c[3] == int_arg(scalar_type::i64, -3));
  CHECK(c[4] == float_arg(scalar_type::f32, -3.0));
  CHECK(c[5] == float_arg(scalar_type::f64, 18446744073709551616.0));
  CHECK(c[6] == float_arg(scalar_type::f32, -9223372036854775808.0));
  // A size symbol stays a size; equal arguments are equal, different types are not.
  CHECK(scalar_args("N")[0] == int_arg(scalar_type::i32, 4096));
  CHECK_FALSE(int_arg(scalar_type::i32, 7) == int_arg(scalar_type::u32, 7));
  CHECK_FALSE(float_arg(scalar_type::f32, 1.0) == float_arg(scalar_type::f32, 2.0));
  CHECK_FALSE(float_arg(scalar_type::f32, 0.0) == float_arg(scalar_type::f32, -0.0));  // different bytes
  CHECK(scalar_args("-0.0:f32")[0] == float_arg(scalar_type::f32, -0.0));
  CHECK_FALSE(parsed("launch k grid(1) block(1) args(-0.0:f32)") == parsed("launch k grid(1) block(1) args(0.0:f32)"));
}

TEST_CASE("typed literals and sizes take every integer and float type, checked") {
  const auto a = scalar_args("1e-5:f32, 0.5:f64, 3:u32, -1:i64, 7:u8, -128:i8, 65535:u16, -32768:i16, N:u64, "
                             "N * M:i64, N:f32, 2.0:i32, -0.0:u8, 1e3:u16, 0.1:bf16");
  CHECK(a[0] == float_arg(scalar_type::f32, static_cast<double>(1e-5f)));
  CHECK(a[1] == float_arg(scalar_type::f64, 0.5));
  CHECK(a[2] == int_arg(scalar_type::u32, 3));
  CHECK(a[3] == int_arg(scalar_type::i64, -1));
  CHECK(a[4] == int_arg(scalar_type::u8, 7));
  CHECK(a[5] == int_arg(scalar_type::i8, -128));
  CHECK(a[6] == int_arg(scalar_type::u16, 65535));
  CHECK(a[7] == int_arg(scalar_type::i16, -32768));
  CHECK(a[8] == int_arg(scalar_type::u64, 4096));
  CHECK(a[9] == int_arg(scalar_type::i64, 4096000));
  CHECK(a[10] == float_arg(scalar_type::f32, 4096.0));
  CHECK(a[11] == int_arg(scalar_type::i32, 2));  // an integral float may become an integer
  CHECK(a[12] == int_arg(scalar_type::u8, 0));
  CHECK(a[13] == int_arg(scalar_type::u16, 1000));
  CHECK(a[14] == float_arg(scalar_type::bf16, 0.10009765625));
}

TEST_CASE("a value that does not fit its type names a type that holds it") {
  const shape_binding big{{"N", 100000}, {"M", 100000}};
  auto fails_at = [](const std::string& args, const shape_binding& b) {
    auto r = resolve(parsed("launch k grid(1) block(1) args(" + args + ")"), scalar_task(), b);
    INFO(args);
    REQUIRE_FALSE(r);
    return r.error();
  };
  CHECK(fails_at("N * M:u32", big).what() ==
        "line 1, column 32: args[0]: 'N * M' = 10000000000 does not fit in u32; write 'N * M:u64' and take an "
        "'unsigned long long' parameter");
  CHECK(scalar_fails("N:u8").message == "'N' = 4096 does not fit in u8; write 'N:u16' and take an 'unsigned short' "
                                        "parameter");
  CHECK(scalar_fails("N:i8").message == "'N' = 4096 does not fit in i8; write 'N:i16' and take a 'short' parameter");
  CHECK(scalar_fails("-1:u32").message == "-1 does not fit in u32; write '-1:i32' and take an 'int' parameter");
  CHECK(scalar_fails("0 - N:u64").message ==
        "'0 - N' = -4096 does not fit in u64; write '0 - N:i64' and take a 'long long' parameter");
  CHECK(scalar_fails("seed:i64").message ==
        "'seed' = 18446744073709551615 does not fit in i64; write 'seed:u64' and take an 'unsigned long long' "
        "parameter");
  CHECK(scalar_fails("lo:i32").message ==
        "'lo' = -9223372036854775808 does not fit in i32; write 'lo:i64' and take a 'long long' parameter");
  CHECK(scalar_fails("k:u8").message == "'k' = -3 does not fit in u8; write 'k:i8' and take a 'signed char' parameter");
  CHECK(scalar_fails("1e30:i64").message == "1e+30 does not fit in i64 nor in any other integer type");
  CHECK(scalar_fails("70000:f16").message ==
        "70000 is out of the range of f16 (-65504 to 65504); write '70000:f32' and take a 'float' parameter");
  CHECK(scalar_fails("1e300:f32").what() ==
        "line 1, column 32: args[0]: 1e+300 is out of the range of f32 (-3.4028234663852886e+38 to "
        "3.4028234663852886e+38); write '1e+300:f64' and take a 'double' parameter");
  CHECK(scalar_fails("1e39:bf16").message ==
        "1e+39 is out of the range of bf16 (-3.3895313892515355e+38 to 3.3895313892515355e+38); write '1e+39:f64' "
        "and take a 'double' parameter");
}

TEST_CASE("a float becomes an integer only when it is integral") {
  CHECK(scalar_fails("x, eps:i32").what() ==
        "line 1, column 35: args[1]: 'eps' = 1e-05 is not an integer, so it cannot be passed as i32");
  CHECK(scalar_fails("2.5:u64").message == "2.5 is not an integer, so it cannot be passed as u64");
  CHECK(scalar_fails("beta:u8").message == "'beta' = 0.1 is not an integer, so it cannot be passed as u8");
}

TEST_CASE("scalars are values: not buffers, not in expressions, and they name no scratch") {
  CHECK(scalar_fails("x, z").message ==
        "unknown name 'z' (inputs: x; outputs: y; scratch: none; symbols: N, M; scalars: eps, beta, seed, lo, k, h, "
        "b)");
  CHECK(scalar_fails("eps * 2").what() ==
        "line 1, column 32: args[0]: 'eps * 2': 'eps' is a task scalar; expressions may use only size symbols (N, M)");
  CHECK(scalar_fails("x:f32").message == "'x' is a buffer; a cast (:f32) applies only to sizes, scalars and literals");
  auto r = resolve(parsed("scratch eps : f32[N]\nlaunch k grid(1) block(1)"), scalar_task(), shape);
  REQUIRE_FALSE(r);
  CHECK(r.error().what() == "line 1: scratch eps: the name is already a task buffer, size symbol or scalar; choose "
                            "another");
  r = resolve(parsed("launch k grid(k) block(1)"), scalar_task(), shape);
  REQUIRE_FALSE(r);
  CHECK(r.error().message == "'k': 'k' is a task scalar; expressions may use only size symbols (N, M)");
}

TEST_CASE("the parameter space counts each argument's own size and alignment") {
  // 1 + 1 bytes, the pointer aligned to 8: 16 bytes. Then a u8 after a pointer: 17.
  CHECK(resolve(parsed("launch k grid(1) block(1) args(7:u8, k, x)"), scalar_task(), shape,
                device_limits{.max_param_bytes = 16}));
  CHECK(scalar_fails("7:u8, x, k", device_limits{.max_param_bytes = 16}).message ==
        "17 bytes of kernel parameters exceed the limit of 16");
  // i8, f16 (aligned to 2), f32 (to 4), f64 (to 8): 1 + 1 pad + 2 + 4 + 8 = 16; an i16 more: 18.
  CHECK(resolve(parsed("launch k grid(1) block(1) args(k, h, eps, beta)"), scalar_task(), shape,
                device_limits{.max_param_bytes = 16}));
  CHECK(scalar_fails("k, h, eps, beta, 1:i16", device_limits{.max_param_bytes = 16}).message ==
        "18 bytes of kernel parameters exceed the limit of 16");
}

TEST_CASE("library calls keep taking buffers and sizes only") {
  CHECK(parse_fails("call gemm_nt(x, w, y, M:u32, N, K)").what() ==
        "line 1, column 23: gemm_nt.args[3]: gemm_nt takes its sizes as i64; the cast ':u32' does not apply (only "
        ":i32 and :i64 are accepted here, and change nothing)");
  CHECK(parse_fails("call gemm_nt(x, w, y, M, 1.5:f32, K)").what() ==
        "line 1, column 26: gemm_nt.args[4]: gemm_nt takes buffers and sizes (A, B, C, M, N, K), not a float");
  CHECK(parsed("call gemm_nt(x, w, y, M:i64, N:i32, K)").calls[0].args[3].cast == scalar_type::i64);
  task t = linear_task();
  t.scalars = {{.name = "alpha", .type = scalar_type::f32, .real = 2}};
  auto r = resolve(parsed("call gemm_nt(x, w, y, M, alpha, K)"), t, {{"M", 64}, {"N", 32}, {"K", 16}});
  REQUIRE_FALSE(r);
  CHECK(r.error().what() ==
        "line 1, column 26: gemm_nt.args[4]: 'alpha': 'alpha' is a task scalar; expressions may use only size "
        "symbols (M, N, K)");
}

TEST_CASE("scalar conversions: ranges, rounding and the exact edges of every width") {
  using sv = scalar_value;
  CHECK(convert_scalar(sv::of_int(127), scalar_type::i8));
  CHECK(convert_scalar(sv::of_int(128), scalar_type::i8).error() == scalar_errc::out_of_range);
  CHECK(convert_scalar(sv::of_int(-129), scalar_type::i8).error() == scalar_errc::out_of_range);
  CHECK(convert_scalar(sv::of_int(4294967295), scalar_type::u32)->value == 4294967295);
  CHECK_FALSE(convert_scalar(sv::of_int(4294967296), scalar_type::u32));
  CHECK(convert_scalar(sv::of_uint(std::numeric_limits<std::uint64_t>::max()), scalar_type::u64));
  CHECK_FALSE(convert_scalar(sv::of_uint(std::uint64_t{1} << 63), scalar_type::i64));
  CHECK(convert_scalar(sv::of_uint((std::uint64_t{1} << 63) - 1), scalar_type::i64));
  // Doubles at the edges: 2^63 is not an i64, -2^63 is; 2^64 is not a u64.
  CHECK_FALSE(convert_scalar(sv::of_real(9223372036854775808.0), scalar_type::i64));
  CHECK(convert_scalar(sv::of_real(-9223372036854775808.0), scalar_type::i64)->value ==
        std::numeric_limits<std::int64_t>::min());
  CHECK(static_cast<std::uint64_t>(convert_scalar(sv::of_real(18446744073709549568.0), scalar_type::u64)->value) ==
        18446744073709549568ull);
  CHECK_FALSE(convert_scalar(sv::of_real(18446744073709551616.0), scalar_type::u64));
  CHECK_FALSE(convert_scalar(sv::of_real(std::numeric_limits<double>::infinity()), scalar_type::f64));
  // Float ranges: the largest finite values pass, the next step rounds to infinity.
  CHECK(convert_scalar(sv::of_real(65504), scalar_type::f16)->real == 65504);
  CHECK(convert_scalar(sv::of_real(65519), scalar_type::f16)->real == 65504);
  CHECK_FALSE(convert_scalar(sv::of_real(65520), scalar_type::f16));
  // Float's largest value plus half an ulp is a tie, which goes to infinity (the even neighbour).
  CHECK(convert_scalar(sv::of_real(0x1.fffffefffffffp+127), scalar_type::f32)->real ==
        static_cast<double>(std::numeric_limits<float>::max()));
  CHECK_FALSE(convert_scalar(sv::of_real(0x1.ffffffp+127), scalar_type::f32));
  CHECK_FALSE(convert_scalar(sv::of_real(-0x1.ffffffp+127), scalar_type::f32));
  CHECK(range_text(scalar_type::u8) == "0 to 255");
  CHECK(range_text(scalar_type::i64) == "-9223372036854775808 to 9223372036854775807");
  CHECK(range_text(scalar_type::u64) == "0 to 18446744073709551615");
  CHECK(c_type_name(scalar_type::bf16) == "__nv_bfloat16");
  for (std::size_t i = 0; i < scalar_type_names.size(); ++i)
    CHECK(parse_scalar_type(scalar_type_names[i]) == static_cast<scalar_type>(i));
  CHECK_FALSE(parse_scalar_type("f8"));
}
