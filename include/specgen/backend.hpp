#pragma once
/// The backend concept: what the engine needs from an LLM server.
///
/// A backend starts reasoning streams and forks non-reasoning generations from
/// an exact token prefix of a running stream. It delivers everything through a
/// `stream_sink`, always on the event loop's thread (a backend with its own I/O
/// thread posts through `executor::post`).
///
/// @code
///   static_assert(specgen::backend<specgen::replay::replay_model>);
///   auto id = model.start_reasoning({.ctx = {.task = "softmax"}, .prompt = p}, sink);
///   if (!id) report(id.error());
/// @endcode
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/limits.hpp>
#include <specgen/expected.hpp>
#include <specgen/types.hpp>

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

using stream_id = std::uint64_t;

/// Who is asking. Real servers ignore this; the replay model uses it to pick a trace.
struct request_context {
  std::string task{};
  int search = 0;
  int round = 0;
  int lane = 0;
  std::uint64_t seed = 0;  ///< per-request seed, derived from the run seed
  friend bool operator==(const request_context&, const request_context&) = default;
};

struct sampling {
  double temperature = 0.6;
  double top_p = 0.95;
  int max_tokens = 32768;
  /// Each field with the range configs accept (docs/policies.md).
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("temperature", s.temperature, detail::in(0.0, 10.0));
    f("top_p", s.top_p, detail::in(1e-6, 1.0));
    f("max_tokens", s.max_tokens, detail::in(1, static_cast<int>(limits::max_tokens)));
  }
  friend bool operator==(const sampling&, const sampling&) = default;
};

/// Start a main (reasoning) stream.
struct reasoning_request {
  request_context ctx{};
  std::string system{};
  std::string prompt{};
  sampling params{};
};

/// What the KV policy found for a fork's prefix (see policy/kv.hpp).
struct kv_lease {
  std::uint64_t cached_tokens = 0;  ///< prefix tokens whose KV blocks are available
  duration fetch_time{0};           ///< modelled or measured time to bring them to the server
  std::uint64_t handle = 0;         ///< store-specific handle for backends with KV hooks
  friend bool operator==(const kv_lease&, const kv_lease&) = default;
};

/// Fork K non-reasoning generations whose context is the parent's prompt plus
/// exactly `reasoning_prefix` (the reasoning token ids received so far).
struct fork_request {
  request_context ctx{};
  stream_id parent = 0;
  std::vector<token_id> reasoning_prefix{};
  int samples = 1;                                    ///< K
  sampling params{.temperature = 0.1, .top_p = 1.0, .max_tokens = 4096};
  std::optional<kv_lease> kv{};
};

/// A piece of streamed output. `sample` distinguishes the K samples of a fork.
struct stream_chunk {
  stream_id id = 0;
  int sample = 0;
  bool reasoning = false;          ///< reasoning (thinking) text, or answer text
  std::string text{};
  std::vector<token_id> tokens{};    ///< ids of exactly this chunk (may be empty if the server gives none)
  /// How many tokens the chunk holds when `tokens` is empty because the
  /// server reports counts but not ids; 0: unknown (counted as one).
  std::uint32_t token_count = 0;
};

struct usage {
  std::uint64_t prompt_tokens = 0;
  std::uint64_t cached_prompt_tokens = 0;  ///< prefix-cache hits reported by the server
  std::uint64_t completion_tokens = 0;
  std::uint64_t reasoning_tokens = 0;
  usage& operator+=(const usage& o) noexcept {
    prompt_tokens += o.prompt_tokens;
    cached_prompt_tokens += o.cached_prompt_tokens;
    completion_tokens += o.completion_tokens;
    reasoning_tokens += o.reasoning_tokens;
    return *this;
  }
  friend bool operator==(const usage&, const usage&) = default;
};

enum class finish_reason : std::uint8_t { stop, length, cancelled, error };

/// The end of one sample of a stream. Exactly one per sample, also after cancel.
struct stream_end {
  stream_id id = 0;
  int sample = 0;
  finish_reason reason = finish_reason::stop;
  usage used{};
  std::string error{};  ///< set when reason == error
};

/// Receives stream output. Called on the loop thread only.
class stream_sink {
 public:
  virtual ~stream_sink() = default;
  virtual void on_chunk(const stream_chunk& chunk) = 0;
  virtual void on_end(const stream_end& end) = 0;
};

struct backend_limits {
  int max_concurrent_streams = 64;  ///< requests in flight (a K-sample fork counts once)
  bool token_ids = true;            ///< chunks carry token ids
  bool kv_hooks = false;            ///< the backend uses kv_lease handles
};

/// An LLM backend.
template <class B>
concept backend = requires(B& b, const B& cb, const reasoning_request& r, const fork_request& f,
                           stream_id id, stream_sink& sink) {
  { cb.limits() } -> std::convertible_to<backend_limits>;
  { b.start_reasoning(r, sink) } -> std::same_as<expected<stream_id, error>>;
  { b.fork(f, sink) } -> std::same_as<expected<stream_id, error>>;
  /// Stop a stream or fork. The sink still receives `on_end(cancelled)` for
  /// every sample not yet ended, and no chunk after the cancel.
  { b.cancel(id) } -> std::same_as<void>;
};

SPECGEN_END_NAMESPACE
