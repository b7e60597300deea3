#pragma once
// What a gpu_context holds behind its CUDA-free public header, and the pieces
// of plan execution the worker's ops share: a plan prepared once and launched
// many times, stream-ordered fills and copies, and waiting with a deadline.
#include "cublas.hpp"
#include "driver.hpp"
#include "marshal.hpp"

#include <specgen/clock.hpp>
#include <specgen/gpu/runtime.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

struct context_state {
  const driver_api* api = nullptr;
  device_info info{};
  CUdevice device = 0;
  CUcontext context = nullptr;  // the device's primary context, retained
  CUstream stream = nullptr;    // non-blocking: never serialised with the legacy default stream
  CUevent start = nullptr;
  CUevent stop = nullptr;
  bool usable = true;  // false after a sticky error or a timeout
  std::unique_ptr<cublas_session> blas{};  // on the stream, made by the first plan that calls a library routine
  void* staging_data = nullptr;            // page-locked host memory for downloads (cuMemAllocHost)
  std::size_t staging_bytes = 0;
  std::uint32_t* gate_flag = nullptr;      // page-locked word the launch gate waits on; null: no gate
  CUdeviceptr gate_device = 0;             // its device address
  std::uint32_t gate_value = 0;            // the value the last hold waits for

  /// CUDA_SUCCESS, or the error as a value (marking the context unusable when sticky).
  expected<void, runtime_error> check(CUresult r, runtime_error::kind k, std::string_view what) {
    if (r == CUDA_SUCCESS) return {};
    auto e = cuda_failure(*api, r, k, what);
    if (is_sticky(e.what)) usable = false;
    return unexpected(std::move(e));
  }
  expected<void, runtime_error> require_usable() const;

  /// Page-locked host memory of at least `bytes`, reused by every download
  /// that is read and dropped (input checks, outputs on their way to the
  /// host); grown in steps of 64 MiB. Valid until the next call.
  expected<std::span<std::byte>, runtime_error> staging(std::size_t bytes);

  /**
   * The launch gate: the events around a timed run must bracket the GPU's
   * work, not the host's launch calls. `hold` queues a wait on a host word
   * (`cuStreamWaitValue32`), so the stream stalls until `release` writes it;
   * everything queued in between (start event, the plan's launches, stop
   * event) then runs back to back, whatever the launches cost on the host
   * (nvbench's blocking kernel, without a kernel). False when there is no
   * gate (stream memory operations unsupported): the run is simply ungated.
   */
  bool hold();
  void release() noexcept;

  /// `bytes` of `value` at `at`, queued on the context's stream.
  expected<void, runtime_error> memset_async(std::uint64_t at, std::uint8_t value, std::size_t bytes);
  /// `bytes` from `src` to `dst` (device memory both), queued on the context's stream.
  expected<void, runtime_error> copy_async(std::uint64_t dst, std::uint64_t src, std::size_t bytes);

  /**
   * Polls `event` (already recorded on the stream) until it completes. Past
   * `until` the context is abandoned (`timeout`): a kernel cannot be stopped
   * in-process. Polling, not cuEventSynchronize: a kernel that never ends must
   * not take the worker with it before it has reported the timeout.
   */
  expected<void, runtime_error> await(CUevent event, std::chrono::steady_clock::time_point until, duration deadline);
};

/// The runtime's own access to the CUDA handles behind the public classes.
struct context_access {
  static context_state& state(gpu_context& c) noexcept { return *c.state_; }
  static CUmodule handle(const module& m) noexcept { return static_cast<CUmodule>(m.handle_); }
};

/**
 * A plan made ready to launch many times: every kernel looked up, its
 * dynamic shared memory allowed, its arguments marshalled, and the plan's
 * scratch allocated. Holds `ctx` by address and the module's kernels: both
 * must outlive it. Everything that can be refused is refused here, before any
 * launch.
 *
 * With `fresh_cubin` (the bytes `mod` was loaded from, for a cubin with
 * writable `__device__` globals) the plan never launches from `mod`: it loads
 * its own instance of the cubin, and `reload()` replaces that instance with a
 * new one whenever a run has used it, so every run starts with the globals as
 * the cubin initialises them. Scratch, arguments and buffers are kept.
 *
 * @code
 *   auto p = prepared_plan::prepare(ctx, plan, mod, pointers, cubin_if_it_has_globals);
 *   p->reload();                                   // before every run (no-op without globals)
 *   p->reset_scratch_async();                      // before every run
 *   auto ms = p->timed_run(steady_clock::now() + deadline, deadline);
 * @endcode
 */
class prepared_plan {
 public:
  /// What scratch not marked `zero` is filled with before every run: a kernel
  /// finds neither zeros nor what an earlier run left there.
  static constexpr std::uint8_t scratch_pattern = 0xA5;

  static expected<prepared_plan, runtime_error> prepare(
      gpu_context& ctx, const resolved_plan& plan, const module& mod, const buffer_pointers& buffers,
      std::shared_ptr<const std::vector<std::byte>> fresh_cubin = nullptr);

  prepared_plan(prepared_plan&& o) noexcept;
  prepared_plan& operator=(prepared_plan&& o) noexcept;
  prepared_plan(const prepared_plan&) = delete;
  prepared_plan& operator=(const prepared_plan&) = delete;
  ~prepared_plan();

  /// Zeroes the scratch buffers the plan marks `zero` and fills the others
  /// with `scratch_pattern`, on the context's stream: before every run.
  expected<void, runtime_error> reset_scratch_async();

  /**
   * With a fresh cubin: when the current module instance has been launched
   * from, unloads it, loads the cubin again and looks the kernels up anew
   * (their shared memory allowed again). Without one, or before the first
   * run, nothing. Synchronous and never timed: call it before queueing a
   * run's poison, when no launch of the plan is in flight.
   */
  expected<void, runtime_error> reload();

  /// Whether every run gets its own module instance.
  [[nodiscard]] bool fresh_module_per_run() const noexcept { return cubin_ != nullptr; }

  /**
   * Records the context's start event, queues every launch, records the stop
   * event and waits for it until `until` (`deadline` is only for the
   * message). Returns the event time in ms. What was queued on the stream
   * before (poison, an L2 flush, scratch resets) runs first and is not
   * timed; nothing here synchronises the host between those and the launches.
   * A refused launch stops the sequence, the launches queued before it are
   * waited for, and the result is `launch_failed`.
   */
  expected<double, runtime_error> timed_run(std::chrono::steady_clock::time_point until, duration deadline);

  /// Queues the launches and library calls alone (no events, no wait). A
  /// refused launch is returned at once; the ones queued before it still run.
  expected<void, runtime_error> enqueue();

  [[nodiscard]] std::size_t launches() const noexcept { return functions_.size(); }

 private:
  prepared_plan() = default;
  /// Looks up every launch's kernel in `m` and allows its dynamic shared memory.
  expected<std::vector<CUfunction>, runtime_error> resolve_functions(CUmodule m) const;
  void unload_own() noexcept;

  context_state* state_ = nullptr;
  std::vector<resolved_launch> launches_;
  std::vector<resolved_call> calls_;  // library calls, in plan order among the launches
  buffer_pointers pointers_;          // every buffer by name, scratch included (for the calls)
  std::vector<device_buffer> scratch_;
  std::vector<bool> zero_;
  std::vector<CUfunction> functions_;
  std::vector<kernel_params> params_;
  std::shared_ptr<const std::vector<std::byte>> cubin_{};  // set: a fresh module per run
  CUmodule own_ = nullptr;  // the plan's own instance of `cubin_`
  bool used_ = false;       // whether `own_` has been launched from since it was loaded
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
