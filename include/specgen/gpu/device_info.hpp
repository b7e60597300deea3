#pragma once
/// The GPUs a program may evaluate on: how many there are, and each one's
/// name, architecture, memory and limits, as the CUDA driver reports them.
/// The driver is loaded at run time, so a program built with this runs on a
/// machine without one and gets an error value saying so. Asking creates no
/// CUDA context: the host process never runs a kernel (candidates run in
/// `specgen-worker`, see evaluation.hpp).
///
/// @code
///   auto n = specgen::gpu::device_count();             // "no NVIDIA driver found ..." without a driver
///   if (!n) return fmt::print("no GPU: {}\n", n.error().message);
///   for (int i = 0; i < *n; ++i)
///     if (auto d = specgen::gpu::query_device(i)) fmt::print("{}: {} ({})\n", i, d->name, d->arch);
/// @endcode
/// Implemented in src/gpu/loader/, which `specgen::gpu_eval` and `specgen::gpu_kv` link; see
/// docs/gpu-runtime.md.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/plan.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

/// Why a driver call failed.
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
///   specgen::gpu::nvrtc_arch(9, 0) == "sm_90a";  specgen::gpu::nvrtc_arch(8, 0) == "sm_80";
/// @endcode
[[nodiscard]] std::string nvrtc_arch(int sm_major, int sm_minor);

/// Number of GPUs, or why there are none to use.
expected<int, runtime_error> device_count();

/// Name, architecture, L2 and limits of GPU `index`.
expected<device_info, runtime_error> query_device(int index);

}  // namespace gpu
SPECGEN_END_NAMESPACE
