#include <specgen/extract.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <random>
#include <string>
#include <vector>

using namespace specgen;

namespace {

std::string kernel(std::string_view name, std::string_view body = "x[i] = 0.f;") {
  return fmt::format("extern \"C\" __global__ void {}(float* x, int N) {{\n  int i = threadIdx.x;\n  if (i < N) {{ {} }}\n}}\n",
                     name, body);
}
std::string fence(std::string_view tag, std::string_view content, std::string_view marker = "```") {
  return fmt::format("{}{}\n{}{}\n", marker, tag, content, marker);
}
std::string launch(std::string_view name) { return fmt::format("launch {} grid(cdiv(N,256)) block(256) smem(0) args(x, N)\n", name); }

/// Every block the scanner reports for `text`, fed in the given chunk sizes (cycled).
std::vector<fenced_block> fences_in(std::string_view text, const std::vector<std::size_t>& sizes = {}) {
  fence_scanner fs;
  std::vector<fenced_block> all;
  std::size_t i = 0, k = 0;
  while (i < text.size()) {
    const std::size_t n = sizes.empty() ? text.size() : std::max<std::size_t>(1, sizes[k++ % sizes.size()]);
    for (auto& b : fs.feed(text.substr(i, n))) all.push_back(std::move(b));
    i += n;
  }
  for (auto& b : fs.finish()) all.push_back(std::move(b));
  return all;
}

std::vector<kernel_event> kernels_in(std::string_view text, const std::vector<std::size_t>& sizes = {}) {
  brace_tracker bt;
  std::vector<kernel_event> all;
  std::size_t i = 0, k = 0;
  while (i < text.size()) {
    const std::size_t n = sizes.empty() ? text.size() : std::max<std::size_t>(1, sizes[k++ % sizes.size()]);
    for (auto& e : bt.feed(text.substr(i, n))) all.push_back(std::move(e));
    i += n;
  }
  return all;
}

extract_failure failure_of(std::string_view text, const extract_options& opt = {}) {
  auto r = extract_candidate(text, opt);
  REQUIRE_FALSE(r);
  return r.error();
}

}  // namespace

// ---- the rules ------------------------------------------------------------------------

TEST_CASE("a cuda block followed by a plan block is a candidate, with copies and spans of both") {
  const std::string text = "Here is my kernel.\n" + fence("cuda", kernel("scale")) + "And the plan:\n" +
                           fence("plan", launch("scale")) + "Done.\n";
  auto r = extract_candidate(text);
  REQUIRE(r);
  CHECK(r->source == kernel("scale"));
  CHECK(r->plan == launch("scale"));
  CHECK(r->kernels == std::vector<std::string>{"scale"});
  CHECK(r->source_span.of(text) == r->source);
  CHECK(r->plan_span.of(text) == r->plan);
  CHECK(text.substr(r->begin, 7) == "```cuda");
  CHECK(text.substr(0, r->end).ends_with("```\n"));
  CHECK(text.substr(r->end) == "Done.\n");
  CHECK_FALSE(r->inline_source);
}

TEST_CASE("every source tag is accepted, case-insensitively, with text after the tag") {
  for (std::string tag : {"cuda", "cu", "cpp", "c++", "cuh", "c", "CUDA", "Cpp", "cuda title=\"k.cu\""}) {
    CAPTURE(tag);
    auto r = extract_candidate(fence(tag, kernel("k")) + fence("plan", launch("k")));
    REQUIRE(r);
    CHECK(r->kernels == std::vector<std::string>{"k"});
  }
  CHECK(extract_candidate(fence("PLAN", launch("k")) + fence("cu", kernel("k"))));
}

