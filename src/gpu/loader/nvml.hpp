#pragma once
// NVML, loaded at run time (dlopen "libnvidia-ml.so.1") with our own
// declarations of the few functions used: no nvml.h is needed to build, and a
// machine without NVML only loses the clock readings.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <optional>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// The libraries to try, in order: $SPECGEN_NVML_LIBRARY alone when set, else
/// "libnvidia-ml.so.1" (installed with the driver).
std::vector<std::string> nvml_candidates();

/// One GPU as NVML sees it, found by its PCI bus id ("0000:3B:00.0").
/// Every reading is nullopt when NVML cannot give it.
class nvml_device {
 public:
  /// The device at `pci_bus_id`, or why not ("NVML not found (libnvidia-ml.so.1 ...)").
  static expected<nvml_device> open(const std::string& pci_bus_id);

  /// The current SM clock in MHz (nvmlDeviceGetClockInfo, NVML_CLOCK_SM).
  [[nodiscard]] std::optional<unsigned> sm_clock_mhz() const;
  /// The maximum memory clock in MHz (nvmlDeviceGetMaxClockInfo, NVML_CLOCK_MEM).
  [[nodiscard]] std::optional<unsigned> max_memory_clock_mhz() const;
  /// The memory bus width in bits (nvmlDeviceGetMemoryBusWidth).
  [[nodiscard]] std::optional<unsigned> memory_bus_width_bits() const;

 private:
  explicit nvml_device(void* handle) : handle_(handle) {}
  void* handle_ = nullptr;  // nvmlDevice_t
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
