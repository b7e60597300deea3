#pragma once
/// The framed, versioned protocol between the host and a `specgen-worker`.
///
/// A frame is a fixed 20-byte little-endian header followed by a payload:
///
/// | offset | size | field                                     |
/// |--------|------|-------------------------------------------|
/// | 0      | 4    | magic `"SGW1"`                            |
/// | 4      | 2    | protocol version (`protocol_version`)     |
/// | 6      | 2    | message type (`message_type`)             |
/// | 8      | 8    | request id (echoed by pong and response)  |
/// | 16     | 4    | payload length (at most `max_payload`)    |
///
/// Hello, request, response and log payloads are a *body*: a u32 length, that
/// many bytes of JSON text, then optional binary bytes (a cubin, an output
/// buffer). Ping, pong and shutdown carry an empty payload. The decoder takes
/// arbitrary chunks (a pipe gives no message boundaries) and reports bad input
/// as a value, so nothing a worker writes can crash the host.
///
/// @code
///   using namespace specgen::gpu;
///   std::string wire = encode({.type = message_type::ping, .request_id = 7});
///   frame_decoder dec;
///   dec.feed(wire);
///   auto f = dec.next();   // expected<optional<frame>>: a ping with id 7
/// @endcode
/// The full description is docs/worker-protocol.md.
#include <specgen/detail/config.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

inline constexpr std::array<char, 4> protocol_magic{'S', 'G', 'W', '1'};
inline constexpr std::uint16_t protocol_version = 1;
inline constexpr std::size_t frame_header_size = 20;
/// Large enough for a cubin or an output buffer, small enough that a garbage
/// length cannot make the host allocate without bound.
inline constexpr std::uint32_t max_payload = 1u << 30;

enum class message_type : std::uint16_t {
  hello = 1,     ///< worker -> host, once at start: version, pid, device
  ping = 2,      ///< host -> worker heartbeat
  pong = 3,      ///< worker -> host, same request id as the ping
  request = 4,   ///< host -> worker: {"op": ..., "args": ...} + binary
  response = 5,  ///< worker -> host: {"ok": bool, "result"|"error": ...} + binary
  log = 6,       ///< worker -> host: {"text": ...}, kept with the worker's stderr
  shutdown = 7,  ///< host -> worker: exit cleanly
};

[[nodiscard]] constexpr std::string_view to_string(message_type t) noexcept {
  switch (t) {
    case message_type::hello: return "hello";
    case message_type::ping: return "ping";
    case message_type::pong: return "pong";
    case message_type::request: return "request";
    case message_type::response: return "response";
    case message_type::log: return "log";
    case message_type::shutdown: return "shutdown";
  }
  return "unknown";
}

[[nodiscard]] constexpr bool is_known(std::uint16_t t) noexcept { return t >= 1 && t <= 7; }

struct frame {
  message_type type = message_type::ping;
  std::uint64_t request_id = 0;
  std::string payload;  ///< bytes, not necessarily text
  friend bool operator==(const frame&, const frame&) = default;
};

/// Why a byte stream is not a valid frame sequence. The stream cannot be
/// resynchronised after any of these, so the decoder stays failed.
struct decode_error {
  enum class kind { bad_magic, unsupported_version, unknown_type, oversized, bad_body };
  kind what = kind::bad_magic;
  std::string message;
  friend bool operator==(const decode_error&, const decode_error&) = default;
};

namespace detail {

inline void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

inline std::uint64_t get_le(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + static_cast<std::size_t>(i)])) << (8 * i);
  return v;
}

/// Printable form of a few bytes, for error messages about garbage.
inline std::string escape_bytes(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) out.push_back(c);
    else out += fmt::format("\\x{:02x}", u);
  }
  return out;
}

}  // namespace detail

/// The bytes of `f` on the wire. A payload over `max_payload` is a programming error.
[[nodiscard]] inline std::string encode(const frame& f) {
  if (f.payload.size() > max_payload)
    throw std::length_error(fmt::format("specgen frame payload of {} bytes exceeds the {} byte limit",
                                        f.payload.size(), max_payload));
  std::string out;
  out.reserve(frame_header_size + f.payload.size());
  out.append(protocol_magic.data(), protocol_magic.size());
  detail::put_le(out, protocol_version, 2);
  detail::put_le(out, static_cast<std::uint16_t>(f.type), 2);
  detail::put_le(out, f.request_id, 8);
  detail::put_le(out, f.payload.size(), 4);
  out += f.payload;
  return out;
}

/// JSON plus optional binary: the payload of hello, request, response and log.
struct message_body {
  nlohmann::json json;
  std::string binary;
};

