#pragma once
/// A kernel optimisation task: what to compute, on which shapes, checked
/// against which reference, timed against which baseline.
/// (Loading from JSON: see `load_task` / `parse_task`, docs/task-format.md.)
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

enum class dtype : std::uint8_t { f16, bf16, f32, f64, i8, u8, i32, i64 };

/// How an input buffer is initialised for validation and timing.
enum class distribution : std::uint8_t { normal, uniform, signed_uniform, large, zeros, ones };

struct tolerance {
  double abs = 1e-5;
  double rel = 1e-5;
  friend bool operator==(const tolerance&, const tolerance&) = default;
};

/// An input or output buffer. Shape entries are size expressions over the
/// task's symbols (e.g. "N", "M*K", "cdiv(N,128)").
struct tensor_spec {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::string> shape;
  distribution init = distribution::normal;  ///< inputs only
  tolerance tol{};                           ///< outputs only
  friend bool operator==(const tensor_spec&, const tensor_spec&) = default;
};

/// A binding of every size symbol to a value.
using shape_binding = std::map<std::string, std::int64_t>;

/// A reference or baseline implementation: device code with a launch plan, or
/// a named host callback registered through the C++ API (cuBLAS, ...).
struct implementation {
  std::string source;  ///< CUDA source (kind plan)
  std::string plan;    ///< launch plan text (kind plan)
  std::string host;    ///< registered host callback name (kind host)
  friend bool operator==(const implementation&, const implementation&) = default;
};

struct task {
  std::string name;
  std::string description;               ///< what the prompt tells the model
  std::vector<std::string> symbols;      ///< size symbols, e.g. {"N", "M"}
  shape_binding benchmark_shape;         ///< the timed shape
  std::vector<shape_binding> validation_shapes;
  std::vector<tensor_spec> inputs;
  std::vector<tensor_spec> outputs;
  implementation reference;
  implementation baseline;
  std::vector<std::string> compile_options;
  std::string file;                      ///< where it was loaded from ("" if built in code)
};

SPECGEN_END_NAMESPACE
