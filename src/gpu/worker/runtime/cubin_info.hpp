#pragma once
// What a cubin (an ELF64 image) says about state a kernel can keep between
// runs: module-scope `__device__` variables and calls into the device heap.
// Host code only, no CUDA type: tested on any machine with NVRTC's cubins.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// What `inspect_cubin` found.
struct cubin_info {
  /// Sections of writable device globals with a non-zero size: `.nv.global`
  /// (zero-initialised `__device__` variables, `__managed__` ones too) and
  /// `.nv.global.*` (`.nv.global.init`: initialised ones, `__device__ const`
  /// included, which a cast can still write).
  std::vector<std::string> global_sections{};
  std::uint64_t global_bytes = 0;  ///< their sizes summed
  /// Undefined function symbols of the device heap the cubin calls (`malloc`,
  /// `free`, `__nv_aligned_device_malloc`): reported, not acted on.
  std::vector<std::string> heap_functions{};

  [[nodiscard]] bool has_writable_globals() const noexcept { return !global_sections.empty(); }
  friend bool operator==(const cubin_info&, const cubin_info&) = default;
};

/**
 * Reads the section headers (and the symbol table, for the heap functions) of
 * a little-endian ELF64 image. Every offset and size is bounds-checked: a
 * truncated or malformed image is an error message, never a crash.
 *
 * @code
 *   auto info = inspect_cubin(cubin);
 *   bool fresh = !info || info->has_writable_globals();   // unreadable: assume the worst
 * @endcode
 */
expected<cubin_info> inspect_cubin(std::span<const std::byte> image);

/// Whether `name` is `.nv.global` or starts with `.nv.global.`.
[[nodiscard]] bool is_global_section(std::string_view name) noexcept;

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
