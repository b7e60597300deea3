#pragma once
// Finding the programs specgen's libraries start (the GPU worker, the
// sandboxed NVRTC helper), the same way for each.
#include <specgen/detail/config.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// `configured` when given, else $`env` when set, else `name` beside the
/// running program (an installed or build tree's bin/), else `installed` when
/// that file exists (an installed specgen used from another program), else
/// `fallback` (the build tree's).
inline std::string find_companion_program(const std::string& configured, const char* env, const char* name,
                                          const char* installed, const char* fallback) {
  if (!configured.empty()) return configured;
  if (const char* e = std::getenv(env); e && *e) return e;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = self.parent_path() / name;
    if (std::filesystem::is_regular_file(beside, ec)) return beside.string();
  }
  if (installed && *installed && std::filesystem::is_regular_file(installed, ec)) return installed;
  return fallback;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
