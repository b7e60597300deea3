#pragma once
/// The host side of a `specgen-worker`, its supervisor: spawns it, talks the
/// framed protocol (gpu/protocol/protocol.hpp), watches it with heartbeats and a deadline per request, and
/// replaces it when it hangs, crashes or writes garbage.
///
/// Untrusted kernels run only in the worker, so whatever they do (an illegal
/// address that leaves the CUDA context sticky-broken, an endless loop, a
/// scribble over the worker's stdout) costs the host one failed call and one
/// respawn, never a crash of the search. POSIX only (posix_spawn, poll,
/// process groups). Runs in the host process, never in the worker (that code is
/// under src/gpu/worker/); target `specgen_gpu_supervisor`. Its settings and
/// counters (`worker_config`, `worker_stats`) are public, in evaluation.hpp.
///
/// @code
///   specgen::gpu::worker_host w({.program = "specgen-worker", .device = 0});
///   if (auto s = w.start(); !s) die(s.error().message);
///   auto r = w.call({.op = "validate", .args = job}, std::chrono::seconds(5));
///   if (!r && r.error().what == specgen::gpu::worker_failure::kind::timeout) ...  // verdict timeout
/// @endcode
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/gpu/evaluation.hpp>
#include <specgen/json.hpp>

#include "gpu/protocol/protocol.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

/// Why a call got no response. Every kind but `spawn_failed` leaves a fresh
/// worker behind (or tried to: see `worker_host::alive`).
struct worker_failure {
  enum class kind {
    timeout,         ///< no response within the deadline; the worker was killed
    crashed,         ///< the worker died; the signal or exit status is in the message
    protocol_error,  ///< the worker wrote something that is not the protocol
    cancelled,       ///< `cancel()` was called during the call
    spawn_failed,    ///< no worker could be started (or it never said hello)
  };
  kind what = kind::crashed;
  std::string message;  ///< includes the tail of the worker's stderr
};

[[nodiscard]] constexpr std::string_view to_string(worker_failure::kind k) noexcept {
  switch (k) {
    case worker_failure::kind::timeout: return "timeout";
    case worker_failure::kind::crashed: return "crashed";
    case worker_failure::kind::protocol_error: return "protocol_error";
    case worker_failure::kind::cancelled: return "cancelled";
    case worker_failure::kind::spawn_failed: return "spawn_failed";
  }
  return "unknown";
}

/// Hello of the running worker: {"protocol", "pid", "device": {...}}.
struct worker_info {
  int pid = 0;
  nlohmann::json hello;
};

namespace detail {
struct worker_process;  // the spawned process and its pipes (worker_host.cpp)

/// The environment a worker starts with: of `parent` (NAME=VALUE entries),
/// only what CUDA, the loader, the sanitizers and specgen read. Kernels run
/// in the worker and, with HMM, device code can address its host memory, so
/// nothing else of the caller's (an API key, say) is handed to it.
std::vector<std::string> worker_environment(const std::vector<std::string>& parent);
}

/**
 * Drives one worker process (one per GPU).
 *
 * `call` blocks its thread (the engine calls it from a per-GPU thread and
 * posts the result); a background thread pings the worker while no call is
 * running and replaces it when a pong is missing. Not copyable or movable: the
 * heartbeat thread holds `this`.
 *
 * @code
 *   worker_host w({.program = path, .heartbeat_interval = std::chrono::milliseconds(50)});
 *   w.start();
 *   std::jthread t([&] { auto r = w.call({.op = "profile"}, std::chrono::seconds(30)); });
 *   w.cancel();  // the call above returns worker_failure::kind::cancelled
 * @endcode
 */
class worker_host {
 public:
  explicit worker_host(worker_config config);
  ~worker_host();
  worker_host(const worker_host&) = delete;
  worker_host& operator=(const worker_host&) = delete;

  /// Spawns the worker and waits for its hello (up to `startup_timeout`),
  /// then starts heartbeats. Calling it again on a running host does nothing.
  expected<void, worker_failure> start();

  /// Sends `r` and waits for the response until `deadline` has passed (time
  /// waiting for a heartbeat in progress counts). On timeout, crash or
  /// garbage the worker's process group is killed and a new worker started
  /// before this returns. Starts the worker if none is running.
  expected<response, worker_failure> call(const request& r, duration deadline);

  /// Aborts the call in progress from another thread: the worker is killed
  /// and that call returns `kind::cancelled`. False when no call was running.
  bool cancel();

  /// Whether a worker is running (false after a failed respawn).
  [[nodiscard]] bool alive() const;
  [[nodiscard]] worker_info info() const;
  [[nodiscard]] worker_stats stats() const;
  [[nodiscard]] double last_respawn_seconds() const { return stats().last_respawn_seconds; }
  [[nodiscard]] const worker_config& config() const noexcept { return config_; }

 private:
  enum class io_outcome { message, deadline, closed, garbage, cancelled };
  struct io_result;

  expected<void, worker_failure> spawn_locked();
  worker_failure replace_locked(worker_failure::kind k, std::string what);
  std::string reap_locked();
  io_result wait_frame_locked(std::chrono::steady_clock::time_point until, bool cancellable);
  std::string stderr_tail() const;
  void heartbeat_loop();
  void stop_heartbeat();

  worker_config config_;
  // Held by whoever talks to the worker (call, heartbeat, respawn): one
  // conversation at a time, so responses never interleave with pongs.
  std::timed_mutex io_mutex_;
  // Guards the fields below it; cancel() takes only this one, so it can
  // reach a worker while a call holds io_mutex_.
  mutable std::mutex state_mutex_;
  std::unique_ptr<detail::worker_process> proc_;
  bool in_call_ = false;
  bool cancel_requested_ = false;
  worker_stats stats_;
  worker_info info_;
  std::uint64_t next_id_ = 1;

  std::mutex hb_mutex_;
  std::condition_variable hb_cv_;
  bool hb_stop_ = false;
  std::thread hb_thread_;
};

}  // namespace gpu
SPECGEN_END_NAMESPACE
