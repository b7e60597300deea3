#pragma once
// Loading a shared library at run time, so programs start on machines that
// lack it and say so instead of failing to load.
#include <specgen/detail/config.hpp>

#include <dlfcn.h>

#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// The first of `names` that dlopen accepts, or, when none does, what was
/// tried and the last loader error (for a message the user can act on).
struct opened_library {
  void* handle = nullptr;   ///< never closed: what it hands out may outlive any owner
  std::string loaded{};     ///< the name that loaded
  std::string tried{};      ///< every name that failed, comma-separated
  std::string last_error{}; ///< dlerror() of the last failure
};

inline opened_library open_first(const std::vector<std::string>& names) {
  opened_library out;
  for (const auto& name : names) {
    out.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (out.handle) {
      out.loaded = name;
      return out;
    }
    out.tried += out.tried.empty() ? name : ", " + name;
    if (const char* e = dlerror()) out.last_error = e;
  }
  return out;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
