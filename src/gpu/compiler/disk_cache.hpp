#pragma once
// The on-disk level of the compile cache: <dir>/<key[0:2]>/<key>.cubin plus
// <key>.json (log, kernels, cubin size). Each file is written to a temporary
// name in the same directory and renamed, so a reader sees a whole file or
// none; the JSON is written last and names the cubin's size, so a cubin from an
// interrupted or damaged write is detected and the entry recompiled.
#include <specgen/detail/config.hpp>
#include <specgen/gpu/compiler.hpp>

#include <memory>
#include <string>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

class disk_cache {
 public:
  explicit disk_cache(std::string dir) : dir_(std::move(dir)) {}

  /// The entry for `key`, or null when absent, unreadable or inconsistent.
  [[nodiscard]] std::shared_ptr<compiled> load(const std::string& key) const;

  /// Best effort: a cache that cannot be written only costs a later recompile.
  void store(const compiled& c) const;

 private:
  std::string dir_;
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
