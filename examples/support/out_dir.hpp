#pragma once
// An output directory that one run at a time may use: two runs writing the same
// journal and results would each destroy the other's work.
#include <specgen/expected.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace specgen::programs {

/**
 * An exclusive lock on an output directory, held until destruction: an
 * `flock` on `<dir>/.specgen.lock`, which holds the owner's process id so that
 * a refused run can name it. The kernel releases the lock when the process
 * ends, however it ends, so a killed run never leaves the directory locked.
 *
 * @code
 *   auto lock = specgen::programs::out_dir_lock::acquire(out);  // creates `out` if needed
 *   if (!lock) { fmt::print(stderr, "{}\n", lock.error().what()); return 2; }
 * @endcode
 */
class out_dir_lock {
 public:
  /// Creates `dir` if needed and locks it without waiting: another process
  /// holding the lock is an error naming the directory and that process.
  static expected<out_dir_lock, error> acquire(const std::filesystem::path& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return unexpected(error{fmt::format("cannot create the output directory {}: {}", dir.string(), ec.message())});
    const auto path = dir / ".specgen.lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return unexpected(error{fmt::format("cannot open {}: {}", path.string(), std::strerror(errno))});
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = read_holder(fd);
      ::close(fd);
      if (err != EWOULDBLOCK) return unexpected(error{fmt::format("cannot lock {}: {}", path.string(), std::strerror(err))});
      return unexpected(error{fmt::format(
          "the output directory {} is in use by another run ({}); wait for it to end, or give this run another --out",
          dir.string(), holder.empty() ? "its process id is not known yet" : "process " + holder)});
    }
    // Ours now: record who holds it. A failure here only loses the name.
    if (::ftruncate(fd, 0) == 0) {
      const std::string pid = std::to_string(::getpid()) + "\n";
      [[maybe_unused]] const auto written = ::pwrite(fd, pid.data(), pid.size(), 0);
    }
    return out_dir_lock(fd, dir);
  }

  out_dir_lock(out_dir_lock&& o) noexcept : fd_(std::exchange(o.fd_, -1)), dir_(std::move(o.dir_)) {}
  out_dir_lock& operator=(out_dir_lock&& o) noexcept {
    if (this != &o) {
      release();
      fd_ = std::exchange(o.fd_, -1);
      dir_ = std::move(o.dir_);
    }
    return *this;
  }
  out_dir_lock(const out_dir_lock&) = delete;  // one owner of the lock
  out_dir_lock& operator=(const out_dir_lock&) = delete;
  ~out_dir_lock() { release(); }

  [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }

 private:
  out_dir_lock(int fd, std::filesystem::path dir) : fd_(fd), dir_(std::move(dir)) {}

  /// The process id the holder wrote, or "" (it may not have written it yet).
  static std::string read_holder(int fd) {
    char buf[32] = {};
    const auto n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string s(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    for (char c : s)
      if (c < '0' || c > '9') return {};
    return s;
  }
  void release() noexcept {
    if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
    fd_ = -1;
  }

  int fd_ = -1;
  std::filesystem::path dir_;
};

}  // namespace specgen::programs