TEST_CASE("tilde fences and longer fences work; a block closes only at a run of its own character at least as long") {
  const std::string inner = "// the next line is content, not a fence\n```\n~~~\n" + kernel("k");
  const std::string text = "~~~~cuda\n" + inner + "~~~~~\n" + fence("plan", launch("k"), "````");
  auto r = extract_candidate(text);
  REQUIRE(r);
  CHECK(r->source == inner);
  CHECK(r->plan == launch("k"));

  const auto blocks = fences_in("```cuda\nint a;\n``` not a close\n  ```  \r\nafter\n");
  REQUIRE(blocks.size() == 1);
  CHECK(blocks[0].content.of("```cuda\nint a;\n``` not a close\n  ```  \r\nafter\n") == "int a;\n``` not a close\n");
}

TEST_CASE("a code block without an extern C kernel is not a source") {
  const std::string host = "int main() { launch(); return 0; }\n";
  auto r = extract_candidate(fence("cuda", kernel("k")) + fence("plan", launch("k")) + fence("cpp", host));
  REQUIRE(r);
  CHECK(r->kernels == std::vector<std::string>{"k"});
  CHECK(r->source == kernel("k"));
}

TEST_CASE("the last complete candidate wins") {
  const std::string text = fence("cuda", kernel("v1")) + fence("plan", launch("v1")) + "Actually, let me fix the bounds.\n" +
                           fence("cuda", kernel("v2")) + fence("plan", launch("v2")) + "Final answer above.\n";
  auto r = extract_candidate(text);
  REQUIRE(r);
  CHECK(r->kernels == std::vector<std::string>{"v2"});
  CHECK(r->plan == launch("v2"));
}

TEST_CASE("a revised source with no plan after it pairs with the plan right before it") {
  const std::string text = fence("cuda", kernel("k", "x[i] = 1.f;")) + fence("plan", launch("k")) +
                           "Let me fix that:\n" + fence("cuda", kernel("k", "x[i] = 2.f;"));
  auto r = extract_candidate(text);
  REQUIRE(r);
  CHECK(r->source == kernel("k", "x[i] = 2.f;"));
  CHECK(r->plan == launch("k"));
  CHECK(r->begin == text.find("```plan"));
  CHECK(r->end == text.size());
}

TEST_CASE("a plan written before its source pairs with it, and other blocks between do not break a pair") {
  const std::string text = fence("plan", launch("k")) + fence("cuda", kernel("k"));
  REQUIRE(extract_candidate(text));
  CHECK(extract_candidate(text)->plan == launch("k"));

  const std::string between = fence("cuda", kernel("k")) + fence("python", "print('x')\n") + fence("", "{}\n") +
                              fence("text", "notes\n") + fence("plan", launch("k"));
  auto r = extract_candidate(between);
  REQUIRE(r);
  CHECK(r->plan == launch("k"));
}

TEST_CASE("a source separated from the earlier plan by another source does not pair with it") {
  // plan, A, B: A takes the plan; B has no neighbouring plan, so A+plan is the last complete candidate.
  const std::string text = fence("plan", launch("a")) + fence("cuda", kernel("a")) + fence("cuda", kernel("b"));
  auto r = extract_candidate(text);
  REQUIRE(r);
  CHECK(r->kernels == std::vector<std::string>{"a"});
  auto loose = extract_candidate(text, {.require_plan = false});
  REQUIRE(loose);
  CHECK(loose->kernels == std::vector<std::string>{"b"});
  CHECK(loose->plan.empty());
  CHECK(loose->plan_span == text_span{});
}

TEST_CASE("without require_plan a source alone is a candidate; a neighbouring plan is still taken") {
  auto alone = extract_candidate(fence("cuda", kernel("k")), {.require_plan = false});
  REQUIRE(alone);
  CHECK(alone->plan.empty());
  auto with = extract_candidate(fence("cuda", kernel("k")) + fence("plan", launch("k")), {.require_plan = false});
  REQUIRE(with);
  CHECK(with->plan == launch("k"));
}

