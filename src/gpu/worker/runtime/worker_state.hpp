#pragma once
// What the worker keeps between requests: its GPU's context (made at the
// first request that needs it) and the modules it has loaded, by key.
#include "lru_cache.hpp"

#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include "runtime.hpp"

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// Modules kept loaded by `module_key` (docs/gpu-runtime.md, "Additions").
inline constexpr std::size_t loaded_module_capacity = 32;

/// A loaded cubin and what a run needs to know about it.
struct loaded_module {
  module mod;
  /// The cubin's bytes, kept only when every run needs a fresh instance of it
  /// (writable `__device__` globals, or an image the ELF reader could not
  /// read): `prepared_plan` reloads it from them. Null otherwise.
  std::shared_ptr<const std::vector<std::byte>> fresh_cubin{};
  [[nodiscard]] bool fresh_module_per_run() const noexcept { return fresh_cubin != nullptr; }
};

struct worker_state {
  explicit worker_state(int device_index) : device(device_index) {}
  worker_state(const worker_state&) = delete;
  worker_state& operator=(const worker_state&) = delete;

  int device = 0;
  std::unique_ptr<gpu_context> ctx{};
  /// Declared after `ctx`, so destroyed before it. Shared pointers: an op
  /// holds the modules it runs even if a later insert drops them here.
  lru_cache<std::shared_ptr<loaded_module>> modules{loaded_module_capacity};
  /// The bulk region the host shared (docs/worker-protocol.md), where replies
  /// put their binary part; empty when there is none.
  std::span<std::byte> reply_region{};

  /// The context, created on first use.
  expected<gpu_context*, runtime_error> context() {
    if (!ctx) {
      auto c = gpu_context::create(device);
      if (!c) return unexpected(c.error());
      ctx = std::move(*c);
    }
    return ctx.get();
  }
  /// False after a fault or a timeout: the worker must answer and exit.
  [[nodiscard]] bool must_exit() const noexcept { return ctx && !ctx->usable(); }
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
