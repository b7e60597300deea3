#pragma once
// What a gpu_context holds behind its CUDA-free public header, and the pieces
// of plan execution the worker's ops share: a plan prepared once and launched
// many times, stream-ordered fills and copies, and waiting with a deadline.
#include "gpu/loader/cublas.hpp"
#include "gpu/loader/driver.hpp"
#include "marshal.hpp"
#include "smem_poison.hpp"

#include <specgen/clock.hpp>
#include "runtime.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
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
  std::optional<smem_poison_kernel> poison{};  // loaded by the first plan that poisons shared memory

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

  /// The shared-memory poison kernel (smem_poison.hpp), JIT-compiled and
  /// loaded into the context at the first call and kept until the context
  /// goes. A driver that cannot compile or load it is an `internal` error
  /// whose message carries the JIT's log.
  expected<const smem_poison_kernel*, runtime_error> smem_poisoner();

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
   * Poisons shared memory before every launch, or stops doing so
   * (`std::nullopt`). While a pattern is set, `enqueue` and `timed_run` queue
   * the poison kernel before each of the plan's launches, on the same stream:
   * it fills all the shared memory of every SM with `pattern`, so a kernel
   * that reads shared memory it never wrote reads the pattern rather than
   * zeros or what the kernel before it left there. Use the three
   * `smem_poison_patterns` on three runs to catch reductions over
   * uninitialised values with a sum, a max or a min.
   *
   * While it is set, the plan's kernels also prefer the largest shared
   * memory carveout (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT of
   * 100, as the poison kernel uses), so the split between L1 and shared
   * memory does not change between the poison and the kernel; `reload()`
   * applies it to the kernels it looks up anew. Unsetting it (or destroying
   * the plan) gives them back the driver's default carveout. The poison
   * launches run inside a timed run's events: poison checked runs, not the
   * ones whose time is reported.
   *
   * Loads the poison kernel into the context at the first call; a failure to
   * load it, or to set a carveout, is an `internal` error (the poison is then
   * not set), as a refused poison launch is in `enqueue` and `timed_run`.
   * @code
   *   for (auto pattern : smem_poison_patterns) {
   *     if (auto r = p->poison_shared_memory(pattern); !r) return unexpected(r.error());
   *     ... reset, timed_run, compare the outputs ...
   *   }
   *   p->poison_shared_memory(std::nullopt);
   * @endcode
   */
  expected<void, runtime_error> poison_shared_memory(std::optional<std::uint32_t> pattern);
  /// The pattern shared memory is poisoned with before each launch, if any.
  [[nodiscard]] std::optional<std::uint32_t> shared_memory_poison() const noexcept { return smem_poison_; }

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
  /// Looks up every launch's kernel in `m` and allows its dynamic shared
  /// memory; while shared memory is poisoned, sets its carveout too.
  expected<std::vector<CUfunction>, runtime_error> resolve_functions(CUmodule m) const;
  /// Sets the preferred shared memory carveout (a CUshared_carveout, or a
  /// percentage) of every kernel the plan launches.
  expected<void, runtime_error> set_carveout(int carveout) const;
  /// While poisoned, gives the kernels back the default carveout and unsets the poison.
  void restore_carveout() noexcept;
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
  std::optional<std::uint32_t> smem_poison_{};  // set: poison shared memory before every launch
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
