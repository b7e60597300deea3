#pragma once
// The stand-in model server: the fake vLLM/SGLang server playing recorded
// traces (a corpus such as the bundled suite) in answer to the engine's
// prompts, responsive to their feedback (replay/responsive.hpp), at a
// realistic pace with contention. The program is specgen-standin-server
// (standin_main.cpp); docs/backends.md, "The stand-in server".
#include "fake_server.hpp"

#include <specgen/replay/responsive.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace openai::testing {

/// Decode slowdown per extra sequence (`slowdown_per_sequence`): published
/// measurements of batched decoding put it between about 0.01 and 0.04.
inline constexpr double contention_low = 0.01;
inline constexpr double contention_middle = 0.025;
inline constexpr double contention_high = 0.04;

/// "low", "middle", "high" or a number >= 0; nullopt for anything else.
std::optional<double> parse_contention(std::string_view text);

struct standin_options {
  wire format = wire::vllm;
  std::string model = "standin/Qwen3-32B";  ///< "qwen3" in the name: the backend picks its Qwen3 preset
  double tokens_per_s = 70;                 ///< per stream, alone
  double slowdown_per_sequence = contention_middle;
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