[[nodiscard]] inline std::string encode_body(const nlohmann::json& json, std::string_view binary = {}) {
  std::string text = json.dump();
  std::string out;
  out.reserve(4 + text.size() + binary.size());
  detail::put_le(out, text.size(), 4);
  out += text;
  out += binary;
  return out;
}

[[nodiscard]] inline expected<message_body, decode_error> decode_body(std::string_view payload) {
  auto fail = [](std::string m) { return unexpected(decode_error{decode_error::kind::bad_body, std::move(m)}); };
  if (payload.size() < 4) return fail(fmt::format("message body of {} bytes is shorter than its 4-byte length", payload.size()));
  std::uint64_t n = detail::get_le(payload, 0, 4);
  if (n > payload.size() - 4)
    return fail(fmt::format("message body declares {} bytes of JSON but has only {}", n, payload.size() - 4));
  auto text = payload.substr(4, n);
  auto json = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded())
    return fail(fmt::format("message body is not valid JSON: \"{}\"", detail::escape_bytes(text.substr(0, 64))));
  return message_body{std::move(json), std::string(payload.substr(4 + n))};
}

/// One operation for the worker: `op` names it ("validate", "profile",
/// "load"; "echo" answers with its arguments), `args` is opaque to the host.
struct request {
  std::string op{};
  nlohmann::json args = nlohmann::json::object();
  std::string binary{};  ///< e.g. a cubin
};

/// The worker's answer. `ok == false` is the worker refusing or failing the
/// operation while staying healthy (an unknown op, a compile error it found);
/// a worker that cannot answer at all is the host's `worker_failure` instead.
struct response {
  bool ok = true;
  nlohmann::json result{};  ///< when ok
  std::string error{};      ///< when !ok
  std::string binary{};     ///< e.g. an output buffer
  /// Non-zero: the binary part is the first `bulk` bytes of the shared bulk
  /// region (docs/worker-protocol.md, "Bulk region"), not in the frame.
  std::uint64_t bulk = 0;
  /// On the host, for a `bulk` response: those bytes, read in place (outputs
  /// of hundreds of MiB are not copied). They stay valid until the next
  /// request to the same worker, which may overwrite the region; `keep` holds
  /// the mapping itself alive even if the worker is replaced meanwhile.
  std::string_view bulk_bytes{};
  std::shared_ptr<const void> keep{};

  /// The binary part, wherever it came: the frame or the bulk region.
  [[nodiscard]] std::string_view payload() const noexcept { return bulk ? bulk_bytes : std::string_view(binary); }
};

[[nodiscard]] inline frame make_request(std::uint64_t id, const request& r) {
  return {message_type::request, id, encode_body({{"op", r.op}, {"args", r.args}}, r.binary)};
}

[[nodiscard]] inline frame make_response(std::uint64_t id, const response& r) {
  nlohmann::json j = r.ok ? nlohmann::json{{"ok", true}, {"result", r.result}}
                          : nlohmann::json{{"ok", false}, {"error", r.error}};
  if (r.bulk) j["bulk"] = r.bulk;
  return {message_type::response, id, encode_body(j, r.binary)};
}

namespace detail {
inline decode_error bad_body(std::string m) { return {decode_error::kind::bad_body, std::move(m)}; }
/// The worker's descriptor of the bulk region (also in SPECGEN_WORKER_BULK_FD).
inline constexpr int bulk_fd_in_worker = 3;
/// Binary parts at least this large go through the bulk region when there is one.
inline constexpr std::size_t bulk_threshold_bytes = std::size_t{1} << 20;
}  // namespace detail

// Request and response bodies are read with json_fields.hpp's field_reader,
// as open objects: keys this side does not know are ignored (a newer peer may
// send more), while a key it reads with the wrong type is a bad_body error
// naming the key's JSON pointer ("response body: /ok: expected true or false,
// found string \"yes\""). `args` and `result` are the operation's own JSON.

[[nodiscard]] inline expected<request, decode_error> read_request(const frame& f) {
  auto body = decode_body(f.payload);
  if (!body) return unexpected(body.error());
  const auto& j = body->json;
  request r{.op = {}, .args = nlohmann::json::object(), .binary = std::move(body->binary)};
  specgen::detail::field_reader in(j, "request body", "");
  in.required("op", r.op);
  if (!in.ok()) return unexpected(detail::bad_body(in.failure()->what()));
  if (auto a = j.find("args"); a != j.end()) r.args = *a;
  return r;
}

