#include <specgen/plan.hpp>

#include <catch2/catch.hpp>

#include <string>

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

plan_error parse_fails(const std::string& text) {
  auto p = parse_plan(text);
  INFO(text);
  REQUIRE_FALSE(p);
  return p.error();
}

plan_error resolve_fails(const std::string& text, const device_limits& limits = {}) {
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
  CHECK(parse_fails("launch grid(N) block(1)").field == "");
  CHECK(parse_fails("launch 9k grid(N) block(1)").field == "kernel");
  CHECK(parse_fails("launch k grid(1) block(1) args(x, N:f32)").what() ==
        "line 1, column 37: args[1]: unknown cast ':f32' (expected :i32 or :i64)");
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
  CHECK(resolve_fails("launch k grid(N * N * N) block(1)").field == "grid.x");
  CHECK(resolved("launch k grid(2147483647) block(1)").launches[0].grid[0] == 2147483647u);
  CHECK(resolve_fails("launch k grid(1) block(32, 64)").what() ==
        "line 1: block: 32 x 64 x 1 = 2048 threads per block; at most 1024 are allowed");
}

TEST_CASE("arguments must name a task buffer, a scratch buffer or a size expression") {
  CHECK(resolve_fails("launch k grid(1) block(1) args(x, z)").what() ==
        "line 1, column 35: args[1]: unknown name 'z' (inputs: x; outputs: y; scratch: none; symbols: N, M)");
  CHECK(resolve_fails("launch k grid(1) block(1) args(x:i32)").message ==
        "'x' is a buffer; a cast (:i32, :i64) applies only to sizes");
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
        "line 1: scratch x: the name is already a task buffer or size symbol; choose another");
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
