#pragma once
// What the GPU benchmarks (gpu_bench.cpp, kv_bench.cpp) share: finding the
// GPUs, or saying why there are none, and writing --json.
#include "support/cli.hpp"

#include <specgen/gpu/device_info.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <stdexcept>

namespace specgen::bench {

/// The number of GPUs, or nothing after printing why there are none (the
/// benchmarks then exit 0: a machine without a GPU is not an error).
inline std::optional<int> gpus_or_explain() {
  auto n = gpu::device_count();
  if (n && *n > 0) return *n;
  fmt::print("no GPU: {}\n", n ? "the driver reports no devices" : n.error().message);
  return std::nullopt;
}

/// Writes `j` to the file --json names, if it names one.
inline void write_json(const programs::options& a, const nlohmann::json& j) {
  if (!a.has("json")) return;
  std::ofstream f(a.get("json"));
  f << j.dump(2) << '\n';
  if (!f) throw std::runtime_error(fmt::format("cannot write {}", a.get("json")));
  fmt::print("wrote {}\n", a.get("json"));
}

}  // namespace specgen::bench
