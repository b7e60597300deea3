#pragma once
// The OpenAI wire format as vLLM and SGLang speak it: request bodies, and the
// decoders that turn a response's SSE events into what the engine receives.
// Decoders run on the I/O thread and never touch the sink: they append
// deliveries, which the backend hands to the loop in order.
#include <specgen/backend.hpp>
#include <specgen/backend/openai.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/types.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace openai::detail {

/// What one server kind understands beyond the standard fields.
struct dialect {
  std::string kind;              ///< "vllm", "sglang" or "openai"
  std::string request_id_field;  ///< body field naming the request ("" none)
  std::string tokenize_path;     ///< "" when the server cannot tokenize
  std::string abort_path;        ///< "" when closing the connection is how to cancel
  bool extensions = false;       ///< continuous usage and reasoning options
  /// `return_token_ids` on a streamed chat completion: vLLM streams the ids;
  /// SGLang refuses the request (HTTP 400), so it is not sent there.
  bool chat_token_ids = false;
  /// `return_token_ids` on a streamed completion (a fork): vLLM and SGLang.
  bool completion_token_ids = false;
};
/// The dialect of "vllm", "sglang" or "openai"; nullopt for anything else.
[[nodiscard]] std::optional<dialect> dialect_of(std::string_view kind);

/// Facts about a main stream the loop side needs for forks.
struct stream_meta {
  stream_id id = 0;
  std::optional<std::vector<token_id>> prompt_ids{};  ///< the templated prompt's ids, when the server sent them
  bool ids_broken = false;  ///< a reasoning token was generated but never streamed: the ids are not a prefix any more
};

/// An origin (one of several servers) left or rejoined the rotation.
struct instance_event {
  int instance = 0;
  bool up = false;
  std::string why{};  ///< why it left (names the server, credentials redacted)
};

using delivery = std::variant<stream_chunk, stream_end, stream_meta, instance_event>;
using delivery_batch = std::vector<delivery>;

/// Turns one request's events into deliveries. One per attempt of a request;
/// `reset` before a retry.
class stream_decoder {
 public:
  virtual ~stream_decoder() = default;
  /// One event's data (never "[DONE]").
  virtual void on_event(std::string_view data, delivery_batch& out) = 0;
  /// The "[DONE]" event.
  virtual void on_done(delivery_batch& out) = 0;
  /// The response ended without "[DONE]".
  virtual void on_eof(delivery_batch& out) = 0;
  /// The request failed for good: every sample not ended ends, with `message`
  /// as its error unless its answer is already complete.
  virtual void on_failure(std::string_view message, delivery_batch& out) = 0;
  /// Something reached the sink: a retry would repeat it, so none may follow.
  [[nodiscard]] virtual bool committed() const noexcept = 0;
  /// Every sample has ended: the rest of the response is not needed.
  [[nodiscard]] virtual bool finished() const noexcept = 0;
  /// Counts the events that moved the request forward: text, token ids, a
  /// usage count that grew, a finish reason. Keep-alive events (no choices,
  /// empty deltas, the same usage again) do not; the idle timeout uses it.
  [[nodiscard]] virtual std::uint64_t progress() const noexcept = 0;
  virtual void reset() = 0;
};

/// The chat-completions stream of a main (reasoning) request.
/// `think_open` are the ids of the preset's `think_open` (empty if unknown).
/// More than `max_bytes` of text and token ids (4 bytes each) ends it with an error.
[[nodiscard]] std::unique_ptr<stream_decoder> make_main_decoder(stream_id id, std::vector<token_id> think_open,
                                                                std::uint64_t max_bytes = std::uint64_t{64} << 20);

struct fork_decoding {
  int samples = 1;
  bool stop_at_closing_fence = true;
  int tail_tokens = 32;
  std::uint64_t max_bytes = std::uint64_t{64} << 20;  ///< text and token ids of all samples together
};
/// The completions stream of a K-sample fork.
[[nodiscard]] std::unique_ptr<stream_decoder> make_fork_decoder(stream_id id, fork_decoding how);

/// `/v1/chat/completions` body of a main stream.
[[nodiscard]] std::string chat_body(const dialect& d, const std::string& model, const model_preset& family,
                                    const reasoning_request& r, std::string_view request_id);

/// What a fork's prompt is made of: token ids, or text (the fallback).
struct fork_prompt {
  std::vector<token_id> ids{};
  std::string text{};
  bool is_text = false;
};
/// `/v1/completions` body of a fork.
[[nodiscard]] std::string completion_body(const dialect& d, const std::string& model, const fork_prompt& prompt,
                                          int samples, const sampling& params, int max_tokens, std::uint64_t seed,
                                          std::string_view request_id);

/// The text-fallback prompt: the template with system and prompt filled in,
/// then what the model wrote to open its reasoning, the reasoning, the
/// end-of-thinking marker and the answer cue.
[[nodiscard]] std::string render_fork_text(const model_preset& family, std::string_view system, std::string_view prompt,
                                           std::string_view reasoning);

/// The message of an error body (`{"error": {"message": ...}}`, `{"message": ...}`
/// or text), cut to a readable length.
[[nodiscard]] std::string error_message_of(std::string_view body);

}  // namespace openai::detail
SPECGEN_END_NAMESPACE
