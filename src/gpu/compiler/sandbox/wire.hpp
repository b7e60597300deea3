#pragma once
// Frames between the compiler and its NVRTC helper over a pipe: an 8-byte
// little-endian length, then that many bytes. A request is a JSON header
// frame and the source; a reply is a JSON header frame, the log and the cubin.
// Binary frames carry source, log and cubin unchanged (a model's source may
// hold any bytes, and JSON would have to replace invalid UTF-8).
#include <specgen/detail/config.hpp>

#include <poll.h>
#include <unistd.h>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail::sandbox_wire {

/// Larger than any source, log or cubin a compile produces; a length beyond it
/// is a broken peer, not a big frame.
inline constexpr std::uint64_t max_frame_bytes = std::uint64_t{512} << 20;

/// Writes all of `p`; to a socket without SIGPIPE, so a peer that died is an
/// error value here, not a signal that ends the caller's process.
inline bool write_all(int fd, const char* p, std::size_t n) {
  bool socket = true;
  while (n > 0) {
    ssize_t w = socket ? ::send(fd, p, n, MSG_NOSIGNAL) : ::write(fd, p, n);
    if (w < 0 && errno == ENOTSOCK) {
      socket = false;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

inline bool write_frame(int fd, std::string_view bytes) {
  unsigned char len[8];
  std::uint64_t n = bytes.size();
  for (auto& b : len) b = static_cast<unsigned char>(n & 0xff), n >>= 8;
  return write_all(fd, reinterpret_cast<const char*>(len), sizeof len) && write_all(fd, bytes.data(), bytes.size());
}

enum class read_status { ok, eof, timeout, too_large, io_error };

/// Reads exactly `n` bytes, waiting no later than `deadline` (none: forever).
inline read_status read_exact(int fd, char* p, std::size_t n,
                              std::optional<std::chrono::steady_clock::time_point> deadline) {
  while (n > 0) {
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return read_status::timeout;
      pollfd pfd{.fd = fd, .events = POLLIN, .revents = 0};
      const int rc = ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 60'000)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) return read_status::io_error;
      if (rc == 0) continue;  // re-checks the deadline
    }
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return read_status::io_error;
    if (r == 0) return read_status::eof;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return read_status::ok;
}

inline read_status read_frame(int fd, std::string& out, std::uint64_t max_bytes,
                              std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt) {
  unsigned char len[8];
  if (auto s = read_exact(fd, reinterpret_cast<char*>(len), sizeof len, deadline); s != read_status::ok) return s;
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > max_bytes) return read_status::too_large;
  out.resize(static_cast<std::size_t>(n));
  return read_exact(fd, out.data(), out.size(), deadline);
}

}  // namespace gpu::detail::sandbox_wire
SPECGEN_END_NAMESPACE
