#pragma once
// Running a resolved launch plan on a GPU: a context with its own stream,
// modules, guarded device buffers, and plan execution with a deadline. Runs
// inside `specgen-worker` only (this folder is the worker's): untrusted
// kernels never run in the host process. No CUDA type appears here. The
// device queries and `runtime_error` are public (specgen/gpu/device_info.hpp).
//
//   using namespace specgen::gpu;
//   auto ctx = gpu_context::create(0);                 // "no NVIDIA driver found ..." without a driver
//   if (!ctx) return report(ctx.error().message);
//   auto mod = (*ctx)->load_module(cubin);
//   auto x = (*ctx)->allocate(4096, {.guard_bytes = 256});
//   x->upload(host_bytes);
//   auto r = (*ctx)->run_plan(resolved, *mod, {{"x", x->pointer()}, ...}, specgen::seconds(1));
//   if (!r && r.error().what == runtime_error::kind::fault) exit_after_reporting();
//
// Target `specgen_gpu_worker_runtime`; see docs/gpu-runtime.md.
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/gpu/device_info.hpp>
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

/// Whether after `k` the context must not be used again (the worker exits).
[[nodiscard]] constexpr bool is_sticky(runtime_error::kind k) noexcept {
  return k == runtime_error::kind::fault || k == runtime_error::kind::timeout;
}

class gpu_context;

namespace detail {
struct context_state;
/// The runtime's own operations (the worker's ops) reach the CUDA handles
/// behind these classes through it; defined in executor.hpp.
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
