#include "landlock.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

/// Every file-system right the kernel's ABI knows: all of them are handled
/// (denied unless a rule grants them), so nothing new slips through.
std::uint64_t fs_rights(int abi) {
  std::uint64_t r = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1;  // ABI 1: execute .. make_sym
#ifdef LANDLOCK_ACCESS_FS_REFER
  if (abi >= 2) r |= LANDLOCK_ACCESS_FS_REFER;
#endif
#ifdef LANDLOCK_ACCESS_FS_TRUNCATE
  if (abi >= 3) r |= LANDLOCK_ACCESS_FS_TRUNCATE;
#endif
#ifdef LANDLOCK_ACCESS_FS_IOCTL_DEV
  if (abi >= 5) r |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
#endif
  (void)abi;
  return r;
}

}  // namespace

landlock_outcome restrict_to_reading(const std::vector<std::string>& dirs) {
  const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 1)
    return {.abi = 0, .note = fmt::format("Landlock is not available in this kernel ({}); it needs Linux 5.13 or "
                                          "newer with landlock in its list of security modules",
                                          errno_text(errno))};
  const int v = static_cast<int>(abi);

  landlock_ruleset_attr attr{};
  std::memset(&attr, 0, sizeof attr);
  attr.handled_access_fs = fs_rights(v);
#ifdef LANDLOCK_ACCESS_NET_CONNECT_TCP
  if (v >= 4) attr.handled_access_net = LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;
#endif
#ifdef LANDLOCK_SCOPE_SIGNAL
  if (v >= 6) attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
#endif
  const int ruleset = static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0));
  if (ruleset < 0) return {.abi = 0, .note = fmt::format("landlock_create_ruleset failed: {}", errno_text(errno))};

  for (const auto& dir : dirs) {
    const int fd = ::open(dir.c_str(), O_PATH | O_CLOEXEC | O_DIRECTORY);
    if (fd < 0) continue;  // a directory that does not exist grants nothing
    landlock_path_beneath_attr rule{};
    rule.allowed_access = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
    rule.parent_fd = fd;
    const long rc = ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    const int e = errno;
    ::close(fd);
    if (rc != 0) {
      ::close(ruleset);
      return {.abi = 0, .note = fmt::format("landlock_add_rule for {} failed: {}", dir, errno_text(e))};
    }
  }
  // Required to restrict an unprivileged process; also keeps set-uid programs out.
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) {
    const int e = errno;
    ::close(ruleset);
    return {.abi = 0, .note = fmt::format("landlock_restrict_self failed: {}", errno_text(e))};
  }
  ::close(ruleset);
  return {.abi = v, .note = {}};
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
