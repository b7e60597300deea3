#pragma once
// A stand-in for vLLM and SGLang on 127.0.0.1: the endpoints the OpenAI
// backend uses, in each server's exact wire format, with a scripted "model",
// a prefix cache of 16-token blocks, and faults on request. One thread, poll()
// over non-blocking sockets; nothing listens beyond the loopback interface.
//
// The model: a Qwen3-style chat template, a tokenizer that maps each Unicode
// code point to one id (plus Qwen3's special tokens), and a generation that
// writes "<think>", the scripted reasoning pieces (one token each), "</think>"
// and the answer pieces. As vLLM's reasoning parser does, no chunk is streamed
// for a token that is only a think marker; continuous usage still counts it.
//
// Instead of the script, a `generator` may supply each chat request's
// generation (the stand-in server plays recorded traces this way); a fork
// (a completion whose prompt continues a chat request's prompt and output,
// by ids or by text) then asks that generation what its samples write.
// Decoding can slow down with the number of sequences decoding at once
// (`slowdown_per_sequence`).
//
// As SGLang does, its SGLang mode refuses `return_token_ids` (and
// `return_prompt_token_ids`) on a streamed chat completion with HTTP 400, and
// streams `token_ids` (and `prompt_token_ids` in each choice's first chunk) on
// a completion that asks for them.
//
//   fake_server s({.format = wire::vllm});
//   s.push_fault({.path = "/v1/chat/completions", .status = 429, .retry_after_s = 0.05});
//   ... point the backend at s.base_url() ...
//   s.wait_until([](const auto& rs) { return rs.size() == 2 && rs[1].client_closed; }, 5.0);
#include <specgen/detail/config.hpp>
#include <specgen/types.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace openai::testing {

enum class wire : std::uint8_t { vllm, sglang };

/// A fault for the next request to `path` ("" = the next streaming request).
/// Faults are used in the order they were pushed.
struct fault {
  std::string path{};
  int status = 200;                 ///< answer this status instead (429, 500, ...)
  double retry_after_s = -1;        ///< with a status: a Retry-After header (< 0: none)
  int drop_after_events = -1;       ///< close the connection after this many events
  int stall_after_events = -1;      ///< send nothing after this many events (the connection stays open)
  int malformed_at_event = -1;      ///< this event (0-based) is broken JSON
  int error_at_event = -1;          ///< this event is an error object, then [DONE]
  std::size_t split_bytes = 0;      ///< write the body in pieces of 1..split_bytes bytes, each its own HTTP chunk
  double piece_interval_s = 0.0002; ///< pause between those pieces (a slow drip when large)
  bool keepalives = false;          ///< ": keep-alive" comment lines between events
  bool crlf = false;                ///< CRLF line ends in the event stream
  bool silent = false;              ///< read the request, then answer nothing (the connection stays open)
  double headers_delay_s = 0;       ///< start the response (its headers too) this late, as SGLang does for a queued request
  double ping_interval_s = 0;       ///< once stalled, a keep-alive this often: an SSE comment, then an event without choices
  int huge_at_event = -1;           ///< this event is one data line of about `huge_bytes` bytes of reasoning text
  std::size_t huge_bytes = 0;
  bool echo_authorization = false;  ///< with a status: the error message quotes the request's Authorization header
};

/// One chat request's generation, supplied by `server_options::generator`.
struct generation {
  std::vector<std::string> reasoning{};  ///< one token per piece
  std::vector<std::string> answer{};     ///< one token per piece
  /// The samples (pieces, one token each) of a fork from the first
  /// `reasoning_tokens` reasoning tokens of this generation; called once per
  /// fork, on the server's thread. Empty function: every sample writes
  /// `server_options::unmatched_fork`.
  std::function<std::vector<std::vector<std::string>>(std::size_t reasoning_tokens, int samples)> fork{};
  std::string note{};   ///< recorded with the request (request_record::note)
  std::string error{};  ///< not empty: the request is answered with HTTP 400 and this message
};

