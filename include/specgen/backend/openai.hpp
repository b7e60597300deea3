#pragma once
/// The OpenAI-compatible HTTP backend: reasoning streams and speculative forks
/// against vLLM, SGLang and other servers that speak the OpenAI wire format.
///
/// The main stream is `/v1/chat/completions` (streamed, reasoning read from
/// `delta.reasoning_content` or `delta.reasoning`). A fork is one
/// `/v1/completions` request with K samples whose prompt is the parent's
/// prompt token ids, the reasoning token ids received so far, the model's
/// end-of-thinking marker and an answer cue, so the server's prefix cache
/// serves the whole prefix. Where the server gives no token ids the fork
/// sends text instead (docs/backends.md says what that costs in cache hits).
/// Cancelling removes the request's connection (vLLM aborts on that) and,
/// where configured, also posts SGLang's `/abort_request`.
///
/// All I/O runs on one thread of the backend's own (libcurl's multi
/// interface); everything reaches the engine through `executor::post`, so the
/// loop must run in real time (`steady_clock`).
///
/// The server is not trusted: what it can make the client hold and how long
/// it can make it wait are bounded (the `max_*_bytes` and `*_timeout_s`
/// fields), and every message the backend emits has the API key, the
/// credentials of every server's URL and those of any URL removed (`redact_url`),
/// also where it quotes the server. docs/backends.md, "Trust boundary".
///
/// @code
///   specgen::event_loop<specgen::steady_clock> loop;
///   auto model = specgen::openai::openai_backend::create(
///       loop, {.base_url = "http://127.0.0.1:8000", .model = "Qwen/Qwen3-32B"});
///   if (!model) return fmt::print("{}\n", model.error().message);  // e.g. "cannot reach ...: Connection refused"
///   specgen::engine eng(loop, **model, gpus, specgen::mode_config("specgen").value());
/// @endcode
/// Implemented in src/backend/openai/ (target `specgen::openai`, needs libcurl).
#include <specgen/backend.hpp>
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/types.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace openai {

/**
 * How one model family marks its reasoning, switches it on, and is asked for
 * an answer. Built-in presets: `find_preset`; any field can be overridden
 * from the configuration (`openai_config::family`).
 */
struct model_preset {
  std::string name = "generic";
  /// Substrings (lower case) of served model names this preset is chosen for
  /// when the configuration says `"preset": "auto"`.
  std::vector<std::string> match{};
  /// What the model itself writes before its reasoning; "" when the chat
  /// template already ends the prompt with it (then the model never does).
  std::string think_open{};
  /// The end-of-thinking marker a fork appends after the reasoning prefix.
  std::string think_close = "</think>";
  /// Appended after `think_close`: makes a fork answer at once with a kernel.
  std::string answer_cue =
      "\n\nThe final kernel, as one ```cuda block with its launch plan in one ```plan block:\n\n";
  /// Merged into every main-stream request body: the thinking switch, e.g.
  /// `{"chat_template_kwargs": {"enable_thinking": true}}`. Not sent to `openai` servers.
  nlohmann::json reasoning_options = nlohmann::json::object();
  /// The chat template's rendering of (system, user) up to where the model
  /// starts writing, with `{system}` and `{prompt}` as placeholders. Used only
  /// by the text fallback, whose cache hits need it to match the server's
  /// template byte for byte.
  std::string prompt_template = "{system}\n\n{prompt}\n\n";

  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("name", s.name);
    f("match", s.match);
    f("think_open", s.think_open);
    f("think_close", s.think_close);
    f("answer_cue", s.answer_cue);
    f("reasoning_options", s.reasoning_options);
    f("prompt_template", s.prompt_template);
  }
  [[nodiscard]] std::string invalid() const;
  friend bool operator==(const model_preset&, const model_preset&) = default;
};

/// The built-in presets, in the order `auto` tries them: deepseek-r1,
/// deepseek-v3, qwen3, glm-4.5, generic.
[[nodiscard]] const std::vector<model_preset>& builtin_presets();
/// A built-in preset by name; the error lists the names.
[[nodiscard]] expected<model_preset, error> find_preset(std::string_view name);
/// The preset for a served model name: the first whose `match` is a
/// substring of the lower-cased name, else `generic`.
[[nodiscard]] const model_preset& preset_for_model(std::string_view model);

/**
 * Everything the backend needs. Durations in seconds. `invalid()` says what
 * is wrong, in words; `create` refuses an invalid configuration.
 */
