#pragma once
// The compiler's side of the sandboxed NVRTC helper (specgen-nvrtc): starting
// a helper process, sending it a compile, and killing it when it overruns or
// breaks. Each helper is allowed one set of directories for its life (Landlock
// cannot widen), so the compiler keeps idle helpers per set (helper_pool).
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/gpu/compiler.hpp>

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

struct helper_config {
  std::string program{};               ///< specgen-nvrtc
  std::string library{};               ///< libnvrtc, by absolute path
  std::vector<std::string> allowed{};  ///< the only directories NVRTC may read
  std::uint64_t memory_limit = 0;      ///< the helper's address-space limit in bytes; 0: none
  bool landlock = true;                ///< false only in tests of the file guard alone
};

/// What a helper said about itself when it started.
struct helper_hello {
  std::string nvrtc{};
  int landlock_abi = 0;  ///< 0: Landlock is not applied (`landlock_note` says why)
  std::string landlock_note{};
  bool guard = true;     ///< the file guard is armed

  /// One line for people: which layers hold the boundary.
  [[nodiscard]] std::string describe() const {
    std::string layers = landlock_abi > 0 ? "Landlock (ABI " + std::to_string(landlock_abi) + ")" : "";
    if (guard) layers += layers.empty() ? "the file guard" : " and the file guard";
    if (layers.empty()) layers = "no file-system restriction";
    return "a process of its own with an empty environment; " + layers +
           (landlock_abi > 0 ? "" : " (Landlock: " + landlock_note + ")");
  }
};

/// NVRTC's answer to one compile, as the helper reported it.
struct helper_reply {
  int rc = 0;               ///< an nvrtcResult
  std::string rc_text{};    ///< nvrtcGetErrorString of it
  std::string log{};
  std::string cubin{};
  double seconds = 0;       ///< NVRTC's own wall time
  bool cancelled = false;   ///< stopped at the deadline
  std::uint64_t denied = 0; ///< file-system calls the guard refused during this compile
};

/// One helper process. Not copyable: it owns the process and its channel.
class nvrtc_helper {
 public:
  static expected<std::unique_ptr<nvrtc_helper>, compile_failure> start(const helper_config& config);
  ~nvrtc_helper();
  nvrtc_helper(const nvrtc_helper&) = delete;
  nvrtc_helper& operator=(const nvrtc_helper&) = delete;

  /// Compiles `source`. Past `deadline` (plus a grace period for NVRTC to
  /// notice its cancellation) the helper is killed and the answer is a
  /// timeout; a helper that dies or breaks the protocol is an internal
  /// failure. Either way the helper is no longer `usable`.
  expected<helper_reply, compile_failure> compile(std::string_view source, const std::vector<std::string>& options,
                                                  duration deadline);

  [[nodiscard]] bool usable() const noexcept { return fd_ >= 0; }
  /// Whether an idle helper is still there to answer (it may have been killed
  /// while it waited: an idle helper never writes, so anything to read means
  /// it hung up).
  [[nodiscard]] bool alive() const;
  [[nodiscard]] const helper_hello& hello() const noexcept { return hello_; }

 private:
  nvrtc_helper(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  /// Kills the process and says how it ended, for a failure message.
  std::string end(bool kill);

  pid_t pid_ = -1;
  int fd_ = -1;
  helper_hello hello_{};
};

/// Idle helpers by allowed-directory set, started on demand.
class helper_pool {
 public:
  explicit helper_pool(std::size_t max_idle) : max_idle_(max_idle) {}

  expected<helper_reply, compile_failure> compile(const helper_config& config, std::string_view source,
                                                  const std::vector<std::string>& options, duration deadline);

  [[nodiscard]] std::uint64_t started() const;
  /// The first helper's description of its sandbox ("" before any started).
  [[nodiscard]] std::string sandbox() const;

 private:
  std::size_t max_idle_;
  mutable std::mutex mutex_;
  std::map<std::vector<std::string>, std::vector<std::unique_ptr<nvrtc_helper>>> idle_;
  std::size_t idle_count_ = 0;
  std::uint64_t started_ = 0;
  std::string sandbox_{};
};

/// The NVRTC helper program to start: `configured`, else $SPECGEN_NVRTC_HELPER,
/// else specgen-nvrtc beside the running program, else the installed one,
/// else the one in the build tree.
[[nodiscard]] std::string find_nvrtc_helper(const std::string& configured);

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
