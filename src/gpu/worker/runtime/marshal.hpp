#pragma once
// Kernel arguments of a resolved launch as cuLaunchKernel takes them: an
// array of pointers, one per parameter, each to the parameter's bytes.
// Pure host code, so it is tested on machines without a GPU.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include "runtime.hpp"
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
  /// The bytes of parameter `i` as the kernel sees them: 8 for pointers, else
  /// the width of its scalar type (1, 2, 4 or 8).
  [[nodiscard]] std::size_t bytes(std::size_t i) const noexcept { return sizes_[i]; }

 private:
  friend expected<kernel_params, runtime_error> marshal_args(const resolved_launch&,
                                                             const std::map<std::string, std::uint64_t>&);
  std::vector<std::uint64_t> slots_;  // one 8-byte, 8-aligned slot per parameter
  std::vector<std::size_t> sizes_;
  std::vector<void*> pointers_;
};

/// Buffers become their device address (a CUdeviceptr, 8 bytes); every other
/// argument its scalar type's bytes by value, exactly as `resolve` typed and
/// converted it: integers in their width (1, 2, 4 or 8 bytes), f32 as a
/// float, f64 as a double, f16 and bf16 as their 2-byte bit patterns. A
/// buffer missing from `pointers` is an `invalid_plan` error.
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
    } else {
      // resolve() checked that integers fit and rounded floats to their type.
      auto put = [&](auto v) {
        std::memcpy(slot, &v, sizeof v);
        p.sizes_.push_back(sizeof v);
      };
      switch (a.type) {
        case scalar_type::i8: put(static_cast<std::int8_t>(a.value)); break;
        case scalar_type::u8: put(static_cast<std::uint8_t>(a.value)); break;
        case scalar_type::i16: put(static_cast<std::int16_t>(a.value)); break;
        case scalar_type::u16: put(static_cast<std::uint16_t>(a.value)); break;
        case scalar_type::i32: put(static_cast<std::int32_t>(a.value)); break;
        case scalar_type::u32: put(static_cast<std::uint32_t>(a.value)); break;
        case scalar_type::i64: put(static_cast<long long>(a.value)); break;
        case scalar_type::u64: put(static_cast<unsigned long long>(a.value)); break;
        case scalar_type::f16: put(float_to_half(static_cast<float>(a.real))); break;
        case scalar_type::bf16: put(float_to_bf16(static_cast<float>(a.real))); break;
        case scalar_type::f32: put(static_cast<float>(a.real)); break;
        case scalar_type::f64: put(a.real); break;
      }
    }
  }
  for (auto& s : p.slots_) p.pointers_.push_back(&s);
  return p;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