TEST_CASE("kernel names come from declarations, not from comments, strings or prototypes twice") {
  const std::string src = "// extern \"C\" __global__ void old(float*) {}\n"
                          "/* extern \"C\" __global__ void older(float*) {} */\n"
                          "const char* s = \"extern \\\"C\\\" __global__ void str(\";\n"
                          "extern \"C\" __global__ void a(float*);\n"
                          "extern \"C\" __global__ __launch_bounds__(256, 2) void a(float* x) { x[0] = '}'; }\n"
                          "__global__ void helper(float* x) {}\n"
                          "extern \"C\" {\n__global__ void b(float* x) { }\n}\n";
  CHECK(declared_kernels(src) == std::vector<std::string>{"a", "b"});
}

// ---- failure reasons ------------------------------------------------------------------

TEST_CASE("no_code: prose and non-source blocks only") {
  auto f = failure_of("I think we should tile by 128.\n" + fence("python", "import torch\n"));
  CHECK(f.reason == extract_reason::no_code);
  CHECK(f.message.find("```cuda") != std::string::npos);
  CHECK(f.message.find("extern \"C\" __global__") != std::string::npos);
  CHECK(f.message.find("```plan") != std::string::npos);
  CHECK(failure_of("").reason == extract_reason::no_code);
  CHECK(failure_of(fence("plan", launch("k"))).reason == extract_reason::no_code);
}

TEST_CASE("no_kernel: a source block without C linkage names what it found") {
  auto f = failure_of(fence("cuda", "__global__ void scale(float* x) { }\n") + fence("plan", launch("scale")));
  CHECK(f.reason == extract_reason::no_kernel);
  CHECK(f.message.find("`scale`") != std::string::npos);
  CHECK(f.message.find("extern \"C\"") != std::string::npos);
  CHECK(failure_of(fence("cpp", "int main() {}\n")).reason == extract_reason::no_kernel);
}

TEST_CASE("no_plan: kernels without any plan block") {
  auto f = failure_of(fence("cuda", kernel("softmax")));
  CHECK(f.reason == extract_reason::no_plan);
  CHECK(f.message.find("`softmax`") != std::string::npos);
  CHECK(f.message.find("launch softmax") != std::string::npos);
}

TEST_CASE("plan_names_unknown_kernel: the plan launches a name the source does not declare") {
  auto f = failure_of(fence("cuda", kernel("k1")) + fence("plan", launch("k1") + launch("k2") + launch("k2")));
  CHECK(f.reason == extract_reason::plan_names_unknown_kernel);
  CHECK(f.message.find("The plan launches `k2`,") != std::string::npos);
  CHECK(f.message.find("declares `k1`") != std::string::npos);
}

TEST_CASE("plan_launches_nothing: a plan without launch lines") {
  auto f = failure_of(fence("cuda", kernel("k")) + fence("plan", "scratch tmp : f32[N]\n# launch k\n"));
  CHECK(f.reason == extract_reason::plan_launches_nothing);
  CHECK(f.message.find("launch k") != std::string::npos);
}

TEST_CASE("truncated: the text ends inside a source or plan block and nothing complete came before") {
  auto f = failure_of("Let me write it.\n```cuda\n" + kernel("k").substr(0, 30));
  CHECK(f.reason == extract_reason::truncated);
  CHECK(f.message.find("```cuda") != std::string::npos);
  CHECK(f.message.find("byte 17") != std::string::npos);
  CHECK(failure_of(fence("cuda", kernel("k")) + "```plan\nlaunch k").reason == extract_reason::truncated);
  CHECK(failure_of("```cuda").reason == extract_reason::truncated);
  // An unterminated block of another language is not a cut-off candidate.
  CHECK(failure_of(fence("cuda", kernel("k")) + "```python\nx = 1\n").reason == extract_reason::no_plan);
}

TEST_CASE("a truncated trailing block is ignored when a complete candidate came before it") {
  const std::string text = fence("cuda", kernel("v1")) + fence("plan", launch("v1")) + "```cuda\n" + kernel("v2");
  auto r = extract_candidate(text);
  REQUIRE(r);
  CHECK(r->kernels == std::vector<std::string>{"v1"});
}

