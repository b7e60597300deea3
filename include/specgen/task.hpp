#pragma once
/// A kernel optimisation task: what to compute, on which shapes, checked
/// against which reference, timed against which baseline.
/// (Loading from JSON: `load_task` / `parse_task` in task_io.hpp; the file
/// format is documented in docs/task-format.md.)
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

enum class dtype : std::uint8_t { f16, bf16, f32, f64, i8, u8, i32, i64 };

inline constexpr std::array<std::string_view, 8> dtype_names{"f16", "bf16", "f32", "f64", "i8", "u8", "i32", "i64"};

/// The name used in task files and plans: "f16", "bf16", "f32", ...
constexpr std::string_view to_string(dtype d) noexcept { return dtype_names[static_cast<std::size_t>(d)]; }
constexpr std::optional<dtype> parse_dtype(std::string_view s) noexcept {
  for (std::size_t i = 0; i < dtype_names.size(); ++i)
    if (dtype_names[i] == s) return static_cast<dtype>(i);
  return std::nullopt;
}
/// Bytes per element.
constexpr std::size_t size_of(dtype d) noexcept {
  constexpr std::size_t sizes[] = {2, 2, 4, 8, 1, 1, 4, 8};
  return sizes[static_cast<std::size_t>(d)];
}

/// How an input buffer is initialised for validation and timing.
enum class distribution : std::uint8_t { normal, uniform, signed_uniform, large, zeros, ones };

inline constexpr std::array<std::string_view, 6> distribution_names{"normal", "uniform", "signed_uniform",
                                                                    "large",  "zeros",   "ones"};

constexpr std::string_view to_string(distribution d) noexcept {
  return distribution_names[static_cast<std::size_t>(d)];
}
constexpr std::optional<distribution> parse_distribution(std::string_view s) noexcept {
  for (std::size_t i = 0; i < distribution_names.size(); ++i)
    if (distribution_names[i] == s) return static_cast<distribution>(i);
  return std::nullopt;
}

struct tolerance {
  double abs = 1e-5;
  double rel = 1e-5;
  friend bool operator==(const tolerance&, const tolerance&) = default;
};

/// The tolerance a task file gets when an output names none: tight enough to
/// catch a precision downgrade (f32 computed in f16 misses 1e-5), loose enough
/// for a reordered floating-point reduction. Integers compare exactly.
constexpr tolerance default_tolerance(dtype d) noexcept {
  switch (d) {
    case dtype::f16: return {.abs = 1e-3, .rel = 1e-3};
    case dtype::bf16: return {.abs = 1e-2, .rel = 1e-2};
    case dtype::f32: return {.abs = 1e-5, .rel = 1e-5};
    case dtype::f64: return {.abs = 1e-10, .rel = 1e-10};
    default: return {.abs = 0, .rel = 0};
  }
}

/// An input or output buffer. Shape entries are size expressions over the
/// task's symbols (e.g. "N", "M*K", "cdiv(N,128)").
struct tensor_spec {
  std::string name{};
  dtype type = dtype::f32;
  std::vector<std::string> shape{};
  distribution init = distribution::normal;  ///< inputs only
  tolerance tol{};                           ///< outputs only
  friend bool operator==(const tensor_spec&, const tensor_spec&) = default;
};

/// A binding of every size symbol to a value.
using shape_binding = std::map<std::string, std::int64_t>;

/// A reference or baseline implementation: device code with a launch plan, or
/// a named host callback registered through the C++ API (cuBLAS, ...).
struct implementation {
  std::string source{};  ///< CUDA source (kind plan)
  std::string plan{};    ///< launch plan text (kind plan, see plan.hpp)
  std::string host{};    ///< registered host callback name (kind host)
  /// True for a host callback, false for device code with a plan.
  [[nodiscard]] bool is_host() const noexcept { return !host.empty(); }
  friend bool operator==(const implementation&, const implementation&) = default;
};

struct task {
  std::string name{};
  std::string description{};           ///< what the prompt tells the model
  std::vector<std::string> symbols{};  ///< size symbols, e.g. {"N", "M"}
  shape_binding benchmark_shape{};     ///< the timed shape
  std::vector<shape_binding> validation_shapes{};
  std::vector<tensor_spec> inputs{};
  std::vector<tensor_spec> outputs{};
  implementation reference{};
  implementation baseline{};  ///< what speedups are measured against
  std::vector<std::string> compile_options{};
  std::string file{};  ///< where it was loaded from ("" if built in code)
  friend bool operator==(const task&, const task&) = default;
};

SPECGEN_END_NAMESPACE