[[nodiscard]] inline expected<response, decode_error> read_response(const frame& f) {
  auto body = decode_body(f.payload);
  if (!body) return unexpected(body.error());
  const auto& j = body->json;
  response r{.ok = true, .result = {}, .error = {}, .binary = std::move(body->binary)};
  specgen::detail::field_reader in(j, "response body", "");
  in.required("ok", r.ok)
      .optional("bulk", r.bulk)
      .check(r.bulk == 0 || r.binary.empty(), "bulk",
             fmt::format("the binary part is in the bulk region or in the frame, not both; the frame has {} binary bytes",
                         r.binary.size()));
  if (in.ok() && !r.ok) {
    r.error = "(no error message)";
    in.optional("error", r.error);
  }
  if (!in.ok()) return unexpected(detail::bad_body(in.failure()->what()));
  if (r.ok) r.result = j.value("result", nlohmann::json());
  return r;
}

/// The text of a log frame (`{"text": ...}`); the whole JSON when it has no text.
[[nodiscard]] inline expected<std::string, decode_error> read_log(const frame& f) {
  auto body = decode_body(f.payload);
  if (!body) return unexpected(body.error());
  std::string text = body->json.dump();
  specgen::detail::field_reader in(body->json, "log body", "");
  in.optional("text", text);
  if (!in.ok()) return unexpected(detail::bad_body(in.failure()->what()));
  return text;
}

/**
 * Turns a byte stream cut anywhere into frames.
 *
 * The header is checked as soon as its bytes arrive (the magic byte by byte),
 * so garbage is reported before any payload is buffered and a declared length
 * over the limit never causes an allocation. Memory held is at most one frame
 * plus the last chunk fed.
 *
 * @code
 *   frame_decoder dec;
 *   dec.feed(chunk);
 *   while (true) {
 *     auto f = dec.next();
 *     if (!f) { report(f.error().message); break; }
 *     if (!*f) break;          // need more bytes
 *     handle(**f);
 *   }
 * @endcode
 */
class frame_decoder {
 public:
  explicit frame_decoder(std::uint32_t payload_limit = max_payload) : limit_(payload_limit) {}

  void feed(std::string_view bytes) {
    if (error_) return;  // a failed stream is not read any further
    if (start_ > 0 && start_ >= buf_.size() / 2) {
      buf_.erase(0, start_);
      start_ = 0;
    }
    buf_.append(bytes);
  }

  /// The next complete frame, nothing if more bytes are needed, or the error
  /// (again on every later call).
  [[nodiscard]] expected<std::optional<frame>, decode_error> next() {
    if (error_) return unexpected(*error_);
    std::string_view avail = std::string_view(buf_).substr(start_);
    std::size_t magic_seen = std::min(avail.size(), protocol_magic.size());
    for (std::size_t i = 0; i < magic_seen; ++i)
      if (avail[i] != protocol_magic[i])
        return fail(decode_error::kind::bad_magic,
                    fmt::format("bad frame magic \"{}\" (expected \"SGW1\"); the peer is not speaking the specgen "
                                "worker protocol or wrote to stdout directly",
                                detail::escape_bytes(avail.substr(0, std::min<std::size_t>(avail.size(), 16)))));
    if (avail.size() < 6) return std::optional<frame>{};
    auto version = detail::get_le(avail, 4, 2);
    if (version != protocol_version)
      return fail(decode_error::kind::unsupported_version,
                  fmt::format("protocol version {} is not supported (this build speaks {}); rebuild the worker "
                              "and the host from the same sources",
                              version, protocol_version));
    if (avail.size() < 8) return std::optional<frame>{};
    auto type = static_cast<std::uint16_t>(detail::get_le(avail, 6, 2));
    if (!is_known(type)) return fail(decode_error::kind::unknown_type, fmt::format("unknown message type {}", type));
    if (avail.size() < frame_header_size) return std::optional<frame>{};
    auto length = detail::get_le(avail, 16, 4);
    if (length > limit_)
      return fail(decode_error::kind::oversized,
                  fmt::format("frame payload of {} bytes exceeds the {} byte limit", length, limit_));
    if (avail.size() < frame_header_size + length) return std::optional<frame>{};
    frame f{.type = static_cast<message_type>(type),
            .request_id = detail::get_le(avail, 8, 8),
            .payload = std::string(avail.substr(frame_header_size, length))};
    start_ += frame_header_size + length;
    return std::optional<frame>(std::move(f));
  }

  [[nodiscard]] bool failed() const noexcept { return error_.has_value(); }
  /// Bytes fed but not yet returned as frames.
  [[nodiscard]] std::size_t buffered() const noexcept { return buf_.size() - start_; }

 private:
  expected<std::optional<frame>, decode_error> fail(decode_error::kind k, std::string message) {
    error_ = decode_error{k, std::move(message)};
    buf_.clear();
    start_ = 0;
    return unexpected(*error_);
  }

  std::uint32_t limit_;
  std::string buf_;
  std::size_t start_ = 0;
  std::optional<decode_error> error_;
};

}  // namespace gpu
SPECGEN_END_NAMESPACE