struct openai_config {
  std::string base_url{};  ///< server root: "http://host:8000" (a trailing "/v1" is accepted)
  /// Several servers serving the same `model` (one serving instance per
  /// node), used as one backend: give these instead of `base_url`. New
  /// streams go to the least loaded, a fork to its parent's server; a server
  /// that fails leaves the rotation until it answers again (docs/backends.md,
  /// "Several servers").
  std::vector<std::string> base_urls{};
  std::string model{};     ///< the served model name, as /v1/models lists it
  /// Which server: "vllm", "sglang", "openai" (standard fields only), or
  /// "auto" (from /v1/models' `owned_by`; needs `probe`).
  std::string server = "auto";
  std::string preset = "auto";  ///< a built-in preset name, or "auto" (from the model name)
  /// Overrides of the preset's fields, e.g. `{"answer_cue": "\n\n"}`.
  nlohmann::json family = nlohmann::json::object();
  /// Name of the environment variable holding the API key; "" sends none.
  /// The key must not hold control characters (they would end the header).
  std::string api_key_env{};
  /// Connecting (TCP and TLS). A connection that times out is not retried.
  double connect_timeout_s = 10;
  /// How long the server may take to answer: a plain request (the probe,
  /// tokenizing, an abort) must be answered whole within `connect_timeout_s`
  /// + this; a stream must get its response headers within this of being
  /// sent. A stream still without headers then (SGLang sends none until the
  /// request's first token, so a queued request waits here) is kept while
  /// the server answers `GET /v1/models` like a plain request; otherwise it
  /// ends with an error.
  double response_timeout_s = 10;
  /// A stream that makes no progress for this long ends with an error.
  /// Progress is text, token ids, a growing usage count or a finish reason;
  /// SSE comments and empty events (keep-alives) are not. Covers the wait
  /// for the first token too (queueing and prefill), so leave room for them.
  double idle_timeout_s = 300;
  /// The longest SSE line, and the most data one SSE event may carry. A
  /// stream that sends more ends with an error that names this field.
  std::uint64_t max_event_bytes = std::uint64_t{8} << 20;
  /// The largest answer a plain request (model list, tokenize) may have.
  std::uint64_t max_response_bytes = std::uint64_t{16} << 20;
  /// The most text and token ids one request (a stream, or all samples of a
  /// fork) may deliver; bounds what a server ignoring max_tokens can make
  /// the client hold.
  std::uint64_t max_stream_bytes = std::uint64_t{64} << 20;
  int max_streams = 64;  ///< requests in flight (a K-sample fork counts once)
  /// Retries of a request that got 429, 5xx or a broken connection (refused,
  /// reset, closed; a timeout is not retried) before its first token. After
  /// the first token an error ends the stream.
  int max_retries = 5;
  double retry_initial_s = 0.5;  ///< first backoff, doubled per retry; a Retry-After header wins
  double retry_max_s = 30;       ///< cap on one backoff
  /// With several servers: how often one out of rotation is asked (GET
  /// /v1/models) whether it serves `model` again; it rejoins when it does.
  double instance_probe_s = 30;
  /// "auto" (token ids where the server gives them, else text),
  /// "token_ids" (never text; a fork fails instead), or "text".
  std::string fork_prompt = "auto";
  int fork_max_tokens = 4096;  ///< cap on each fork sample's tokens (also bounded by the request's own)
  /// A fork sample ends at the closing fence that completes a candidate (a
  /// source block and a plan block).
  bool stop_at_closing_fence = true;
  /// After every sample of a fork has its candidate, tokens per sample the
  /// server may still send (waiting for its usage report with the
  /// cached-token count) before the request is cancelled. 0: cancel at once.
  int fork_tail_tokens = 32;
  /// Posted `{"rid": ...}` to cancel a request; "" uses the server's default
  /// ("/abort_request" for SGLang, none otherwise: closing the connection aborts).
  std::string abort_path{};
  /// At create: check the model is served (GET /v1/models), detect the server
  /// kind, and tokenize the fork suffix (needed for token-id forks).
  bool probe = true;

  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("base_url", s.base_url);
    f("base_urls", s.base_urls);
    f("model", s.model);
    f("server", s.server);
    f("preset", s.preset);
    f("family", s.family);
    f("api_key_env", s.api_key_env);
    f("connect_timeout_s", s.connect_timeout_s);
    f("response_timeout_s", s.response_timeout_s);
    f("idle_timeout_s", s.idle_timeout_s);
    f("max_event_bytes", s.max_event_bytes);
    f("max_response_bytes", s.max_response_bytes);
    f("max_stream_bytes", s.max_stream_bytes);
    f("max_streams", s.max_streams);
    f("max_retries", s.max_retries);
    f("retry_initial_s", s.retry_initial_s);
    f("retry_max_s", s.retry_max_s);
    f("instance_probe_s", s.instance_probe_s);
    f("fork_prompt", s.fork_prompt);
    f("fork_max_tokens", s.fork_max_tokens);
    f("stop_at_closing_fence", s.stop_at_closing_fence);
    f("fork_tail_tokens", s.fork_tail_tokens);
    f("abort_path", s.abort_path);
    f("probe", s.probe);
  }
  /// The servers, in order: `base_urls`, or `base_url` alone.
  [[nodiscard]] std::vector<std::string> servers() const;
  [[nodiscard]] std::string invalid() const;
  friend bool operator==(const openai_config&, const openai_config&) = default;
};

