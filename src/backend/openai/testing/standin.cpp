#include "standin.hpp"

#include <fmt/format.h>

#include <map>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace openai::testing {

std::vector<std::string> pieces_of(const replay::token_text& text) {
  std::vector<std::string> out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) out.emplace_back(text.slice(i, i + 1));
  return out;
}

server_options standin_server_options(std::shared_ptr<const replay::responsive_traces> traces, const standin_options& o) {
  server_options s;
  s.format = o.format;
  s.model = o.model;
  s.tokens_per_s = o.tokens_per_s;
  s.slowdown_per_sequence = o.slowdown_per_sequence;
  s.port = o.port;
  const replay::no_kernel_answer no_kernel = traces->no_kernel();
  s.unmatched_fork = [no_kernel](int) {
    return pieces_of(replay::expand_answer({no_kernel.text, no_kernel.tokens}));
  };
  s.generator = [traces, no_kernel](std::string_view, std::string_view prompt) {
    auto g = std::make_shared<generation>();
    const auto task = replay::responsive_traces::task_of(prompt);
    if (!task) {
      g->error = "the stand-in model needs the task's name on the prompt's first line: \"# Task: <name>\"";
      return std::shared_ptr<const generation>(std::move(g));
    }
    auto chosen = traces->select(*task, prompt);
    if (!chosen) {
      g->error = chosen.error().message;
      return std::shared_ptr<const generation>(std::move(g));
    }
    auto t = std::make_shared<const replay::trace>(std::move(*chosen));
    g->reasoning = pieces_of(replay::expand_reasoning(*t));
    g->answer = pieces_of(replay::expand_answer(t->answer));
    g->note = fmt::format("task {} round {} (trace {})", t->task, t->round, t->id);
    // As the replay model: a second fork from the same fork point draws the next samples.
    auto drawn = std::make_shared<std::map<std::uint64_t, int>>();
    g->fork = [t, drawn, no_kernel](std::size_t reasoning_tokens, int samples) {
      std::vector<std::vector<std::string>> out;
      const auto point = replay::outcome_of_fork(*t, reasoning_tokens, 0, no_kernel).at_token;
      int& d = (*drawn)[point ? *point + 1 : 0];
      for (int i = 0; i < samples; ++i)
        out.push_back(pieces_of(replay::expand_answer(replay::outcome_of_fork(*t, reasoning_tokens, d + i, no_kernel).answer)));
      d += samples;
      return out;
    };
    return std::shared_ptr<const generation>(std::move(g));
  };
  return s;
}

}  // namespace openai::testing
SPECGEN_END_NAMESPACE
