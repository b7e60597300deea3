#pragma once
// Shared memory that does not read as zeros, or as what an earlier kernel
// left there: before each launch of a checked run, a poison kernel fills all
// the shared memory of every SM with a 32-bit pattern, so that a candidate
// that reads shared memory it never wrote reads the pattern
// (`prepared_plan::poison_shared_memory`).
//
// The kernel is PTX text embedded here (no nvcc at build time), for an old
// ISA and target (PTX ISA 7.0, sm_52) so that any driver of CUDA 11.0 or
// later JIT-compiles it for its device; each context loads it once.
#include "gpu/loader/driver.hpp"

#include "runtime.hpp"

#include <specgen/detail/config.hpp>

#include <array>
#include <cstdint>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

// The poison words themselves come from the host with each run
// (`validation_config::shared_memory_poison`, specgen/gpu/evaluation.hpp).

/// The poison kernel's entry point in `smem_poison_ptx()`.
inline constexpr const char* smem_poison_entry = "specgen_smem_poison";

/// The PTX of `specgen_smem_poison(u32 pattern, u32 bytes)`: every thread of
/// the block stores the pattern 16 bytes at a time, striding by the block's
/// size, over the first `bytes` (a multiple of 16) of the block's dynamic
/// shared memory.
[[nodiscard]] std::string_view smem_poison_ptx() noexcept;

/// How the poison kernel is launched on a device.
struct smem_poison_geometry {
  std::uint32_t blocks = 0;   ///< a few per SM, so that every SM runs at least one
  std::uint32_t threads = 0;  ///< per block
  std::uint32_t bytes = 0;    ///< dynamic shared memory per block, all of it filled
  friend bool operator==(const smem_poison_geometry&, const smem_poison_geometry&) = default;
};

/// Blocks that each take the device's whole opt-in shared memory per block
/// (`max_dynamic_smem_bytes`, rounded down to 16 bytes), so one such block
/// fills all of an SM's shared memory but what the system reserves per block
/// (which no kernel can read), and four per SM; 1024 threads where the device
/// allows them. Zero blocks when the device reports no shared memory or SMs.
[[nodiscard]] smem_poison_geometry smem_poison_geometry_for(std::int64_t max_dynamic_smem_bytes,
                                                            int multiprocessors,
                                                            std::int64_t max_threads_per_block) noexcept;

/// The poison kernel loaded into one context.
struct smem_poison_kernel {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  smem_poison_geometry geometry{};
};

/// Queues one fill of every SM's shared memory with `pattern` on `stream`.
CUresult launch_smem_poison(const driver_api& api, const smem_poison_kernel& k, std::uint32_t pattern,
                            CUstream stream);

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
