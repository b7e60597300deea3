// Device discovery: count, name, architecture and the limits a plan is checked against.
#include "driver.hpp"
#include "nvml.hpp"

#include <fmt/format.h>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

std::string nvrtc_arch(int sm_major, int sm_minor) {
  // From Hopper on, wgmma, TMA multicast and friends exist only in the
  // arch-specific target ("a"); a cubin for it runs on exactly that chip,
  // which is what a worker compiles for anyway.
  return fmt::format("sm_{}{}{}", sm_major, sm_minor, sm_major >= 9 ? "a" : "");
}

namespace {

/// 2 (double data rate) x clock x bus width / 8, in GB/s. The driver's
/// attributes first (kHz, bits); where they are missing or 0, NVML's maximum
/// memory clock (MHz) and bus width; 0 when neither reports them.
double peak_dram_gbps(const detail::driver_api& api, CUdevice dev, const std::string& pci_bus_id) {
  int khz = 0, bits = 0;
  if (api.cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev) == CUDA_SUCCESS &&
      api.cuDeviceGetAttribute(&bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev) == CUDA_SUCCESS && khz > 0 &&
      bits > 0)
    return 2.0 * static_cast<double>(khz) * 1e3 * static_cast<double>(bits) / 8.0 / 1e9;
  if (pci_bus_id.empty()) return 0;
  auto nvml = detail::nvml_device::open(pci_bus_id);
  if (!nvml) return 0;
  const auto mhz = nvml->max_memory_clock_mhz();
  const auto width = nvml->memory_bus_width_bits();
  if (!mhz || !width) return 0;
  return 2.0 * static_cast<double>(*mhz) * 1e6 * static_cast<double>(*width) / 8.0 / 1e9;
}

}  // namespace

expected<int, runtime_error> device_count() {
  const auto& api = detail::load_driver();
  if (!api) return unexpected(api.error());
  int n = 0;
  if (CUresult r = (*api)->cuDeviceGetCount(&n); r != CUDA_SUCCESS)
    return unexpected(detail::cuda_failure(**api, r, runtime_error::kind::no_device, "cuDeviceGetCount"));
  return n;
}

expected<device_info, runtime_error> query_device(int index) {
  auto count = device_count();
  if (!count) return unexpected(count.error());
  if (index < 0 || index >= *count)
    return unexpected(runtime_error{runtime_error::kind::no_device,
                                    fmt::format("there is no GPU {}: the driver sees {} GPU{} (indices from 0)", index,
                                                *count, *count == 1 ? "" : "s"),
                                    {}});
  const detail::driver_api& api = **detail::load_driver();
  CUdevice dev = 0;
  if (CUresult r = api.cuDeviceGet(&dev, index); r != CUDA_SUCCESS)
    return unexpected(detail::cuda_failure(api, r, runtime_error::kind::no_device, fmt::format("cuDeviceGet({})", index)));
  device_info d{.index = index};
  char name[256] = {};
  std::string failed;
  if (api.cuDeviceGetName(name, sizeof name - 1, dev) == CUDA_SUCCESS) d.name = name;
  auto attr = [&](CUdevice_attribute a, const char* what) -> std::int64_t {
    int v = 0;
    if (api.cuDeviceGetAttribute(&v, a, dev) != CUDA_SUCCESS) failed += failed.empty() ? what : fmt::format(", {}", what);
    return v;
  };
  d.sm_major = static_cast<int>(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability"));
  d.sm_minor = static_cast<int>(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability"));
  d.arch = nvrtc_arch(d.sm_major, d.sm_minor);
  d.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 size");
  d.limits.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "threads per block");
  d.limits.max_block_dims = {attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, "block dims"),
                             attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, "block dims"),
                             attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, "block dims")};
  d.limits.max_grid_dims = {attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, "grid dims"),
                            attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, "grid dims"),
                            attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, "grid dims")};
  d.limits.max_dynamic_smem_bytes =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "opt-in shared memory per block");
  d.limits.smem_opt_in_bytes = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "shared memory per block");
  d.multiprocessors = static_cast<int>(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessor count"));
  std::size_t total = 0;
  if (api.cuDeviceTotalMem(&total, dev) == CUDA_SUCCESS) d.memory_bytes = static_cast<std::int64_t>(total);
  char bus_id[32] = {};
  if (api.cuDeviceGetPCIBusId(bus_id, static_cast<int>(sizeof bus_id - 1), dev) == CUDA_SUCCESS) d.pci_bus_id = bus_id;
  d.peak_dram_gbps = peak_dram_gbps(api, dev, d.pci_bus_id);
  if (!failed.empty())
    return unexpected(runtime_error{runtime_error::kind::internal,
                                    fmt::format("GPU {}: the driver did not report {}", index, failed), {}});
  return d;
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