struct server_options {
  wire format = wire::vllm;
  std::string model = "test/Qwen3-8B";
  /// The field reasoning is streamed in: vLLM before 0.11 and SGLang use
  /// "reasoning_content", later vLLM "reasoning".
  std::string reasoning_field = "reasoning_content";
  bool token_ids = true;     ///< honour return_token_ids where the server kind streams ids (vLLM: chat and completions; SGLang: completions)
  bool cache_report = true;  ///< usage.prompt_tokens_details.cached_tokens
  double tokens_per_s = 0;   ///< decode pace per stream; 0: as fast as the socket takes it
  std::size_t block_size = 16;
  /// The main stream's reasoning and answer, one token per piece. A piece of
  /// several code points gets an id the tokenizer never produces (as real
  /// models sometimes emit a non-canonical tokenization).
  std::vector<std::string> reasoning{"\n", "Let", " me", " tile", " the", " rows", ".", "\n", "```cuda", "\n", "draft",
                                     "\n", "```", "\n", "Use", " shared", " memory", "."};
  std::vector<std::string> answer{"Final", ":", " ok", "."};
  /// What fork sample `i` writes (one token per code point).
  std::function<std::string(int sample)> fork_answer{};
  /// Decode slowdown under load: with B sequences decoding (each chat stream
  /// and each unfinished sample of a completion), each decodes at
  /// tokens_per_s / (1 + slowdown_per_sequence * (B - 1)); a token is due that
  /// long after the previous one, at the rate of the moment. 0: no slowdown.
  double slowdown_per_sequence = 0;
  /// The port to listen on (127.0.0.1); 0: a free one.
  int port = 0;
  /// When set, a chat request plays what this returns for its (system,
  /// prompt) instead of `reasoning` and `answer`; pieces of several code
  /// points get ids from a dictionary of the server's own (above every id the
  /// tokenizer produces, the same for the same piece in every request), so a
  /// fork by ids is matched to the request it continues.
  std::function<std::shared_ptr<const generation>(std::string_view system, std::string_view prompt)> generator{};
  /// With a generator: what each sample of a fork that continues no known
  /// chat request writes (pieces). Default: a short answer without a kernel.
  std::function<std::vector<std::string>(int sample)> unmatched_fork{};
  bool record_lateness = false;  ///< keep each paced event's delay past its due time
  std::size_t models_padding_bytes = 0;  ///< GET /v1/models answers with this many bytes of padding besides the list
};

/// The default fork answer: a complete candidate, then some chatter.
std::string default_fork_answer(int sample);

struct request_record {
  int number = 0;
  std::string method, path;
  std::map<std::string, std::string> headers;  ///< names lower-cased
  nlohmann::json body;                          ///< null when not JSON
  std::vector<token_id> prompt_ids;             ///< chat and completions: the prompt as the model saw it
  bool prompt_was_text = false;
  std::vector<token_id> generated;              ///< ids generated so far (think markers included)
  std::uint64_t cached_tokens = 0;              ///< prefix-cache hit at admission
  int status = 0;
  int events_sent = 0;
  bool finished = false;       ///< the whole response was written
  bool client_closed = false;  ///< the client closed the connection before that
  bool aborted = false;        ///< an /abort_request named it
  std::string rid;             ///< the request id it was given (request_id, rid or X-Request-Id)
  std::chrono::steady_clock::time_point first_byte{};  ///< when its first byte arrived
  std::string note;             ///< with a generator: its note (chat), or what the fork matched
  int continues = -1;           ///< with a generator, a fork: the number of the chat request it continues (-1: none)
  std::size_t fork_reasoning_tokens = 0;  ///< with a generator, a fork: reasoning tokens in its prefix
};

class fake_server {
 public:
  explicit fake_server(server_options options = {});
  ~fake_server();
  fake_server(const fake_server&) = delete;  // its thread holds `this`
  fake_server& operator=(const fake_server&) = delete;

  [[nodiscard]] int port() const noexcept;
  [[nodiscard]] std::string base_url() const;

  void push_fault(fault f);
  /// Every request so far, in arrival order (a snapshot).
  [[nodiscard]] std::vector<request_record> requests() const;
  /// Request ids named by /abort_request.
  [[nodiscard]] std::vector<std::string> aborted_rids() const;
  /// Polls `pred(requests())` until true or `timeout_s` passes.
  bool wait_until(const std::function<bool(const std::vector<request_record>&)>& pred, double timeout_s) const;
  /// Delay of paced events past their due time, in seconds (record_lateness).
  [[nodiscard]] std::vector<double> lateness() const;

  /// The tokenizer and chat template the fake model uses.
  [[nodiscard]] static std::vector<token_id> tokenize(std::string_view text);
  [[nodiscard]] static std::string chat_template(std::string_view system, std::string_view prompt);
  /// Ids of the main generation (what `generated` ends as, unless cut).
  [[nodiscard]] std::vector<token_id> main_generation_ids() const;
  /// The text of an id this server produces or streams (a code point, a
  /// special token, or a generator's piece); nullopt for an id it never made.
  [[nodiscard]] std::optional<std::string> piece_of(token_id id) const;
  /// Sequences decoding now (what `slowdown_per_sequence` counts).
  [[nodiscard]] int decoding_sequences() const;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

/// Runs `args` (a command and its arguments) with every "{port}" in them replaced by `port`,
/// waits for it, and returns its exit status (128 + the signal if one ended it; 127 when it
/// cannot be started, after saying so on stderr as `program`). For the programs that serve a
/// stand-in while a command runs against it.
int run_with_port(std::string_view program, int port, std::vector<std::string> args);

}  // namespace openai::testing
SPECGEN_END_NAMESPACE
