#include "helper.hpp"

#include "wire.hpp"
#include "gpu/common/companion.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <system_error>
#include <utility>

#ifndef SPECGEN_DEFAULT_NVRTC_HELPER
#define SPECGEN_DEFAULT_NVRTC_HELPER "specgen-nvrtc"
#endif

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

namespace wire = sandbox_wire;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

compile_failure failure(compile_failure_kind kind, std::string message, std::string log = {}) {
  return compile_failure{.kind = kind, .message = std::move(message), .log = std::move(log)};
}

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

/// A cold start loads a 100 MB library and compiles once; on a loaded machine
/// that can take seconds, never a minute.
constexpr auto startup_limit = std::chrono::seconds(60);
/// Past a compile's deadline NVRTC is cancelled by its own callback; this is
/// how long it gets to notice before the process is killed.
constexpr auto cancel_grace = std::chrono::seconds(3);

/// The whole environment of a helper: nothing of the caller's (an API key in
/// the environment must not be one `#include "/proc/self/environ"` away, even
/// where the sandbox would stop that read). CUDA_CACHE_DISABLE=1 switches
/// NVRTC's own compile cache off from the helper's first instruction on: a
/// compile answered from that cache has no ptxas report in its log
/// (gpu/loader/nvrtc.cpp says more).
char* helper_environment[] = {const_cast<char*>("CUDA_CACHE_DISABLE=1"), const_cast<char*>("LC_ALL=C"), nullptr};

}  // namespace

std::string find_nvrtc_helper(const std::string& configured) {
#ifndef SPECGEN_INSTALLED_NVRTC_HELPER
#define SPECGEN_INSTALLED_NVRTC_HELPER ""
#endif
  return find_companion_program(configured, "SPECGEN_NVRTC_HELPER", "specgen-nvrtc", SPECGEN_INSTALLED_NVRTC_HELPER,
                                SPECGEN_DEFAULT_NVRTC_HELPER);
}

expected<std::unique_ptr<nvrtc_helper>, compile_failure> nvrtc_helper::start(const helper_config& config) {
  if (::access(config.program.c_str(), X_OK) != 0)
    return unexpected(failure(
        compile_failure_kind::unavailable,
        fmt::format("the NVRTC helper program {} cannot be run ({}); specgen compiles model-written sources only "
                    "inside it. Build or install specgen-nvrtc, or point compiler_config::helper_program or "
                    "$SPECGEN_NVRTC_HELPER at it",
                    config.program, errno_text(errno))));
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return unexpected(failure(compile_failure_kind::internal, fmt::format("socketpair failed: {}", errno_text(errno))));

  std::vector<std::string> args{config.program, "--library", config.library};
  for (const auto& d : config.allowed) args.insert(args.end(), {"--allow", d});
  if (config.memory_limit > 0) args.insert(args.end(), {"--memory-limit", std::to_string(config.memory_limit)});
  if (!config.landlock) args.emplace_back("--no-landlock");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sv[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, sv[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, config.program.c_str(), &actions, &attr, argv.data(), helper_environment);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    return unexpected(failure(compile_failure_kind::unavailable,
                              fmt::format("cannot start the NVRTC helper {}: {}", config.program, errno_text(rc))));
  }
  std::unique_ptr<nvrtc_helper> h(new nvrtc_helper(pid, sv[0]));

  std::string hello;
  const auto status = wire::read_frame(h->fd_, hello, 1 << 20, clock_type::now() + startup_limit);
  if (status != wire::read_status::ok)
    return unexpected(failure(compile_failure_kind::internal,
                              fmt::format("the NVRTC helper {} did not start: {}", config.program,
                                          h->end(status == wire::read_status::timeout))));
  try {
    const auto j = json::parse(hello);
    if (j.contains("error"))
      return unexpected(failure(compile_failure_kind::unavailable,
                                fmt::format("the NVRTC helper could not start: {}", j.at("error").get<std::string>())));
    if (j.contains("warmup_error"))
      return unexpected(failure(
          compile_failure_kind::internal,
          fmt::format("NVRTC fails inside its sandbox (directories allowed: {}): {}", fmt::join(config.allowed, ", "),
                      j.at("warmup_error").get<std::string>())));
    h->hello_.nvrtc = j.at("nvrtc").get<std::string>();
    h->hello_.landlock_abi = j.at("landlock_abi").get<int>();
    h->hello_.landlock_note = j.at("landlock_note").get<std::string>();
    h->hello_.guard = j.at("guard_roots").get<int>() >= 0;
  } catch (const std::exception& e) {
    return unexpected(failure(compile_failure_kind::internal,
                              fmt::format("the NVRTC helper {} sent a malformed greeting: {}", config.program, e.what())));
  }
  return h;
}

nvrtc_helper::~nvrtc_helper() { end(true); }

bool nvrtc_helper::alive() const {
  if (fd_ < 0) return false;
  pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
  return ::poll(&p, 1, 0) == 0;
}

