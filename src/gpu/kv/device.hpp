#pragma once
// One GPU as the KV store and its clients drive it: the primary context, two
// streams, the store's kernels (compiled with NVRTC for the device's own
// architecture), a small arena for kernel arguments, and typed launches.
#include "gpu/loader/driver.hpp"

#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::kv_detail {

using gpu::detail::driver_api;

/// `error` for a failed driver call, or nothing; `sticky` set for errors that leave the context unusable.
expected<void, error> check(const driver_api& api, CUresult r, std::string_view what, bool* sticky = nullptr);

// Propagates an expected<void, error> failure (only in src/gpu/kv).
#define SPECGEN_KV_TRY(...)                                        \
  do {                                                             \
    if (auto specgen_kv_r_ = (__VA_ARGS__); !specgen_kv_r_)        \
      return ::specgen::unexpected(specgen_kv_r_.error());         \
  } while (0)

/// The CUDA C++ of the store's kernels (copy, checksum, fill, set).
extern const char* const kernel_source;

/// Compiles `kernel_source` with NVRTC into a cubin for `arch` ("sm_90a").
expected<std::vector<char>, error> compile_kernels(const std::string& arch);
/// `compile_kernels`, once per architecture and process (thread-safe); failures are not kept.
expected<std::shared_ptr<const std::vector<char>>, error> kernels_for(const std::string& arch);

/// Makes contexts current within a scope and restores the caller's at its
/// end, so a caller's own CUDA work on this thread is not disturbed. Not
/// copyable: it restores exactly once.
class context_scope {
 public:
  explicit context_scope(const driver_api& api) : api_(api) {
    if (api_.cuCtxGetCurrent(&saved_) != CUDA_SUCCESS) saved_ = nullptr;
  }
  ~context_scope() { api_.cuCtxSetCurrent(saved_); }
  context_scope(const context_scope&) = delete;
  context_scope& operator=(const context_scope&) = delete;

 private:
  const driver_api& api_;
  CUcontext saved_ = nullptr;
};

/// Threads per block of every kernel here (the kernels' __launch_bounds__).
inline constexpr unsigned block_threads = 256;

/// One GPU. Not copyable: it owns streams, events, a module and buffers.
class kv_device {
 public:
  /// Retains the primary context and loads the kernels (`kernels_for` the
  /// device's architecture). The caller holds a context_scope.
  static expected<std::unique_ptr<kv_device>, error> open(const driver_api& api, int ordinal);
  ~kv_device();
  kv_device(const kv_device&) = delete;
  kv_device& operator=(const kv_device&) = delete;

  /// Makes this device's context current (the caller holds a context_scope).
  expected<void, error> use() const;

  const driver_api& api;
  int ordinal = 0;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  std::string pci_bus_id{};
  std::string arch{};
  int multiprocessors = 1;
  CUstream compute = nullptr;  ///< kernels (gathers, scatters, checksums)
  CUstream copy = nullptr;     ///< copy-engine transfers, overlapping the next gather
  CUevent gathered[2]{};       ///< staging buffer b is filled (compute -> copy)
  CUevent released[2]{};       ///< staging buffer b has been copied out (copy -> compute; via host: bounce filled)
  CUevent uploaded[2]{};       ///< bounce buffer c has been copied in (as a destination: -> the source's copy stream)

  // ---- kernel arguments ----------------------------------------------------------------
  /// Makes room for `bytes` of arguments and resets the arena. Only while
  /// nothing queued on this device still reads it (every call ends synchronised).
  expected<void, error> reserve_arena(std::size_t bytes);
  /// Copies `bytes` into the arena and queues their upload on `s`; the device address.
  expected<CUdeviceptr, error> upload(CUstream s, const void* data, std::size_t bytes);
  /// `count` 8-byte words on the device, zeroed on `s`, with a host mirror for `download`.
  struct words {
    CUdeviceptr device = 0;
    const std::uint64_t* host = nullptr;
    std::size_t count = 0;
  };
  expected<words, error> zeroed_words(CUstream s, std::size_t count);
  /// Queues the copy of `w` to its host mirror (read it after synchronising).
  expected<void, error> download(CUstream s, const words& w);
  /// Arena bytes one launch of `n` blocks needs at most (for reserve_arena).
  static constexpr std::size_t arena_bytes_per_block = 128;

  // ---- kernels (16-byte aligned addresses; bytes a multiple of 16) -----------------------------
  /// dst[i][0..bytes) = src[i][0..bytes), all blocks in one launch.
  expected<void, error> copy_blocks(CUstream s, std::span<const std::uint64_t> src, std::span<const std::uint64_t> dst,
                                    std::uint64_t bytes);
  /// sums[i] += checksum of src[i] (zero `sums` first).
  expected<void, error> checksum_blocks(CUstream s, std::span<const std::uint64_t> src, std::uint64_t bytes, CUdeviceptr sums);
  /// dst[i] = the synthetic bytes of keys[i].
  expected<void, error> fill_blocks(CUstream s, std::span<const std::uint64_t> dst, std::span<const std::uint64_t> keys,
                                    std::uint64_t bytes);
  /// *where[i] = values[i] (8-byte words; `values` a device array of `where.size()`).
  expected<void, error> set_words(CUstream s, std::span<const std::uint64_t> where, CUdeviceptr values);

  expected<void, error> synchronize() const;
  /// Free bytes on the device now (cuMemGetInfo).
  expected<std::uint64_t, error> free_memory() const;

 private:
  explicit kv_device(const driver_api& a) : api(a) {}
  expected<void, error> launch(CUstream s, CUfunction f, std::uint64_t vecs, std::size_t n, void** params);

  CUmodule module_ = nullptr;
  CUfunction copy_ = nullptr, checksum_ = nullptr, fill_ = nullptr, set_ = nullptr;
  CUdeviceptr arena_device_ = 0;
  std::byte* arena_host_ = nullptr;
  std::size_t arena_bytes_ = 0, arena_used_ = 0;
};

/// 64 bytes as 128 lower-case hex digits, and back.
std::string to_hex(std::span<const std::byte> bytes);
bool from_hex(std::string_view hex, std::span<std::byte> out);

}  // namespace gpu::kv_detail
SPECGEN_END_NAMESPACE
