#include "disk_cache.hpp"

#include "hash128.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <system_error>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view magic = "specgen-compile-cache 3\n";

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

/// Owned by this process's user and writable by nobody else: nobody else can
/// have put there what is read from it.
bool private_to_us(const struct stat& st) { return st.st_uid == ::geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0; }

/// Why `st` (of directory `dir`) may not hold cache entries, or "" when it may.
std::string directory_problem(const std::string& dir, const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", dir);
  if (st.st_uid != ::geteuid())
    return fmt::format("{} belongs to user {}, not to this process's user {}; another user's directory could hand "
                       "this process a kernel it did not compile",
                       dir, st.st_uid, ::geteuid());
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fmt::format("group or others may write to {} (mode {:04o}), so they could plant a kernel in it; "
                       "run chmod go-w {} or choose another cache_dir",
                       dir, st.st_mode & 07777, dir);
  return {};
}

fs::path subdir_of(const std::string& dir, const std::string& key) { return fs::path(dir) / key.substr(0, 2); }

std::string digest(const std::string& key, std::string_view cubin, const std::string& log, const std::string& kernels,
                   double seconds) {
  hash128 h;
  h.add(magic).add(key).add(cubin).add(log).add(kernels).add(fmt::format("{}", seconds));
  return h.hex();
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

void put_u64(std::string& out, std::uint64_t n) {
  for (int i = 0; i < 8; ++i, n >>= 8) out.push_back(static_cast<char>(n & 0xff));
}
std::uint64_t get_u64(std::string_view in) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(in[static_cast<std::size_t>(i)]);
  return n;
}

/// The bytes of a private regular file of bounded size, read through one
/// descriptor (so the file checked is the file read), or nothing.
std::optional<std::string> read_private_file(const fs::path& path, bool& rejected) {
  // O_NOFOLLOW: a link (to /dev/zero, to another user's file) is refused;
  // O_NONBLOCK: a FIFO cannot stall the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    rejected = errno != ENOENT;
    return std::nullopt;
  }
  struct stat st {};
  std::optional<std::string> out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && private_to_us(st) &&
      static_cast<std::uint64_t>(st.st_size) <= disk_cache::max_entry_bytes) {
    std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    if (got == bytes.size()) out = std::move(bytes);
  }
  ::close(fd);
  if (!out) rejected = true;
  return out;
}

bool write_atomically(const fs::path& path, const std::string& bytes) {
  static std::atomic<unsigned> counter{0};
  const fs::path tmp = path.parent_path() / fmt::format(".{}.{}.{}.tmp", path.filename().string(),
                                                         static_cast<long>(::getpid()), counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::size_t put = 0;
  while (put < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + put, bytes.size() - put);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    put += static_cast<std::size_t>(w);
  }
  const bool ok = ::close(fd) == 0 && put == bytes.size() && ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

}  // namespace

expected<disk_cache, error> disk_cache::open(std::string dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return unexpected(error{fmt::format("cannot create the compile cache directory {}: {}", dir, ec.message())});
    ::chmod(dir.c_str(), 0700);
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return unexpected(error{fmt::format("cannot use the compile cache directory {}: {}", dir, errno_text(errno))});
  if (auto problem = directory_problem(dir, st); !problem.empty())
    return unexpected(error{fmt::format("refusing the compile cache directory: {}", problem)});
  return disk_cache(std::move(dir));
}

disk_cache::loaded disk_cache::load(const std::string& key) const {
  loaded out;
  const fs::path sub = subdir_of(dir_, key);
  struct stat st {};
  if (::lstat(sub.c_str(), &st) != 0) {
    out.rejected = errno != ENOENT;
    return out;
  }
  if (!directory_problem(sub.string(), st).empty()) {
    out.rejected = true;
    return out;
  }
  const auto bytes = read_private_file(sub / (key + ".entry"), out.rejected);
  if (!bytes) return out;
  out.rejected = true;  // until every check below has passed
  const std::string_view b = *bytes;
  if (b.size() < magic.size() + 8 || b.substr(0, magic.size()) != magic) return out;
  // The sections: header (JSON), log, cubin; each after its 8-byte length but the cubin, which is the rest.
  std::string_view rest = b.substr(magic.size());
  auto section = [&rest](std::string_view& out_section) {
    if (rest.size() < 8) return false;
    const std::uint64_t n = get_u64(rest);
    rest.remove_prefix(8);
    if (n > rest.size()) return false;
    out_section = rest.substr(0, n);
    rest.remove_prefix(n);
    return true;
  };
  std::string_view head, log;
  if (!section(head) || !section(log)) return out;
  const std::string_view cubin = rest;
  const auto header = nlohmann::json::parse(head, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return out;
  auto c = std::make_shared<compiled>();
  try {
    if (header.at("key").get<std::string>() != key || header.at("cubin_bytes").get<std::size_t>() != cubin.size())
      return out;
    c->log = std::string(log);
    const auto& kernels = header.at("kernels");
    c->kernels = kernels.get<std::vector<kernel_resources>>();
    c->seconds = header.at("seconds").get<double>();
    if (header.at("digest").get<std::string>() != digest(key, cubin, c->log, dump(kernels), c->seconds)) return out;
  } catch (const nlohmann::json::exception&) {
    return out;  // damaged or from another format: recompiling is the repair
  }
  if (cubin.size() < 4 || cubin.substr(0, 4) != "\x7f" "ELF") return out;
  const auto* p = reinterpret_cast<const std::byte*>(cubin.data());
  c->cubin.assign(p, p + cubin.size());
  // The kernels are read again from the cubin (the stored report adds the
  // spills), so an entry written from a compile whose log lacked the ptxas
  // report, or before the cubin was read, still names every kernel.
  c->kernels = kernels_of_compile(c->cubin, c->kernels);
  c->cache_hit = true;
  c->key = key;
  out.entry = std::move(c);
  out.rejected = false;
  return out;
}

void disk_cache::store(const compiled& c) const {
  const fs::path sub = subdir_of(dir_, c.key);
  if (::mkdir(sub.c_str(), 0700) != 0 && errno != EEXIST) return;
  struct stat st {};
  if (::lstat(sub.c_str(), &st) != 0 || !directory_problem(sub.string(), st).empty()) return;
  const std::string_view cubin(reinterpret_cast<const char*>(c.cubin.data()), c.cubin.size());
  // The kernel report is digested as it will read back (names with invalid UTF-8 replaced).
  const auto kernels = nlohmann::json::parse(dump(nlohmann::json(c.kernels)));
  const nlohmann::json header = {{"key", c.key},
                                 {"cubin_bytes", c.cubin.size()},
                                 {"kernels", kernels},
                                 {"seconds", c.seconds},
                                 {"digest", digest(c.key, cubin, c.log, dump(kernels), c.seconds)}};
  const std::string head = dump(header);
  std::string bytes(magic);
  put_u64(bytes, head.size());
  bytes += head;
  put_u64(bytes, c.log.size());
  bytes += c.log;
  bytes += cubin;
  if (bytes.size() > max_entry_bytes) return;
  write_atomically(sub / (c.key + ".entry"), bytes);
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