TEST_CASE("extract_reason names are stable") {
  CHECK(to_string(extract_reason::no_code) == "no_code");
  CHECK(to_string(extract_reason::plan_names_unknown_kernel) == "plan_names_unknown_kernel");
  CHECK(to_string(extract_reason::plan_launches_nothing) == "plan_launches_nothing");
}

// ---- inline code ------------------------------------------------------------------------

TEST_CASE("inline code is recognised only when allowed and no fenced source exists") {
  const std::string text = "Let's do it: " + kernel("a") + kernel("b") + "That's the kernel.\n" + fence("plan", launch("a") + launch("b"));
  CHECK(failure_of(text).reason == extract_reason::no_code);
  auto r = extract_candidate(text, {.allow_inline_code = true});
  REQUIRE(r);
  CHECK(r->inline_source);
  CHECK(r->source == kernel("a") + kernel("b").substr(0, kernel("b").size() - 1));
  CHECK(r->kernels == std::vector<std::string>{"a", "b"});
  CHECK(r->source_span.of(text) == r->source);

  const std::string fenced = text + fence("cuda", kernel("c")) + fence("plan", launch("c"));
  auto f = extract_candidate(fenced, {.allow_inline_code = true});
  REQUIRE(f);
  CHECK(f->kernels == std::vector<std::string>{"c"});
}

TEST_CASE("inline code: kernels inside other fenced blocks are not inline, and an unclosed body is truncated") {
  const extract_options inline_ok{.require_plan = false, .allow_inline_code = true};
  CHECK(failure_of(fence("python", kernel("k")), inline_ok).reason == extract_reason::no_code);
  auto f = failure_of("So the kernel is " + kernel("k").substr(0, 60), inline_ok);
  CHECK(f.reason == extract_reason::truncated);
  CHECK(f.message.find("never closes") != std::string::npos);
  // A prototype or a mention in prose is not a function.
  CHECK(failure_of("We call extern \"C\" __global__ void k(float*); later. The extern keyword...", inline_ok).reason ==
        extract_reason::no_code);
}

// ---- adversarial text ----------------------------------------------------------------------

TEST_CASE("CRLF line ends are handled and kept in the copies") {
  std::string text = fence("cuda", kernel("k")) + fence("plan", launch("k"));
  std::string crlf;
  for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  auto r = extract_candidate(crlf);
  REQUIRE(r);
  CHECK(r->kernels == std::vector<std::string>{"k"});
  CHECK(r->source.find("\r\n") != std::string::npos);
  CHECK(r->source_span.of(crlf) == r->source);
}

TEST_CASE("fence markers inside code lines, string literals and comments do not close a block") {
  const std::string src = "// close with ``` later\n"
                          "const char* s = \"```\\n~~~\";\n"
                          "/* ```plan */\n" +
                          kernel("k");
  auto r = extract_candidate(fence("cuda", src) + fence("plan", launch("k")));
  REQUIRE(r);
  CHECK(r->source == src);
}

TEST_CASE("inline code spans with backticks in prose are not fences") {
  const std::string text = "Use ```cuda``` blocks, like ``` `x` ```.\n" + fence("cuda", kernel("k")) + fence("plan", launch("k"));
  auto r = extract_candidate(text);
  REQUIRE(r);
  CHECK(r->begin == text.find("\n```cuda") + 1);
  CHECK(fences_in("```cuda``` more\n").empty());
}