std::string nvrtc_helper::end(bool kill) {
  if (fd_ >= 0) {
    ::close(fd_);  // a helper waiting for a request sees end of input and exits
    fd_ = -1;
  }
  if (pid_ <= 0) return "it had ended";
  if (kill) ::kill(pid_, SIGKILL);
  int status = 0;
  pid_t r;
  do r = ::waitpid(pid_, &status, 0);
  while (r < 0 && errno == EINTR);
  pid_ = -1;
  if (r < 0) return "its exit status is unknown";
  if (WIFSIGNALED(status)) return fmt::format("it ended with signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return fmt::format("it exited with status {}", WEXITSTATUS(status));
}

expected<helper_reply, compile_failure> nvrtc_helper::compile(std::string_view source,
                                                              const std::vector<std::string>& options,
                                                              duration deadline) {
  if (fd_ < 0) return unexpected(failure(compile_failure_kind::internal, "the NVRTC helper is no longer running"));
  // Clamped so a "never" deadline (duration::max()) cannot overflow the time point.
  const auto budget = std::clamp<duration>(deadline, std::chrono::milliseconds(1), std::chrono::hours(24));
  const auto budget_ms = std::chrono::duration_cast<std::chrono::milliseconds>(budget).count();
  const json header{{"options", options}, {"deadline_ms", budget_ms}};
  if (!wire::write_frame(fd_, header.dump()) || !wire::write_frame(fd_, source))
    return unexpected(failure(compile_failure_kind::internal,
                              fmt::format("the NVRTC helper stopped taking requests: {}", end(false))));

  const auto hard_deadline = clock_type::now() + budget + cancel_grace;
  helper_reply reply;
  std::string head;
  auto status = wire::read_frame(fd_, head, 1 << 20, hard_deadline);
  if (status == wire::read_status::ok) status = wire::read_frame(fd_, reply.log, wire::max_frame_bytes, hard_deadline);
  if (status == wire::read_status::ok) status = wire::read_frame(fd_, reply.cubin, wire::max_frame_bytes, hard_deadline);
  if (status == wire::read_status::timeout) {
    end(true);
    return unexpected(failure(
        compile_failure_kind::timeout,
        fmt::format("compilation was stopped at its deadline of {:.1f} s (NVRTC did not finish nor notice its "
                    "cancellation, so its process was killed); simplify the source or raise "
                    "compile_options::deadline",
                    to_seconds(budget))));
  }
  if (status != wire::read_status::ok)
    return unexpected(failure(compile_failure_kind::internal,
                              fmt::format("the NVRTC helper failed while compiling this source: {}. NVRTC crashed or "
                                          "ran out of memory on it; the next compile starts a new helper",
                                          end(status != wire::read_status::eof))));
  try {
    const auto j = json::parse(head);
    reply.rc = j.at("rc").get<int>();
    reply.rc_text = j.at("error").get<std::string>();
    reply.seconds = j.at("seconds").get<double>();
    reply.cancelled = j.at("cancelled").get<bool>();
    reply.denied = j.at("denied").get<std::uint64_t>();
  } catch (const std::exception& e) {
    end(true);
    return unexpected(
        failure(compile_failure_kind::internal, fmt::format("the NVRTC helper sent a malformed reply: {}", e.what())));
  }
  return reply;
}

expected<helper_reply, compile_failure> helper_pool::compile(const helper_config& config, std::string_view source,
                                                             const std::vector<std::string>& options,
                                                             duration deadline) {
  std::unique_ptr<nvrtc_helper> h;
  {
    std::lock_guard lock(mutex_);
    if (auto it = idle_.find(config.allowed); it != idle_.end())
      while (!h && !it->second.empty()) {
        h = std::move(it->second.back());
        it->second.pop_back();
        --idle_count_;
        if (!h->alive()) h.reset();  // killed while idle: start another
      }
  }
  if (!h) {
    auto started = nvrtc_helper::start(config);
    if (!started) return unexpected(started.error());
    h = std::move(*started);
    std::lock_guard lock(mutex_);
    ++started_;
    if (sandbox_.empty()) sandbox_ = h->hello().describe();
  }
  auto r = h->compile(source, options, deadline);
  if (h->usable()) {
    std::unique_ptr<nvrtc_helper> evicted;  // destroyed (killed) after the lock is released
    std::lock_guard lock(mutex_);
    if (idle_count_ >= max_idle_ && max_idle_ > 0)
      for (auto& [dirs, helpers] : idle_)
        if (dirs != config.allowed && !helpers.empty()) {
          evicted = std::move(helpers.back());
          helpers.pop_back();
          --idle_count_;
          break;
        }
    if (idle_count_ < max_idle_) {
      idle_[config.allowed].push_back(std::move(h));
      ++idle_count_;
    }
  }
  return r;
}

std::uint64_t helper_pool::started() const {
  std::lock_guard lock(mutex_);
  return started_;
}

std::string helper_pool::sandbox() const {
  std::lock_guard lock(mutex_);
  return sandbox_;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
