#pragma once
// Kernel arguments of a resolved launch as cuLaunchKernel takes them: an
// array of pointers, one per parameter, each to the parameter's bytes.
// Pure host code, so it is tested on machines without a GPU.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/gpu/runtime.hpp>
#include <specgen/plan.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// Owns the parameter bytes; `data()` points into them. Not copyable: a copy
/// would point at the original's bytes.
class kernel_params {
 public:
  kernel_params() = default;
  kernel_params(const kernel_params&) = delete;
  kernel_params& operator=(const kernel_params&) = delete;
  kernel_params(kernel_params&&) noexcept = default;  // vectors keep their heap blocks when moved
  kernel_params& operator=(kernel_params&&) noexcept = default;

  /// For cuLaunchKernel's `kernelParams`.
  [[nodiscard]] void** data() noexcept { return pointers_.data(); }
  [[nodiscard]] std::size_t size() const noexcept { return pointers_.size(); }
  /// The bytes of parameter `i` as the kernel sees them (8 for pointers and i64, 4 for i32).
  [[nodiscard]] std::size_t bytes(std::size_t i) const noexcept { return sizes_[i]; }

 private:
  friend expected<kernel_params, runtime_error> marshal_args(const resolved_launch&,
                                                             const std::map<std::string, std::uint64_t>&);
  std::vector<std::uint64_t> slots_;  // one 8-byte, 8-aligned slot per parameter
  std::vector<std::size_t> sizes_;
  std::vector<void*> pointers_;
};

/// Buffers become their device address (a CUdeviceptr, 8 bytes), sizes an
/// `int` or `long long` by value, exactly as `resolve` typed them. A buffer
/// missing from `pointers` is an `invalid_plan` error.
inline expected<kernel_params, runtime_error> marshal_args(const resolved_launch& launch,
                                                           const std::map<std::string, std::uint64_t>& pointers) {
  kernel_params p;
  p.slots_.assign(launch.args.size(), 0);
  p.sizes_.reserve(launch.args.size());
  for (std::size_t i = 0; i < launch.args.size(); ++i) {
    const auto& a = launch.args[i];
    void* slot = &p.slots_[i];
    if (a.is_buffer) {
      auto it = pointers.find(a.buffer);
      if (it == pointers.end())
        return unexpected(runtime_error{runtime_error::kind::invalid_plan,
                                        fmt::format("kernel {} argument {}: no device buffer named '{}' was provided",
                                                    launch.kernel, i, a.buffer),
                                        {}});
      std::memcpy(slot, &it->second, sizeof(std::uint64_t));
      p.sizes_.push_back(sizeof(std::uint64_t));
    } else if (a.type == scalar_type::i32) {
      // resolve() checked that the value fits.
      const auto v = static_cast<std::int32_t>(a.value);
      std::memcpy(slot, &v, sizeof v);
      p.sizes_.push_back(sizeof v);
    } else {
      const auto v = static_cast<long long>(a.value);
      std::memcpy(slot, &v, sizeof v);
      p.sizes_.push_back(sizeof v);
    }
  }
  for (auto& s : p.slots_) p.pointers_.push_back(&s);
  return p;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