/// Reads a configuration (unknown keys, wrong types and invalid values are
/// errors; a bad entry of `base_urls` is named by its JSON pointer, "/base_urls/1").
[[nodiscard]] expected<openai_config, error> config_from_json(const nlohmann::json& j);
/// The configuration as JSON, `base_url` and `base_urls` as given
/// (credentials included): print or store `redact_url` of them instead.
[[nodiscard]] nlohmann::json to_json(const openai_config& c);

/// `url` safe to print: the user name and password (`http://user:KEY@host`
/// becomes `http://***@host`) and the values of query and fragment
/// parameters whose names look like credentials (`api_key`, `key`,
/// `access_token`, `token`, `secret`, `password`, `auth`, `sig`, ...) are
/// replaced by `***`. Everything the backend itself says is redacted already.
[[nodiscard]] std::string redact_url(std::string_view url);

/// What `create` found out about the server (with several, the first that answered).
struct server_info {
  std::string kind;                    ///< "vllm", "sglang" or "openai"
  std::vector<std::string> models{};   ///< from /v1/models (empty without probe)
  model_preset family{};               ///< the resolved preset, overrides applied
  /// Ids of `think_close + answer_cue`, appended to every token-id fork.
  /// Empty when the server could not tokenize: forks then send text.
  std::vector<token_id> fork_suffix{};
  std::vector<token_id> think_open{};  ///< ids of `think_open` (see docs/backends.md, "Token ids")
  std::string token_ids_note{};        ///< why forks cannot use token ids, when they cannot
  /// The server root, credentials redacted (`redact_url`); with several, the
  /// first that answered at `create` (whose kind and token ids these are).
  std::string base_url{};
  /// With several servers: those left out at `create` because they could not
  /// be reached (or answered 5xx), each with why; they rejoin when they answer.
  std::vector<std::string> left_out{};
};

/// One server of the backend, as `openai_backend::instances()` reports it.
struct instance_stats {
  std::string base_url;            ///< credentials redacted
  bool in_rotation = true;         ///< new streams may go there
  std::string out_reason{};        ///< why it left the rotation ("" while in it)
  int active = 0;                  ///< sequences running there now: main streams plus unfinished fork samples
  std::uint64_t reasoning_streams = 0;  ///< started there since `create`
  std::uint64_t forks = 0;              ///< started there since `create`
  std::uint64_t times_out = 0;          ///< how often it left the rotation
};

/// Counters since `create`. Cheap to read from any thread.
struct backend_stats {
  std::uint64_t reasoning_streams = 0;
  std::uint64_t forks = 0;
  std::uint64_t forks_token_ids = 0;      ///< forks whose prompt was token ids
  std::uint64_t forks_text = 0;           ///< forks that fell back to text
  std::uint64_t fork_prompt_tokens = 0;   ///< as the server reported them
  std::uint64_t fork_cached_tokens = 0;   ///< prefix-cache hits the server reported for forks
  std::uint64_t fork_usage_reports = 0;   ///< forks whose usage (and cache hits) the server reported
  std::uint64_t chunks = 0;               ///< stream chunks delivered to sinks
  std::uint64_t http_requests = 0;        ///< attempts, retries and aborts included
  std::uint64_t retries = 0;
  std::uint64_t stream_errors = 0;        ///< samples that ended with finish_reason::error
  std::uint64_t cancels = 0;
  std::uint64_t aborts_posted = 0;        ///< abort_path requests sent
  double io_cpu_seconds = 0;              ///< CPU time of the I/O thread
};

/**
 * The backend. Models `specgen::backend`. Not copyable or movable: its I/O
 * thread and the executor's queued deliveries refer to it.
 */
class openai_backend {
 public:
  /// Validates `config`, reads the API key, starts the I/O thread and, with
  /// `probe`, asks every server what it serves (with several, one that cannot
  /// be reached is left out for now: `server().left_out`). Errors say what to fix.
  static expected<std::unique_ptr<openai_backend>, error> create(executor& loop, openai_config config);
  ~openai_backend();
  openai_backend(const openai_backend&) = delete;
  openai_backend& operator=(const openai_backend&) = delete;

  [[nodiscard]] backend_limits limits() const noexcept;
  /// Starts a chat-completion stream. Call on the loop's thread.
  expected<stream_id, error> start_reasoning(const reasoning_request& r, stream_sink& sink);
  /// Starts a K-sample completion from `f.reasoning_prefix`, which must be the
  /// first ids this backend delivered for `f.parent`. Call on the loop's thread.
  expected<stream_id, error> fork(const fork_request& f, stream_sink& sink);
  /// No chunk after this call; on_end(cancelled) follows for every sample
  /// not yet ended. Call on the loop's thread.
  void cancel(stream_id id);

  [[nodiscard]] const openai_config& config() const noexcept;
  [[nodiscard]] const server_info& server() const noexcept;
  [[nodiscard]] backend_stats stats() const;
  /// Per server, in configuration order. Call on the loop's thread.
  [[nodiscard]] std::vector<instance_stats> instances() const;

 private:
  struct impl;
  explicit openai_backend(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

static_assert(specgen::backend<openai_backend>);

}  // namespace openai
SPECGEN_END_NAMESPACE
