#pragma once
// The HTTP side of the backend: one I/O thread driving libcurl's multi
// interface. Streams are SSE responses fed through a `stream_decoder`; the
// decoders' deliveries go out in one batch per turn of the I/O loop.
//
// Failure handling, in one place: a request that gets 429, 5xx or a broken
// connection before its decoder has delivered anything is retried with
// exponential backoff (a Retry-After header sets the wait); after that, or
// after `max_retries`, the decoder ends its samples with the error. Timeouts
// are not retried: a stream without progress for `idle_timeout_s` ends, and
// a stream without response headers after `response_timeout_s` ends once
// `GET /v1/models` shows the server does not answer at all.
//
// Several servers (origins) share the one I/O thread; every request names
// its origin. With more than one, an origin that fails a request before its
// first token (a broken connection or a 5xx, after the retries), or that
// does not answer GET /v1/models when asked, is taken out of rotation: an
// `instance_event` says so, and the origin is probed every
// `instance_probe_s` until `serves` accepts its model list (then another
// event brings it back). With one origin nothing is ever taken out.
//
// Everything held per request is bounded: an SSE line or event by
// `max_event_bytes`, a plain answer by `max_response_bytes`, an error body
// by 64 KiB (only its start goes into the message). Messages name the URL
// with its credentials redacted.
#include "wire.hpp"

#include <specgen/detail/config.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace openai::detail {

struct client_options {
  std::vector<std::string> base_urls;  ///< the origins: scheme://host:port, no trailing slash
  std::vector<std::string> headers{};  ///< sent with every request ("Authorization: Bearer ..."); no control characters
  double connect_timeout_s = 10;
  double response_timeout_s = 10;
  double idle_timeout_s = 300;
  int max_retries = 5;
  double retry_initial_s = 0.5;
  double retry_max_s = 30;
  std::uint64_t max_event_bytes = std::uint64_t{8} << 20;
  std::uint64_t max_response_bytes = std::uint64_t{16} << 20;
  double instance_probe_s = 30;  ///< how often an origin out of rotation is probed
};

/// What to POST to cancel a request on the server (SGLang's /abort_request);
/// an empty path: closing the connection is enough.
struct abort_request {
  std::string path{};
  std::string body{};
};

/// The answer to a plain (non-streaming) request.
struct plain_result {
  long status = 0;      ///< 0: no HTTP answer (see `error`)
  std::string body{};   ///< of an error status: its first 64 KiB
  std::string error{};  ///< why there is no answer, when status == 0
};

/// Whether an answer to GET /v1/models shows the origin serving what it
/// should; an origin out of rotation comes back once this holds. Empty: HTTP 200.
using serves_fn = std::function<bool(const plain_result&)>;

struct client_counters {
  std::uint64_t http_requests = 0;
  std::uint64_t retries = 0;
  std::uint64_t aborts_posted = 0;
};

class http_client {
 public:
  using deliver_fn = std::function<void(delivery_batch&&)>;

  /// Starts the I/O thread. `deliver` runs on it, once per batch.
  http_client(client_options options, deliver_fn deliver, serves_fn serves = {});
  ~http_client();
  http_client(const http_client&) = delete;  // the I/O thread holds `this`
  http_client& operator=(const http_client&) = delete;

  // Thread-safe; none blocks on I/O.
  /// POSTs `body` to `path` and streams the answer through `decoder`.
  /// `abort` is posted if the stream is cancelled or stopped before its end.
  void start_stream(int origin, stream_id id, std::string path, std::string body, std::string request_id, abort_request abort,
                    std::unique_ptr<stream_decoder> decoder);
  /// Closes the stream's connection (no delivery for it after this returns
  /// is guaranteed only on the loop side, which drops late ones).
  void cancel(stream_id id);
  /// A plain request ("GET" or "POST"); `done` runs on the I/O thread.
  void request(int origin, std::string method, std::string path, std::string body, std::function<void(plain_result)> done);
  /// The same, waiting for the answer. Never call it on the I/O thread.
  plain_result request_sync(int origin, std::string method, std::string path, std::string body);

  /// Takes `origin` out of rotation without an event (the caller knows):
  /// found unreachable at start. It is probed like any other.
  void set_down(int origin);

  [[nodiscard]] client_counters counters() const noexcept;
  /// CPU time the I/O thread has used.
  [[nodiscard]] double io_cpu_seconds() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace openai::detail
SPECGEN_END_NAMESPACE
