#pragma once
/// Running a resolved launch plan on a GPU: the CUDA driver loaded at run time,
/// a context with its own stream, modules, guarded device buffers, and plan
/// execution with a deadline. Used inside `specgen-worker` only: untrusted
/// kernels never run in the host process. No CUDA type appears here.
///
/// @code
///   using namespace specgen::gpu;
///   auto ctx = gpu_context::create(0);                 // "no NVIDIA driver found ..." without a driver
///   if (!ctx) return report(ctx.error().message);
///   auto mod = (*ctx)->load_module(cubin);
///   auto x = (*ctx)->allocate(4096, {.guard_bytes = 256});
///   x->upload(host_bytes);
///   auto r = (*ctx)->run_plan(resolved, *mod, {{"x", x->pointer()}, ...}, specgen::seconds(1));
///   if (!r && r.error().what == runtime_error::kind::fault) exit_after_reporting();
/// @endcode
/// Implemented in src/gpu/runtime/ (target `specgen::gpu_runtime`); see docs/gpu-runtime.md.
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/plan.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

/// Why a runtime call failed.
struct runtime_error {
  enum class kind : std::uint8_t {
    no_driver,      ///< libcuda could not be loaded or lacks a function
    no_device,      ///< the driver loaded but there is no such GPU
    invalid_plan,   ///< the plan names a kernel or buffer that does not exist
    load_failed,    ///< the cubin was rejected (wrong architecture, corrupt)
    out_of_memory,  ///< an allocation failed
    launch_failed,  ///< a launch was refused before running (bad geometry, too much smem)
    fault,          ///< a sticky error (illegal address, trap): the context is unusable
    timeout,        ///< the kernels did not finish by the deadline: the context is unusable
    internal,       ///< any other driver error
  };
  kind what = kind::internal;
  std::string message{};     ///< one line saying what happened and what to do
  std::string cuda_error{};  ///< the driver's error name ("CUDA_ERROR_ILLEGAL_ADDRESS"), if any
  friend bool operator==(const runtime_error&, const runtime_error&) = default;
};

[[nodiscard]] constexpr std::string_view to_string(runtime_error::kind k) noexcept {
  constexpr std::array<std::string_view, 9> names{"no_driver", "no_device", "invalid_plan", "load_failed",
                                                  "out_of_memory", "launch_failed", "fault", "timeout",
                                                  "internal"};
  return names[static_cast<std::size_t>(k)];
}

/// Whether after `k` the context must not be used again (the worker exits).
[[nodiscard]] constexpr bool is_sticky(runtime_error::kind k) noexcept {
  return k == runtime_error::kind::fault || k == runtime_error::kind::timeout;
}

/// One GPU as the driver describes it.
struct device_info {
  int index = 0;
  std::string name{};
  int sm_major = 0;
  int sm_minor = 0;
  std::string arch{};  ///< what NVRTC should target: "sm_90a" on an H100/H200
  std::int64_t l2_bytes = 0;
  std::int64_t memory_bytes = 0;
  int multiprocessors = 0;
  /// Peak DRAM bandwidth in GB/s from the memory clock and bus width
  /// (2 x clock x width / 8): the driver's attributes, else NVML's maximum
  /// memory clock and bus width, else 0. The roofline check's bound.
  double peak_dram_gbps = 0;
  std::string pci_bus_id{};  ///< "0000:3b:00.0": how NVML finds the same GPU
  device_limits limits{};  ///< filled from the device's attributes
  friend bool operator==(const device_info&, const device_info&) = default;
};

/// The NVRTC architecture for a compute capability: the arch-specific variant
/// ("sm_90a", "sm_100a") where one exists, so candidates may use wgmma/TMA.
/// @code
///   nvrtc_arch(9, 0) == "sm_90a";  nvrtc_arch(8, 0) == "sm_80"
/// @endcode
[[nodiscard]] std::string nvrtc_arch(int sm_major, int sm_minor);

/// Number of GPUs, or why there are none to use.
expected<int, runtime_error> device_count();
/// Shared-memory poison words: before a checked launch the worker fills all
/// shared memory of every SM with one of them (see the worker's `run`
/// `smem_poison` and `validation_config::shared_memory_poison`).
/// All bits set: a NaN read as f32, f16 or bf16 (any width), -1 read as a
/// signed integer of any width, the maximum as an unsigned one.
inline constexpr std::uint32_t smem_poison_ones = 0xFFFFFFFFu;
/// 3.39e38 read as f32 (and as bf16), a NaN as f16; 2,139,062,143 as i32: a
/// maximum that an uninitialised value wins.
inline constexpr std::uint32_t smem_poison_high = 0x7F7F7F7Fu;
/// -1.69e38 read as f32 (and as bf16), a NaN as f16; -16,843,010 as i32: a
/// minimum that an uninitialised value wins.
inline constexpr std::uint32_t smem_poison_low = 0xFEFEFEFEu;
/// The three together: a kernel that reduces uninitialised values with a sum,
/// a max or a min gives a wrong answer under at least one of them.
inline constexpr std::array<std::uint32_t, 3> smem_poison_patterns{smem_poison_ones, smem_poison_high,
                                                                   smem_poison_low};

