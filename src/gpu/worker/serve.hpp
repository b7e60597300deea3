#pragma once
/// The worker's side of the protocol, shared by `specgen-worker` and the
/// test stand-in `specgen-fake-worker`: frames in on stdin, out on stdout.
///
/// The worker is single-threaded on purpose: while it runs a request it does
/// not answer pings, and the host's per-request deadline is what catches a
/// kernel that never returns.
#include "gpu/protocol/protocol.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>

#include <sys/mman.h>
#include <unistd.h>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// Writes all of `bytes` to `fd`; false when the host has gone away.
inline bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

inline bool send_frame(const frame& f) { return write_all(STDOUT_FILENO, encode(f)); }

/// The device index the host asked for (SPECGEN_WORKER_DEVICE), 0 if unset.
inline int requested_device() {
  const char* s = std::getenv("SPECGEN_WORKER_DEVICE");
  return s ? std::atoi(s) : 0;
}

inline bool send_hello(const nlohmann::json& device) {
  nlohmann::json hello = {{"protocol", protocol_version}, {"pid", static_cast<long>(::getpid())}, {"device", device}};
  return send_frame({message_type::hello, 0, encode_body(hello)});
}

/// The bulk region the host shared (SPECGEN_WORKER_BULK_FD and _BYTES),
/// mapped on first use; empty when there is none.
struct bulk_region {
  char* data = nullptr;
  std::size_t size = 0;
};

inline const bulk_region& worker_bulk() {
  static const bulk_region region = [] {
    bulk_region r;
    const char* fd = std::getenv("SPECGEN_WORKER_BULK_FD");
    const char* bytes = std::getenv("SPECGEN_WORKER_BULK_BYTES");
    if (!fd || !bytes) return r;
    const std::size_t size = std::strtoull(bytes, nullptr, 10);
    void* m = size ? ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, std::atoi(fd), 0)
                   : MAP_FAILED;
    if (m == MAP_FAILED) return r;
    r.data = static_cast<char*>(m);
    r.size = size;
    return r;
  }();
  return region;
}

/// Moves a large binary part into the bulk region (`bulk` then says how
/// much); a small one, or one that does not fit, stays in the frame.
inline void use_bulk(response& r) {
  const bulk_region& b = worker_bulk();
  if (r.binary.size() < bulk_threshold_bytes || r.binary.size() > b.size) return;
  std::memcpy(b.data, r.binary.data(), r.binary.size());
  r.bulk = r.binary.size();
  r.binary.clear();
}

using request_handler = std::function<response(const request&)>;

/// A response, and whether the worker must exit once it is sent (a sticky
/// CUDA error or a hung kernel left its context unusable).
struct handled {
  response reply;
  bool exit_after = false;
};
using exiting_request_handler = std::function<handled(const request&)>;

/// Answers pings and requests until shutdown or end of input; the exit status
/// for main(). Input that is not the protocol ends the worker (status 2): the
/// host is broken and a guess would be worse. A request answered with
/// `exit_after` ends it with status 2 too, right after the response: without
/// running destructors, which could block on a kernel that never ends.
inline int serve(const exiting_request_handler& handle) {
  frame_decoder decoder;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;  // the host closed the channel
    decoder.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    while (true) {
      auto f = decoder.next();
      if (!f) {
        std::fprintf(stderr, "specgen-worker: %s\n", f.error().message.c_str());
        return 2;
      }
      if (!*f) break;
      const frame& in = **f;
      switch (in.type) {
        case message_type::ping:
          if (!send_frame({message_type::pong, in.request_id, {}})) return 0;
          break;
        case message_type::shutdown: return 0;
        case message_type::request: {
          auto r = read_request(in);
          handled out = r ? handle(*r)
                          : handled{response{.ok = false, .result = {}, .error = r.error().message, .binary = {}}};
          use_bulk(out.reply);
          const bool sent = send_frame(make_response(in.request_id, out.reply));
          if (out.exit_after) std::_Exit(2);
          if (!sent) return 0;
          break;
        }
        default: break;  // host-bound types are ignored
      }
    }
  }
}

/// `serve` for handlers that never need the worker to exit.
inline int serve(const request_handler& handle) {
  return serve(exiting_request_handler([&](const request& r) { return handled{handle(r)}; }));
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
