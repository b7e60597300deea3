#pragma once
// The stand-in model server: the fake vLLM/SGLang server playing recorded
// traces (a corpus such as the bundled suite) in answer to the engine's
// prompts, responsive to their feedback (replay/responsive.hpp), at a
// realistic pace with contention. The program is specgen-standin-server
// (standin_main.cpp); docs/backends.md, "The stand-in server".
#include "fake_server.hpp"

#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/responsive.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace openai::testing {

struct standin_options {
  wire format = wire::vllm;
  std::string model = "standin/Qwen3-32B";  ///< "qwen3" in the name: the backend picks its Qwen3 preset
  double tokens_per_s = 70;                 ///< per stream, alone
  double slowdown_per_sequence = contention_middle;  ///< contention_levels names the band
  int port = 0;                             ///< 0: a free port
};

/// Server options that play `traces` as a model would: a chat request whose
/// prompt starts with `# Task: <name>` streams `traces->select(name, prompt)`
/// (its reasoning and answer, one token per token of the trace); a fork
/// answers from that trace's fork points as the replay model does; a prompt
/// without a known task is answered with HTTP 400 and the reason.
server_options standin_server_options(std::shared_ptr<const replay::responsive_traces> traces, const standin_options& o);

/// The pieces (one per token) of a text with token boundaries.
std::vector<std::string> pieces_of(const replay::token_text& text);

}  // namespace openai::testing
SPECGEN_END_NAMESPACE