/// Name, architecture, L2 and limits of GPU `index`.
expected<device_info, runtime_error> query_device(int index);

class gpu_context;

namespace detail {
struct context_state;
/// The runtime's own operations (the worker's ops) reach the CUDA handles
/// behind these classes through it; defined in src/gpu/runtime/executor.hpp.
struct context_access;
}  // namespace detail

/// A loaded cubin. Not copyable: it owns the driver's module handle.
class module {
 public:
  module(const module&) = delete;
  module& operator=(const module&) = delete;
  module(module&&) noexcept;
  module& operator=(module&&) noexcept;
  ~module();

  /// Whether the cubin defines an entry point `name` (an `extern "C"` kernel).
  [[nodiscard]] bool has_kernel(std::string_view name) const;

 private:
  friend class gpu_context;
  friend struct detail::context_access;
  module(const gpu_context* ctx, void* handle) : ctx_(ctx), handle_(handle) {}
  const gpu_context* ctx_ = nullptr;
  void* handle_ = nullptr;  // CUmodule
};

/// How a buffer is allocated.
struct buffer_options {
  /// Guard zones of this size before and after the buffer, to catch writes
  /// just out of bounds (an off-by-one at either end).
  std::size_t guard_bytes = 0;
  friend bool operator==(const buffer_options&, const buffer_options&) = default;
};

/// A device allocation of `size()` usable bytes between two guard zones.
/// Not copyable: it owns the allocation.
class device_buffer {
 public:
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&&) noexcept;
  device_buffer& operator=(device_buffer&&) noexcept;
  ~device_buffer();

  /// The device address of the first usable byte (what a kernel receives).
  [[nodiscard]] std::uint64_t pointer() const noexcept { return base_ + guard_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t guard_bytes() const noexcept { return guard_; }

  /// Copies `bytes` (at most `size()`) to the start of the buffer.
  expected<void, runtime_error> upload(std::span<const std::byte> bytes);
  /// The `size()` usable bytes.
  expected<std::vector<std::byte>, runtime_error> download() const;
  /// The `size()` usable bytes into `out` (at least `size()` bytes; page-locked
  /// memory makes this several times faster than `download`).
  expected<void, runtime_error> download_into(std::span<std::byte> out) const;
  /// Sets every usable byte to `value` (a poison pattern for outputs, 0 for scratch).
  expected<void, runtime_error> fill(std::byte value);
  /// Sets both guard zones to `value`.
  expected<void, runtime_error> fill_guards(std::byte value);
  /// The guard zone before and the one after, as they are now.
  expected<std::array<std::vector<std::byte>, 2>, runtime_error> read_guards() const;

 private:
  friend class gpu_context;
  device_buffer(const gpu_context* ctx, std::uint64_t base, std::size_t size, std::size_t guard)
      : ctx_(ctx), base_(base), size_(size), guard_(guard) {}
  const gpu_context* ctx_ = nullptr;
  std::uint64_t base_ = 0;  // CUdeviceptr of the whole allocation
  std::size_t size_ = 0;
  std::size_t guard_ = 0;
};

/// Device pointers of the plan's input and output buffers, by name.
using buffer_pointers = std::map<std::string, std::uint64_t>;

struct run_result {
  double elapsed_ms = 0;  ///< CUDA events around all launches of the plan
};

/**
 * The primary context of one GPU and a non-blocking stream owned by it.
 * After a `fault` or `timeout` every call fails: a sticky error cannot be
 * cleared in-process, and a hung kernel cannot be stopped, so the worker
 * reports and exits. Not copyable or movable: modules and buffers point at it.
 *
 * @code
 *   auto ctx = specgen::gpu::gpu_context::create(0);
 *   if (ctx) fmt::print("{} ({})\n", (*ctx)->info().name, (*ctx)->info().arch);
 * @endcode
 */
class gpu_context {
 public:
  static expected<std::unique_ptr<gpu_context>, runtime_error> create(int device);
  ~gpu_context();
  gpu_context(const gpu_context&) = delete;
  gpu_context& operator=(const gpu_context&) = delete;

  [[nodiscard]] const device_info& info() const noexcept;

  expected<module, runtime_error> load_module(std::span<const std::byte> cubin);
  expected<device_buffer, runtime_error> allocate(std::size_t bytes, buffer_options options = {});

  /**
   * Launches the plan's kernels in order on the context's stream and waits
   * until `deadline` has passed. Scratch buffers are allocated here (zeroed
   * when the plan says `zero`) and freed after. Every input/output buffer the
   * plan names must be in `buffers`.
   */
  expected<run_result, runtime_error> run_plan(const resolved_plan& plan, const module& mod,
                                               const buffer_pointers& buffers, duration deadline);

  /// False after a fault or a timeout.
  [[nodiscard]] bool usable() const noexcept;

 private:
  friend class module;
  friend class device_buffer;
  friend struct detail::context_access;
  explicit gpu_context(std::unique_ptr<detail::context_state> s);
  std::unique_ptr<detail::context_state> state_;
};

}  // namespace gpu
SPECGEN_END_NAMESPACE
