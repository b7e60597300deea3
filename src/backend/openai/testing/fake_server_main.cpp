// specgen-openai-fake-server: the tests' vLLM/SGLang stand-in as a program,
// so a command (specgen-run) can be tried against it end to end.
//
//   specgen-openai-fake-server [--format vllm|sglang] [--reasoning-tokens N]
//                              [--tokens-per-s R] -- COMMAND [ARGS...]
//
// Serves on 127.0.0.1 at a free port, runs COMMAND with "{port}" in its
// arguments replaced by that port, and exits with COMMAND's status. The
// reasoning is N tokens of prose with a kernel draft at 60% of it.
#include "fake_server.hpp"

#include <fmt/format.h>


#include <cstdlib>
#include <string>
#include <vector>


namespace {

int usage() {
  fmt::print(stderr, "usage: specgen-openai-fake-server [--format vllm|sglang] [--reasoning-tokens N] [--tokens-per-s R] -- COMMAND [ARGS...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace specgen::openai::testing;
  server_options o;
  int reasoning_tokens = 600;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--format" && (v == "vllm" || v == "sglang")) o.format = v == "vllm" ? wire::vllm : wire::sglang;
    else if (a == "--reasoning-tokens") reasoning_tokens = std::atoi(v.c_str());
    else if (a == "--tokens-per-s") o.tokens_per_s = std::atof(v.c_str());
    else return usage();
  }
  if (i + 1 >= argc || reasoning_tokens < 1) return usage();

  o.reasoning.clear();
  const int draft_at = reasoning_tokens * 6 / 10;
  for (int t = 0; t < reasoning_tokens; ++t) {
    if (t == draft_at)
      for (const char* p : {"\n```cuda\n", "extern \"C\" __global__ void draft(float* x) { x[0] = 0; }\n", "```\n", "```plan\n",
                            "launch draft grid(1) block(1) args(x)\n", "```\n"})
        o.reasoning.emplace_back(p);
    o.reasoning.emplace_back(t % 12 == 11 ? "\n" : " thinking");
  }
  fake_server server(o);

  return run_with_port("specgen-openai-fake-server", server.port(), std::vector<std::string>(argv + i + 1, argv + argc));
}
