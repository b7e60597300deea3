#pragma once
/// Reading the files a user names: task files and their sources, configs,
/// traces, cost tables, corpora and journals all come through here.
///
/// A path can name anything: a FIFO (opening it for reading would block until
/// a writer comes, reading it might never end), `/dev/zero` (never ends), a
/// directory, or a file of gigabytes. So a file is opened without blocking
/// (`O_NONBLOCK`), checked to be a regular file on the opened descriptor (no
/// race with a rename), and read up to a limit that depends on its kind. Every
/// failure is an `error` naming the path, the kind and what to do; nothing
/// throws.
///
/// @code
///   auto text = specgen::detail::read_regular_file("run.json", specgen::detail::file_kinds::config);
///   auto j = specgen::detail::read_json_file("task.json", specgen::detail::file_kinds::task);
///   if (!j) std::cerr << j.error().message;  // "task.json: the task file is a FIFO (named pipe), not a regular file; ..."
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/detail/limits.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace detail {

/// What a file is for, and the most bytes it may hold (for a journal: the
/// most bytes of one record line).
struct file_kind {
  std::string_view name;
  std::size_t max_bytes;
};

/// The limits, far above what real files need (the bundled suite's largest
/// trace file is 120 KB, its cost table 68 KB). A parsed JSON document takes
/// about ten times its file's size in memory.
namespace file_kinds {
inline constexpr file_kind task{"task file", 4u << 20};
inline constexpr file_kind source{"kernel source file", 4u << 20};
inline constexpr file_kind config{"config", 4u << 20};
inline constexpr file_kind trace{"trace file", 64u << 20};
inline constexpr file_kind cost_table{"cost table", 64u << 20};
inline constexpr file_kind journal{"journal", 64u << 20};  ///< per record line
}  // namespace file_kinds

/// "1.5 MiB": a byte count for messages.
inline std::string byte_text(std::size_t n) {
  if (n >= (1u << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(n) / (1u << 20));
  if (n >= (1u << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(n) / (1u << 10));
  return fmt::format("{} bytes", n);
}

/// An open file descriptor, closed on destruction.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

/// What a non-regular file is, for the message that refuses it.
inline std::string_view file_type_text(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/// Opens `path` for reading if it is a regular file; the size it had when opened.
struct opened_file {
  unique_fd fd;
  std::size_t size = 0;
};

inline expected<opened_file, error> open_regular_file(const std::filesystem::path& path, const file_kind& kind) {
  // O_NONBLOCK: opening a FIFO without a writer returns at once instead of
  // waiting for one; fstat below then refuses it.
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0)
    return unexpected(error{fmt::format("{}: cannot open the file: {}", path.string(), std::strerror(errno))});
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return unexpected(error{fmt::format("{}: cannot read the {}: {}", path.string(), kind.name, std::strerror(errno))});
  if (!S_ISREG(st.st_mode))
    return unexpected(error{fmt::format("{}: the {} is {}, not a regular file; give the path of a {} (a pipe or device "
                                        "could block or never end)",
                                        path.string(), kind.name, file_type_text(st.st_mode), kind.name)});
  return opened_file{std::move(fd), static_cast<std::size_t>(st.st_size)};
}

inline error too_large(const std::filesystem::path& path, const file_kind& kind, std::size_t size) {
  return error{fmt::format("{}: the {} is {}, over the limit of {} for a {}; check that the path names the right "
                           "file (split a larger one)",
                           path.string(), kind.name, size > kind.max_bytes ? byte_text(size) : "larger",
                           byte_text(kind.max_bytes), kind.name)};
}

/**
 * The contents of the regular file `path`, at most `kind.max_bytes` of them.
 * A FIFO, device, socket or directory, a file over the limit, or a read error
 * is an error naming the path and the kind. Never blocks on a FIFO, never
 * throws.
 */
inline expected<std::string, error> read_regular_file(const std::filesystem::path& path, const file_kind& kind) noexcept {
  try {
    auto f = open_regular_file(path, kind);
    if (!f) return unexpected(f.error());
    if (f->size > kind.max_bytes) return unexpected(too_large(path, kind, f->size));
    // Read at most one byte past the limit: a file that grew since fstat is
    // still refused, and a huge one is never read whole.
    std::string out;
    out.resize(std::min(f->size, kind.max_bytes) + 1);
    std::size_t used = 0;
    for (;;) {
      if (used == out.size()) {
        if (out.size() > kind.max_bytes) return unexpected(too_large(path, kind, out.size()));
        out.resize(std::min(out.size() * 2, kind.max_bytes + 1));
      }
      const ssize_t n = ::read(f->fd.get(), out.data() + used, out.size() - used);
      if (n < 0) {
        if (errno == EINTR) continue;
        return unexpected(error{fmt::format("{}: cannot read the {}: {}", path.string(), kind.name, std::strerror(errno))});
      }
      if (n == 0) break;
      used += static_cast<std::size_t>(n);
    }
    if (used > kind.max_bytes) return unexpected(too_large(path, kind, used));
    out.resize(used);
    return out;
  } catch (const std::exception& e) {  // bad_alloc for a file near the limit with little memory left
    return unexpected(error{fmt::format("{}: cannot read the {}: {}", path.string(), kind.name, e.what())});
  }
}

/// Parses JSON text (with `comments`, `//` and block comments are allowed).
/// An error names `file` and says what is wrong: a syntax error, a number out
/// of range (`1e999`), or arrays and objects nested more than
/// `limits::max_json_depth` deep (which every recursive walk of the document
/// would pay for). Never throws.
inline expected<nlohmann::json, error> parse_json(std::string_view text, std::string_view file, bool comments = true) noexcept {
  struct too_deep {};
  try {
    const nlohmann::json::parser_callback_t deep = [](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
      if ((event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start) &&
          depth >= limits::max_json_depth)
        throw too_deep{};
      return true;
    };
    return nlohmann::json::parse(text, deep, /*allow_exceptions=*/true, comments);
  } catch (const too_deep&) {
    return unexpected(error{fmt::format("{}: arrays and objects are nested more than {} levels deep; no specgen file "
                                        "needs that many: check how the file was made",
                                        file, limits::max_json_depth)});
  } catch (const nlohmann::json::exception& e) {
    return unexpected(error{fmt::format("{}: not valid JSON: {}", file, e.what())});
  } catch (const std::bad_alloc&) {
    return unexpected(error{fmt::format("{}: not enough memory to parse the JSON", file)});
  } catch (const std::exception& e) {
    return unexpected(error{fmt::format("{}: cannot parse the JSON: {}", file, e.what())});
  }
}

/// `read_regular_file` then `parse_json`: a JSON file of the given kind.
inline expected<nlohmann::json, error> read_json_file(const std::filesystem::path& path, const file_kind& kind,
                                                      bool comments = true) noexcept {
  return read_regular_file(path, kind).and_then(
      [&](const std::string& text) { return parse_json(text, path.string(), comments); });
}

/// The `*.json` entries of `dir` (not recursive), sorted by path. Whatever
/// they are: reading one that is not a regular file then says so, rather
/// than the file being skipped without a word.
inline expected<std::vector<std::filesystem::path>, error> json_files_in(const std::filesystem::path& dir) noexcept {
  try {
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".json") files.push_back(it->path());
    if (ec) return unexpected(error{fmt::format("{}: cannot list the directory: {}", dir.string(), ec.message())});
    std::sort(files.begin(), files.end());
    return files;
  } catch (const std::exception& e) {
    return unexpected(error{fmt::format("{}: cannot list the directory: {}", dir.string(), e.what())});
  }
}

/**
 * Reads a regular file line by line, each line at most `kind.max_bytes`
 * (for files too large to hold at once, like a journal).
 *
 * @code
 *   auto in = specgen::detail::line_reader::open(path, specgen::detail::file_kinds::journal);
 *   std::string line;
 *   while (true) {
 *     auto got = in->next(line);           // an error for a line over the limit
 *     if (!got || *got == specgen::detail::line_reader::end) break;
 *     use(line, *got == specgen::detail::line_reader::unterminated);
 *   }
 * @endcode
 */
class line_reader {
 public:
  enum status {
    terminated,    ///< a line that ended with '\n' (not included)
    unterminated,  ///< the last line, without a '\n' at the end of the file
    end,           ///< no more lines
  };

  static expected<line_reader, error> open(const std::filesystem::path& path, const file_kind& kind) noexcept {
    return open_regular_file(path, kind).transform([&](auto&& f) { return line_reader(path, kind, std::move(f.fd)); });
  }

  expected<status, error> next(std::string& line) noexcept {
    try {
      line.clear();
      for (;;) {
        if (at_ == buffer_.size()) {
          if (eof_) return line.empty() && !started_ ? end : finish_unterminated();
          if (auto got = fill(); !got) return unexpected(got.error());
          continue;
        }
        started_ = true;
        const auto nl = std::find(buffer_.begin() + static_cast<std::ptrdiff_t>(at_), buffer_.end(), '\n');
        const std::size_t take = static_cast<std::size_t>(nl - buffer_.begin()) - at_;
        if (line.size() + take > kind_.max_bytes)
          return unexpected(error{fmt::format("{}:{}: the line is longer than {}, the limit for a line of a {}; the "
                                              "file is damaged or not a {}",
                                              path_.string(), lines_ + 1, byte_text(kind_.max_bytes), kind_.name,
                                              kind_.name)});
        line.append(buffer_, at_, take);
        at_ += take;
        if (nl != buffer_.end()) {
          ++at_;
          ++lines_;
          started_ = false;
          return terminated;
        }
      }
    } catch (const std::bad_alloc&) {
      return unexpected(error{fmt::format("{}: not enough memory to read the {}", path_.string(), kind_.name)});
    }
  }

 private:
  line_reader(std::filesystem::path path, const file_kind& kind, unique_fd fd)
      : path_(std::move(path)), kind_(kind), fd_(std::move(fd)) {}

  status finish_unterminated() {
    started_ = false;
    ++lines_;
    return unterminated;
  }

  expected<void, error> fill() {
    buffer_.resize(64 * 1024);
    at_ = 0;
    for (;;) {
      const ssize_t n = ::read(fd_.get(), buffer_.data(), buffer_.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        buffer_.clear();
        return unexpected(error{fmt::format("{}: cannot read the {}: {}", path_.string(), kind_.name, std::strerror(errno))});
      }
      buffer_.resize(static_cast<std::size_t>(n));
      eof_ = n == 0;
      return {};
    }
  }

  std::filesystem::path path_;
  file_kind kind_;
  unique_fd fd_;
  std::string buffer_;
  std::size_t at_ = 0;
  std::size_t lines_ = 0;
  bool eof_ = false;
  bool started_ = false;  ///< the current line has begun (possibly empty so far)
};

}  // namespace detail
SPECGEN_END_NAMESPACE
