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

#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

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

  std::vector<std::string> args;
  for (int k = i + 1; k < argc; ++k) {
    std::string s = argv[k];
    for (std::size_t at = s.find("{port}"); at != std::string::npos; at = s.find("{port}", at))
      s.replace(at, 6, std::to_string(server.port()));
    args.push_back(std::move(s));
  }
  std::vector<char*> cargs;
  for (auto& s : args) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  pid_t pid = 0;
  if (const int rc = ::posix_spawnp(&pid, cargs[0], nullptr, nullptr, cargs.data(), environ); rc != 0) {
    fmt::print(stderr, "specgen-openai-fake-server: cannot run {}: error {}\n", args[0], rc);
    return 127;
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
