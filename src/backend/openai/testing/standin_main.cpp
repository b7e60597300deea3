// specgen-standin-server: a stand-in reasoning model on 127.0.0.1 that speaks
// vLLM's (or SGLang's) wire format and writes real kernels: it plays the
// recorded traces of a corpus (the bundled suite by default) in answer to the
// engine's prompts, moving on to later rounds as the prompts report earlier
// kernels and never writing again a kernel reported as failing, at a
// realistic decode pace that slows down with the number of sequences.
//
//   specgen-standin-server [--corpus DIR] [--format vllm|sglang] [--model NAME]
//                          [--tokens-per-s R] [--contention low|middle|high|A]
//                          [--port N] [-- COMMAND [ARGS...]]
//
// Without a COMMAND it prints one line saying where it serves and serves until
// SIGINT or SIGTERM. With one, it runs COMMAND with "{port}" in its arguments
// replaced by the port and exits with COMMAND's status.
// docs/backends.md, "The stand-in server".
#include "standin.hpp"

#include <specgen/replay/trace.hpp>

#include <fmt/format.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>


namespace {

namespace fs = std::filesystem;

constexpr const char* usage_line =
    "usage: specgen-standin-server [--corpus DIR] [--format vllm|sglang] [--model NAME] [--tokens-per-s R]\n"
    "                              [--contention low|middle|high|A] [--port N] [-- COMMAND [ARGS...]]\n";

int bad_usage(const std::string& why) {
  fmt::print(stderr, "specgen-standin-server: {}\n{}", why, usage_line);
  return 2;
}

/// The bundled suite: $SPECGEN_SUITE, an installed share/specgen/suite, or the source tree's.
fs::path default_corpus() {
  if (const char* env = std::getenv("SPECGEN_SUITE"); env && *env) return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = self.parent_path().parent_path() / "share" / "specgen" / "suite";
    if (fs::exists(installed / "traces", ec)) return installed;
  }
#ifdef SPECGEN_SUITE_DIR
  return SPECGEN_SUITE_DIR;
#else
  return "tasks/suite";
#endif
}

bool parse_number(const std::string& text, double& out) {
  try {
    std::size_t used = 0;
    out = std::stod(text, &used);
    return used == text.size() && std::isfinite(out);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace specgen;
  using namespace specgen::openai::testing;
  standin_options o;
  fs::path corpus = default_corpus();
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "-h" || a == "--help") {
      fmt::print("{}", usage_line);
      return 0;
    }
    if (i + 1 >= argc) return bad_usage(fmt::format("{} needs a value", a));
    const std::string v = argv[++i];
    double x = 0;
    if (a == "--corpus") {
      corpus = v;
    } else if (a == "--format") {
      if (v != "vllm" && v != "sglang") return bad_usage(fmt::format("--format must be vllm or sglang, not \"{}\"", v));
      o.format = v == "vllm" ? wire::vllm : wire::sglang;
    } else if (a == "--model") {
      if (v.empty()) return bad_usage("--model is empty");
      o.model = v;
    } else if (a == "--tokens-per-s") {
      if (!parse_number(v, x) || x <= 0) return bad_usage(fmt::format("--tokens-per-s must be a number > 0, not \"{}\"", v));
      o.tokens_per_s = x;
    } else if (a == "--contention") {
      const auto c = parse_contention(v);
      if (!c) return bad_usage(fmt::format("--contention must be low, middle, high or a number >= 0, not \"{}\"", v));
      o.slowdown_per_sequence = *c;
    } else if (a == "--port") {
      if (!parse_number(v, x) || x < 0 || x > 65535 || x != static_cast<int>(x))
        return bad_usage(fmt::format("--port must be a port number (0: a free one), not \"{}\"", v));
      o.port = static_cast<int>(x);
    } else {
      return bad_usage(fmt::format("unknown option \"{}\"", a));
    }
  }
  const bool has_command = i < argc;
  if (has_command && i + 1 >= argc) return bad_usage("-- needs a COMMAND after it");

  std::error_code ec;
  const fs::path traces_dir = fs::is_directory(corpus / "traces", ec) ? corpus / "traces" : corpus;
  auto traces = replay::load_traces(traces_dir);
  if (!traces) {
    fmt::print(stderr, "specgen-standin-server: cannot load the traces of {}: {}\n", corpus.string(), traces.error().what());
    return 1;
  }
  auto chooser = std::make_shared<const replay::responsive_traces>(std::move(*traces));

  // Block the stop signals before the server's thread starts, so only sigwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (!has_command) pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::unique_ptr<fake_server> server;
  try {
    server = std::make_unique<fake_server>(standin_server_options(chooser, o));
  } catch (const std::exception& e) {
    fmt::print(stderr, "specgen-standin-server: {}\n", e.what());
    return 1;
  }

  if (!has_command) {
    fmt::print("specgen-standin-server: serving {} as {} at {} ({} tokens/s per stream, slowdown {} per extra sequence)\n",
               corpus.string(), o.model, server->base_url(), o.tokens_per_s, o.slowdown_per_sequence);
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    return 0;
  }

  return run_with_port("specgen-standin-server", server->port(), std::vector<std::string>(argv + i + 1, argv + argc));
}