TEST_CASE("NUL bytes and very long lines are ordinary text") {
  std::string text = std::string(200'000, 'x') + std::string("\0\0", 2) + "\n" +
                     fence("cuda", std::string("// \0 nul\n", 9) + kernel("k")) + fence("plan", launch("k")) +
                     std::string(100'000, '`') + "\n";
  auto r = extract_candidate(text);
  REQUIRE(r);
  CHECK(r->source.find('\0') != std::string::npos);
  CHECK(r->kernels == std::vector<std::string>{"k"});
}

TEST_CASE("braces in char, string and raw-string literals do not unbalance a kernel body") {
  const std::string src = "extern \"C\" __global__ void k(char* o) {\n"
                          "  const char* a = \"}}}\"; char b = '}'; char c = '\\'';\n"
                          "  const char* r = R\"xy(})\" }\n)xy\";\n"
                          "  int n = 1'000; // }\n"
                          "  o[0] = a[0] + b + c + r[0] + n; /* } */\n"
                          "}\n";
  const auto events = kernels_in(src);
  REQUIRE(events.size() == 2);
  CHECK(events[1].kind == kernel_event_kind::completed);
  CHECK(events[1].name == "k");
  CHECK(events[1].span.of(src) == src.substr(0, src.size() - 1));
}

TEST_CASE("a 1 MB input of many candidates, fences or unclosed kernels is extracted in well under a second") {
  std::string many;
  while (many.size() < (1u << 20)) many += "Actually:\n" + fence("cuda", kernel("k")) + fence("plan", launch("k"));
  std::string fences;
  while (fences.size() < (1u << 20)) fences += "```cuda\n```\n~~~\n~~~\n";
  fences += "```cuda\n";
  std::string unclosed = "Now: ";
  while (unclosed.size() < (1u << 20)) unclosed += "extern \"C\" __global__ void k(float* x) { if (x) { \"";
  std::string one_line = "```cuda " + std::string(1u << 20, 'a');

  const auto seconds_for = [](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Bounds are loose for unoptimised builds on a loaded machine; a quadratic scan would take minutes.
  CHECK(seconds_for([&] { CHECK(extract_candidate(many)); }) < 0.5);
  CHECK(seconds_for([&] { CHECK(failure_of(fences).reason == extract_reason::truncated); }) < 0.5);
  CHECK(seconds_for([&] {
          CHECK(failure_of(unclosed, {.allow_inline_code = true}).reason == extract_reason::truncated);
        }) < 0.5);
  CHECK(seconds_for([&] { CHECK(failure_of(one_line).reason == extract_reason::truncated); }) < 0.5);
}

// ---- incremental scanners ----------------------------------------------------------------

TEST_CASE("fence_scanner reports each closed block with tag and spans, and whether it is inside a fence") {
  const std::string text = "prose\n```CUDA extra\nint a;\n```\n~~~plan\r\nlaunch k\r\n~~~\r\n```python\nx";
  fence_scanner fs;
  auto blocks = fs.feed(text);
  CHECK(fs.inside_fence());
  CHECK(fs.open_tag() == "python");
  CHECK(fs.open_at() == text.find("```python"));
  REQUIRE(blocks.size() == 2);
  CHECK(blocks[0].tag == "cuda");
  CHECK(blocks[0].fence == '`');
  CHECK(blocks[0].block.of(text) == "```CUDA extra\nint a;\n```\n");
  CHECK(blocks[0].content.of(text) == "int a;\n");
  CHECK(blocks[1].tag == "plan");
  CHECK(blocks[1].fence == '~');
  CHECK(blocks[1].content.of(text) == "launch k\r\n");
  CHECK(fs.finish().empty());
  CHECK(fs.inside_fence());
  CHECK_THROWS_AS(fs.feed("more"), std::logic_error);
}

TEST_CASE("fence_scanner closes a block whose closing fence ends the text without a newline") {
  fence_scanner fs;
  CHECK(fs.feed("```c\nint a;\n```").empty());
  CHECK(fs.inside_fence());
  auto last = fs.finish();
  REQUIRE(last.size() == 1);
  CHECK(last[0].block == text_span{0, 15});
  CHECK_FALSE(fs.inside_fence());
}

TEST_CASE("fence_scanner gives the same blocks for every chunking") {
  const std::string text = "a ```x``` b\n  ```cuda\r\nint s = \"```\";\n ```` \n```\r\n~~~~plan x\n~~~\n~~~~\n"
                           "```\n```\n````text\n```\n````\n```cu";
  const auto whole = fences_in(text);
  REQUIRE(whole.size() == 3);
  CHECK(whole[0].content.of(text) == "int s = \"```\";\n");
  CHECK(whole[2].tag == "");
  for (std::size_t split = 0; split <= text.size(); ++split) {
    fence_scanner fs;
    auto got = fs.feed(text.substr(0, split));
    for (auto& b : fs.feed(text.substr(split))) got.push_back(std::move(b));
    for (auto& b : fs.finish()) got.push_back(std::move(b));
    CHECK(got == whole);
  }
  CHECK(fences_in(text, {1}) == whole);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::size_t> sizes(8);
    for (auto& s : sizes) s = rng() % 9 + 1;
    CHECK(fences_in(text, sizes) == whole);
  }
}

TEST_CASE("brace_tracker reports declaration and completion, and the same events for every chunking") {
  const std::string text = "Let's see: __global__ void plain(int* a) { a[0] = '{'; }\n"
                           "extern \"C\" __global__ void proto(int*);\n"
                           "extern \"C\" __global__ __launch_bounds__(128) void k(int* a) {\n"
                           "  if (a) { a[0] = 1; } // }\n"
                           "}\n";
  const auto whole = kernels_in(text);
  REQUIRE(whole.size() == 5);
  CHECK(whole[0] == kernel_event{kernel_event_kind::declared, "plain", false, {text.find("__global__"), text.find("plain(") + 6}});
  CHECK(whole[1].kind == kernel_event_kind::completed);
  CHECK(whole[2].name == "proto");
  CHECK(whole[3].name == "k");
  CHECK(whole[3].extern_c);
  CHECK(whole[4].kind == kernel_event_kind::completed);
  CHECK(whole[4].span.of(text).starts_with("extern \"C\" __global__ __launch_bounds__"));
  CHECK(whole[4].span.end == text.size() - 1);
  for (std::size_t split = 0; split <= text.size(); ++split) {
    brace_tracker bt;
    auto got = bt.feed(text.substr(0, split));
    for (auto& e : bt.feed(text.substr(split))) got.push_back(std::move(e));
    CHECK(got == whole);
  }
  CHECK(kernels_in(text, {1}) == whole);
  CHECK(kernels_in(text, {3, 1, 4, 1, 5}) == whole);
}

TEST_CASE("brace_tracker says when it is inside a kernel") {
  brace_tracker bt;
  bt.feed("extern \"C\" __global__ void k(int* a) { if (a) {");
  CHECK(bt.inside_kernel());
  CHECK_FALSE(bt.idle());
  auto done = bt.feed(" } }");
  REQUIRE(done.size() == 1);
  CHECK(done[0].kind == kernel_event_kind::completed);
  CHECK_FALSE(bt.inside_kernel());
  CHECK(bt.idle());
}

// ---- options ------------------------------------------------------------------------------------

TEST_CASE("extract_options round-trip through JSON; absent keys keep defaults; wrong types throw") {
  const extract_options o{.require_plan = false, .allow_inline_code = true};
  const nlohmann::json j = o;
  CHECK(j.get<extract_options>() == o);
  CHECK(nlohmann::json::parse(R"({"allow_inline_code": true, "future": 1})").get<extract_options>() ==
        extract_options{.require_plan = true, .allow_inline_code = true});
  CHECK_THROWS_WITH(nlohmann::json::parse(R"({"require_plan": "yes"})").get<extract_options>(),
                    "/require_plan: expected true or false, found string \"yes\"");
  CHECK_THROWS_AS(nlohmann::json::parse("[]").get<extract_options>(), detail::json_read_error);
}
